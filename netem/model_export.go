package netem

import (
	"math/rand/v2"
	"net/netip"
	"time"

	"github.com/mrgw/mrgw/internal/ecn"
)

// This file exports the emulator's link model and its ECMP hash, the minimum
// that another emulator needs to apply exactly the same model: the TUN
// emulator (loadtest/tunemu) carries any IP traffic (kernel TCP, QUIC)
// through planes that must behave like this package's, so that rows
// measured through either emulator are comparable. Nothing here changes
// how this package's own relay works.

// Link is the model of one plane in one direction (see link): a drop-tail
// queue in front of a serialiser, then a wire with delay, jitter that
// never reorders, random loss after the queue, and ECN marking above a
// threshold. Its methods are not safe for concurrent use (guard a Link
// with a lock, as the relay guards its links with the direction's lock),
// except Stats and the delivery counters, which are atomic.
type Link struct{ l link }

// NewLink returns a Link configured with cfg, or the validation error.
func NewLink(cfg LinkConfig) (*Link, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Link{l: link{cfg: cfg}}, nil
}

// Admit runs the model for one datagram of size bytes of UDP payload (for
// any other IPv4 packet: its total length less IPHeaderLen) with ECN
// codepoint cp
// arriving at now (any monotonic clock, as long as it is the same for
// every call on this Link); full reports that the caller's global buffer
// cap is reached. The returned event carries the verdict; for Forwarded,
// Deliver is the delivery time and ECNOut the codepoint to deliver with.
// Dir and Plane are left for the caller to fill in. The link is charged
// size + IPHeaderLen bytes, the whole IP packet, in its queue, its
// serialiser and its byte counters.
func (l *Link) Admit(now time.Duration, size int, cp ecn.Codepoint, full bool, rng *rand.Rand) TraceEvent {
	var ev TraceEvent
	ev.Verdict = l.l.admit(now, size, cp, full, rng, &ev)
	return ev
}

// SetConfig re-tunes the link at now (see Emulator.SetLink).
func (l *Link) SetConfig(now time.Duration, cfg LinkConfig) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	l.l.setConfig(now, cfg)
	return nil
}

// Config returns the link's configuration.
func (l *Link) Config() LinkConfig { return l.l.cfg }

// Fail black-holes the link at now: new arrivals and everything already
// admitted (see Epoch) are lost.
func (l *Link) Fail(now time.Duration) { l.l.fail(now) }

// Restore brings a failed link back, empty.
func (l *Link) Restore() { l.l.down = false }

// Down reports whether the link is failed.
func (l *Link) Down() bool { return l.l.down }

// Epoch counts failures. A datagram admitted under an older epoch was in
// flight when the link failed: the caller drops it at its delivery time
// and calls DroppedInFlight.
func (l *Link) Epoch() uint32 { return l.l.epoch }

// Delivered counts one datagram handed to its receiver; size is what
// Admit was given, and the wire bytes (size + IPHeaderLen) are counted.
func (l *Link) Delivered(size int) {
	l.l.c.delivered.Add(1)
	l.l.c.bytesDelivered.Add(uint64(wireBytes(size)))
}

// DroppedInFlight counts one datagram lost because the link failed while
// it was in flight.
func (l *Link) DroppedInFlight() { l.l.c.downDrops.Add(1) }

// Stats returns the link's counters.
func (l *Link) Stats() LinkStats {
	c := &l.l.c
	return LinkStats{
		In: c.in.Load(), BytesIn: c.bytesIn.Load(),
		Delivered: c.delivered.Load(), BytesDelivered: c.bytesDelivered.Load(),
		QueueDrops: c.queueDrops.Load(), LossDrops: c.lossDrops.Load(),
		DownDrops: c.downDrops.Load(), CEMarks: c.ceMarks.Load(),
		MaxQueueBytes: c.maxQueue.Load(),
	}
}

// IP protocol numbers understood by FlowHash.
const (
	ProtoTCP uint8 = 6
	ProtoUDP uint8 = 17
)

// FlowHash is the ECMP hash of a 5-tuple in direction d, seeded. For UDP it
// is exactly the hash this package's relay uses (so a UDP flow lands on
// the same plane in both emulators for the same seed); other protocols fold
// the protocol number into the seed.
func FlowHash(seed uint64, d Dir, proto uint8, src, dst netip.AddrPort) uint64 {
	if proto != ProtoUDP {
		seed = mix64(seed ^ uint64(proto)<<56 ^ 0x7c0ffee)
	}
	src = netip.AddrPortFrom(src.Addr().Unmap(), src.Port())
	dst = netip.AddrPortFrom(dst.Addr().Unmap(), dst.Port())
	return ecmpHash(seed, d, src, dst)
}

// PlaneFor maps a FlowHash onto one of planes planes, as the relay does.
func PlaneFor(h uint64, planes int) int { return planeOf(h, planes) }
