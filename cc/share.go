package cc

import (
	"math"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mrgw/mrgw/units"
)

// FairShare is the receiver loop: it knows the receiver's inbound capacity and
// which senders have been active recently, and gives them a max-min fair
// share of the capacity. The share is returned to each sender in every ack,
// so a sender starts at its share instead of searching for it, and an N-to-1
// incast settles as soon as every sender has seen one ack.
//
// Demand: when the receiver is told how many bytes each sender delivered
// (Account), it measures each sender's rate over Window. A sender that used
// clearly less than the last share (it has less to send, or is held back by
// a bottleneck elsewhere) is counted at its measured rate, and what it leaves
// is shared among the others (water-filling). Every sender receives the same
// level L, which is the max-min share of the unconstrained ones and above the
// rate of the constrained ones, so a constrained sender may grow back without
// asking first. New senders count as unconstrained until they have been
// measured for a full window.
//
// Senders are identified by an opaque key (the connection id). FairShare's
// memory is bounded by the number of senders seen within Idle.
type FairShare struct {
	// Capacity is the receiver's inbound capacity.
	Capacity units.BitRate
	// Idle is how long a sender stays counted after its last packet.
	Idle time.Duration
	// Window is the demand measurement interval (default Idle/50). It must
	// hold several packets of every sender, or demand is misread.
	Window time.Duration
	// MarkWindow is the interval over which arriving CE marks are counted
	// to drain a queue in front of the receiver (default Window); a couple
	// of round trips.
	MarkWindow time.Duration
	// DrainGain is the fraction of the capacity held back per unit of
	// marked fraction F: the next mark window hands out (1 − DrainGain·F)
	// of the capacity (default defaultDrainGain).
	DrainGain float64

	last   map[uint64]*shareSender
	active int
	swept  time.Duration

	winStart time.Duration
	level    float64 // bytes/s; 0 until the first window closes
	demands  []float64
	// CE-marked and all bytes delivered in the current window: the receiver
	// sees its own inbound queue through the marks on what arrives.
	winCE, winAll int64
	drain         float64 // fraction of capacity held back to drain a queue
	markStart     time.Duration
}

type shareSender struct {
	last     time.Duration
	first    time.Duration
	bytes    int64   // in the current window
	measured float64 // bytes/s over the last full window, -1 if none yet
}

// defaultDrainGain is FairShare's default DrainGain, 1/16 (DCTCP's gain).
// Over a mark window of two round trips a fully marked window then holds
// back an eighth of a bandwidth-delay product: about the depth at which
// marking starts (a tenth of a BDP in the scenarios and load tests), so the
// drain empties a standing queue down to the marking threshold in a few
// windows without draining far below it; a larger gain cuts the hints at
// every burst a late-waking sender makes, and the link idles (docs/CC.md
// §3). The senders' own controllers drain a
// queue too (DCTCP's cut in dc-aimd; the delay equilibrium in the long-RTT
// controllers, which holds at most QueueShare of it, more than a marking
// threshold of 0.1 BDP at short round trips): the receiver's drain is for
// a queue that nobody else drains, such as one a paced fixed-rate sender
// left, and for that it may be slow. Not slower than this yet: a lone
// long-RTT connection on a host that stalls keeps a queue that covers the
// stalls (the delay equilibrium's stall allowance), above a 0.1-BDP
// marking threshold, and this drain then holds its hint a few per cent
// below the capacity; a slower drain costs the regions scenario its
// max-min target after a plane failure (docs/CC.md §7).
const defaultDrainGain = 1.0 / 16

// NewFairShare returns a FairShare for capacity with senders forgotten after idle.
func NewFairShare(capacity units.BitRate, idle time.Duration) *FairShare {
	return &FairShare{Capacity: capacity, Idle: idle, last: make(map[uint64]*shareSender)}
}

