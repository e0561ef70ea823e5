package sim

import (
	"fmt"
	"math/rand/v2"
	"time"
)

// LinkConfig describes one directional link. The zero value is an ideal link: infinite rate,
// no delay, no loss.
type LinkConfig struct {
	Rate         int64         // bits per second; 0 = infinite (no serialization, no queue)
	Delay        time.Duration // propagation delay
	QueueLimit   int           // drop-tail limit on bytes waiting to be serialized; 0 = unlimited
	ECNThreshold int           // mark ECT datagrams CE above this many bytes waiting; 0 = never
	Loss         float64       // probability that a datagram is lost on the wire, in [0, 1]
}

// Validate reports a configuration no link can have.
func (c LinkConfig) Validate() error {
	switch {
	case c.Rate < 0:
		return fmt.Errorf("sim: link Rate %d is negative", c.Rate)
	case c.Delay < 0:
		return fmt.Errorf("sim: link Delay %v is negative", c.Delay)
	case c.QueueLimit < 0:
		return fmt.Errorf("sim: link QueueLimit %d is negative", c.QueueLimit)
	case c.ECNThreshold < 0:
		return fmt.Errorf("sim: link ECNThreshold %d is negative", c.ECNThreshold)
	case !(c.Loss >= 0 && c.Loss <= 1): // also rejects NaN
		return fmt.Errorf("sim: link Loss %v is not in [0, 1]", c.Loss)
	}
	return nil
}

// LinkStats are a link's counters since it was created.
type LinkStats struct {
	Enqueued       uint64 // datagrams accepted (sent straight to the serializer or queued)
	DroppedQueue   uint64 // refused by the drop-tail queue
	DroppedLoss    uint64 // lost on the wire after serialization
	DroppedDown    uint64 // dropped because the link was down (offered, or flushed when it went down)
	MarkedCE       uint64 // ECT datagrams this link marked CE (already-CE ones are not counted)
	Delivered      uint64 // datagrams that reached the far end
	BytesDelivered uint64 // their bytes (len(Data) + overhead)
	MaxQueueBytes  int    // the most bytes ever waiting
}

// wireEntry is a datagram propagating on a link and the time it reaches the far end.
type wireEntry struct {
	at time.Duration
	d  *Datagram
}

// Link is one directional link: a drop-tail queue, a serializer and a wire (see the package
// documentation for the order of operations). A link keeps at most one serialization event and
// one arrival event in the Sim's heap whatever its load: datagrams on the wire wait in a FIFO
// ring, which keeps the heap small and its operations cheap.
type Link struct {
	sim      *Sim
	name     string
	cfg      LinkConfig
	overhead int             // bytes added to len(Data) for every datagram
	out      func(*Datagram) // the next hop; takes ownership of the datagram
	down     bool

	lossAll    bool   // Loss == 1
	lossThresh uint64 // lose when a uniform uint64 draw is below this; 0 = no loss
	rng        rand.PCG

	busy   bool      // the serializer holds cur
	cur    *Datagram // being serialized
	rem    uint64    // serialization remainder, in bit·ns/s, carried so the long-run rate is exact
	queue  ring[*Datagram]
	qbytes int

	wire        ring[wireEntry]
	lastArrival time.Duration // keeps the wire FIFO when Delay shrinks

	gen   uint64 // bumped when the link is flushed, invalidating its events in the heap
	stats LinkStats
}

func newLink(s *Sim, name string, cfg LinkConfig, overhead int, out func(*Datagram)) *Link {
	if err := cfg.Validate(); err != nil {
		panic(fmt.Sprintf("%v (link %s)", err, name))
	}
	l := &Link{sim: s, name: name, overhead: overhead, out: out}
	l.rng = *s.newStream()
	l.cfg = cfg
	l.SetLoss(cfg.Loss)
	return l
}

// Name returns the link's name, such as "plane2:A>B" or "host3:up".
func (l *Link) Name() string { return l.name }

