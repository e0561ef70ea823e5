//go:build linux

// Package hostcap is `mrgw-lab loadtest hosts`: what a registered host
// costs a gateway. It runs one gateway daemon (`mrgw run`, its own process,
// so that its memory and descriptors are its own), registers hosts with it
// from this process (the host library, each host on its own loopback
// source), keeps them registered and PINGing, and reads the daemon's RSS,
// open descriptors and path sockets before and after. Every address is in
// 127.0.0.0/8.
package hostcap

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/mrgw/mrgw/gateway"
	"github.com/mrgw/mrgw/host"
	"github.com/mrgw/mrgw/loadtest/lab"
	"github.com/mrgw/mrgw/tunnel/pki"
)

// Options configure a run. Zero values take the defaults in brackets.
type Options struct {
	Binary string // the mrgw daemon binary [required]
	Hosts  int    // hosts to register [1000]
	// Parallel is how many registrations run at once [16]; SourceIPs how
	// many loopback addresses the hosts spread over (the gateway admits
	// 20 a second and holds 32 unregistered per source IP) [64].
	Parallel, SourceIPs int
	// Settle is how long the hosts stay registered and PINGing before the
	// gateway is measured again [3 s].
	Settle time.Duration
	// Dir keeps the configuration and the daemon's log [a temporary
	// directory, removed].
	Dir      string
	Progress io.Writer
	// MemoryBytes is the gateway's limits.memory_bytes [256 MiB].
	MemoryBytes int64
}

// Result is what the hosts cost the gateway.
type Result struct {
	Hosts      int `json:"hosts"`
	Registered int `json:"registered"` // the gateway's /status hosts at the end
	// The daemon's resident memory and open descriptors before the first
	// host and with every host registered; path sockets from /status.
	RSSBeforeMB float64 `json:"rss_before_mb"`
	RSSAfterMB  float64 `json:"rss_after_mb"`
	FDsBefore   int     `json:"fds_before"`
	FDsAfter    int     `json:"fds_after"`
	PathSockets uint64  `json:"path_sockets"`
	// KiBPerHost and FDsPerHost divide the growth by the hosts registered.
	KiBPerHost    float64 `json:"rss_kib_per_host"`
	FDsPerHost    float64 `json:"fds_per_host"`
	RegisterSecs  float64 `json:"register_seconds"`
	RegisterFails int     `json:"register_failures"`
	FirstFailure  string  `json:"first_failure,omitempty"`
	// RSSPeakMB is the daemon's peak resident memory (VmHWM) over the run,
	// registration storm included; BoundMB the most it may hold:
	// limits.memory_bytes (MemoryMB) plus gateway.MemoryOverhead plus
	// gateway.MemoryPerHost per host of lan.max_hosts, the Go memory
	// limit `mrgw run` sets. Within says RSSPeakMB ≤ BoundMB.
	RSSPeakMB float64 `json:"rss_peak_mb"`
	MemoryMB  float64 `json:"memory_mb"`
	BoundMB   float64 `json:"bound_mb"`
	Within    bool    `json:"within_bound"`
}

func (o *Options) fill() error {
	if o.Binary == "" {
		return errors.New("hostcap: the mrgw binary is required")
	}
	if o.Hosts <= 0 {
		o.Hosts = 1000
	}
	if o.Parallel <= 0 {
		o.Parallel = 16
	}
	if o.SourceIPs <= 0 {
		o.SourceIPs = 64
	}
	if o.Settle <= 0 {
		o.Settle = 3 * time.Second
	}
	if o.MemoryBytes <= 0 {
		o.MemoryBytes = 256 << 20
	}
	return nil
}

func (o *Options) say(format string, a ...any) {
	if o.Progress != nil {
		fmt.Fprintf(o.Progress, format+"\n", a...)
	}
}

