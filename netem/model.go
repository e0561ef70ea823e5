package netem

import (
	"math/bits"
	"math/rand/v2"
	"net"
	"sync/atomic"
	"time"

	"github.com/mrgw/mrgw/internal/ecn"
)

// Verdict is what the link model decided for one datagram.
type Verdict uint8

// Verdicts, in the order the model checks them.
const (
	Forwarded       Verdict = iota // scheduled for delivery
	DroppedDown                    // the plane is failed (black hole)
	DroppedOverflow                // the emulator-wide MaxBuffered cap was reached
	DroppedQueue                   // drop-tail: the plane's queue was full
	DroppedLoss                    // random loss on the wire, after the queue
	DroppedSize                    // larger than the plane's MTU clamp (LinkConfig.MTU)
)

// String names the verdict.
func (v Verdict) String() string {
	switch v {
	case Forwarded:
		return "forwarded"
	case DroppedDown:
		return "dropped-down"
	case DroppedOverflow:
		return "dropped-overflow"
	case DroppedQueue:
		return "dropped-queue"
	case DroppedLoss:
		return "dropped-loss"
	case DroppedSize:
		return "dropped-size"
	}
	return "verdict(?)"
}

// TraceEvent is the model's decision for one datagram (see Config.Trace).
// Times are offsets from the emulator's start on the monotonic clock.
type TraceEvent struct {
	Dir     Dir
	Plane   int
	Size    int // UDP payload bytes (the link is charged Size + IPHeaderLen)
	Verdict Verdict
	Arrival time.Duration
	// Depart is when the last bit leaves the plane's serialiser; set for
	// Forwarded and DroppedLoss (a lost datagram still used the link).
	Depart time.Duration
	// Deliver is the scheduled hand-over to the receiver (Forwarded only):
	// Depart + Delay + jitter, never earlier than the plane's previous one.
	Deliver time.Duration
	// Backlog is the wire bytes queued ahead of the datagram when it
	// arrived.
	Backlog int
	ECNIn   ecn.Codepoint
	ECNOut  ecn.Codepoint
}

// linkCounters are atomics so Stats can read them without the direction
// lock; writers hold the lock anyway except for the delivery counters.
type linkCounters struct {
	in, bytesIn               atomic.Uint64
	delivered, bytesDelivered atomic.Uint64
	queueDrops, lossDrops     atomic.Uint64
	downDrops, ceMarks        atomic.Uint64
	maxQueue                  atomic.Uint64
	sizeDrops                 atomic.Uint64
	sizeDropLast              atomic.Uint64 // size of the last datagram dropped for size
}

// link is one plane in one direction: the queue model (the datagrams
// waiting for their delivery time are in the direction's Sched). All
// fields except the counters are guarded by the owning direction's Sched.Mu.
//
// The queue is modelled analytically rather than by holding datagrams
// until they are serialised: busyUntil is when the serialiser finishes the
// last accepted datagram, so the bytes still queued at time t are
// (busyUntil-t)*Rate/8. This is exact for a FIFO work-conserving link and
// lets a datagram's whole fate be decided once, on arrival.
type link struct {
	cfg  LinkConfig
	down bool
	// epoch counts failures: a datagram queued under an older epoch was
	// in flight when the plane failed and is dropped at delivery, even if
	// the plane has been restored since.
	epoch       uint32
	busyUntil   time.Duration
	lastDeliver time.Duration
	c           linkCounters
}

// wireBytes is what a datagram of size bytes of UDP payload occupies on
// the link: the payload and its IPv4 and UDP headers. (Ethernet framing is
// not charged: the planes stand for IP links, whose rate is stated in IP
// bytes.)
func wireBytes(size int) int { return size + IPHeaderLen }

// txTime is the serialisation time of size bytes at rate bits/s.
func txTime(size int, rate uint64) time.Duration {
	if rate == 0 {
		return 0
	}
	hi, lo := bits.Mul64(uint64(size)*8, uint64(time.Second))
	q, _ := bits.Div64(hi, lo, rate) // hi < rate: size*8e9 < 2^64
	return time.Duration(q)
}

// backlog returns the bytes still waiting for the serialiser at now.
func (l *link) backlog(now time.Duration) int {
	if l.cfg.Rate == 0 || l.busyUntil <= now {
		return 0
	}
	hi, lo := bits.Mul64(uint64(l.busyUntil-now), l.cfg.Rate)
	q, _ := bits.Div64(hi, lo, 8*uint64(time.Second))
	return int(q)
}

