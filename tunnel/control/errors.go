package control

import (
	"errors"
	"fmt"
	"io"

	"github.com/quic-go/quic-go"

	"github.com/mrgw/mrgw/tunnel/control/wire"
	"github.com/mrgw/mrgw/tunnel/pki"
)

// Typed errors: every error from Dial, Accept, the Session methods and
// Session.Err wraps one of these (and often the underlying quic-go, pki or
// wire error as well).
var (
	// ErrUnknownPeer: the peer's certificate is valid but its name is not
	// one we expect, or its Hello claims another name. From the dialer's
	// side it also means "the listener does not expect us".
	ErrUnknownPeer = errors.New("control: unknown peer")
	// ErrPeerDenied (a kind of ErrUnknownPeer): the peer's certificate is
	// valid but a deny-list refuses it (Config.AcceptPeer).
	ErrPeerDenied = fmt.Errorf("%w: denied", ErrUnknownPeer)
	// ErrIdentityMismatch (a kind of ErrUnknownPeer): the peer's
	// certificate names another gateway identity (region, name) than the
	// one it announces: in its Hello, or in gossip (Config.AcceptPeer).
	ErrIdentityMismatch = fmt.Errorf("%w: identity mismatch", ErrUnknownPeer)
	// ErrBadCertificate: the peer's certificate is missing, expired or not
	// signed by our CA, or the peer refused ours.
	ErrBadCertificate = errors.New("control: bad certificate")
	// ErrVersionMismatch: the peer speaks another control protocol version.
	ErrVersionMismatch = errors.New("control: protocol version mismatch")
	// ErrProtocol: the peer sent something malformed or out of place.
	ErrProtocol = errors.New("control: protocol violation")
	// ErrPeerDead: keepalive (or QUIC's idle timeout) found the peer silent.
	ErrPeerDead = errors.New("control: peer dead")
	// ErrDrained: the session ended by a graceful drain.
	ErrDrained = errors.New("control: session drained")
	// ErrClosed: the session or listener was closed.
	ErrClosed = errors.New("control: closed")
	// ErrEpochExhausted: no epoch is left to rotate to.
	ErrEpochExhausted = errors.New("control: key epochs exhausted")
)

// QUIC application error codes this package closes connections with. The
// peer maps them back to the typed errors above, so a refused dialer learns
// why it was refused.
const (
	CodeNoError        quic.ApplicationErrorCode = 0x0
	CodeProtocol       quic.ApplicationErrorCode = 0x1
	CodeUnknownPeer    quic.ApplicationErrorCode = 0x2
	CodeBadCertificate quic.ApplicationErrorCode = 0x3
	CodeVersion        quic.ApplicationErrorCode = 0x4
	CodeDrained        quic.ApplicationErrorCode = 0x5
	CodePeerDead       quic.ApplicationErrorCode = 0x6
)

var codeErrors = map[quic.ApplicationErrorCode]error{
	CodeNoError:        ErrClosed,
	CodeProtocol:       ErrProtocol,
	CodeUnknownPeer:    ErrUnknownPeer,
	CodeBadCertificate: ErrBadCertificate,
	CodeVersion:        ErrVersionMismatch,
	CodeDrained:        ErrDrained,
	CodePeerDead:       ErrPeerDead,
}

func codeFor(err error) quic.ApplicationErrorCode {
	for code, e := range codeErrors {
		if errors.Is(err, e) {
			return code
		}
	}
	return CodeProtocol
}