func (f *FairShare) window() time.Duration {
	if f.Window > 0 {
		return f.Window
	}
	if f.Idle > 0 {
		return f.Idle / 50
	}
	return time.Millisecond
}

// Observe records that sender was active at now.
func (f *FairShare) Observe(now time.Duration, sender uint64) {
	s, ok := f.last[sender]
	if !ok {
		s = &shareSender{first: now, measured: -1}
		f.last[sender] = s
		f.active++
		f.level = 0 // a newcomer: fall back to the equal split until measured
	}
	s.last = now
	f.sweep(now)
}

// Account records that sender delivered bytes at now (it also counts as
// activity); ce tells whether they arrived marked ECN-CE. Without Account,
// FairShare divides the capacity equally.
//
// Marks on arrivals mean a queue in front of the receiver. If the shares
// summed to the full capacity, such a queue (left by a burst, or by
// senders that started before they knew how many they were) would stand for
// ever, so the next window hands out only (1 - DrainGain·F) of the
// capacity, where F is the fraction of bytes that arrived marked: the queue
// drains over a few windows and the shares return to the full capacity when
// the marks stop.
func (f *FairShare) Account(now time.Duration, sender uint64, bytes int, ce bool) {
	f.winAll += int64(bytes)
	if ce {
		f.winCE += int64(bytes)
	}
	f.rollMarks(now)
	s, ok := f.last[sender]
	if !ok {
		f.Observe(now, sender)
		s = f.last[sender]
	}
	s.last = now
	s.bytes += int64(bytes)
	f.roll(now)
}

// SetCapacity changes the capacity while senders are counted (a live
// reload, or a new part of a region's rate, which a gateway's demand-aware
// split sets every few hundred milliseconds): the level is water-filled
// again over the new capacity from the demands the last window measured,
// as roll computes it. Before any measurement the shares are the equal
// split of the new capacity.
//
// Why not the equal split at once: with one busy sender and others that
// only keep their connections alive, the equal split is a fraction of
// what the busy sender had, and its controller takes a lower hint at once
// (capTo); every re-split of a region's rate then cut the only flow
// through a gateway to a half or a third of its part for a window, and the
// rate it lost made its gateway's next demand report, and part, smaller.
func (f *FairShare) SetCapacity(capacity units.BitRate) {
	prev := f.level
	f.Capacity = capacity
	f.level = 0
	if prev > 0 {
		f.level = f.waterFill(prev)
	}
}

// waterFill is the level that fills the capacity over the rates last
// measured (shareSender.measured): a sender measured clearly below
// prevLevel (under 0.8 of it) is constrained elsewhere and keeps its rate;
// one measured near or above it, or not measured, could take more and
// shares what is left equally.
func (f *FairShare) waterFill(prevLevel float64) float64 {
	f.demands = f.demands[:0]
	unconstrained := 0
	for _, s := range f.last {
		if s.measured >= 0 && s.measured < 0.8*prevLevel {
			f.demands = append(f.demands, s.measured)
		} else {
			unconstrained++
		}
	}
	return maxMinLevel(float64(f.Capacity.Bytes()), f.demands, unconstrained)
}

// Forget removes sender at once (its connection closed).
func (f *FairShare) Forget(sender uint64) {
	if _, ok := f.last[sender]; ok {
		delete(f.last, sender)
		f.active--
		f.level = 0
	}
}

// Active returns the number of senders currently counted.
func (f *FairShare) Active() int { return f.active }

// Share returns a sender's share of the capacity, in bytes per second as a
// sender paces (0 if no capacity is configured).
func (f *FairShare) Share(now time.Duration) units.ByteRate {
	f.sweep(now)
	f.roll(now)
	return f.current()
}

// current is the share with the senders and level as they are (no sweep,
// no roll).
func (f *FairShare) current() units.ByteRate {
	if f.Capacity <= 0 {
		return 0
	}
	n := f.active
	if n < 1 {
		n = 1
	}
	share := float64(f.Capacity.Bytes()) / float64(n)
	if f.level > share {
		share = f.level
	}
	return units.ByteRate(share * (1 - f.drain))
}

