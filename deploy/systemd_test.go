package deploy_test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// unit parses a systemd unit into section → key → values (repeated keys
// accumulate).
func unit(t *testing.T, path string) map[string]map[string][]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]map[string][]string{}
	section := ""
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			section = strings.Trim(line, "[]")
			out[section] = map[string][]string{}
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || section == "" {
				t.Fatalf("%s:%d: not key=value in a section: %q", path, n, line)
			}
			out[section][k] = append(out[section][k], v)
		}
	}
	return out
}

// TestSystemdUnitHardening checks the unit's hardening and restart policy.
func TestSystemdUnitHardening(t *testing.T) {
	u := unit(t, filepath.Join("systemd", "mrgw.service"))
	svc := u["Service"]
	one := func(k string) string {
		v := svc[k]
		if len(v) == 0 {
			return ""
		}
		return v[len(v)-1]
	}
	for k, want := range map[string]string{
		"User":             "mrgw",
		"Group":            "mrgw",
		"NoNewPrivileges":  "yes",
		"ProtectSystem":    "strict",
		"ProtectHome":      "yes",
		"PrivateTmp":       "yes",
		"PrivateDevices":   "yes",
		"Restart":          "on-failure",
		"ExecReload":       "/bin/kill -HUP $MAINPID",
		"ExecStart":        "/usr/local/bin/mrgw run --config /etc/mrgw/mrgw.yaml --drain-timeout 30s",
		"ExecStartPre":     "/usr/local/bin/mrgw config check /etc/mrgw/mrgw.yaml",
		"ReadOnlyPaths":    "/etc/mrgw",
		"RestrictSUIDSGID": "yes",
	} {
		if got := one(k); got != want {
			t.Errorf("%s=%q, want %q", k, got, want)
		}
	}
	// Only CAP_NET_BIND_SERVICE, in both sets.
	for _, k := range []string{"CapabilityBoundingSet", "AmbientCapabilities"} {
		if got := strings.Fields(one(k)); !slices.Equal(got, []string{"CAP_NET_BIND_SERVICE"}) {
			t.Errorf("%s=%v, want only CAP_NET_BIND_SERVICE", k, got)
		}
	}
	fams := strings.Fields(one("RestrictAddressFamilies"))
	slices.Sort(fams)
	if !slices.Equal(fams, []string{"AF_INET", "AF_INET6", "AF_NETLINK", "AF_UNIX"}) {
		t.Errorf("RestrictAddressFamilies=%v", fams)
	}
	if one("LimitNOFILE") == "" || one("MemoryMax") == "" {
		t.Error("LimitNOFILE and MemoryMax must be set")
	}
	if len(svc["ReadWritePaths"]) == 0 {
		t.Error("ReadWritePaths missing (the only writable place must be explicit)")
	}
	if got := u["Install"]["WantedBy"]; !slices.Equal(got, []string{"multi-user.target"}) {
		t.Errorf("WantedBy=%v", got)
	}
}

