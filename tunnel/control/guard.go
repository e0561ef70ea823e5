package control

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/qlog"
	"github.com/quic-go/quic-go/qlogwriter"

	"github.com/mrgw/mrgw/internal/ratelog"
)

// The listener's guard: what control.listen does with a packet before any
// connection holds state for it (state only for peers that
// proved they can receive; every queue bounded; every drop counted by
// reason and logged at warn, rate-limited).
//
//   - Stateless address validation, always: an Initial without a valid
//     address token is answered with a QUIC Retry (RFC 9000 §8.1.2) and
//     forgotten. A Retry is smaller than the 1,200-byte Initial it
//     answers, and a quic-go connection (about four goroutines) is only
//     started for an Initial that echoes a Retry token minted for its
//     source address: a flood of junk or spoofed Initials costs a Retry
//     each and no state. A real peer pays one round trip per session.
//     Before this, each junk Initial started a connection that lived for
//     the handshake timeout: 5,000 of them took the process from 173 to
//     19,733 goroutines, a flood of 100k/s past 200,000 and 2.3 GiB.
//   - At most MaxHandshakes QUIC handshakes in progress (from validated
//     addresses); an attempt beyond is refused with CONNECTION_REFUSED.
//   - A shorter QUIC handshake timeout on the listener
//     (listenerHandshakeIdle; quic-go gives a handshake twice its idle
//     timeout in all).
//   - quic-go's own drops outside any connection (Transport.Tracer:
//     queues full, unparseable headers, unknown connection ids) are
//     counted too.
//
// Listener.Stats returns the counts; the gateway exports them.

// MaxHandshakes bounds the QUIC handshakes in progress on a listener, from
// the first Initial a Retry validated to the connection's Accept. A
// connection completes its handshake in a few round trips; a handshake
// that stalls is given up after twice listenerHandshakeIdle.
const MaxHandshakes = 64

// listenerHandshakeIdle is the listener's QUIC handshake idle timeout
// (at most Config.HandshakeTimeout): a peer whose address was validated
// and then goes silent holds its slot this long. 3 s leaves a 150-ms
// WAN round trip several retransmissions.
const listenerHandshakeIdle = 3 * time.Second

// Reasons a listener drops a packet before a connection holds state for
// it (ListenerStats.Dropped, the reason label of
// mrgw_control_packets_dropped_total).
const (
	// DropRetry: an Initial without a valid address token, answered with
	// a Retry and forgotten (every session attempt has one; a junk or
	// spoofed Initial never gets further). quic-go drops the Retry
	// instead when its send queue is full.
	DropRetry = "retry"
	// DropBusy: MaxHandshakes handshakes were in progress; refused with
	// CONNECTION_REFUSED.
	DropBusy = "busy"
	// DropQueue: a quic-go queue was full (its receive queue for new
	// connections, 0-RTT): qlog's dos_prevention.
	DropQueue = "queue"
	// DropMalformed: a header that does not parse, or a payload that
	// does not decrypt.
	DropMalformed = "malformed"
	// DropUnknownConn: a short-header packet for no connection (of a
	// closed connection, or junk).
	DropUnknownConn = "unknown_connection"
	// DropVersion: a QUIC version we do not speak.
	DropVersion = "version"
	// DropUnexpected: a packet no connection attempt starts with (an
	// Initial under 1,200 bytes or with a too-short connection id, a
	// Handshake or 0-RTT packet of no connection, a Version Negotiation).
	DropUnexpected = "unexpected"
	// DropBuffer: dropped by the kernel, the socket's receive buffer full
	// (read by the gateway from /proc, not by this package).
	DropBuffer = "buffer"
	DropOther  = "other"
)

// DropReasons lists the values of ListenerStats.Dropped's keys (DropBuffer
// is the gateway's).
var DropReasons = []string{DropRetry, DropBusy, DropQueue, DropMalformed, DropUnknownConn, DropVersion, DropUnexpected, DropBuffer, DropOther}

const numGuardReasons = 9 // len(DropReasons)

// ListenerStats are a listener's counters.
type ListenerStats struct {
	// Dropped counts packets turned away before a connection held state
	// for them, by reason (DropReasons, DropBuffer aside).
	Dropped map[string]uint64
	// HandshakesInProgress: QUIC handshakes from validated addresses not
	// yet accepted (at most MaxHandshakes).
	HandshakesInProgress int
	// HandshakeTimeouts: handshakes given up because the peer went
	// silent or took too long.
	HandshakeTimeouts uint64
}

var errBusy = errors.New("control: too many handshakes in progress")

