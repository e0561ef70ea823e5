package pki

import (
	"crypto/ecdsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// File roles, used in FileError so a message says which file is wrong.
const (
	RoleCA   = "CA bundle"
	RoleCert = "certificate"
	RoleKey  = "private key"
)

// FileError is returned for any problem with one PEM file. Err wraps one of
// the package's typed errors (ErrMissing, ErrNotPEM, ErrExpired, ...) and,
// for I/O failures, the OS error too.
type FileError struct {
	Role string // RoleCA, RoleCert or RoleKey
	Path string
	Err  error
}

func (e *FileError) Error() string {
	return fmt.Sprintf("pki: %s file %s: %v", e.Role, e.Path, e.Err)
}

func (e *FileError) Unwrap() error { return e.Err }

const (
	pemCert = "CERTIFICATE"
	pemKey  = "PRIVATE KEY" // PKCS #8
)

// WriteFiles writes the CA certificate (0644) and key (0600) as PEM.
func (ca *CA) WriteFiles(certPath, keyPath string) error {
	if err := WriteCertPEM(certPath, ca.Cert); err != nil {
		return err
	}
	return WriteKeyPEM(keyPath, ca.Key)
}

// WriteFiles writes the gateway certificate (0644) and key (0600) as PEM.
func (id *Identity) WriteFiles(certPath, keyPath string) error {
	if err := WriteCertPEM(certPath, id.Cert); err != nil {
		return err
	}
	return WriteKeyPEM(keyPath, id.Key)
}

// WriteCertPEM writes certificates as consecutive PEM blocks, mode 0644.
func WriteCertPEM(path string, certs ...*x509.Certificate) error {
	var b []byte
	for _, c := range certs {
		b = append(b, pem.EncodeToMemory(&pem.Block{Type: pemCert, Bytes: c.Raw})...)
	}
	return writeAtomic(path, b, 0o644, RoleCert)
}

// WriteKeyPEM writes key as a PKCS #8 PEM block, mode 0600.
func WriteKeyPEM(path string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return &FileError{Role: RoleKey, Path: path, Err: err}
	}
	return writeAtomic(path, pem.EncodeToMemory(&pem.Block{Type: pemKey, Bytes: der}), 0o600, RoleKey)
}

// writeAtomic writes through a temporary file in the same directory and a
// rename, so a reader never sees half a key, and the key is never, even
// briefly, readable by others (the temp file is created 0600 before any byte).
func writeAtomic(path string, data []byte, mode os.FileMode, role string) error {
	fail := func(err error) error { return &FileError{Role: role, Path: path, Err: err} }
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fail(err)
	}
	tmp := f.Name()
	defer os.Remove(tmp) // no-op after a successful rename
	if err := f.Chmod(mode); err != nil {
		f.Close()
		return fail(err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fail(err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fail(err)
	}
	if err := f.Close(); err != nil {
		return fail(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fail(err)
	}
	return nil
}

func readFile(role, path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, &FileError{Role: role, Path: path, Err: fmt.Errorf("%w: %w", ErrMissing, err)}
	case err != nil:
		return nil, &FileError{Role: role, Path: path, Err: fmt.Errorf("%w: %w", ErrUnreadable, err)}
	}
	return b, nil
}

// parseCerts decodes every CERTIFICATE block in b. Other block types are
// skipped (bundles often carry comments or keys), but at least one
// certificate must be present.
func parseCerts(role, path string, b []byte) ([]*x509.Certificate, error) {
	var certs []*x509.Certificate
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			break
		}
		if blk.Type != pemCert {
			continue
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, &FileError{Role: role, Path: path, Err: fmt.Errorf("%w: %w", ErrBadContent, err)}
		}
		certs = append(certs, c)
	}
	if len(certs) == 0 {
		return nil, &FileError{Role: role, Path: path, Err: fmt.Errorf("%w: want %s", ErrNotPEM, pemCert)}
	}
	return certs, nil
}

