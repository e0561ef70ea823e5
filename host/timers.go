package host

import (
	"container/heap"
	"time"
)

// flowTimers is a host's one timer queue for its outgoing flows. A flow
// that waits for a time (a retry, the deadline of a re-open, FailAfter)
// has one live entry; an open flow has none. The housekeeping tick pops
// what is due instead of walking every flow: with 2,500 flows per host
// (mrgw-lab loadtest connections at 10,000 flows) a walk of every flow
// every 10 ms was 16% of the lab's CPU profile, all of it for flows that
// had nothing due.
//
// Re-scheduling a flow does not search the heap: the flow's generation
// moves on and its older entries become stale, skipped when popped and
// dropped by a rebuild once they outnumber the live ones, so the heap
// stays within twice the flows with timers (plus a constant).
type flowTimers struct {
	h    timerHeap
	live int // flows with an entry
}

type timerEntry struct {
	at  time.Duration
	f   *Flow
	gen uint64
}

type timerHeap []timerEntry

func (h timerHeap) Len() int           { return len(h) }
func (h timerHeap) Less(i, j int) bool { return h[i].at < h[j].at }
func (h timerHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *timerHeap) Push(x any)        { *h = append(*h, x.(timerEntry)) }
func (h *timerHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = timerEntry{}
	*h = old[:len(old)-1]
	return e
}

// schedule sets f's timer to at, replacing any earlier one.
func (t *flowTimers) schedule(f *Flow, at time.Duration) {
	if f.timerArmed && f.timerAt == at {
		return
	}
	t.cancel(f)
	f.timerArmed, f.timerAt = true, at
	t.live++
	heap.Push(&t.h, timerEntry{at: at, f: f, gen: f.timerGen})
	if len(t.h) > 2*t.live+64 {
		t.compact()
	}
}

// cancel removes f's timer, if any.
func (t *flowTimers) cancel(f *Flow) {
	if !f.timerArmed {
		return
	}
	f.timerArmed = false
	f.timerGen++
	t.live--
}

// due removes and returns the flows whose timer is at or before now, in
// time order. A flow re-armed while the caller handles them is not
// returned again before the next call, whatever its new time.
func (t *flowTimers) due(now time.Duration, out []*Flow) []*Flow {
	for len(t.h) > 0 && t.h[0].at <= now {
		e := heap.Pop(&t.h).(timerEntry)
		if !e.f.timerArmed || e.gen != e.f.timerGen {
			continue // stale
		}
		e.f.timerArmed = false
		e.f.timerGen++
		t.live--
		out = append(out, e.f)
	}
	return out
}

// len is the number of entries held, stale ones included.
func (t *flowTimers) len() int { return len(t.h) }

// compact drops the stale entries.
func (t *flowTimers) compact() {
	keep := t.h[:0]
	for _, e := range t.h {
		if e.f.timerArmed && e.gen == e.f.timerGen {
			keep = append(keep, e)
		}
	}
	clear(t.h[len(keep):])
	t.h = keep
	heap.Init(&t.h)
}

// arm sets the flow's timer for its state: a waiting flow at its retry
// (or its FailAfter, if sooner), a flow re-opening at its deadline, any
// other none.
func (f *Flow) arm() {
	t := &f.h.o.timers
	switch f.state {
	case flowWaiting:
		at := f.retryAt
		if f.lostAt >= 0 {
			at = min(at, f.lostAt+f.h.cfg.FailAfter)
		}
		t.schedule(f, at)
	case flowOpening:
		if f.opened {
			t.schedule(f, f.openDeadline)
			return
		}
		// The first open's deadline is OpenFlow's.
		t.cancel(f)
	default:
		t.cancel(f)
	}
}

// onTimer runs a flow's due timer.
func (f *Flow) onTimer(now time.Duration) {
	switch f.state {
	case flowOpening:
		if f.opened && now >= f.openDeadline {
			f.reroute(now, ErrOpenTimeout, f.gw)
		}
	case flowWaiting:
		switch {
		case f.lostAt >= 0 && now-f.lostAt >= f.h.cfg.FailAfter:
			f.finish(now, f.noRoute(), flowFailed, false)
		case now >= f.retryAt:
			f.tryOpen(now)
		}
	}
	f.arm()
}

// runTimers runs the flows' due timers and re-pumps the flows whose last
// pump found the connection's send queue full.
func (h *Host) runTimers(now time.Duration) {
	h.o.dueBuf = h.o.timers.due(now, h.o.dueBuf[:0])
	for i, f := range h.o.dueBuf {
		f.onTimer(now)
		h.o.dueBuf[i] = nil
	}
	if len(h.o.blocked) == 0 {
		return
	}
	fs := make([]*Flow, 0, len(h.o.blocked))
	for f := range h.o.blocked {
		fs = append(fs, f)
	}
	for _, f := range fs {
		f.pump(now) // takes f out of blocked, or puts it back
	}
}
