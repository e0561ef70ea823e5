package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mrgw/mrgw/internal/cli"
)

// run executes a fresh mrgw command tree with args and returns its output.
func run(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	return cli.Run(newRoot(), args...)
}

// TestVersion: `mrgw version` and `mrgw --version` print the same line,
// made from the build information mrgw_build_info is labelled with
// (internal/cli's TestVersionLine checks the line itself).
func TestVersion(t *testing.T) {
	if err := cli.CheckVersion(newRoot); err != nil {
		t.Error(err)
	}
}

func TestConfigCheckNamesTheKey(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("node:\n  name: gw1\n  region: r1\nwan:\n  mtu: 0\n  pathz: 3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, errOut, err := run(t, "config", "check", "--skip-file-checks", bad)
	if err == nil {
		t.Fatal("a bad file passed config check")
	}
	for _, want := range []string{"wan.mtu", "wan.pathz"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("output does not name %s:\n%s", want, errOut)
		}
	}
}

func TestCertThenConfigCheckExamples(t *testing.T) {
	dir := t.TempDir()
	// REGION/NAME, and --region for bare names.
	if _, _, err := run(t, "cert", "--dir", filepath.Join(dir, "certs"), "eu-west/euw-gw1", "eu-west/euw-gw2"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := run(t, "cert", "--dir", filepath.Join(dir, "certs"), "--region", "us-east", "use-gw1", "use-gw2"); err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob("../../config/examples/two-region/*.yaml")
	if len(files) == 0 {
		t.Fatal("no example configurations found")
	}
	var args []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(dir, filepath.Base(f))
		if err := os.WriteFile(dst, b, 0o644); err != nil {
			t.Fatal(err)
		}
		args = append(args, dst)
	}
	out, errOut, err := run(t, append([]string{"config", "check"}, args...)...)
	if err != nil {
		t.Fatalf("examples with minted certificates fail config check: %v\n%s", err, errOut)
	}
	if strings.Count(out, ": ok") != len(args) {
		t.Fatalf("output: %s", out)
	}
	// A certificate of another region is refused by key; the old form (no
	// region) still passes the check.
	if _, _, err := run(t, "cert", "--dir", filepath.Join(dir, "certs"), "us-east/euw-gw1"); err != nil {
		t.Fatal(err)
	}
	_, errOut, err = run(t, "config", "check", args[0])
	if err == nil || !strings.Contains(errOut, "control.tls.cert_file") || !strings.Contains(errOut, "mrgw://us-east/euw-gw1") {
		t.Fatalf("%s with a certificate of another region: %v\n%s", args[0], err, errOut)
	}
	if _, _, err := run(t, "cert", "--dir", filepath.Join(dir, "certs"), "euw-gw1"); err != nil {
		t.Fatal(err)
	}
	if out, errOut, err := run(t, "config", "check", args[0]); err != nil || !strings.Contains(out, ": ok") {
		t.Fatalf("old-form certificate: %v\n%s%s", err, out, errOut)
	}
}

// TestNoLabCommands: the daemon binary has no lab commands (they are in
// cmd/mrgw-lab).
func TestNoLabCommands(t *testing.T) {
	for _, c := range []string{"demo", "sim", "loadtest", "conformance"} {
		if _, _, err := run(t, c); err == nil || !strings.Contains(err.Error(), "unknown command") {
			t.Errorf("mrgw %s: err = %v, want unknown command", c, err)
		}
	}
}