type guard struct {
	log *ratelog.Logger
	// draining: the gateway is shutting down; the stray packets of the
	// connections it just closed or stopped dialing (unexpected, unknown
	// connection) are counted but logged at debug, not warned.
	draining   atomic.Bool
	max        int64
	inProgress atomic.Int64
	dropped    [numGuardReasons]atomic.Uint64
	timeouts   atomic.Uint64
}

func newGuard(log *ratelog.Logger, max int) *guard {
	return &guard{log: log, max: int64(max)}
}

func reasonIndex(r string) int {
	for i, v := range DropReasons {
		if v == r {
			return i
		}
	}
	return len(DropReasons) - 1
}

// drop counts a packet dropped for reason and logs it, at most once a
// second per reason (a Retry at info: every session attempt has one).
func (g *guard) drop(reason string, remote net.Addr) {
	g.dropped[reasonIndex(reason)].Add(1)
	// The address is formatted only if the line is written (slog calls
	// String); the log key (its reason attribute) is control_REASON.
	var addr any = remote
	if remote == nil {
		addr = "unknown"
	}
	switch reason {
	case DropRetry:
		g.log.Info("control_"+reason, "control: Initial without an address token answered with a Retry (stateless address validation)", "remote", addr)
	case DropBusy:
		g.log.Warn("control_"+reason, "control: handshake refused: too many in progress", "remote", addr, "max", g.max)
	case DropUnexpected, DropUnknownConn:
		level := slog.LevelWarn
		if g.draining.Load() {
			level = slog.LevelDebug
		}
		g.log.Log(level, "control_"+reason, "control: packet dropped before any connection", "remote", addr)
	default:
		g.log.Warn("control_"+reason, "control: packet dropped before any connection", "remote", addr)
	}
}

// verifySourceAddress is quic.Transport.VerifySourceAddress: every Initial
// without a valid token is answered with a Retry.
func (g *guard) verifySourceAddress(remote net.Addr) bool {
	g.drop(DropRetry, remote)
	return true
}

type slotKey struct{}

// slot is a handshake in progress; released once, at Accept or when the
// connection ends first.
type slot struct{ once sync.Once }

// connContext is quic.Transport.ConnContext: it takes a handshake slot, or
// refuses the connection when all are taken.
func (g *guard) connContext(ctx context.Context, ci *quic.ClientInfo) (context.Context, error) {
	if g.inProgress.Add(1) > g.max {
		g.inProgress.Add(-1)
		g.drop(DropBusy, ci.RemoteAddr)
		return ctx, errBusy
	}
	s := &slot{}
	ctx = context.WithValue(ctx, slotKey{}, s)
	remote := ci.RemoteAddr
	context.AfterFunc(ctx, func() {
		s.once.Do(func() {
			g.inProgress.Add(-1)
			var ne net.Error
			if cause := context.Cause(ctx); errors.As(cause, &ne) && ne.Timeout() {
				g.timeouts.Add(1)
				g.log.Warn("control_handshake_timeout", "control: QUIC handshake timed out", "remote", remote, "err", cause)
			}
		})
	})
	return ctx, nil
}

// accepted releases the slot of a connection quic-go handed to Accept.
func (g *guard) accepted(conn *quic.Conn) {
	if s, ok := conn.Context().Value(slotKey{}).(*slot); ok {
		s.once.Do(func() { g.inProgress.Add(-1) })
	}
}

func (g *guard) stats() ListenerStats {
	st := ListenerStats{Dropped: make(map[string]uint64, len(DropReasons)),
		HandshakesInProgress: int(max(g.inProgress.Load(), 0)), HandshakeTimeouts: g.timeouts.Load()}
	for i, r := range DropReasons {
		if r != DropBuffer {
			st.Dropped[r] = g.dropped[i].Load()
		}
	}
	return st
}

// dropRecorder is the transport's qlog Recorder: it counts the packets quic-go
// drops outside any connection by their trigger.
type dropRecorder struct{ g *guard }

var _ qlogwriter.Recorder = dropRecorder{}

func (r dropRecorder) RecordEvent(ev qlogwriter.Event) {
	if d, ok := ev.(qlog.PacketDropped); ok {
		r.g.drop(triggerReason(d.Trigger), nil)
	}
}

func (dropRecorder) Close() error { return nil }

func triggerReason(t qlog.PacketDropReason) string {
	switch t {
	case qlog.PacketDropDOSPrevention:
		return DropQueue
	case qlog.PacketDropHeaderParseError, qlog.PacketDropPayloadDecryptError:
		return DropMalformed
	case qlog.PacketDropUnknownConnectionID:
		return DropUnknownConn
	case qlog.PacketDropUnsupportedVersion, qlog.PacketDropUnexpectedVersion:
		return DropVersion
	case qlog.PacketDropUnexpectedPacket:
		return DropUnexpected
	}
	return DropOther
}