// roll closes the measurement window if it is over and recomputes the level.
func (f *FairShare) roll(now time.Duration) {
	w := f.window()
	if now-f.winStart < w {
		return
	}
	span := (now - f.winStart).Seconds()
	full := now-f.winStart < 2*w // a window that was not interrupted by a long quiet spell
	f.winStart = now
	capacity := float64(f.Capacity.Bytes())
	prevLevel := f.level
	if prevLevel == 0 && f.active > 0 {
		prevLevel = capacity / float64(f.active)
	}
	for _, s := range f.last {
		rate := float64(s.bytes) / span
		s.bytes = 0
		if !full || now-s.first < 2*w {
			s.measured = -1
			continue
		}
		s.measured = rate
	}
	f.level = f.waterFill(prevLevel)
}

// rollMarks closes the mark window if it is over.
func (f *FairShare) rollMarks(now time.Duration) {
	w := f.MarkWindow
	if w <= 0 {
		w = f.window()
	}
	if now-f.markStart < w {
		return
	}
	span := (now - f.markStart).Seconds()
	f.markStart = now
	f.drain = 0
	// Only a queue that stands is drained. A standing queue in front of
	// the receiver keeps its link busy, so arrivals run at the capacity;
	// marks in a window whose arrivals fell clearly short of it come from
	// short bursts (a sender catching up after a late timer, a batch),
	// which drained by themselves: holding the senders back for them
	// would only leave the link idle.
	busy := f.Capacity <= 0 || float64(f.winAll)/span >= 0.9*float64(f.Capacity.Bytes())
	if f.winAll > 0 && busy {
		g := f.DrainGain
		if g <= 0 {
			g = defaultDrainGain
		}
		f.drain = g * float64(f.winCE) / float64(f.winAll)
	}
	f.winCE, f.winAll = 0, 0
}

// maxMinLevel is water-filling: the level L such that the constrained
// demands below L plus L for everyone else fill the capacity.
func maxMinLevel(capacity float64, demands []float64, unconstrained int) float64 {
	sort.Float64s(demands)
	left := capacity
	n := unconstrained + len(demands)
	if n == 0 {
		return capacity
	}
	for i, d := range demands {
		l := left / float64(n-i)
		if d >= l {
			return l
		}
		left -= d
	}
	if unconstrained == 0 {
		// Everyone is below what they could have: the largest sender
		// may take what the others leave (and everyone may grow to it).
		// The equal split would make the level flip: a sender still
		// growing into a raised level is counted constrained, and when
		// all are, the level would fall back to the equal split below
		// what the largest already uses, which is then unconstrained for
		// a window and raises the level again.
		rest := 0.0
		for _, d := range demands[:len(demands)-1] {
			rest += d
		}
		return math.Max(capacity/float64(len(demands)), capacity-rest)
	}
	return left / float64(unconstrained)
}

// sweep drops senders idle for longer than Idle, at most once per Idle/4 so
// that the cost stays amortised.
func (f *FairShare) sweep(now time.Duration) {
	if f.Idle <= 0 || now-f.swept < f.Idle/4 {
		return
	}
	f.swept = now
	for k, s := range f.last {
		if now-s.last > f.Idle {
			delete(f.last, k)
			f.active--
			f.level = 0
		}
	}
}

