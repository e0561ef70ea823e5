package netem

import (
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mrgw/mrgw/internal/hrtimer"
)

// Sched is the delivery half of one direction of an emulator: a FIFO per
// queue (a plane, or a plane and a delay class) of items waiting for
// their delivery times, and the dispatcher that hands them over on time,
// in batches, sleeping on a timerfd (internal/hrtimer) in between (Go's timers are ~1 ms
// late here) and yield-spinning only for waits under spinWindow. This
// package's UDP relay and the TUN emulator (loadtest/tunemu) both run
// their directions on it, so that the two deliver with the same
// precision.
//
// Mu guards the FIFOs and the scheduling state; the caller also guards
// its own per-queue state (its links) with it, so that a link's decision
// and the push of its item happen under one lock, in order.
type Sched[T any] struct {
	// Mu is held by Push's caller, and by the dispatcher while it
	// collects due items.
	Mu sync.Mutex

	now   func() time.Duration
	timer *hrtimer.FD
	q     []ring[T]
	// stale reports, with Mu held, whether an item of queue i was in
	// flight when its plane failed: it is dropped (and given to drop)
	// instead of delivered.
	stale func(i int, it *Item[T]) bool
	drop  func(i int, it Item[T])
	send  func(batch []Item[T])
	batch int

	closed bool
	// sleeping is set while the dispatcher waits on the timer, which is
	// then armed for armedAt (math.MaxInt64: not armed). A push that
	// brings an earlier deadline re-arms it; otherwise the dispatcher
	// looks at the FIFOs again before it sleeps, so nothing is missed.
	sleeping bool
	armedAt  time.Duration
	gen      atomic.Uint64 // bumped by Kick; ends a spin early
	next     int           // queue the next collect starts at (fairness)
}

// Item is a queued value with its delivery time and the epoch of its
// plane when it was admitted (see Link.Epoch).
type Item[T any] struct {
	Deliver time.Duration
	Epoch   uint32
	V       T
}

// SchedConfig configures a Sched.
type SchedConfig[T any] struct {
	// Queues is the number of FIFOs; Now the emulator's clock.
	Queues int
	Now    func() time.Duration
	// Batch is the most items handed to Send at once.
	Batch int
	// Stale (optional) and Drop: see Sched. Drop is called with Mu held.
	Stale func(queue int, it *Item[T]) bool
	Drop  func(queue int, it Item[T])
	// Send delivers due items; it runs on the dispatcher goroutine
	// without Mu and must not keep the slice.
	Send func(batch []Item[T])
}

// Scheduling precision: the timer is armed earlyWake before a deadline and
// the dispatcher busy-polls (yielding) for waits shorter than spinWindow,
// so that the timerfd's wake-up latency (tens of µs) is mostly absorbed
// without burning a core for long waits.
const (
	earlyWake  = 50 * time.Microsecond
	spinWindow = 60 * time.Microsecond
)

// NewSched returns a scheduler; start its dispatcher with Run.
func NewSched[T any](c SchedConfig[T]) (*Sched[T], error) {
	t, err := hrtimer.NewFD()
	if err != nil {
		return nil, err
	}
	if c.Batch < 1 {
		c.Batch = DefaultBatch
	}
	return &Sched[T]{
		now: c.Now, timer: t, q: make([]ring[T], c.Queues),
		stale: c.Stale, drop: c.Drop, send: c.Send, batch: c.Batch,
		armedAt: math.MaxInt64,
	}, nil
}

// Push queues it on queue i. Mu must be held; call Kick after unlocking.
// Deliveries within one queue must not decrease (the link model keeps
// them in order).
func (s *Sched[T]) Push(i int, it Item[T]) {
	s.q[i].push(it)
	if s.sleeping && it.Deliver < s.armedAt {
		s.armedAt = it.Deliver
		s.timer.Arm(it.Deliver - earlyWake - s.now())
	}
}

// Kick tells a spinning dispatcher that something was pushed (it may be
// due sooner than what it waits for).
func (s *Sched[T]) Kick() { s.gen.Add(1) }

// Len returns the items queued on queue i (Mu held).
func (s *Sched[T]) Len(i int) int { return s.q[i].len() }