// classify maps an error from quic-go or the wire codec to a typed error.
func classify(err error) error {
	var (
		ae *quic.ApplicationError
		te *quic.TransportError
		ie *quic.IdleTimeoutError
	)
	switch {
	case errors.As(err, &ae):
		typed, ok := codeErrors[ae.ErrorCode]
		if !ok {
			typed = ErrProtocol
		}
		if ae.Remote {
			return fmt.Errorf("%w: %w (code %#x %q)", typed, errClosedByPeer, uint64(ae.ErrorCode), ae.ErrorMessage)
		}
		return fmt.Errorf("%w: %w", typed, err)
	case errors.As(err, &te) && te.ErrorCode.IsCryptoError():
		// A TLS alert: under TLS 1.3 the listener's verdict on our
		// certificate ("tls: certificate required", "bad certificate")
		// arrives after our dial has completed, as this.
		if te.Remote {
			return fmt.Errorf("%w: %w: %w", ErrBadCertificate, errPeerRefusedCert, err)
		}
		return fmt.Errorf("%w: local TLS: %w", ErrBadCertificate, err)
	case errors.As(err, &ie):
		return fmt.Errorf("%w: %w", ErrPeerDead, err)
	case errors.Is(err, wire.ErrVersion):
		return fmt.Errorf("%w: %w", ErrVersionMismatch, err)
	case errors.Is(err, wire.ErrTruncated), errors.Is(err, wire.ErrMalformed),
		errors.Is(err, wire.ErrTooLarge), errors.Is(err, wire.ErrUnknownType):
		return fmt.Errorf("%w: %w", ErrProtocol, err)
	case errors.Is(err, io.EOF):
		return fmt.Errorf("%w: peer closed the control stream", ErrClosed)
	}
	return err
}

// ErrRefusedLocally is wrapped, with ErrBadCertificate, by a Dial error
// when this side refused the listener's certificate (Config.OnRefused has
// been told): the caller counts it as a refusal, not as a failure.
var ErrRefusedLocally = errors.New("control: refused by this side")

// Refusal reasons, as RefusalReason names them (metric label values).
const (
	ReasonNoCertificate = "no_certificate"    // the peer presented none
	ReasonExpired       = "expired"           // expired or not yet valid
	ReasonUnknownCA     = "unknown_ca"        // not signed by a CA we trust (or wrong key usage)
	ReasonBadName       = "bad_name"          // not exactly one valid gateway name
	ReasonUnknownPeer   = "unknown_peer"      // a valid certificate for a name we do not expect
	ReasonDenied        = "denied"            // a valid certificate a deny-list refuses
	ReasonMismatch      = "identity_mismatch" // a certificate naming another identity than announced
	ReasonVersion       = "version"           // another control protocol version
	ReasonProtocol      = "protocol"          // a malformed or out-of-place Hello
	ReasonOther         = "other"
)

// RefusalReasons lists every value RefusalReason returns.
var RefusalReasons = []string{ReasonNoCertificate, ReasonExpired, ReasonUnknownCA, ReasonBadName,
	ReasonUnknownPeer, ReasonDenied, ReasonMismatch, ReasonVersion, ReasonProtocol, ReasonOther}

// RefusalReason names why err refused a peer (one of RefusalReasons).
func RefusalReason(err error) string {
	switch {
	case errors.Is(err, pki.ErrNoCertificate):
		return ReasonNoCertificate
	case errors.Is(err, pki.ErrExpired), errors.Is(err, pki.ErrNotYetValid):
		return ReasonExpired
	case errors.Is(err, pki.ErrNotSignedByCA):
		return ReasonUnknownCA
	case errors.Is(err, pki.ErrBadName):
		return ReasonBadName
	case errors.Is(err, ErrPeerDenied):
		return ReasonDenied
	case errors.Is(err, ErrIdentityMismatch):
		return ReasonMismatch
	case errors.Is(err, ErrUnknownPeer):
		return ReasonUnknownPeer
	case errors.Is(err, ErrVersionMismatch):
		return ReasonVersion
	case errors.Is(err, ErrProtocol):
		return ReasonProtocol
	}
	return ReasonOther
}

// The peer's verdicts, as classify marks them: a refusal the peer made is
// not one this side made (it is neither counted nor logged as ours).
var (
	errClosedByPeer    = errors.New("closed by peer")
	errPeerRefusedCert = errors.New("peer refused our certificate")
)

// refusedByPeer reports whether err is the peer's refusal of this side.
func refusedByPeer(err error) bool {
	return errors.Is(err, errClosedByPeer) || errors.Is(err, errPeerRefusedCert)
}
