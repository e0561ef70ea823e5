// Package control is the control channel between two peer mrgw gateways: one
// QUIC connection (quic-go) per gateway pair, authenticated both ways with
// mutual TLS from tunnel/pki, carrying one bidirectional stream of framed
// messages (tunnel/control/wire documents every byte).
//
// What it does for the gateway:
//
//   - Authenticates the peer. Inside the TLS handshake each side checks the
//     other's certificate itself (VerifyConnection, not crypto/tls's own
//     check, which refused unseen), after it the gateway name (the
//     certificate's DNS SAN) against Config.ExpectedPeers, or its whole
//     identity (name, region of the mrgw://REGION/NAME URI SAN, serial)
//     with Config.AcceptPeer; anything else is refused with
//     ErrBadCertificate, ErrUnknownPeer (ErrPeerDenied and
//     ErrIdentityMismatch are kinds of it), a warn line (one per
//     reason per second) and a call to Config.OnRefused, on whichever side
//     refused. The dialer's QUIC dial
//     completes even when the listener rejects its certificate (TLS 1.3 sends
//     the verdict after the client's Finished), so Dial only returns a Session
//     after the listener has answered Hello: the rejection surfaces there, as
//     ErrBadCertificate, instead of as a live-looking connection.
//   - Exchanges Hello/HelloAck: protocol version, name, region, capabilities,
//     data-plane UDP address per plane, number of paths (Session.Peer).
//   - Announces data-plane paths (Session.SetupPaths / PathSetupAck).
//   - Derives the datagram keys (Session.Keys) from the TLS exporter, per
//     direction and per epoch, and rotates them (KeyUpdate/KeyUpdateAck),
//     on demand or when Config.KeyLifetime passes.
//   - Measures RTT and detects a dead peer with its own Ping/Pong (not QUIC's),
//     so the interval and the number of misses are ours to set.
//   - Drains gracefully: the peer stops opening new flows, acknowledges, and
//     the connection closes.
//
// The data plane (netio/udp, netio/seal) never talks to this package's
// peer directly: it takes keys and epoch numbers from Session.Keys and the
// events, and seals datagrams itself.
//
// Concurrency: a Session runs two goroutines (reader, ticker). Config.OnEvent
// is called from the reader goroutine, one event at a time and in order; a
// receive key is reported (EventRecvKey) before the KeyUpdateAck leaves, so
// the data plane can install it before the peer switches. OnEvent must not
// block for long and must not call Session.Close or Session.Drain.
//
// This package must not import region/, gateway/, config/ or metrics: the
// gateway turns events into logs and metrics.
package control

import (
	"github.com/quic-go/quic-go"

	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"net/netip"
	"slices"
	"time"

	"github.com/mrgw/mrgw/internal/ratelog"
	"github.com/mrgw/mrgw/tunnel/control/wire"
	"github.com/mrgw/mrgw/tunnel/pki"
)

// KeyLabel is the TLS exporter label for datagram keys (RFC 8446 §7.5). The
// exporter context is the 4-byte big-endian epoch followed by one direction
// byte (DirDialerToListener or DirListenerToDialer), so every direction and
// every epoch gets an independent 32-byte key.
const KeyLabel = "mrgw datagram key"

// Directions of the data plane, as used in the exporter context.
const (
	DirDialerToListener byte = 0
	DirListenerToDialer byte = 1
)

// Defaults for the zero values of Config.
const (
	DefaultKeepaliveInterval = time.Second
	DefaultKeepaliveMisses   = 3
	DefaultKeyLifetime       = 10 * time.Minute
	DefaultHandshakeTimeout  = 10 * time.Second
	// maxPendingHandshakes bounds the listener's concurrent handshakes, so a
	// flood of connection attempts costs bounded memory and goroutines.
	maxPendingHandshakes = 32
	// acceptQueue bounds sessions established but not yet Accepted.
	acceptQueue = 16
)

// LocalInfo describes this gateway in Hello.
type LocalInfo struct {
	Name         string // must be the name in our certificate
	Region       string
	Capabilities []string
	Planes       []netip.AddrPort // data-plane UDP address per plane
	NumPaths     uint16
}

// PeerInfo is what the peer said in Hello (its name checked against its
// certificate), plus its address.
type PeerInfo struct {
	Version      uint16
	Name         string
	Region       string
	Capabilities []string
	Planes       []netip.AddrPort
	NumPaths     uint16
	Addr         net.Addr
	// Serial is the serial number of the peer's certificate (deny-lists).
	Serial *big.Int
}