// Closed reports whether Close was called (Mu held).
func (s *Sched[T]) Closed() bool { return s.closed }

// Run is the dispatcher: it sends every item at its delivery time, in
// batches of at most SchedConfig.Batch, and returns once Close is called.
func (s *Sched[T]) Run() {
	b := make([]Item[T], 0, s.batch)
	for {
		gen := s.gen.Load()
		var next time.Duration
		var sleep, ok bool
		b, next, sleep, ok = s.collect(b[:0])
		switch {
		case !ok:
			return
		case len(b) > 0:
			s.send(b)
			clear(b)
		case sleep:
			if !s.timer.Wait() {
				return
			}
		default:
			// Short wait: yield-spin until the deadline or until a new
			// item arrives (it may be due earlier). Bounded by
			// spinWindow.
			for s.now() < next && s.gen.Load() == gen {
				spinYield()
			}
		}
	}
}

// collect pops the items that are due (up to cap(batch)). If none is, it
// returns the next deadline and whether to sleep on the timer, which it
// then arms (a deadline closer than spinWindow is spun for instead). It
// reports ok=false once the scheduler is closed.
func (s *Sched[T]) collect(batch []Item[T]) (_ []Item[T], next time.Duration, sleep, ok bool) {
	s.Mu.Lock()
	defer s.Mu.Unlock()
	if s.closed {
		return batch, 0, false, false
	}
	s.sleeping = false
	now := s.now()
	next = time.Duration(math.MaxInt64)
	nq := len(s.q)
	start := s.next
	s.next = (s.next + 1) % nq
	for k := 0; k < nq; k++ {
		i := (start + k) % nq
		f := &s.q[i]
		for f.len() > 0 {
			h := f.peek()
			if h.Deliver > now || len(batch) == cap(batch) {
				next = min(next, h.Deliver)
				break
			}
			it := f.pop()
			if s.stale != nil && s.stale(i, &it) {
				s.drop(i, it)
				continue
			}
			batch = append(batch, it)
		}
	}
	if len(batch) > 0 || next-now <= spinWindow {
		return batch, next, false, true
	}
	// About to sleep: arm for the earliest deadline (or disarm).
	s.sleeping = true
	if next == math.MaxInt64 {
		if s.armedAt != math.MaxInt64 {
			s.timer.Disarm()
		}
	} else {
		s.timer.Arm(next - earlyWake - now)
	}
	s.armedAt = next
	return batch, next, true, true
}

// Close stops the dispatcher (it wakes a sleeping one). Mu must be held.
func (s *Sched[T]) Close() {
	if !s.closed {
		s.closed = true
		s.timer.Close()
	}
}

// Drain hands every queued item to f and empties the FIFOs; call it once
// the dispatcher has returned.
func (s *Sched[T]) Drain(f func(Item[T])) {
	s.Mu.Lock()
	defer s.Mu.Unlock()
	for i := range s.q {
		for s.q[i].len() > 0 {
			f(s.q[i].pop())
		}
	}
}

// ring is a growable FIFO. It grows by doubling and never shrinks; its
// size is bounded by the emulator's buffer cap.
type ring[T any] struct {
	buf  []Item[T]
	head int
	n    int
}

func (r *ring[T]) len() int { return r.n }

func (r *ring[T]) push(p Item[T]) {
	if r.n == len(r.buf) {
		nb := make([]Item[T], max(16, 2*len(r.buf)))
		for i := 0; i < r.n; i++ {
			nb[i] = r.buf[(r.head+i)%len(r.buf)]
		}
		r.buf, r.head = nb, 0
	}
	r.buf[(r.head+r.n)%len(r.buf)] = p
	r.n++
}

// peek returns the oldest item; the FIFO must not be empty.
func (r *ring[T]) peek() *Item[T] { return &r.buf[r.head] }

// pop removes and returns the oldest item; the FIFO must not be empty.
func (r *ring[T]) pop() Item[T] {
	p := r.buf[r.head]
	var zero Item[T]
	r.buf[r.head] = zero // drop references for the GC
	r.head = (r.head + 1) % len(r.buf)
	r.n--
	return p
}