// Egress is the sending side's fair share: a gateway's WAN capacity
// (wan.max_rate_bps) divided max-min among the connections it sends on,
// by demand, exactly as FairShare divides a receiver's inbound capacity
// among its senders. Every controller built with Params.Egress set to the
// same Egress registers with it on its first send, reports the bytes it
// sends, and paces at no more than min(receiver's hint, egress level).
//
// Why: with the line rate capping each connection alone, three
// connections of one gateway could each run at the gateway's whole
// capacity, and a connection whose receiver had no other sender would be
// told all of that receiver's capacity. Where the shared long-haul segment
// is the sending region's own uplink, nothing but the fabric's queue
// would then divide it: the delay equilibrium, whose queue share scales with
// the hint (so the pair told most took most) and whose price is the sum
// of the queues along the path (so the pair crossing most segments got
// least: proportional, not max-min, fairness). With the two ends of every
// connection each handing out an explicit max-min share of their own
// access link, the connection runs at the smaller of the two, which is
// its max-min share whenever the bottlenecks are the regions' access
// links; a segment in the middle is still found by the fabric's queue.
//
// An Egress is shared by controllers on several goroutines (a gateway with
// several WAN endpoints) and is called once per sent packet, so that path
// takes no lock: each connection adds its bytes to counters of its own
// (egressConn, written only by its connection's goroutine) and reads the
// level from an atomic. The lock is taken only to fold the counters into
// the FairShare when a measurement window closes (by the first packet
// after it, as FairShare.Account rolled on the first packet after it),
// when a connection registers or leaves, and on SetCapacity; each of them
// publishes the new level. With a mutex per packet it cost 50-65 ns per
// packet on one goroutine and up to 103 ns on two, against 17-28 and
// 23-33 ns now (BenchmarkEgressSent, at load 13.9; docs/CC.md §3).
type Egress struct {
	mu    sync.Mutex
	share *FairShare               // guarded by mu
	conns map[*egressConn]struct{} // guarded by mu: the connections counted in share
	next  uint64                   // guarded by mu: the last connection key handed out

	// level is what each connection may send, bytes/s (math.Float64bits),
	// published under mu whenever it may have changed; due is when the
	// current measurement window closes (ns since the clock's origin).
	level atomic.Uint64
	due   atomic.Int64
}

// egressConn is one connection's place in an Egress. Only its connection
// writes bytes and last; the window's roll reads and resets them. A packet
// writes only bytes (one atomic add); last is for activity without bytes.
type egressConn struct {
	id    uint64       // its sender key in the FairShare
	bytes atomic.Int64 // sent since the last roll
	last  atomic.Int64 // when it was last active without sending (time.Duration)
	// counted: it is in the FairShare (false before its first packet,
	// after it was forgotten for idling Idle, and after leave); a packet
	// of a connection that is not counted registers it at once.
	counted atomic.Bool
	left    atomic.Bool // leave was called: its connection closed
}

// NewEgress returns an Egress for capacity, measuring each connection's
// sending rate over window (a couple of the longest round trips: long
// enough to hold several packets of every connection, short enough to
// follow a connection that a bottleneck elsewhere holds back). A
// connection that sent nothing for 50 windows is forgotten; one that
// closed leaves at once (AIMD.LeaveEgress). A capacity of 0 is unlimited:
// the level is 0 (no ceiling), but the connections are still counted, so
// that a capacity set later (SetCapacity) is shared among them at once.
func NewEgress(capacity units.BitRate, window time.Duration) *Egress {
	if window <= 0 {
		window = 100 * time.Millisecond
	}
	f := NewFairShare(units.BitRate(EgressUtilisation*float64(capacity)), 50*window)
	f.Window = window
	e := &Egress{share: f, conns: make(map[*egressConn]struct{})}
	e.due.Store(int64(window))
	return e
}

// EgressUtilisation is the part of its capacity an Egress hands out. With
// the whole of it, connections paced at levels that sum to the capacity
// of the link they fill keep whatever queue a transient left there for
// ever (the load matches the service rate exactly), and a connection that
// shares that queue with others and is held by the delay equilibrium (a
// longer path, more queues summed) never gets back to its level: the
// others were given what it left. 2% of headroom drains such a queue.
const EgressUtilisation = 0.98

