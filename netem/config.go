package netem

import (
	"errors"
	"fmt"
	"math"
	"net/netip"
	"time"
)

// Site names one side of the emulated WAN.
type Site uint8

// The two sites. Endpoints at SiteA talk to endpoints at SiteB, never to
// each other through the emulator.
const (
	SiteA Site = 0
	SiteB Site = 1
)

// Other returns the opposite site.
func (s Site) Other() Site { return s ^ 1 }

// String returns "A" or "B".
func (s Site) String() string {
	if s == SiteA {
		return "A"
	}
	return "B"
}

// Dir is a direction of travel through the fabric. Every plane has an
// independent link (rate, queue, delay, loss, ECN) in each direction, as a
// real WAN circuit does.
type Dir uint8

// The two directions.
const (
	AtoB Dir = 0
	BtoA Dir = 1
)

// From returns the direction of traffic sent by endpoints at site s.
func From(s Site) Dir { return Dir(s) }

// String returns "A->B" or "B->A".
func (d Dir) String() string {
	if d == AtoB {
		return "A->B"
	}
	return "B->A"
}

// Limits that keep the model's arithmetic exact and memory bounded.
const (
	MaxPlanes     = 64
	MaxQueueBytes = 1 << 30
	MaxDelay      = 10 * time.Second
	// MaxDatagramSize is the largest UDP payload over IPv4.
	MaxDatagramSize = 65507
)

// Defaults applied by Config.withDefaults and LinkConfig normalisation.
const (
	// DefaultQueueBytes is the drop-tail limit used when LinkConfig.QueueBytes
	// is 0: about 8 ms at 1 Gbit/s, a shallow switch buffer.
	DefaultQueueBytes  = 1 << 20
	DefaultMaxMappings = 1024
	DefaultIdleTimeout = 2 * time.Minute
	DefaultMaxBuffered = 1 << 16
	// DefaultMaxDatagram covers a 1500-byte MTU with room to spare; larger
	// datagrams are dropped and counted as Truncated unless Config raises it.
	DefaultMaxDatagram = 2048
	DefaultBatch       = 64
)

// LinkConfig describes one plane in one direction: a serialising link of
// Rate bits/s behind a drop-tail queue of QueueBytes, followed by a wire of
// Delay (+ up to Jitter) that loses a fraction Loss of what it carries. A
// datagram that is ECN-capable and finds more than ECNThreshold bytes queued
// ahead of it leaves marked CE; one that is not waits in the queue like any
// other until the queue is full.
//
// Every byte figure is in wire bytes: a datagram occupies its UDP payload
// and its IPv4 and UDP headers (IPHeaderLen), as on a real IP link, so the
// capacity of a plane is Rate of IP packets and a protocol's goodput can
// reach at most its payload's share of its packets.
type LinkConfig struct {
	// Rate is the serialisation rate in bits per second of IP packets
	// (headers included); 0 means unlimited (no serialisation time, so no
	// queue ever builds).
	Rate uint64
	// QueueBytes is the drop-tail limit on wire bytes waiting for the link
	// (including the datagram being serialised); 0 means DefaultQueueBytes.
	QueueBytes int
	// Delay is the one-way propagation delay added after serialisation.
	Delay time.Duration
	// Jitter adds a uniform random extra delay in [0, Jitter]. It never
	// reorders a plane: delivery times within a plane stay in FIFO order.
	Jitter time.Duration
	// Loss is the probability in [0, 1] that a datagram is lost on the wire,
	// after it has passed the queue (it still used link time).
	Loss float64
	// ECNThreshold marks ECT datagrams CE when more than this many bytes
	// are queued ahead of them; 0 disables marking.
	ECNThreshold int
	// MTU clamps the plane's IP MTU: a datagram whose IPv4 packet (UDP
	// payload + IPHeaderLen) is larger is dropped on arrival and counted
	// in SizeDrops, as a link that does not fragment (DF set) drops it;
	// 0 means no clamp. Change it while traffic flows with SetLink or
	// SetMTU.
	MTU int
}

// IPHeaderLen is what an IPv4 packet adds to a UDP payload (IPv4 20,
// UDP 8): the emulator is IPv4 only.
const IPHeaderLen = 28

// MinMTU is the smallest MTU clamp (IPv4's minimum, RFC 791).
const MinMTU = 68

// ErrInvalid is wrapped by every configuration error.
var ErrInvalid = errors.New("emu: invalid configuration")

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

// Validate reports the first field of l that is out of range.
func (l LinkConfig) Validate() error {
	switch {
	case l.QueueBytes < 0 || l.QueueBytes > MaxQueueBytes:
		return invalid("queue %d bytes outside [0, %d]", l.QueueBytes, MaxQueueBytes)
	case l.Delay < 0 || l.Delay > MaxDelay:
		return invalid("delay %v outside [0, %v]", l.Delay, MaxDelay)
	case l.Jitter < 0 || l.Jitter > MaxDelay:
		return invalid("jitter %v outside [0, %v]", l.Jitter, MaxDelay)
	case math.IsNaN(l.Loss) || l.Loss < 0 || l.Loss > 1:
		return invalid("loss %v outside [0, 1]", l.Loss)
	case l.ECNThreshold < 0 || l.ECNThreshold > MaxQueueBytes:
		return invalid("ecn threshold %d bytes outside [0, %d]", l.ECNThreshold, MaxQueueBytes)
	case l.MTU != 0 && (l.MTU < MinMTU || l.MTU > MaxDatagramSize+IPHeaderLen):
		return invalid("mtu %d outside [%d, %d] (0: no clamp)", l.MTU, MinMTU, MaxDatagramSize+IPHeaderLen)
	}
	return nil
}