func checkValidity(c *x509.Certificate, now time.Time) error {
	if now.After(c.NotAfter) {
		return fmt.Errorf("%w: %q expired %s (now %s)", ErrExpired, c.Subject.CommonName,
			c.NotAfter.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	}
	if now.Before(c.NotBefore) {
		return fmt.Errorf("%w: %q valid from %s (now %s)", ErrNotYetValid, c.Subject.CommonName,
			c.NotBefore.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	}
	return nil
}

// LoadCABundle reads one or more CA certificates from a PEM file. Each must be
// a CA and valid at now.
func LoadCABundle(path string, now time.Time) ([]*x509.Certificate, error) {
	b, err := readFile(RoleCA, path)
	if err != nil {
		return nil, err
	}
	certs, err := parseCerts(RoleCA, path, b)
	if err != nil {
		return nil, err
	}
	for _, c := range certs {
		if !c.IsCA {
			return nil, &FileError{Role: RoleCA, Path: path,
				Err: fmt.Errorf("%w: %q", ErrNotCA, c.Subject.CommonName)}
		}
		if err := checkValidity(c, now); err != nil {
			return nil, &FileError{Role: RoleCA, Path: path, Err: err}
		}
	}
	return certs, nil
}

// LoadKey reads an ECDSA private key (PKCS #8 or SEC 1 "EC PRIVATE KEY").
func LoadKey(path string) (*ecdsa.PrivateKey, error) {
	b, err := readFile(RoleKey, path)
	if err != nil {
		return nil, err
	}
	fail := func(err error) error { return &FileError{Role: RoleKey, Path: path, Err: err} }
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			return nil, fail(fmt.Errorf("%w: want %s", ErrNotPEM, pemKey))
		}
		switch blk.Type {
		case pemKey:
			k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
			if err != nil {
				return nil, fail(fmt.Errorf("%w: %w", ErrBadContent, err))
			}
			ek, ok := k.(*ecdsa.PrivateKey)
			if !ok {
				return nil, fail(fmt.Errorf("%w: key is %T, want ECDSA", ErrBadContent, k))
			}
			return ek, nil
		case "EC PRIVATE KEY":
			k, err := x509.ParseECPrivateKey(blk.Bytes)
			if err != nil {
				return nil, fail(fmt.Errorf("%w: %w", ErrBadContent, err))
			}
			return k, nil
		}
	}
}

// LoadCA reads a CA certificate and its key, for issuing certificates from
// an existing CA (`mrgw cert issue`).
func LoadCA(certPath, keyPath string, now time.Time) (*CA, error) {
	certs, err := LoadCABundle(certPath, now)
	if err != nil {
		return nil, err
	}
	key, err := LoadKey(keyPath)
	if err != nil {
		return nil, err
	}
	if !key.PublicKey.Equal(certs[0].PublicKey) {
		return nil, &FileError{Role: RoleKey, Path: keyPath,
			Err: fmt.Errorf("%w: %s", ErrKeyMismatch, certPath)}
	}
	return &CA{Cert: certs[0], Key: key}, nil
}

// LoadCredentials reads a CA bundle and a gateway cert/key pair and checks
// that they fit together at now: the certificate is in its validity period,
// chains to one of the CAs, and matches the key. The error names the file at
// fault and why.
func LoadCredentials(caPath, certPath, keyPath string, now time.Time) (*Credentials, error) {
	cas, err := LoadCABundle(caPath, now)
	if err != nil {
		return nil, err
	}
	b, err := readFile(RoleCert, certPath)
	if err != nil {
		return nil, err
	}
	certs, err := parseCerts(RoleCert, certPath, b)
	if err != nil {
		return nil, err
	}
	key, err := LoadKey(keyPath)
	if err != nil {
		return nil, err
	}
	leaf := certs[0]
	if !key.PublicKey.Equal(leaf.PublicKey) {
		return nil, &FileError{Role: RoleKey, Path: keyPath,
			Err: fmt.Errorf("%w: %s", ErrKeyMismatch, certPath)}
	}
	id, err := VerifyPeer(certs, NewPool(cas), x509.ExtKeyUsageAny, now)
	if err != nil {
		return nil, &FileError{Role: RoleCert, Path: certPath, Err: err}
	}
	return &Credentials{
		CAs:      cas,
		Pool:     NewPool(cas),
		Identity: &Identity{Name: id.Name, Region: id.Region, Cert: leaf, Key: key},
	}, nil
}