// join gives a new connection its place; it is counted from its first
// packet (sent), as a FairShare counts a sender from its first packet.
func (e *Egress) join() *egressConn {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.next++
	return &egressConn{id: e.next}
}

// sent records that connection c sent bytes at now and returns the egress
// level, bytes per second (0 without a capacity). It takes no lock unless
// c is not counted yet or the measurement window is over.
func (e *Egress) sent(now time.Duration, c *egressConn, bytes int) float64 {
	if bytes > 0 {
		c.bytes.Add(int64(bytes)) // the one write per packet: the fold dates it
	} else {
		c.last.Store(int64(now)) // activity without bytes (FairShare.Observe)
	}
	if c.left.Load() {
		// A closed connection's controller sending on: it counts for
		// nothing (leave), and must not register again.
		return math.Float64frombits(e.level.Load())
	}
	if !c.counted.Load() || int64(now) >= e.due.Load() {
		e.update(now, c)
	}
	return math.Float64frombits(e.level.Load())
}

// update registers c if it is not counted, closes the measurement window
// if it is over, and publishes the level.
func (e *Egress) update(now time.Duration, c *egressConn) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if c != nil && !c.counted.Load() && !c.left.Load() {
		// A newcomer, or a connection back after idling: it counts at
		// once (the level falls back to the equal split, FairShare.Observe).
		e.conns[c] = struct{}{}
		c.counted.Store(true)
		e.share.Observe(now, c.id)
	}
	if int64(now) >= e.due.Load() {
		e.fold(now)
	}
	e.publish(now)
}

// fold hands the bytes the connections counted since the last roll to the
// FairShare and closes its window; it runs under mu.
func (e *Egress) fold(now time.Duration) {
	f := e.share
	for c := range e.conns {
		s := f.last[c.id]
		if s == nil {
			continue // forgotten (idle) by a sweep: publish drops it
		}
		if b := c.bytes.Swap(0); b > 0 {
			// It sent in this window: active now, to within a window
			// of the 50 it may idle.
			s.bytes += b
			s.last = max(s.last, now)
		} else if l := time.Duration(c.last.Load()); l > s.last {
			s.last = l
		}
	}
	f.roll(now)
	e.due.Store(int64(f.winStart + f.window()))
}

// publish stores the level for the lock-free readers and drops from conns
// the connections the FairShare forgot for idling; it runs under mu.
func (e *Egress) publish(now time.Duration) {
	e.level.Store(math.Float64bits(float64(e.share.Share(now))))
	if len(e.conns) == e.share.Active() {
		return
	}
	for c := range e.conns {
		if _, ok := e.share.last[c.id]; !ok {
			delete(e.conns, c)
			c.counted.Store(false) // its next packet registers it again
		}
	}
}

// leave takes connection c out at once (its connection closed): the
// others' level rises now rather than after c idled for 50 windows.
func (e *Egress) leave(c *egressConn) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if c.left.Swap(true) {
		return
	}
	if _, ok := e.conns[c]; ok {
		delete(e.conns, c)
		e.share.Forget(c.id)
	}
	c.counted.Store(false)
	e.level.Store(math.Float64bits(float64(e.share.current())))
}

// SetCapacity changes the capacity (a live reload of the gateway's WAN
// rate; 0 is unlimited): the level is water-filled again over the new
// capacity from the demands last measured, as FairShare.SetCapacity.
func (e *Egress) SetCapacity(capacity units.BitRate) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.share.SetCapacity(units.BitRate(EgressUtilisation * float64(capacity)))
	e.level.Store(math.Float64bits(float64(e.share.current())))
}

// Level returns the egress level now, bytes per second: what each
// connection that is not held back elsewhere may send.
func (e *Egress) Level(now time.Duration) units.ByteRate {
	e.update(now, nil)
	return units.ByteRate(math.Float64frombits(e.level.Load()))
}

// Active returns the number of connections counted.
func (e *Egress) Active() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.share.Active()
}