// setConfig re-tunes the link. The bytes already queued stay queued: they
// are re-expressed as serialiser time at the new rate, so a lower rate
// makes later arrivals wait longer. Datagrams already scheduled keep their
// delivery times.
func (l *link) setConfig(now time.Duration, cfg LinkConfig) {
	q := l.backlog(now)
	l.cfg = cfg
	l.busyUntil = now + txTime(q, cfg.Rate)
}

// fail black-holes the plane: what is queued is lost and the serialiser
// is idle when the plane comes back.
func (l *link) fail(now time.Duration) {
	if l.down {
		return
	}
	l.down = true
	l.epoch++
	l.busyUntil = now
}

// admit runs the model for one datagram of size bytes of UDP payload with
// ECN codepoint cp
// arriving at now; full reports that the emulator-wide buffer cap is
// reached. The link is charged the datagram's wire bytes (wireBytes): its
// queue, its serialiser and its byte counters see the IPv4 and UDP headers
// as a real link does, so every protocol pays for its headers alike. It
// updates the link state and counters (except
// delivered) and returns the verdict; for Forwarded, ev.Deliver is the
// delivery time and ev.ECNOut the codepoint to send with.
func (l *link) admit(now time.Duration, size int, cp ecn.Codepoint, full bool, rng *rand.Rand, ev *TraceEvent) Verdict {
	return l.admitVia(now, size, cp, full, rng, ev, l.cfg.Delay, &l.lastDeliver)
}

// admitVia is admit for a datagram whose propagation delay after the
// serialiser is delay (a Config.PairDelays pair's, not the plane's) and
// whose delivery must not precede *last, the previous delivery of the
// same wire (updated).
func (l *link) admitVia(now time.Duration, size int, cp ecn.Codepoint, full bool, rng *rand.Rand, ev *TraceEvent, delay time.Duration, last *time.Duration) Verdict {
	ev.Arrival, ev.Size, ev.ECNIn, ev.ECNOut = now, size, cp, cp
	wire := wireBytes(size)
	l.c.in.Add(1)
	l.c.bytesIn.Add(uint64(wire))
	if l.down {
		l.c.downDrops.Add(1)
		return DroppedDown
	}
	if l.cfg.MTU > 0 && wire > l.cfg.MTU {
		l.c.sizeDrops.Add(1)
		l.c.sizeDropLast.Store(uint64(size))
		return DroppedSize
	}
	if full {
		return DroppedOverflow // counted by the emulator, not the plane
	}
	q := l.backlog(now)
	ev.Backlog = q
	// Drop-tail for every datagram alike: one that is not ECN-capable
	// waits in the queue as long as there is room, like an ECT one; the
	// marking threshold below only decides the codepoint of ECT datagrams.
	if l.cfg.Rate != 0 && q+wire > l.cfg.queueLimit() {
		l.c.queueDrops.Add(1)
		return DroppedQueue
	}
	if occ := uint64(q + wire); l.cfg.Rate != 0 && occ > l.c.maxQueue.Load() {
		l.c.maxQueue.Store(occ) // only writer: the direction lock is held
	}
	start := max(now, l.busyUntil)
	depart := start + txTime(wire, l.cfg.Rate)
	if l.cfg.Rate != 0 {
		l.busyUntil = depart
	}
	ev.Depart = depart
	if l.cfg.ECNThreshold > 0 && q > l.cfg.ECNThreshold && cp.IsECT() {
		if cp != ecn.CE {
			l.c.ceMarks.Add(1)
		}
		ev.ECNOut = ecn.CE
	}
	if l.cfg.Loss > 0 && rng.Float64() < l.cfg.Loss {
		l.c.lossDrops.Add(1)
		return DroppedLoss
	}
	deliver := depart + delay
	if l.cfg.Jitter > 0 {
		deliver += time.Duration(rng.Int64N(int64(l.cfg.Jitter) + 1))
	}
	// Jitter must not reorder the plane: a datagram never overtakes the
	// one ahead of it.
	deliver = max(deliver, *last)
	*last = deliver
	ev.Deliver = deliver
	return Forwarded
}

// packet is a datagram waiting in a plane's FIFO (its delivery time and
// epoch are in the Item that holds it).
type packet struct {
	buf   *[]byte // from the emulator's pool; payload is (*buf)[:n]
	n     int
	tos   byte // full TOS byte to send with (DSCP kept, ECN maybe CE)
	plane uint8
	out   *sock        // the stand-in socket that sends it
	to    *net.UDPAddr // the real receiver
}
