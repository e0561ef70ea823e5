package pki

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"time"
)

// Credentials is what one gateway needs for mutual TLS: the CAs it trusts and
// its own identity.
type Credentials struct {
	CAs      []*x509.Certificate
	Pool     *x509.CertPool // the same CAs, as crypto/tls wants them
	Identity *Identity
}

// NewPool returns a certificate pool holding cas.
func NewPool(cas []*x509.Certificate) *x509.CertPool {
	p := x509.NewCertPool()
	for _, c := range cas {
		p.AddCert(c)
	}
	return p
}

// Credentials returns in-memory credentials for id trusting only ca (tests,
// `mrgw-lab demo`). It does not check that ca signed id: a mismatch is exactly
// what some tests need, and the peer will refuse it.
func (ca *CA) Credentials(id *Identity) *Credentials {
	cas := []*x509.Certificate{ca.Cert}
	return &Credentials{CAs: cas, Pool: NewPool(cas), Identity: id}
}

// ServerTLS returns the listener-side config: TLS 1.3 only, ALPN mrgw-ctl/1,
// and a client certificate required and verified against the CA pool.
func (c *Credentials) ServerTLS() *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: c.certificates(),
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    c.Pool,
		NextProtos:   []string{ALPN},
	}
}

// ClientTLS returns the dialer-side config: TLS 1.3 only, ALPN mrgw-ctl/1,
// our certificate offered, and the server verified against the CA pool and
// the name peer.
func (c *Credentials) ClientTLS(peer string) *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: c.certificates(),
		RootCAs:      c.Pool,
		ServerName:   peer,
		NextProtos:   []string{ALPN},
	}
}

func (c *Credentials) certificates() []tls.Certificate {
	if c.Identity == nil {
		return nil // a client without a certificate: only useful to test refusal
	}
	return []tls.Certificate{c.Identity.TLSCertificate()}
}

// PeerName verifies a peer's certificate chain (leaf first, as in
// tls.ConnectionState.PeerCertificates) against pool at now for usage, and
// returns the gateway name it certifies: its single DNS SAN.
//
// crypto/tls has normally verified the chain already; this check is repeated
// after the handshake on purpose, so that a config mistake (a missing
// ClientAuth, an InsecureSkipVerify) can never let an unverified peer in, and
// so the refusal carries a typed error.
func PeerName(chain []*x509.Certificate, pool *x509.CertPool, usage x509.ExtKeyUsage, now time.Time) (string, error) {
	id, err := VerifyPeer(chain, pool, usage, now)
	return id.Name, err
}

// VerifyPeer is PeerName returning the whole identity: the name, the region
// of its mrgw://REGION/NAME URI SAN ("" when the certificate has none; one
// naming another gateway, or two such URIs, is ErrBadName) and the serial.
func VerifyPeer(chain []*x509.Certificate, pool *x509.CertPool, usage x509.ExtKeyUsage, now time.Time) (PeerIdentity, error) {
	name, err := peerName(chain, pool, usage, now)
	if err != nil {
		return PeerIdentity{}, err
	}
	region, err := RegionOf(chain[0], name)
	if err != nil {
		return PeerIdentity{}, err
	}
	return PeerIdentity{Name: name, Region: region, Serial: chain[0].SerialNumber}, nil
}

// RegionOf returns the region of leaf's mrgw:// URI SAN, which must name
// name; "" when it has no such URI.
func RegionOf(leaf *x509.Certificate, name string) (string, error) {
	region := ""
	for _, u := range leaf.URIs {
		if u.Scheme != IdentityScheme {
			continue
		}
		switch {
		case region != "":
			return "", fmt.Errorf("%w: certificate has more than one %s:// identity", ErrBadName, IdentityScheme)
		case u.Path != "/"+name || u.User != nil || u.RawQuery != "" || u.Fragment != "" || u.Port() != "":
			return "", fmt.Errorf("%w: certificate identity %s does not name %q", ErrBadName, u, name)
		}
		if err := ValidName(u.Host); err != nil {
			return "", fmt.Errorf("certificate identity %s: region: %w", u, err)
		}
		region = u.Host
	}
	return region, nil
}

func peerName(chain []*x509.Certificate, pool *x509.CertPool, usage x509.ExtKeyUsage, now time.Time) (string, error) {
	if len(chain) == 0 {
		return "", ErrNoCertificate
	}
	leaf := chain[0]
	// Checked first so that an expired certificate says "expired", not the
	// vaguer verification error.
	if err := checkValidity(leaf, now); err != nil {
		return "", err
	}
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	_, err := leaf.Verify(x509.VerifyOptions{
		Roots:         pool,
		Intermediates: inter,
		CurrentTime:   now,
		KeyUsages:     []x509.ExtKeyUsage{usage},
	})
	if err != nil {
		var inv x509.CertificateInvalidError
		if errors.As(err, &inv) && inv.Reason == x509.Expired {
			// The leaf is in its period, so a CA in the chain has expired.
			return "", fmt.Errorf("%w: %w", ErrExpired, err)
		}
		return "", fmt.Errorf("%w: %q: %w", ErrNotSignedByCA, leaf.Subject.CommonName, err)
	}
	if len(leaf.DNSNames) != 1 {
		return "", fmt.Errorf("%w: certificate has %d DNS names, want exactly 1", ErrBadName, len(leaf.DNSNames))
	}
	name := leaf.DNSNames[0]
	if err := ValidName(name); err != nil {
		return "", err
	}
	return name, nil
}
