package pki

import (
	"crypto/x509"
	"errors"
	"net/url"
	"path/filepath"
	"testing"
	"time"
)

// A gateway certificate names its region in a mrgw://REGION/NAME URI SAN;
// one without (minted before regions) still verifies, naming no region.
func TestIdentityURI(t *testing.T) {
	now := time.Now()
	ca, err := NewCA("test CA", now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	pool := NewPool([]*x509.Certificate{ca.Cert})
	id, err := ca.IssueIn("eu-west", "euw-gw1", now, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(id.Cert.URIs) != 1 || id.Cert.URIs[0].String() != "mrgw://eu-west/euw-gw1" {
		t.Fatalf("URIs = %v", id.Cert.URIs)
	}
	pid, err := VerifyPeer([]*x509.Certificate{id.Cert}, pool, x509.ExtKeyUsageClientAuth, now)
	if err != nil || pid.Name != "euw-gw1" || pid.Region != "eu-west" || pid.Serial.Cmp(id.Cert.SerialNumber) != 0 {
		t.Fatalf("VerifyPeer = %+v, %v", pid, err)
	}
	old, _ := ca.Issue("euw-gw2", now, time.Minute)
	if pid, err := VerifyPeer([]*x509.Certificate{old.Cert}, pool, x509.ExtKeyUsageClientAuth, now); err != nil || pid.Region != "" || pid.Name != "euw-gw2" {
		t.Fatalf("old form: %+v, %v", pid, err)
	}
	if _, err := ca.IssueIn("EU West", "x", now, time.Minute); err == nil {
		t.Error("a region that is no valid name was issued")
	}
	// A URI naming another gateway, or two identities, are refused.
	for _, uris := range [][]*url.URL{
		{IdentityURI("eu-west", "other")},
		{IdentityURI("eu-west", "euw-gw1"), IdentityURI("us-east", "euw-gw1")},
	} {
		c := *id.Cert
		c.URIs = uris
		if _, err := RegionOf(&c, "euw-gw1"); !errors.Is(err, ErrBadName) {
			t.Errorf("URIs %v: %v, want ErrBadName", uris, err)
		}
	}
	// Files: the region survives loading, and config check compares it.
	dir := t.TempDir()
	caf, cf, kf := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "gw.pem"), filepath.Join(dir, "gw-key.pem")
	if err := WriteCertPEM(caf, ca.Cert); err != nil {
		t.Fatal(err)
	}
	if err := id.WriteFiles(cf, kf); err != nil {
		t.Fatal(err)
	}
	creds, err := LoadCredentials(caf, cf, kf, now)
	if err != nil || creds.Identity.Region != "eu-west" {
		t.Fatalf("LoadCredentials: %+v, %v", creds, err)
	}
	if ps, _ := CheckFilesIn(caf, cf, kf, "eu-west", "euw-gw1", now, 0); len(ps) != 0 {
		t.Errorf("problems %v", ps)
	}
	if ps, _ := CheckFilesIn(caf, cf, kf, "us-east", "euw-gw1", now, 0); len(ps) != 1 || !errors.Is(ps[0], ErrNameMismatch) {
		t.Errorf("another region: problems %v", ps)
	}
}