// Config returns the link's current configuration.
func (l *Link) Config() LinkConfig { return l.cfg }

// Stats returns a snapshot of the link's counters.
func (l *Link) Stats() LinkStats { return l.stats }

// QueueBytes returns the bytes waiting to be serialized now.
func (l *Link) QueueBytes() int { return l.qbytes }

// InFlight returns the datagrams held by the link: waiting, being serialized or on the wire.
func (l *Link) InFlight() int {
	n := l.queue.len() + l.wire.len()
	if l.busy {
		n++
	}
	return n
}

// Down reports whether the link is down.
func (l *Link) Down() bool { return l.down }

// SetDown takes the link down (a black hole: everything it holds is dropped at once and
// everything offered later is dropped) or brings it back.
func (l *Link) SetDown(down bool) {
	if down == l.down {
		return
	}
	l.down = down
	if down {
		l.flush()
	}
}

// SetLoss sets the probability that a datagram is lost on the wire, from the next datagram
// to finish serialization.
func (l *Link) SetLoss(p float64) {
	c := l.cfg
	c.Loss = p
	l.mustValidate(c)
	l.cfg.Loss = p
	const two64 = 18446744073709551616.0
	l.lossAll = p >= 1
	l.lossThresh = 0
	if t := p * two64; !l.lossAll && t >= 1 {
		l.lossThresh = uint64(t) // p < 1, so t < 2^64
	}
}

// SetRate sets the rate in bits/s (0 = infinite) from the next datagram to start serializing;
// the one being serialized finishes at the old rate.
func (l *Link) SetRate(bps int64) {
	c := l.cfg
	c.Rate = bps
	l.mustValidate(c)
	l.cfg.Rate = bps
	l.rem = 0
}

// SetDelay sets the propagation delay for datagrams that finish serialization from now on.
// A datagram never overtakes one sent before it: links stay FIFO.
func (l *Link) SetDelay(d time.Duration) {
	c := l.cfg
	c.Delay = d
	l.mustValidate(c)
	l.cfg.Delay = d
}

// SetQueueLimit sets the drop-tail limit in bytes (0 = unlimited) for datagrams enqueued from
// now on; datagrams already waiting stay.
func (l *Link) SetQueueLimit(bytes int) {
	c := l.cfg
	c.QueueLimit = bytes
	l.mustValidate(c)
	l.cfg.QueueLimit = bytes
}

// SetECNThreshold sets the marking threshold in bytes (0 = no marking).
func (l *Link) SetECNThreshold(bytes int) {
	c := l.cfg
	c.ECNThreshold = bytes
	l.mustValidate(c)
	l.cfg.ECNThreshold = bytes
}

func (l *Link) mustValidate(c LinkConfig) {
	if err := c.Validate(); err != nil {
		panic(fmt.Sprintf("%v (link %s)", err, l.name))
	}
}

// ScheduleDown calls SetDown(down) at virtual time t.
func (l *Link) ScheduleDown(t time.Duration, down bool) { l.sim.At(t, func() { l.SetDown(down) }) }

// ScheduleLoss calls SetLoss(p) at virtual time t.
func (l *Link) ScheduleLoss(t time.Duration, p float64) { l.sim.At(t, func() { l.SetLoss(p) }) }

// ScheduleRate calls SetRate(bps) at virtual time t.
func (l *Link) ScheduleRate(t time.Duration, bps int64) { l.sim.At(t, func() { l.SetRate(bps) }) }

func (l *Link) size(d *Datagram) int { return len(d.Data) + l.overhead }

