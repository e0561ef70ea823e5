package pki

import (
	"crypto/x509"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Errors of [CheckFiles] beyond those of loading.
var (
	// ErrNameMismatch: the certificate is valid but names another gateway,
	// so the gateway would refuse to start with it.
	ErrNameMismatch = errors.New("certificate does not name this gateway")
	// ErrExpiresSoon is a warning: the certificate (or a CA) is valid now
	// but expires within the window given to CheckFiles.
	ErrExpiresSoon = errors.New("certificate expires soon")
	// ErrUsage: the certificate is not valid for both server and client
	// authentication.
	ErrUsage = errors.New("certificate not valid for both server and client authentication")
)

// CheckFiles checks the CA bundle, certificate and key files of the gateway
// named name as the gateway itself uses them at start ([LoadCredentials], then
// the name check), so that a file that would stop the daemon is reported
// before it starts: `mrgw config check` runs it, and the systemd unit runs
// that as ExecStartPre.
//
// problems are what would stop the gateway: a file that is missing, holds no
// PEM block of its kind or does not parse; a CA that is not a CA or is outside
// its validity period; a certificate outside its validity period, not signed
// by the CA, not valid for both server and client authentication (either
// gateway of a pair may dial the other) or not naming name as its single DNS
// name; a key that does not match the certificate. Every file is checked even
// when another is bad, so all problems show at once.
//
// warnings are for a certificate or CA that is valid at now but expires
// within soon.
//
// Each is a *FileError whose Role says which file it concerns and whose Err
// wraps one of the package's typed errors (ErrExpiresSoon for warnings).
func CheckFiles(caPath, certPath, keyPath, name string, now time.Time, soon time.Duration) (problems, warnings []*FileError) {
	return CheckFilesIn(caPath, certPath, keyPath, "", name, now, soon)
}

// CheckFilesIn is CheckFiles for gateway name of region: a certificate whose
// mrgw://REGION/NAME identity names another region is a problem too (one
// without such an identity is not: certificates before regions had none).
func CheckFilesIn(caPath, certPath, keyPath, region, name string, now time.Time, soon time.Duration) (problems, warnings []*FileError) {
	fileErr := func(err error) *FileError {
		var fe *FileError
		if errors.As(err, &fe) {
			return fe
		}
		return &FileError{Role: RoleCert, Path: certPath, Err: err}
	}
	problem := func(role, path string, err error) {
		problems = append(problems, &FileError{Role: role, Path: path, Err: err})
	}
	expiring := func(role, path string, c *x509.Certificate) {
		if left := c.NotAfter.Sub(now); left < soon {
			warnings = append(warnings, &FileError{Role: role, Path: path,
				Err: fmt.Errorf("%w: %q expires %s, in %s", ErrExpiresSoon, c.Subject.CommonName,
					c.NotAfter.UTC().Format(time.RFC3339), fmtLeft(left))})
		}
	}

	cas, err := LoadCABundle(caPath, now)
	if err != nil {
		problems = append(problems, fileErr(err))
	}
	var leaf *x509.Certificate
	var chain []*x509.Certificate
	if b, err := readFile(RoleCert, certPath); err != nil {
		problems = append(problems, fileErr(err))
	} else if chain, err = parseCerts(RoleCert, certPath, b); err != nil {
		problems = append(problems, fileErr(err))
	} else {
		leaf = chain[0]
	}
	key, err := LoadKey(keyPath)
	if err != nil {
		problems = append(problems, fileErr(err))
	}

	if leaf != nil {
		if key != nil && !key.PublicKey.Equal(leaf.PublicKey) {
			problem(RoleKey, keyPath, fmt.Errorf("%w: %s", ErrKeyMismatch, certPath))
		}
		nameOK := len(leaf.DNSNames) == 1 && leaf.DNSNames[0] == name
		if !nameOK {
			problem(RoleCert, certPath, fmt.Errorf("%w: it names %s, node.name is %q", ErrNameMismatch, certNames(leaf), name))
		}
		validErr := checkValidity(leaf, now)
		switch {
		case validErr != nil:
			problem(RoleCert, certPath, validErr)
		case cas != nil:
			// The control channel verifies a listener's certificate for
			// server and a dialer's for client authentication.
			for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
				if _, err := PeerName(chain, NewPool(cas), usage, now); err != nil {
					var inv x509.CertificateInvalidError
					switch {
					case errors.As(err, &inv) && inv.Reason == x509.IncompatibleUsage:
						problem(RoleCert, certPath, fmt.Errorf("%w: %s is missing", ErrUsage, usageName[usage]))
					case !errors.Is(err, ErrBadName) || nameOK:
						problem(RoleCert, certPath, err)
					}
					break
				}
			}
		}
		if validErr == nil {
			expiring(RoleCert, certPath, leaf)
		}
	}
	for _, ca := range cas {
		expiring(RoleCA, caPath, ca)
	}

	// The gateway loads the files with LoadCredentials: whatever the checks
	// above missed, it must not refuse.
	if len(problems) == 0 {
		creds, err := LoadCredentials(caPath, certPath, keyPath, now)
		switch {
		case err != nil:
			problems = append(problems, fileErr(err))
		case creds.Identity.Name != name:
			problem(RoleCert, certPath, fmt.Errorf("%w: it names %q, node.name is %q", ErrNameMismatch, creds.Identity.Name, name))
		case region != "" && creds.Identity.Region != "" && creds.Identity.Region != region:
			problem(RoleCert, certPath, fmt.Errorf("%w: its identity is %s, node.region is %q", ErrNameMismatch,
				IdentityURI(creds.Identity.Region, name), region))
		}
	}
	return problems, warnings
}

var usageName = map[x509.ExtKeyUsage]string{
	x509.ExtKeyUsageServerAuth: "server authentication",
	x509.ExtKeyUsageClientAuth: "client authentication",
}

// certNames lists the names a certificate carries, for messages.
func certNames(c *x509.Certificate) string {
	if len(c.DNSNames) == 0 {
		return fmt.Sprintf("no DNS name (common name %q)", c.Subject.CommonName)
	}
	q := make([]string, len(c.DNSNames))
	for i, n := range slices.Sorted(slices.Values(c.DNSNames)) {
		q[i] = fmt.Sprintf("%q", n)
	}
	return strings.Join(q, ", ")
}

// fmtLeft writes a remaining validity in days and hours, or less.
func fmtLeft(d time.Duration) string {
	if d >= 24*time.Hour {
		days := d / (24 * time.Hour)
		return fmt.Sprintf("%dd%dh", days, (d-days*24*time.Hour)/time.Hour)
	}
	return d.Round(time.Minute).String()
}