// stubUnit writes the unit into a temporary directory with its binary
// path pointed at a stand-in executable there (mrgw is not installed
// here), and returns the unit's path, its text as shipped and the stub's
// path.
func stubUnit(t *testing.T) (unitPath string, shipped []byte, stub string) {
	t.Helper()
	dir := t.TempDir()
	stub = filepath.Join(dir, "mrgw")
	if err := os.WriteFile(stub, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	shipped, err := os.ReadFile(filepath.Join("systemd", "mrgw.service"))
	if err != nil {
		t.Fatal(err)
	}
	unitPath = filepath.Join(dir, "mrgw.service")
	if err := os.WriteFile(unitPath, []byte(strings.ReplaceAll(string(shipped), "/usr/local/bin/mrgw", stub)), 0o644); err != nil {
		t.Fatal(err)
	}
	return unitPath, shipped, stub
}

// TestSystemdAnalyzeVerify runs systemd-analyze verify on the unit (with the
// binary path pointed at a stand-in executable: mrgw is not installed here).
// Any warning fails the test.
func TestSystemdAnalyzeVerify(t *testing.T) {
	sa, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze not installed")
	}
	unitPath, b, stub := stubUnit(t)
	cmd := exec.Command(sa, "verify", unitPath)
	cmd.Env = append(os.Environ(), "SYSTEMD_LOG_COLOR=0")
	out, err := cmd.CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}

	// The check is not vacuous: a misspelt directive is reported.
	bad := filepath.Join(filepath.Dir(unitPath), "bad.service")
	if err := os.WriteFile(bad, []byte(strings.Replace(strings.ReplaceAll(string(b), "/usr/local/bin/mrgw", stub), "NoNewPrivileges=", "NoNewPrivilege=", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, _ := exec.Command(sa, "verify", bad).CombinedOutput(); !strings.Contains(string(out), "NoNewPrivilege") {
		t.Errorf("systemd-analyze verify does not report a misspelt key:\n%s", out)
	}
}

// TestSystemdRealtimeDropIn: the optional real-time drop-in is valid
// beside the unit (systemd-analyze verify reads the unit's .d directory),
// asks for SCHED_FIFO at a priority Linux accepts, and lifts the base
// unit's RestrictRealtime (which would otherwise forbid it).
func TestSystemdRealtimeDropIn(t *testing.T) {
	drop := unit(t, filepath.Join("systemd", "realtime.conf"))["Service"]
	if got := drop["CPUSchedulingPolicy"]; len(got) != 1 || got[0] != "fifo" {
		t.Errorf("CPUSchedulingPolicy = %q, want fifo", got)
	}
	if got := drop["RestrictRealtime"]; len(got) != 1 || got[0] != "no" {
		t.Errorf("RestrictRealtime = %q, want no: the base unit forbids real-time scheduling", got)
	}
	if got := drop["CPUSchedulingPriority"]; len(got) != 1 {
		t.Errorf("CPUSchedulingPriority = %q, want one value", got)
	} else if p, err := strconv.Atoi(got[0]); err != nil || p < 1 || p > 99 {
		t.Errorf("CPUSchedulingPriority = %q, want 1..99", got[0])
	}

	sa, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze not installed")
	}
	unitPath, _, _ := stubUnit(t)
	d, err := os.ReadFile(filepath.Join("systemd", "realtime.conf"))
	if err != nil {
		t.Fatal(err)
	}
	verify := func(dropIn []byte) string {
		t.Helper()
		if err := os.MkdirAll(unitPath+".d", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(unitPath+".d", "realtime.conf"), dropIn, 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(sa, "verify", unitPath)
		cmd.Env = append(os.Environ(), "SYSTEMD_LOG_COLOR=0")
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Sprintf("%v: %s", err, out)
		}
		return strings.TrimSpace(string(out))
	}
	if out := verify(d); out != "" {
		t.Errorf("systemd-analyze verify with the drop-in: %s", out)
	}
	// Not vacuous: the drop-in is read, and a misspelt key in it reported.
	if out := verify([]byte(strings.Replace(string(d), "CPUSchedulingPolicy=", "CPUSchedulingPolicyX=", 1))); !strings.Contains(out, "CPUSchedulingPolicyX") {
		t.Errorf("systemd-analyze verify does not read the drop-in directory:\n%s", out)
	}
}

// TestSystemdStopOutlastsTheDrain: systemd sends SIGKILL TimeoutStopSec
// after SIGTERM; the daemon drains for up to --drain-timeout and then needs
// a moment to close sockets and leave gossip. With the two equal, SIGKILL
// races the end of the drain and flows still draining are cut.
func TestSystemdStopOutlastsTheDrain(t *testing.T) {
	svc := unit(t, filepath.Join("systemd", "mrgw.service"))["Service"]
	last := func(k string) string {
		if v := svc[k]; len(v) > 0 {
			return v[len(v)-1]
		}
		return ""
	}
	f := strings.Fields(last("ExecStart"))
	i := slices.Index(f, "--drain-timeout")
	if i < 0 || i+1 >= len(f) {
		t.Fatalf("ExecStart %q does not set --drain-timeout (the stop timeout is checked against it)", last("ExecStart"))
	}
	drain, err := time.ParseDuration(f[i+1])
	if err != nil {
		t.Fatalf("--drain-timeout %q: %v", f[i+1], err)
	}
	stop, err := time.ParseDuration(last("TimeoutStopSec"))
	if err != nil {
		t.Fatalf("TimeoutStopSec %q: %v", last("TimeoutStopSec"), err)
	}
	const margin = 10 * time.Second
	if stop < drain+margin {
		t.Errorf("TimeoutStopSec=%v, want at least --drain-timeout %v + %v", stop, drain, margin)
	}
	if ks := last("KillSignal"); ks != "" && ks != "SIGTERM" && ks != "SIGINT" {
		t.Errorf("KillSignal=%s: the daemon drains on SIGTERM or SIGINT", ks)
	}
}

// TestForwardUnit: the forwarder's unit runs `mrgw host forward` with the
// instance's arguments, is hardened as the daemon's is, and gives the
// drain its full time before SIGKILL.
func TestForwardUnit(t *testing.T) {
	u := unit(t, filepath.Join("systemd", "mrgw-forward@.service"))
	svc := u["Service"]
	last := func(k string) string {
		if v := svc[k]; len(v) > 0 {
			return v[len(v)-1]
		}
		return ""
	}
	start := last("ExecStart")
	if !strings.HasPrefix(start, "/usr/local/bin/mrgw host forward ") || !strings.Contains(start, "$MRGW_FORWARD_ARGS") {
		t.Fatalf("ExecStart %q", start)
	}
	f := strings.Fields(start)
	i := slices.Index(f, "--drain")
	if i < 0 || i+1 >= len(f) {
		t.Fatalf("ExecStart %q has no --drain", start)
	}
	drain, err := time.ParseDuration(f[i+1])
	if err != nil {
		t.Fatal(err)
	}
	stop, err := time.ParseDuration(strings.TrimSuffix(last("TimeoutStopSec"), "s") + "s")
	if err != nil || stop <= drain {
		t.Fatalf("TimeoutStopSec %q must exceed --drain %v", last("TimeoutStopSec"), drain)
	}
	for k, want := range map[string]string{"User": "mrgw", "NoNewPrivileges": "yes", "ProtectSystem": "strict", "EnvironmentFile": "/etc/mrgw/forward-%i.env"} {
		if got := last(k); got != want {
			t.Errorf("%s=%q, want %q", k, got, want)
		}
	}
}