// enqueue offers d to the link, which takes ownership of it.
func (l *Link) enqueue(d *Datagram) {
	if l.down {
		l.stats.DroppedDown++
		l.sim.free(d)
		return
	}
	if !l.busy { // invariant: the queue is empty whenever the serializer is idle
		l.stats.Enqueued++
		if l.cfg.Rate == 0 {
			l.onWire(d, true)
			return
		}
		l.startTx(d)
		return
	}
	size := l.size(d)
	if l.cfg.QueueLimit > 0 && l.qbytes+size > l.cfg.QueueLimit {
		l.stats.DroppedQueue++
		l.sim.free(d)
		return
	}
	l.stats.Enqueued++
	if l.cfg.ECNThreshold > 0 && d.ECT && l.qbytes > l.cfg.ECNThreshold && !d.CE {
		d.CE = true
		l.stats.MarkedCE++
	}
	l.queue.push(d)
	l.qbytes += size
	if l.qbytes > l.stats.MaxQueueBytes {
		l.stats.MaxQueueBytes = l.qbytes
	}
}

// startTx puts d on the serializer. Rate must be positive.
func (l *Link) startTx(d *Datagram) {
	l.busy, l.cur = true, d
	rate := uint64(l.cfg.Rate)
	num := uint64(l.size(d))*8*uint64(time.Second) + l.rem
	l.rem = num % rate
	l.sim.schedule(event{at: l.sim.now + time.Duration(num/rate), kind: evTxDone, link: l, gen: l.gen})
}

// txDone ends the serialization of cur and starts the next datagram. The next one is started
// before cur goes on the wire so that the link is consistent whatever the next hop does.
func (l *Link) txDone(gen uint64) {
	if gen != l.gen {
		return // flushed while serializing
	}
	d := l.cur
	l.busy, l.cur = false, nil
	l.onWire(d, false)
	for l.queue.len() > 0 {
		next := l.queue.pop()
		l.qbytes -= l.size(next)
		if l.cfg.Rate == 0 { // the rate became infinite: the queue drains at once
			l.onWire(next, false)
			continue
		}
		l.startTx(next)
		break
	}
}

// onWire applies the loss draw and starts propagation. With sync set and nothing to wait for,
// the datagram is handed to the next hop at once instead of through an event: that makes ideal
// (all-zero) access links free.
func (l *Link) onWire(d *Datagram, sync bool) {
	if l.lossAll || (l.lossThresh != 0 && l.rng.Uint64() < l.lossThresh) {
		l.stats.DroppedLoss++
		l.sim.free(d)
		return
	}
	at := l.sim.now + l.cfg.Delay
	if at < l.lastArrival {
		at = l.lastArrival
	}
	l.lastArrival = at
	if sync && at == l.sim.now && l.wire.len() == 0 {
		l.stats.Delivered++
		l.stats.BytesDelivered += uint64(l.size(d))
		l.out(d)
		return
	}
	if l.wire.len() == 0 {
		l.sim.schedule(event{at: at, kind: evArrive, link: l, gen: l.gen})
	}
	l.wire.push(wireEntry{at: at, d: d})
}

// arrive hands the datagram at the head of the wire to the next hop.
func (l *Link) arrive(gen uint64) {
	if gen != l.gen {
		return // flushed while propagating
	}
	d := l.wire.pop().d
	if l.wire.len() > 0 {
		l.sim.schedule(event{at: l.wire.peek().at, kind: evArrive, link: l, gen: l.gen})
	}
	l.stats.Delivered++
	l.stats.BytesDelivered += uint64(l.size(d))
	l.out(d)
}

// flush drops everything the link holds and invalidates its pending events.
func (l *Link) flush() {
	l.gen++
	if l.busy {
		l.stats.DroppedDown++
		l.sim.free(l.cur)
		l.busy, l.cur = false, nil
	}
	for l.queue.len() > 0 {
		l.stats.DroppedDown++
		l.sim.free(l.queue.pop())
	}
	for l.wire.len() > 0 {
		l.stats.DroppedDown++
		l.sim.free(l.wire.pop().d)
	}
	l.qbytes, l.rem, l.lastArrival = 0, 0, 0
}
