package pki

import (
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// CheckFiles is what `mrgw config check` runs on control.tls.*: every file
// the gateway would refuse at start is a problem naming the file and the
// reason; a certificate close to expiry is a warning.
func TestCheckFiles(t *testing.T) {
	ca := mustCA(t, "ca")           // t0 .. t0+365d
	id := mustIssue(t, ca, "gw-a1") // t0 .. t0+30d
	good := writeAll(t, ca, id)
	now := t0.Add(time.Hour)
	const soon = 14 * 24 * time.Hour

	other := mustCA(t, "other CA")
	otherID := mustIssue(t, other, "gw-a1")
	foreign := writeAll(t, other, otherID)
	peer := mustIssue(t, ca, "gw-a2")
	peerFiles := writeAll(t, ca, peer)

	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage.pem")
	if err := os.WriteFile(garbage, []byte("not a PEM file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A CERTIFICATE block whose content is not DER.
	badDER := filepath.Join(dir, "bad-der.pem")
	if err := os.WriteFile(badDER, []byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	serverOnly := filepath.Join(dir, "server-only.pem")
	if err := WriteCertPEM(serverOnly, issueWithUsage(t, ca, id, x509.ExtKeyUsageServerAuth)); err != nil {
		t.Fatal(err)
	}

	type want struct {
		role string
		err  error
	}
	for _, tc := range []struct {
		name           string
		ca, cert, key  string
		gw             string
		now            time.Time
		problems       []want
		warnings       []want
		messageContain string
	}{
		{name: "good", ca: good.ca, cert: good.cert, key: good.key, gw: "gw-a1", now: now},
		{name: "garbage CA", ca: garbage, cert: good.cert, key: good.key, gw: "gw-a1", now: now,
			problems: []want{{RoleCA, ErrNotPEM}}},
		{name: "garbage certificate", ca: good.ca, cert: garbage, key: good.key, gw: "gw-a1", now: now,
			problems: []want{{RoleCert, ErrNotPEM}}},
		{name: "certificate not DER", ca: good.ca, cert: badDER, key: good.key, gw: "gw-a1", now: now,
			problems: []want{{RoleCert, ErrBadContent}}},
		{name: "garbage key", ca: good.ca, cert: good.cert, key: garbage, gw: "gw-a1", now: now,
			problems: []want{{RoleKey, ErrNotPEM}}},
		{name: "every file garbage", ca: garbage, cert: garbage, key: garbage, gw: "gw-a1", now: now,
			problems: []want{{RoleCA, ErrNotPEM}, {RoleCert, ErrNotPEM}, {RoleKey, ErrNotPEM}}},
		{name: "missing key", ca: good.ca, cert: good.cert, key: filepath.Join(dir, "nope.pem"), gw: "gw-a1", now: now,
			problems: []want{{RoleKey, ErrMissing}}},
		{name: "key of another certificate", ca: good.ca, cert: good.cert, key: peerFiles.key, gw: "gw-a1", now: now,
			problems: []want{{RoleKey, ErrKeyMismatch}}},
		{name: "certificate of another CA", ca: good.ca, cert: foreign.cert, key: foreign.key, gw: "gw-a1", now: now,
			problems: []want{{RoleCert, ErrNotSignedByCA}}},
		{name: "CA bundle is a leaf", ca: good.cert, cert: good.cert, key: good.key, gw: "gw-a1", now: now,
			problems: []want{{RoleCA, ErrNotCA}}},
		{name: "wrong name", ca: good.ca, cert: peerFiles.cert, key: peerFiles.key, gw: "gw-a1", now: now,
			problems: []want{{RoleCert, ErrNameMismatch}}, messageContain: `it names "gw-a2", node.name is "gw-a1"`},
		{name: "server auth only", ca: good.ca, cert: serverOnly, key: good.key, gw: "gw-a1", now: now,
			problems: []want{{RoleCert, ErrUsage}}, messageContain: "client authentication"},
		{name: "expired", ca: good.ca, cert: good.cert, key: good.key, gw: "gw-a1", now: t0.Add(31 * 24 * time.Hour),
			problems: []want{{RoleCert, ErrExpired}}},
		{name: "not yet valid", ca: good.ca, cert: good.cert, key: good.key, gw: "gw-a1", now: t0.Add(-time.Minute),
			problems: []want{{RoleCA, ErrNotYetValid}, {RoleCert, ErrNotYetValid}}},
		{name: "CA expired", ca: good.ca, cert: good.cert, key: good.key, gw: "gw-a1", now: t0.Add(366 * 24 * time.Hour),
			problems: []want{{RoleCA, ErrExpired}, {RoleCert, ErrExpired}}},
		{name: "expires soon", ca: good.ca, cert: good.cert, key: good.key, gw: "gw-a1", now: t0.Add(20 * 24 * time.Hour),
			warnings: []want{{RoleCert, ErrExpiresSoon}}, messageContain: "in 10d0h"},
		{name: "expires tomorrow", ca: good.ca, cert: good.cert, key: good.key, gw: "gw-a1", now: t0.Add(29 * 24 * time.Hour),
			warnings: []want{{RoleCert, ErrExpiresSoon}}, messageContain: "in 1d0h"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			problems, warnings := CheckFiles(tc.ca, tc.cert, tc.key, tc.gw, tc.now, soon)
			check := func(what string, got []*FileError, want []want) {
				t.Helper()
				if len(got) != len(want) {
					t.Fatalf("%s = %v, want %d", what, got, len(want))
				}
				for i, w := range want {
					if got[i].Role != w.role || !errors.Is(got[i], w.err) {
						t.Errorf("%s[%d] = %v (role %s), want role %s and %v", what, i, got[i], got[i].Role, w.role, w.err)
					}
					if got[i].Path == "" {
						t.Errorf("%s[%d] names no file", what, i)
					}
				}
			}
			check("problems", problems, tc.problems)
			check("warnings", warnings, tc.warnings)
			if tc.messageContain != "" {
				var all []string
				for _, fe := range append(problems, warnings...) {
					all = append(all, fe.Error())
				}
				if !strings.Contains(strings.Join(all, "\n"), tc.messageContain) {
					t.Errorf("messages %q do not say %q", all, tc.messageContain)
				}
			}
			// What CheckFiles passes, the gateway must load.
			if len(problems) == 0 {
				if _, err := LoadCredentials(tc.ca, tc.cert, tc.key, tc.now); err != nil {
					t.Errorf("CheckFiles passed files LoadCredentials refuses: %v", err)
				}
			}
		})
	}

	t.Run("CA close to expiry", func(t *testing.T) {
		shortCA, err := NewCA("short CA", t0, 40*24*time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		f := writeAll(t, shortCA, mustIssue(t, shortCA, "gw-a1"))
		problems, warnings := CheckFiles(f.ca, f.cert, f.key, "gw-a1", t0.Add(27*24*time.Hour), soon)
		if len(problems) != 0 || len(warnings) != 2 || warnings[0].Role != RoleCert || warnings[1].Role != RoleCA {
			t.Fatalf("problems %v, warnings %v: want a warning for the certificate and one for the CA", problems, warnings)
		}
	})
}

// issueWithUsage signs id's key again with only the given extended key usage.
func issueWithUsage(t *testing.T, ca *CA, id *Identity, usage x509.ExtKeyUsage) *x509.Certificate {
	t.Helper()
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(42),
		Subject:               pkix.Name{CommonName: id.Name},
		DNSNames:              []string{id.Name},
		NotBefore:             t0,
		NotAfter:              t0.Add(30 * 24 * time.Hour),
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{usage},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &id.Key.PublicKey, ca.Key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
