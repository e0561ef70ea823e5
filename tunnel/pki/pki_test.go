package pki

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func mustCA(t *testing.T, name string) *CA {
	t.Helper()
	ca, err := NewCA(name, t0, 365*24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func mustIssue(t *testing.T, ca *CA, name string) *Identity {
	t.Helper()
	id, err := ca.Issue(name, t0, 30*24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func TestIssueCertificateShape(t *testing.T) {
	ca := mustCA(t, "mrgw test CA")
	if !ca.Cert.IsCA || ca.Cert.KeyUsage&x509.KeyUsageCertSign == 0 {
		t.Fatalf("CA cert not a signing CA: IsCA=%v usage=%v", ca.Cert.IsCA, ca.Cert.KeyUsage)
	}
	id := mustIssue(t, ca, "gw-a1.region-a")
	c := id.Cert
	if c.Subject.CommonName != "gw-a1.region-a" || len(c.DNSNames) != 1 || c.DNSNames[0] != "gw-a1.region-a" {
		t.Fatalf("CN=%q DNS=%v", c.Subject.CommonName, c.DNSNames)
	}
	if c.IsCA {
		t.Fatal("leaf must not be a CA")
	}
	for _, u := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		if _, err := PeerName([]*x509.Certificate{c}, NewPool([]*x509.Certificate{ca.Cert}), u, t0.Add(time.Hour)); err != nil {
			t.Fatalf("usage %v: %v", u, err)
		}
	}
	if err := c.CheckSignatureFrom(ca.Cert); err != nil {
		t.Fatal(err)
	}
}

func TestIssueRefusesBadInput(t *testing.T) {
	ca := mustCA(t, "ca")
	for _, name := range []string{"", "UPPER", "a..b", "-a", "a-", "a_b", strings.Repeat("a", 64), "a.b."} {
		if _, err := ca.Issue(name, t0, time.Hour); !errors.Is(err, ErrBadName) {
			t.Errorf("Issue(%q) = %v, want ErrBadName", name, err)
		}
	}
	if _, err := ca.Issue("ok", t0, 2*365*24*time.Hour); !errors.Is(err, ErrValidity) {
		t.Errorf("outliving the CA: %v, want ErrValidity", err)
	}
	if _, err := ca.Issue("ok", t0, 0); !errors.Is(err, ErrValidity) {
		t.Errorf("zero validity: %v, want ErrValidity", err)
	}
	for _, name := range []string{"a", "gw-1.eu-west.example", "0"} {
		if err := ValidName(name); err != nil {
			t.Errorf("ValidName(%q) = %v", name, err)
		}
	}
}

type files struct{ ca, caKey, cert, key string }

func writeAll(t *testing.T, ca *CA, id *Identity) files {
	t.Helper()
	d := t.TempDir()
	f := files{
		ca: filepath.Join(d, "ca.pem"), caKey: filepath.Join(d, "ca-key.pem"),
		cert: filepath.Join(d, "gw.pem"), key: filepath.Join(d, "gw-key.pem"),
	}
	if err := ca.WriteFiles(f.ca, f.caKey); err != nil {
		t.Fatal(err)
	}
	if err := id.WriteFiles(f.cert, f.key); err != nil {
		t.Fatal(err)
	}
	return f
}

func TestFilesRoundTripAndModes(t *testing.T) {
	ca := mustCA(t, "ca")
	id := mustIssue(t, ca, "gw-a1")
	f := writeAll(t, ca, id)
	for path, want := range map[string]os.FileMode{f.ca: 0o644, f.caKey: 0o600, f.cert: 0o644, f.key: 0o600} {
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != want {
			t.Errorf("%s: mode %v, want %v", path, st.Mode().Perm(), want)
		}
	}
	cr, err := LoadCredentials(f.ca, f.cert, f.key, t0.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if cr.Identity.Name != "gw-a1" || !cr.Identity.Cert.Equal(id.Cert) || !cr.Identity.Key.Equal(id.Key) {
		t.Fatalf("loaded identity differs: %+v", cr.Identity.Name)
	}
	if len(cr.CAs) != 1 || !cr.CAs[0].Equal(ca.Cert) {
		t.Fatal("loaded CA differs")
	}
	ca2, err := LoadCA(f.ca, f.caKey, t0.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	// The reloaded CA can still issue certificates that chain to the original.
	id2, err := ca2.Issue("gw-b1", t0, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := id2.Cert.CheckSignatureFrom(ca.Cert); err != nil {
		t.Fatal(err)
	}
}

func TestLoadErrorsNameFileAndReason(t *testing.T) {
	ca := mustCA(t, "ca")
	id := mustIssue(t, ca, "gw-a1")
	f := writeAll(t, ca, id)
	other := mustCA(t, "other")
	foreign := mustIssue(t, other, "gw-a1")
	ff := writeAll(t, other, foreign)
	d := t.TempDir()
	garbage := filepath.Join(d, "garbage.pem")
	if err := os.WriteFile(garbage, []byte("hello, not pem\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	badDER := filepath.Join(d, "bad.pem")
	if err := os.WriteFile(badDER, []byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	unreadable := filepath.Join(d, "dir.pem")
	if err := os.Mkdir(unreadable, 0o700); err != nil {
		t.Fatal(err)
	}
	now := t0.Add(time.Hour)
	cases := []struct {
		name               string
		ca, cert, key      string
		now                time.Time
		wantErr            error
		wantRole, wantPath string
	}{
		{"missing CA", filepath.Join(d, "nope.pem"), f.cert, f.key, now, ErrMissing, RoleCA, filepath.Join(d, "nope.pem")},
		{"missing cert", f.ca, filepath.Join(d, "nope.pem"), f.key, now, ErrMissing, RoleCert, filepath.Join(d, "nope.pem")},
		{"missing key", f.ca, f.cert, filepath.Join(d, "nope.pem"), now, ErrMissing, RoleKey, filepath.Join(d, "nope.pem")},
		{"unreadable cert", f.ca, unreadable, f.key, now, ErrUnreadable, RoleCert, unreadable},
		{"CA not PEM", garbage, f.cert, f.key, now, ErrNotPEM, RoleCA, garbage},
		{"cert not PEM", f.ca, garbage, f.key, now, ErrNotPEM, RoleCert, garbage},
		{"key not PEM", f.ca, f.cert, garbage, now, ErrNotPEM, RoleKey, garbage},
		{"cert bad DER", f.ca, badDER, f.key, now, ErrBadContent, RoleCert, badDER},
		{"key is a cert", f.ca, f.cert, f.cert, now, ErrNotPEM, RoleKey, f.cert},
		{"CA bundle holds a leaf", f.cert, f.cert, f.key, now, ErrNotCA, RoleCA, f.cert},
		{"key of another cert", f.ca, f.cert, ff.key, now, ErrKeyMismatch, RoleKey, ff.key},
		{"cert from another CA", f.ca, ff.cert, ff.key, now, ErrNotSignedByCA, RoleCert, ff.cert},
		{"cert expired", f.ca, f.cert, f.key, t0.Add(31 * 24 * time.Hour), ErrExpired, RoleCert, f.cert},
		{"cert not yet valid", f.ca, f.cert, f.key, t0.Add(-time.Hour), ErrNotYetValid, RoleCA, f.ca},
		{"CA expired", f.ca, f.cert, f.key, t0.Add(400 * 24 * time.Hour), ErrExpired, RoleCA, f.ca},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := LoadCredentials(tc.ca, tc.cert, tc.key, tc.now)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			var fe *FileError
			if !errors.As(err, &fe) {
				t.Fatalf("err %v is not a *FileError", err)
			}
			if fe.Role != tc.wantRole || fe.Path != tc.wantPath {
				t.Fatalf("blames %s %s, want %s %s", fe.Role, fe.Path, tc.wantRole, tc.wantPath)
			}
			if !strings.Contains(err.Error(), tc.wantPath) {
				t.Fatalf("message %q does not name the file", err)
			}
		})
	}
	_, err := LoadCredentials(filepath.Join(d, "nope.pem"), f.cert, f.key, now)
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing file should also wrap fs.ErrNotExist: %v", err)
	}
}

func TestPeerName(t *testing.T) {
	ca := mustCA(t, "ca")
	pool := NewPool([]*x509.Certificate{ca.Cert})
	id := mustIssue(t, ca, "gw-b2")
	now := t0.Add(time.Hour)
	if n, err := PeerName([]*x509.Certificate{id.Cert}, pool, x509.ExtKeyUsageClientAuth, now); err != nil || n != "gw-b2" {
		t.Fatalf("PeerName = %q, %v", n, err)
	}
	if _, err := PeerName(nil, pool, x509.ExtKeyUsageClientAuth, now); !errors.Is(err, ErrNoCertificate) {
		t.Fatalf("empty chain: %v", err)
	}
	foreign := mustIssue(t, mustCA(t, "other"), "gw-b2")
	if _, err := PeerName([]*x509.Certificate{foreign.Cert}, pool, x509.ExtKeyUsageClientAuth, now); !errors.Is(err, ErrNotSignedByCA) {
		t.Fatalf("foreign: %v", err)
	}
	if _, err := PeerName([]*x509.Certificate{id.Cert}, pool, x509.ExtKeyUsageClientAuth, t0.Add(40*24*time.Hour)); !errors.Is(err, ErrExpired) {
		t.Fatalf("expired: %v", err)
	}
}

// TestMutualTLS runs a real TLS 1.3 handshake over loopback TCP with the
// configs this package builds: both sides authenticate, ALPN is negotiated,
// and a client without a certificate or from another CA is refused.
func TestMutualTLS(t *testing.T) {
	// Real clock: the certificates must be valid now for crypto/tls.
	now := time.Now()
	ca2, err := NewCA("ca-now", now.Add(-time.Hour), 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	issue := func(c *CA, n string) *Identity {
		id, err := c.Issue(n, now.Add(-time.Hour), 12*time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	srv := ca2.Credentials(issue(ca2, "gw-srv"))
	cli := ca2.Credentials(issue(ca2, "gw-cli"))
	noCert := &Credentials{CAs: cli.CAs, Pool: cli.Pool}
	other, err := NewCA("other-now", now.Add(-time.Hour), 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	foreign := &Credentials{CAs: cli.CAs, Pool: cli.Pool, Identity: issue(other, "gw-cli")}

	sc := srv.ServerTLS()
	if sc.MinVersion != tls.VersionTLS13 || sc.ClientAuth != tls.RequireAndVerifyClientCert || sc.NextProtos[0] != ALPN {
		t.Fatalf("server config: %+v", sc)
	}
	handshake := func(cc *tls.Config) (state tls.ConnectionState, cliErr, srvErr error) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		done := make(chan error, 1)
		go func() {
			c, err := ln.Accept()
			if err != nil {
				done <- err
				return
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(10 * time.Second))
			tc := tls.Server(c, sc)
			err = tc.Handshake()
			if err == nil {
				// TLS 1.3: the client's certificate is only checked once the
				// server has read its Finished; a read makes that explicit.
				_, err = tc.Write([]byte{1})
			}
			done <- err
		}()
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		tc := tls.Client(c, cc)
		cliErr = tc.Handshake()
		if cliErr == nil {
			var b [1]byte
			_, cliErr = tc.Read(b[:])
		}
		state = tc.ConnectionState()
		return state, cliErr, <-done
	}
	st, cliErr, srvErr := handshake(cli.ClientTLS("gw-srv"))
	if cliErr != nil || srvErr != nil {
		t.Fatalf("good pair: client %v, server %v", cliErr, srvErr)
	}
	if st.NegotiatedProtocol != ALPN || st.Version != tls.VersionTLS13 {
		t.Fatalf("ALPN %q version %x", st.NegotiatedProtocol, st.Version)
	}
	if _, cliErr, _ := handshake(cli.ClientTLS("gw-wrong")); cliErr == nil {
		t.Fatal("client accepted a server certificate for another name")
	}
	if _, cliErr, srvErr := handshake(noCert.ClientTLS("gw-srv")); cliErr == nil || srvErr == nil {
		t.Fatalf("no client cert accepted: client %v server %v", cliErr, srvErr)
	}
	if _, cliErr, srvErr := handshake(foreign.ClientTLS("gw-srv")); cliErr == nil || srvErr == nil {
		t.Fatalf("foreign client cert accepted: client %v server %v", cliErr, srvErr)
	}
}

// FuzzParsePEM feeds arbitrary file contents to the certificate and key
// parsers: they must never panic, and any failure must be a typed FileError.
func FuzzParsePEM(f *testing.F) {
	ca, err := NewCA("ca", t0, time.Hour)
	if err != nil {
		f.Fatal(err)
	}
	d := f.TempDir()
	if err := ca.WriteFiles(filepath.Join(d, "c.pem"), filepath.Join(d, "k.pem")); err != nil {
		f.Fatal(err)
	}
	for _, n := range []string{"c.pem", "k.pem"} {
		b, err := os.ReadFile(filepath.Join(d, n))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		f.Add(b[:len(b)/2])
	}
	f.Add([]byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		p := filepath.Join(t.TempDir(), "f.pem")
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		var fe *FileError
		if certs, err := parseCerts(RoleCert, p, b); err != nil {
			if !errors.As(err, &fe) {
				t.Fatalf("untyped error %v", err)
			}
		} else if len(certs) == 0 {
			t.Fatal("no error and no certificate")
		}
		if _, err := LoadKey(p); err != nil && !errors.As(err, &fe) {
			t.Fatalf("untyped error %v", err)
		}
	})
}