// Config configures Dial and Listen. The zero values of the durations and
// counts pick the defaults above.
type Config struct {
	Credentials   *pki.Credentials
	Local         LocalInfo
	ExpectedPeers []string // gateway names allowed to be our peer (when AcceptPeer is nil)
	// AcceptPeer, if set, decides instead of ExpectedPeers whether a peer
	// whose certificate chains to the CA is accepted, on both sides,
	// after the handshake: a non-nil error refuses it (wrap
	// ErrPeerDenied or ErrIdentityMismatch to name the reason; anything
	// else counts as ErrUnknownPeer). It must not block for long.
	AcceptPeer func(pki.PeerIdentity) error

	KeepaliveInterval time.Duration
	KeepaliveMisses   int           // the peer is dead after this many unanswered pings
	KeyLifetime       time.Duration // rotate the sending key after this long; < 0 disables
	HandshakeTimeout  time.Duration // QUIC handshake plus Hello exchange

	Logger *slog.Logger // nil: discard
	// OnEvent receives session events; see the package doc for the rules.
	OnEvent func(Event)
	// OnRefused is told about every peer this side refuses, inside the TLS
	// handshake (no certificate, an expired one, another CA: checked by
	// our own VerifyConnection, so that crypto/tls does not refuse it
	// unseen) or after it (a name not expected, a bad Hello), on the
	// listener and on the dialer alike. RefusalReason(err) names the
	// reason. Every refusal is also logged at warn, at most one line per
	// reason per second (Refusals). Optional; it must not block.
	OnRefused func(remote net.Addr, err error)
	// Refusals rate-limits the refusal log lines; nil: one built from
	// Logger for each Dial and Listen. A gateway shares one between its
	// listener and its dials, so a peer retrying does not flood the log.
	Refusals *ratelog.Logger
	// Now gives the time for certificate validity checks; nil: time.Now.
	Now func() time.Time

	// via is the transport dials go through (Listener.Dial: the
	// listener's socket); nil: a socket of their own (transport.go).
	via *quic.Transport
}

// ErrConfig is wrapped by every configuration error.
var ErrConfig = errors.New("control: invalid config")

// withDefaults validates c and returns a copy with defaults filled in.
func (c Config) withDefaults() (*Config, error) {
	if c.Credentials == nil || c.Credentials.Identity == nil || c.Credentials.Pool == nil {
		return nil, fmt.Errorf("%w: Credentials with an identity and a CA pool are required", ErrConfig)
	}
	if c.Local.Name != c.Credentials.Identity.Name {
		return nil, fmt.Errorf("%w: Local.Name %q is not the certificate's name %q",
			ErrConfig, c.Local.Name, c.Credentials.Identity.Name)
	}
	if len(c.ExpectedPeers) == 0 && c.AcceptPeer == nil {
		return nil, fmt.Errorf("%w: ExpectedPeers is empty: no peer could ever be accepted", ErrConfig)
	}
	// Encoding the Hello once here turns an over-long name or too many
	// planes into a config error instead of a failure at every connection.
	if _, err := wire.Append(nil, wire.Hello{
		Version: wire.ProtocolVersion, Name: c.Local.Name, Region: c.Local.Region,
		Capabilities: c.Local.Capabilities, Planes: c.Local.Planes, NumPaths: c.Local.NumPaths,
	}); err != nil {
		return nil, fmt.Errorf("%w: Local: %w", ErrConfig, err)
	}
	if c.KeepaliveInterval == 0 {
		c.KeepaliveInterval = DefaultKeepaliveInterval
	}
	if c.KeepaliveMisses == 0 {
		c.KeepaliveMisses = DefaultKeepaliveMisses
	}
	if c.KeyLifetime == 0 {
		c.KeyLifetime = DefaultKeyLifetime
	}
	if c.HandshakeTimeout == 0 {
		c.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if c.KeepaliveInterval < 0 || c.KeepaliveMisses < 0 || c.HandshakeTimeout < 0 {
		return nil, fmt.Errorf("%w: negative keepalive or handshake setting", ErrConfig)
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Refusals == nil {
		c.Refusals = ratelog.New(c.Logger, time.Second)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	c.ExpectedPeers = slices.Clone(c.ExpectedPeers)
	return &c, nil
}

// expected is the check before a dial: the name is one we would accept
// (with AcceptPeer, the check after the handshake decides).
func (c *Config) expected(name string) bool {
	return c.AcceptPeer != nil || slices.Contains(c.ExpectedPeers, name)
}

// idleTimeout is QUIC's idle timeout: comfortably longer than our own
// dead-peer detection, so that our keepalive, with its configured interval
// and misses, is what declares a peer dead.
func (c *Config) idleTimeout() time.Duration {
	return 2 * c.KeepaliveInterval * time.Duration(c.KeepaliveMisses+1)
}