// queueLimit is the effective drop-tail limit.
func (l LinkConfig) queueLimit() int {
	if l.QueueBytes == 0 {
		return DefaultQueueBytes
	}
	return l.QueueBytes
}

// Config configures an Emulator. The zero value (plus nothing) is a single
// transparent plane: no delay, no loss, unlimited rate.
type Config struct {
	// Planes is the number of parallel ECMP planes; 0 means 1.
	Planes int
	// Seed seeds the ECMP hash and every random choice (loss, jitter), so
	// a run's plane assignment is repeatable.
	Seed uint64
	// Link is the initial link of every plane in both directions; change
	// it per plane and direction later with SetLink.
	Link LinkConfig
	// Bind is the loopback address the emulator's sockets listen on;
	// the zero value means 127.0.0.1. IPv4 loopback only.
	Bind netip.Addr
	// MaxMappings bounds the dynamically created stand-ins (one per
	// unexposed source endpoint); 0 means DefaultMaxMappings. Datagrams from
	// new sources beyond it are dropped and counted in MappingDrops.
	MaxMappings int
	// IdleTimeout expires a dynamic stand-in after this long without
	// traffic in either direction; 0 means DefaultIdleTimeout.
	IdleTimeout time.Duration
	// MaxBuffered caps the datagrams held in all queues together, a guard
	// on memory whatever the per-plane byte limits add up to; 0 means
	// DefaultMaxBuffered.
	MaxBuffered int
	// MaxDatagram is the receive buffer size; larger datagrams are dropped
	// (Truncated); 0 means DefaultMaxDatagram.
	MaxDatagram int
	// Batch is the number of datagrams per recvmmsg/sendmmsg call; 0 means
	// DefaultBatch.
	Batch int
	// PairDelays give pairs of endpoint addresses their own one-way delay
	// instead of their planes' Delay, in both directions: endpoints at
	// different distances behind one shared bottleneck (the planes'
	// queues and rates are shared; propagation is not). A pair's datagrams
	// keep their order; they may overtake a longer pair's datagrams that
	// left the queue before them, as on separate long-haul links.
	PairDelays []PairDelay
	// Trace, if set, is called for every datagram entering a plane with
	// the model's decision. It runs on the emulator's receive goroutines:
	// it must be fast, must not block and must not call the Emulator.
	Trace func(TraceEvent)
}

// PairDelay is the one-way delay between an endpoint address A at site A
// and B at site B (any port).
type PairDelay struct {
	A, B  netip.Addr
	Delay time.Duration
}

// MaxPairDelays bounds Config.PairDelays.
const MaxPairDelays = 64

// withDefaults returns c with zero fields replaced by their defaults, or an
// error naming the first field out of range.
func (c Config) withDefaults() (Config, error) {
	if c.Planes == 0 {
		c.Planes = 1
	}
	if c.Planes < 1 || c.Planes > MaxPlanes {
		return c, invalid("planes %d outside [1, %d]", c.Planes, MaxPlanes)
	}
	if err := c.Link.Validate(); err != nil {
		return c, err
	}
	if !c.Bind.IsValid() {
		c.Bind = netip.AddrFrom4([4]byte{127, 0, 0, 1})
	}
	if !c.Bind.Is4() || !c.Bind.IsLoopback() {
		return c, invalid("bind %v is not an IPv4 loopback address", c.Bind)
	}
	if c.MaxMappings == 0 {
		c.MaxMappings = DefaultMaxMappings
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = DefaultIdleTimeout
	}
	if c.MaxBuffered == 0 {
		c.MaxBuffered = DefaultMaxBuffered
	}
	if c.MaxDatagram == 0 {
		c.MaxDatagram = DefaultMaxDatagram
	}
	if c.Batch == 0 {
		c.Batch = DefaultBatch
	}
	if err := ValidatePairDelays(c.PairDelays); err != nil {
		return c, err
	}
	switch {
	case c.MaxMappings < 0:
		return c, invalid("max mappings %d < 0", c.MaxMappings)
	case c.IdleTimeout < 0:
		return c, invalid("idle timeout %v < 0", c.IdleTimeout)
	case c.MaxBuffered < 0:
		return c, invalid("max buffered %d < 0", c.MaxBuffered)
	case c.MaxDatagram < 1 || c.MaxDatagram > MaxDatagramSize:
		return c, invalid("max datagram %d outside [1, %d]", c.MaxDatagram, MaxDatagramSize)
	case c.Batch < 1 || c.Batch > 1024:
		return c, invalid("batch %d outside [1, 1024]", c.Batch)
	}
	return c, nil
}