// Run starts the gateway, registers the hosts and measures.
func Run(ctx context.Context, o Options) (*Result, error) {
	if err := o.fill(); err != nil {
		return nil, err
	}
	dir := o.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "mrgw-hostcap-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	key := &host.Key{ID: "hostcap", Secret: make([]byte, 32)}
	if _, err := rand.Read(key.Secret); err != nil {
		return nil, err
	}
	gw, err := startGateway(ctx, dir, o, key)
	if err != nil {
		return nil, err
	}
	defer gw.stop()
	res := &Result{Hosts: o.Hosts}
	res.RSSBeforeMB, res.FDsBefore = gw.usage()
	o.say("gateway up (pid %d): RSS %.1f MB, %d descriptors; registering %d hosts", gw.cmd.Process.Pid, res.RSSBeforeMB, res.FDsBefore, o.Hosts)

	hosts := make([]*host.Host, o.Hosts)
	defer func() {
		for _, h := range hosts {
			if h != nil {
				h.Close()
			}
		}
	}()
	t0 := time.Now()
	var mu sync.Mutex
	sem := make(chan struct{}, o.Parallel)
	var wg sync.WaitGroup
	for i := range o.Hosts {
		if ctx.Err() != nil {
			break
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			// 127.0.1.0/24 upwards: one source IP per SourceIPs hosts.
			ip := netip.AddrFrom4([4]byte{127, 0, byte(1 + (i%o.SourceIPs)/250), byte(1 + (i%o.SourceIPs)%250)})
			h, err := host.New(host.Config{Name: fmt.Sprintf("h%05d", i), Region: "r1", Gateways: []netip.AddrPort{gw.lan},
				Listen: netip.AddrPortFrom(ip, 0), Key: key, Protocol: lab.HostProtocol(), OpenTimeout: 30 * time.Second})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				res.RegisterFails++
				if res.FirstFailure == "" {
					res.FirstFailure = err.Error()
				}
				return
			}
			hosts[i] = h
		})
		if (i+1)%500 == 0 {
			o.say("  %d hosts started (%.0f s)", i+1, time.Since(t0).Seconds())
		}
	}
	wg.Wait()
	res.RegisterSecs = time.Since(t0).Seconds()
	o.say("registrations done in %.1f s (%d failed); settling %v", res.RegisterSecs, res.RegisterFails, o.Settle)
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(o.Settle):
	}
	st, err := gw.status(ctx)
	if err != nil {
		return nil, err
	}
	res.Registered, res.PathSockets = st.Hosts, st.PathSockets
	res.RSSAfterMB, res.FDsAfter = gw.usage()
	if res.Registered > 0 {
		res.KiBPerHost = (res.RSSAfterMB - res.RSSBeforeMB) * 1024 / float64(res.Registered)
		res.FDsPerHost = float64(res.FDsAfter-res.FDsBefore) / float64(res.Registered)
	}
	o.say("%d hosts registered: RSS %.1f → %.1f MB (%.1f KiB per host), descriptors %d → %d (%.3f per host), %d path sockets",
		res.Registered, res.RSSBeforeMB, res.RSSAfterMB, res.KiBPerHost, res.FDsBefore, res.FDsAfter, res.FDsPerHost, res.PathSockets)
	res.RSSPeakMB = gw.peakRSS()
	res.MemoryMB = float64(o.MemoryBytes) / (1 << 20)
	res.BoundMB = float64(o.MemoryBytes+gateway.MemoryOverhead+gateway.MemoryPerHost*int64(maxHosts(o))) / (1 << 20)
	res.Within = res.RSSPeakMB <= res.BoundMB
	o.say("peak RSS %.1f MiB, bound %.1f MiB (limits.memory_bytes %.0f MiB + %d MiB + %d KiB × %d hosts): within %v",
		res.RSSPeakMB, res.BoundMB, res.MemoryMB, gateway.MemoryOverhead>>20, gateway.MemoryPerHost>>10, maxHosts(o), res.Within)
	return res, nil
}

// daemon is the gateway process.
type daemon struct {
	cmd   *exec.Cmd
	lan   netip.AddrPort
	admin string
	done  chan struct{}
}

