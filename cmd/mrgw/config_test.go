package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mrgw/mrgw/config"
	"github.com/mrgw/mrgw/tunnel/pki"
)

// config check parses the certificates the configuration names, as the
// gateway does at start: files the gateway would refuse fail the check (the
// systemd unit runs it as ExecStartPre, so the unit does not restart-loop),
// naming the key; a certificate close to expiry and an unreachable
// limits.max_flows are warnings.
func TestConfigCheckCertificates(t *testing.T) {
	now := time.Now()
	ca, err := pki.NewCA("test CA", now.Add(-72*time.Hour), 400*24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	issue := func(name string, from time.Time, validity time.Duration) *pki.Identity {
		id, err := ca.Issue(name, from, validity)
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	example, err := os.ReadFile("../../config/examples/two-region/euw-gw1.yaml")
	if err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name     string
		cert     *pki.Identity // written as certs/euw-gw1.pem
		key      *pki.Identity // its key written as certs/euw-gw1-key.pem; nil: cert's
		garbage  string        // if set, written over this file under certs/
		yaml     func(string) string
		wantErr  []string // substrings of the problems; none: the check passes
		wantWarn []string // substrings of the one warning; none: no warning
	}{
		{name: "good", cert: issue("euw-gw1", now, 90*24*time.Hour)},
		{name: "garbage certificate", cert: issue("euw-gw1", now, 90*24*time.Hour), garbage: "euw-gw1.pem",
			wantErr: []string{"control.tls.cert_file: ", "euw-gw1.pem: no PEM block"}},
		{name: "garbage CA", cert: issue("euw-gw1", now, 90*24*time.Hour), garbage: "ca.pem",
			wantErr: []string{"control.tls.ca_file: ", "ca.pem: no PEM block"}},
		{name: "key of another gateway", cert: issue("euw-gw1", now, 90*24*time.Hour), key: issue("euw-gw2", now, 90*24*time.Hour),
			wantErr: []string{"control.tls.key_file: ", "private key does not match certificate"}},
		{name: "certificate of another gateway", cert: issue("euw-gw2", now, 90*24*time.Hour),
			wantErr: []string{"control.tls.cert_file: ", `it names "euw-gw2", node.name is "euw-gw1"`}},
		{name: "expired", cert: issue("euw-gw1", now.Add(-48*time.Hour), 24*time.Hour),
			wantErr: []string{"control.tls.cert_file: ", "certificate expired"}},
		{name: "expires in 3 days", cert: issue("euw-gw1", now.Add(-48*time.Hour), 5*24*time.Hour),
			wantWarn: []string{"warning: control.tls.cert_file: ", "certificate expires soon"}},
		{name: "max_flows beyond memory", cert: issue("euw-gw1", now, 90*24*time.Hour),
			yaml:     func(s string) string { return strings.Replace(s, "max_flows: 64 ", "max_flows: 1024 ", 1) },
			wantWarn: []string{"warning: limits.max_flows: 1024 flows cannot all be admitted", "which holds 64"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			certs := filepath.Join(dir, "certs")
			if err := os.Mkdir(certs, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := ca.WriteFiles(filepath.Join(certs, "ca.pem"), filepath.Join(certs, "ca-key.pem")); err != nil {
				t.Fatal(err)
			}
			key := tc.key
			if key == nil {
				key = tc.cert
			}
			if err := pki.WriteCertPEM(filepath.Join(certs, "euw-gw1.pem"), tc.cert.Cert); err != nil {
				t.Fatal(err)
			}
			if err := pki.WriteKeyPEM(filepath.Join(certs, "euw-gw1-key.pem"), key.Key); err != nil {
				t.Fatal(err)
			}
			if tc.garbage != "" {
				if err := os.WriteFile(filepath.Join(certs, tc.garbage), []byte("garbage\n"), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			y := string(example)
			if tc.yaml != nil {
				y = tc.yaml(y)
			}
			path := filepath.Join(dir, "euw-gw1.yaml")
			if err := os.WriteFile(path, []byte(y), 0o644); err != nil {
				t.Fatal(err)
			}

			out, errOut, err := run(t, "config", "check", path)
			if len(tc.wantErr) > 0 {
				if err == nil {
					t.Fatalf("config check passed:\n%s", out)
				}
				for _, w := range tc.wantErr {
					if !strings.Contains(errOut, w) {
						t.Errorf("output does not say %q:\n%s", w, errOut)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("config check failed: %v\n%s", err, errOut)
			}
			if !strings.HasPrefix(out, path+": ok\n") {
				t.Errorf("output: %s", out)
			}
			if got, want := strings.Count(out, "warning: "), min(len(tc.wantWarn), 1); got != want {
				t.Errorf("%d warnings, want %d:\n%s", got, want, out)
			}
			for _, w := range tc.wantWarn {
				if !strings.Contains(out, w) {
					t.Errorf("output does not say %q:\n%s", w, out)
				}
			}

			// --skip-file-checks leaves the files alone.
			if _, errOut, err := run(t, "config", "check", "--skip-file-checks", path); err != nil {
				t.Errorf("--skip-file-checks: %v\n%s", err, errOut)
			}
		})
	}
}

// `mrgw config keys` prints the key table; with --doc it rewrites the table
// between a document's markers and leaves the rest of it alone.
func TestConfigKeys(t *testing.T) {
	out, _, err := run(t, "config", "keys")
	if err != nil || !strings.Contains(out, "| `wan.mtu` |") {
		t.Fatalf("config keys: %v\n%s", err, out)
	}
	doc := filepath.Join(t.TempDir(), "CONFIG.md")
	before, after := "# Configuration\n\n"+config.KeyTableBegin+"\n", config.KeyTableEnd+"\n\nMore.\n"
	if err := os.WriteFile(doc, []byte(before+"stale\n"+after), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := run(t, "config", "keys", "--doc", doc); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	if want := before + config.KeyTable() + after; string(b) != want {
		t.Errorf("--doc wrote:\n%s", b)
	}
}

// TestConfigCheckFleet: files checked together are one deployment. The
// example's four pass together; a copy of euw-gw1 moved to other
// addresses fails on node.name, naming the file that has it first; a
// gateway of its own name that reuses another's address fails on that
// address's key. Before, each file was checked alone and both passed.
func TestConfigCheckFleet(t *testing.T) {
	examples := "../../config/examples/two-region/"
	four := []string{examples + "euw-gw1.yaml", examples + "euw-gw2.yaml", examples + "use-gw1.yaml", examples + "use-gw2.yaml"}
	if _, errOut, err := run(t, append([]string{"config", "check", "--skip-file-checks"}, four...)...); err != nil {
		t.Fatalf("the example deployment fails config check: %v\n%s", err, errOut)
	}
	src, err := os.ReadFile(examples + "euw-gw1.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write := func(name, y string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(y), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	// The copy: every address on 127.0.0.99, the name unchanged.
	moved := write("copy.yaml", strings.ReplaceAll(string(src), "127.0.0.11:", "127.0.0.99:"))
	out, errOut, err := run(t, "config", "check", "--skip-file-checks", four[0], moved)
	if err == nil {
		t.Fatal("a copy of euw-gw1 on other addresses passed config check with the original")
	}
	if want := `node.name: "euw-gw1" is also the node.name of ` + four[0]; !strings.Contains(errOut, want) {
		t.Errorf("output does not say %q:\n%s", want, errOut)
	}
	if !strings.Contains(out, four[0]+": ok") || !strings.Contains(errOut, moved+": 1 problem(s)") {
		t.Errorf("the problem is not the later file's alone:\n%s%s", out, errOut)
	}
	// Another name, one address in common (the admin listener).
	renamed := strings.ReplaceAll(string(src), "127.0.0.11:", "127.0.0.99:")
	renamed = strings.Replace(renamed, "name: euw-gw1", "name: euw-gw9", 1)
	renamed = strings.ReplaceAll(renamed, "127.0.0.99:19461", "127.0.0.11:19461")
	other := write("other.yaml", renamed)
	_, errOut, err = run(t, "config", "check", "--skip-file-checks", four[0], other)
	if err == nil {
		t.Fatal("two gateways with one admin.listen passed config check")
	}
	if want := "admin.listen: 127.0.0.11:19461 is also admin.listen of " + four[0]; !strings.Contains(errOut, want) {
		t.Errorf("output does not say %q:\n%s", want, errOut)
	}
	if strings.Contains(errOut, "node.name") {
		t.Errorf("distinct names reported:\n%s", errOut)
	}
	// Two gateways of one region told different region rates.
	src2, err := os.ReadFile(examples + "euw-gw2.yaml")
	if err != nil {
		t.Fatal(err)
	}
	told := write("told.yaml", strings.Replace(string(src2), "wan:\n", "wan:\n  region_rate_bps: 1000000000\n", 1))
	_, errOut, err = run(t, "config", "check", "--skip-file-checks", four[0], told)
	if err == nil {
		t.Fatal("two gateways of one region with different wan.region_rate_bps passed config check")
	}
	if want := `wan.region_rate_bps: 1000000000 differs from ` + four[0] + `'s 0 in region "eu-west"`; !strings.Contains(errOut, want) {
		t.Errorf("output does not say %q:\n%s", want, errOut)
	}
}
