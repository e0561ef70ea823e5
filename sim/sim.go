package sim

import (
	"fmt"
	"math/rand/v2"
	"time"
)

// Defaults applied by New to zero fields of Config.
const (
	DefaultMaxDatagramSize = 9216    // a jumbo frame: room for a 4 KiB MTU protocol packet and more
	DefaultMaxDatagrams    = 1 << 17 // ~1.2 GB of buffers at most with the default size
	DefaultMaxPollBurst    = 1 << 14
)

// Config sets up a Sim. The zero value is usable: fields left zero take the defaults above.
type Config struct {
	// Seed drives every random choice of the run (losses, the ECMP salt, Sim.Rand).
	Seed uint64
	// MaxDatagramSize is the capacity of every datagram buffer handed to Endpoint.Poll.
	MaxDatagramSize int
	// MaxDatagrams caps the datagrams alive (in queues, on wires, in inboxes) in the whole Sim.
	// Past it a polled datagram is dropped and counted in Stats.DroppedNoBuffer.
	MaxDatagrams int
	// MaxPollBurst caps the datagrams one drain of a host's Poll may send at one instant; past it
	// the host yields and polls again 1ns later (Stats.PollBurstLimited). It only stops an
	// endpoint that always has something to send from freezing virtual time.
	MaxPollBurst int
}

// Stats are the Sim-wide counters. Per-link and per-host counters are in LinkStats and HostStats.
type Stats struct {
	Events             uint64 // events processed by Run, stale ones included
	DatagramsSent      uint64 // datagrams returned by Endpoint.Poll, whatever became of them
	DatagramsAllocated uint64 // datagram buffers ever allocated (the free list's high-water mark)
	DatagramsAlive     int    // datagram buffers currently in flight
	DroppedNoBuffer    uint64 // polled datagrams dropped because MaxDatagrams were alive
	DroppedOversize    uint64 // polled datagrams longer than MaxDatagramSize
	Unroutable         uint64 // polled datagrams whose Dst is unknown or at the sender's own site
	ClampedTimeouts    uint64 // host timers still due after HandleTimeout, pushed to now+1ns
	PollBurstLimited   uint64 // drains cut short by MaxPollBurst
}

// Sim is a discrete-event simulation: a virtual clock, an event queue, a seeded random source
// and the datagram free list. It is not safe for concurrent use.
type Sim struct {
	cfg     Config
	now     time.Duration
	q       eventQueue
	stopped bool
	rng     *rand.Rand
	streams uint64 // random streams handed out so far (one per link)
	pool    pool
	stats   Stats
}

// New returns a Sim at virtual time 0.
func New(cfg Config) *Sim {
	if cfg.MaxDatagramSize == 0 {
		cfg.MaxDatagramSize = DefaultMaxDatagramSize
	}
	if cfg.MaxDatagrams == 0 {
		cfg.MaxDatagrams = DefaultMaxDatagrams
	}
	if cfg.MaxPollBurst == 0 {
		cfg.MaxPollBurst = DefaultMaxPollBurst
	}
	if cfg.MaxDatagramSize < 0 || cfg.MaxDatagrams < 0 || cfg.MaxPollBurst < 0 {
		panic(fmt.Sprintf("sim: negative limit in Config %+v", cfg))
	}
	s := &Sim{cfg: cfg}
	s.pool = pool{size: cfg.MaxDatagramSize, max: cfg.MaxDatagrams}
	s.rng = rand.New(s.newStream())
	return s
}

// newStream returns an independent PCG stream derived from the seed. Streams are handed out in
// creation order, which is deterministic, so each link keeps the same stream run after run.
func (s *Sim) newStream() *rand.PCG {
	s.streams++
	return rand.NewPCG(mix64(s.cfg.Seed), mix64(s.cfg.Seed^mix64(s.streams)))
}

// Config returns the configuration with defaults applied.
func (s *Sim) Config() Config { return s.cfg }

// Now returns the current virtual time.
func (s *Sim) Now() time.Duration { return s.now }

// Rand returns the Sim's own seeded generator for callers (workload generators, adapters).
// Links do not draw from it, so using it does not change their loss patterns.
func (s *Sim) Rand() *rand.Rand { return s.rng }

// Stats returns a snapshot of the Sim-wide counters.
func (s *Sim) Stats() Stats {
	st := s.stats
	st.DatagramsAllocated = s.pool.allocated
	st.DatagramsAlive = s.pool.alive
	return st
}

// Pending returns the number of events in the queue, stale ones included.
func (s *Sim) Pending() int { return s.q.len() }

// At schedules fn at virtual time t. A time in the past runs at Now, after the events already
// due. Each call allocates the closure: use it for faults and workload steps, not per packet.
func (s *Sim) At(t time.Duration, fn func()) {
	s.schedule(event{at: t, kind: evFunc, fn: fn})
}

// After schedules fn d after Now.
func (s *Sim) After(d time.Duration, fn func()) { s.At(s.now+d, fn) }

// Every calls fn at first, first+period, ... for as long as fn returns true.
func (s *Sim) Every(first, period time.Duration, fn func(now time.Duration) bool) {
	if period <= 0 {
		panic("sim: Every needs a positive period")
	}
	var tick func()
	tick = func() {
		if fn(s.now) {
			s.At(s.now+period, tick)
		}
	}
	s.At(first, tick)
}

func (s *Sim) schedule(e event) {
	if e.at < s.now {
		e.at = s.now
	}
	s.q.push(e)
}

// Run processes events in order until the next one is later than until, then advances the clock
// to until. Events at exactly until run. Run returns early, with the clock at the last event, if
// an event calls Stop. Run may be called again to continue.
func (s *Sim) Run(until time.Duration) {
	s.stopped = false
	for s.q.len() > 0 && !s.stopped && s.q.peekAt() <= until {
		e := s.q.pop()
		s.now = e.at
		s.stats.Events++
		s.dispatch(&e)
	}
	if !s.stopped && until > s.now {
		s.now = until
	}
}

// Stop makes the current Run return after the event that called it.
func (s *Sim) Stop() { s.stopped = true }

func (s *Sim) dispatch(e *event) {
	switch e.kind {
	case evFunc:
		e.fn()
	case evTxDone:
		e.link.txDone(e.gen)
	case evArrive:
		e.link.arrive(e.gen)
	case evHostWake:
		e.host.wake(e.gen)
	case evHostPoll:
		e.host.pollNow()
	}
}

// mix64 is the splitmix64 finalizer: a fast bijective mixer used to derive seeds and for ECMP.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
