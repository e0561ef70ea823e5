// Package pki mints and loads the certificates that authenticate mrgw
// gateways to each other, and builds the mutual-TLS configurations the QUIC
// control channel (tunnel/control) runs on.
//
// The trust model is deliberately small: one private CA per deployment, one
// ECDSA P-256 certificate per gateway. A gateway's identity is its name, carried
// as both the certificate's only DNS SAN and its Common Name, and its region:
// a URI SAN mrgw://REGION/NAME ([IdentityURI]), which the gateway compares with
// what the peer announces in gossip. Certificates minted before regions (no
// URI) still load and verify; they name no region. Every gateway certificate
// is valid for both client and server authentication because either of two
// gateways may dial the other.
//
// What lives here:
//   - NewCA / CA.Issue: development certificate minting (what `mrgw cert` calls).
//   - Write*/Load*: PEM files (keys written 0600) and loading a CA bundle plus a
//     cert/key pair, with *FileError values that name the file and the reason.
//   - Credentials.ServerTLS / ClientTLS: TLS 1.3-only configs with ALPN "mrgw-ctl/1".
//   - PeerName / VerifyPeer: verify a peer chain against the CA and return its
//     gateway name (and region, serial).
//
// Time is always an argument (now time.Time): the package never reads the
// clock, so expiry is testable. Randomness comes from crypto/rand (Go 1.26
// ignores caller-supplied readers for key generation anyway).
//
// This package must not import sockets, QUIC or anything above tunnel/.
package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"net/url"
	"time"
)

// ALPN is the application protocol negotiated on the control channel. A
// change to the control protocol that is not backwards compatible gets a new
// ALPN value, so mismatched gateways fail at the handshake with a clear error.
const ALPN = "mrgw-ctl/1"

// Typed errors. Every error this package returns wraps one of these, so
// callers can branch with errors.Is; file errors also wrap the OS error
// (for example fs.ErrNotExist).
var (
	ErrMissing       = errors.New("file missing")
	ErrUnreadable    = errors.New("file unreadable")
	ErrNotPEM        = errors.New("no PEM block of the expected type")
	ErrBadContent    = errors.New("PEM content does not parse")
	ErrExpired       = errors.New("certificate expired")
	ErrNotYetValid   = errors.New("certificate not yet valid")
	ErrNotSignedByCA = errors.New("certificate not signed by the CA")
	ErrKeyMismatch   = errors.New("private key does not match certificate")
	ErrNoCertificate = errors.New("no certificate presented")
	ErrBadName       = errors.New("invalid gateway name")
	ErrNotCA         = errors.New("certificate is not a CA")
	ErrValidity      = errors.New("invalid validity period")
)

// CA is a certificate authority able to issue gateway certificates.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
}

// Identity is one gateway's certificate and private key.
type Identity struct {
	Name   string // the gateway name (DNS SAN and CN)
	Region string // its region (the mrgw:// URI SAN); "" in a certificate without one
	Cert   *x509.Certificate
	Key    *ecdsa.PrivateKey
}

// IdentityScheme is the URI scheme of a gateway identity: mrgw://REGION/NAME.
const IdentityScheme = "mrgw"

// IdentityURI is the URI SAN naming gateway name of region.
func IdentityURI(region, name string) *url.URL {
	return &url.URL{Scheme: IdentityScheme, Host: region, Path: "/" + name}
}

// PeerIdentity is what a verified peer certificate says of the gateway.
type PeerIdentity struct {
	Name   string   // the DNS SAN
	Region string   // from the mrgw://REGION/NAME URI SAN; "" when it has none
	Serial *big.Int // the certificate's serial number (deny-lists)
}

// TLSCertificate returns the identity in the form crypto/tls wants.
func (id *Identity) TLSCertificate() tls.Certificate {
	return tls.Certificate{
		Certificate: [][]byte{id.Cert.Raw},
		PrivateKey:  id.Key,
		Leaf:        id.Cert,
	}
}