func startGateway(ctx context.Context, dir string, o Options, key *host.Key) (*daemon, error) {
	ca, err := pki.NewCA("mrgw hostcap CA", time.Now().Add(-time.Hour), 48*time.Hour)
	if err != nil {
		return nil, err
	}
	if err := pki.WriteCertPEM(filepath.Join(dir, "ca.pem"), ca.Cert); err != nil {
		return nil, err
	}
	id, err := ca.IssueIn("r1", "gw1", time.Now().Add(-time.Hour), 24*time.Hour)
	if err != nil {
		return nil, err
	}
	if err := id.WriteFiles(filepath.Join(dir, "gw1.pem"), filepath.Join(dir, "gw1-key.pem")); err != nil {
		return nil, err
	}
	lo := netip.MustParseAddr("127.0.0.1")
	var ports [5]netip.AddrPort
	for i := range ports {
		a, held, err := lab.FreePort(lo)
		if err != nil {
			return nil, err
		}
		for _, h := range held {
			h.Close()
		}
		ports[i] = a
	}
	doc := map[string]any{
		"node": map[string]any{"name": "gw1", "region": "r1"},
		"lan": map[string]any{"listen": ports[0].String(), "congestion_control": "dc-aimd", "max_hosts": maxHosts(o),
			"host_keys": []string{key.ID + ":" + base64.StdEncoding.EncodeToString(key.Secret)}},
		"wan": map[string]any{"planes": []any{map[string]any{"name": "p0", "local": ports[1].String()}}},
		"control": map[string]any{"listen": ports[2].String(),
			"tls": map[string]any{"ca_file": "ca.pem", "cert_file": "gw1.pem", "key_file": "gw1-key.pem"}},
		"gossip": map[string]any{"bind": ports[3].String()},
		"admin":  map[string]any{"listen": ports[4].String()},
		"log":    map[string]any{"level": "warn"},
		"limits": map[string]any{"memory_bytes": o.MemoryBytes},
	}
	b, err := yaml.Marshal(doc)
	if err != nil {
		return nil, err
	}
	cfgPath := filepath.Join(dir, "gw1.yaml")
	if err := os.WriteFile(cfgPath, b, 0o600); err != nil {
		return nil, err
	}
	logf, err := os.Create(filepath.Join(dir, "gw1.log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(o.Binary, "run", "--config", cfgPath)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, err
	}
	d := &daemon{cmd: cmd, lan: ports[0], admin: ports[4].String(), done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		logf.Close()
		close(d.done)
	}()
	// Up when /status answers.
	for {
		if _, err := d.status(ctx); err == nil {
			return d, nil
		}
		select {
		case <-d.done:
			return nil, fmt.Errorf("hostcap: the gateway exited at start; see %s", filepath.Join(dir, "gw1.log"))
		case <-ctx.Done():
			d.stop()
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (d *daemon) stop() {
	_ = d.cmd.Process.Signal(syscall.SIGKILL)
	<-d.done
}

func (d *daemon) status(ctx context.Context) (*gateway.Status, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+d.admin+"/status", nil)
	if err != nil {
		return nil, err
	}
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var st gateway.Status
	return &st, json.NewDecoder(resp.Body).Decode(&st)
}

// maxHosts is the gateway's lan.max_hosts.
func maxHosts(o Options) int { return o.Hosts + 16 }

// peakRSS is the daemon's peak resident memory (VmHWM), in MiB.
func (d *daemon) peakRSS() float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", d.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb / 1024
		}
	}
	return 0
}

// usage is the daemon's resident memory (MB) and open descriptors.
func (d *daemon) usage() (rssMB float64, fds int) {
	pid := d.cmd.Process.Pid
	if f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid)); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
				kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
				rssMB = kb / 1024
			}
		}
		f.Close()
	}
	if ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid)); err == nil {
		fds = len(ents)
	}
	return rssMB, fds
}