// NewCA creates a self-signed ECDSA P-256 CA valid from now for validity.
func NewCA(name string, now time.Time, validity time.Duration) (*CA, error) {
	if name == "" {
		return nil, fmt.Errorf("pki: CA name: %w: empty", ErrBadName)
	}
	if validity <= 0 {
		return nil, fmt.Errorf("pki: CA %q: %w: %v", name, ErrValidity, validity)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("pki: CA key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: name, Organization: []string{"mrgw"}},
		NotBefore:             now,
		NotAfter:              now.Add(validity),
		IsCA:                  true,
		BasicConstraintsValid: true,
		// The CA only signs gateway leaves: no intermediates.
		MaxPathLen:     0,
		MaxPathLenZero: true,
		KeyUsage:       x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("pki: CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("pki: CA certificate: %w", err)
	}
	return &CA{Cert: cert, Key: key}, nil
}

// Issue creates a gateway certificate for name, signed by ca, valid from now
// for validity. The certificate carries name as its only DNS SAN and as CN,
// and allows both server and client authentication. A certificate that would
// outlive the CA is refused rather than silently shortened.
func (ca *CA) Issue(name string, now time.Time, validity time.Duration) (*Identity, error) {
	return ca.IssueIn("", name, now, validity)
}

// IssueIn is Issue for a gateway of region: the certificate also carries the
// URI SAN mrgw://REGION/NAME, which peers compare with the region the
// gateway announces in gossip. An empty region is Issue.
func (ca *CA) IssueIn(region, name string, now time.Time, validity time.Duration) (*Identity, error) {
	if err := ValidName(name); err != nil {
		return nil, fmt.Errorf("pki: issue: %w", err)
	}
	var uris []*url.URL
	if region != "" {
		if err := ValidName(region); err != nil {
			return nil, fmt.Errorf("pki: issue %q: region: %w", name, err)
		}
		uris = []*url.URL{IdentityURI(region, name)}
	}
	if validity <= 0 {
		return nil, fmt.Errorf("pki: issue %q: %w: %v", name, ErrValidity, validity)
	}
	notAfter := now.Add(validity)
	if notAfter.After(ca.Cert.NotAfter) {
		return nil, fmt.Errorf("pki: issue %q: %w: would expire %s, after the CA (%s)",
			name, ErrValidity, notAfter.UTC().Format(time.RFC3339), ca.Cert.NotAfter.UTC().Format(time.RFC3339))
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("pki: key for %q: %w", name, err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: name, Organization: []string{"mrgw"}},
		DNSNames:              []string{name},
		URIs:                  uris,
		NotBefore:             now,
		NotAfter:              notAfter,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		return nil, fmt.Errorf("pki: certificate for %q: %w", name, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("pki: certificate for %q: %w", name, err)
	}
	return &Identity{Name: name, Region: region, Cert: cert, Key: key}, nil
}

func newSerial() (*big.Int, error) {
	// 128 random bits: unique without keeping state, as RFC 5280 asks.
	s, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, fmt.Errorf("pki: serial: %w", err)
	}
	return s, nil
}

// ValidName reports whether name can be a gateway name: a DNS name of
// lower-case letters, digits, '-' and '.', 1 to 253 characters, labels of 1
// to 63 characters not starting or ending with '-'. Names go into a DNS SAN
// and are compared byte for byte, so case and form are fixed here.
func ValidName(name string) error {
	if len(name) == 0 || len(name) > 253 {
		return fmt.Errorf("%w %q: length %d not in 1..253", ErrBadName, name, len(name))
	}
	label := 0
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
			label++
		case c == '-':
			if label == 0 || i+1 == len(name) || name[i+1] == '.' {
				return fmt.Errorf("%w %q: label starts or ends with '-'", ErrBadName, name)
			}
			label++
		case c == '.':
			if label == 0 {
				return fmt.Errorf("%w %q: empty label", ErrBadName, name)
			}
			label = 0
			continue
		default:
			return fmt.Errorf("%w %q: character %q not allowed", ErrBadName, name, c)
		}
		if label > 63 {
			return fmt.Errorf("%w %q: label longer than 63", ErrBadName, name)
		}
	}
	if label == 0 {
		return fmt.Errorf("%w %q: empty label", ErrBadName, name)
	}
	return nil
}
