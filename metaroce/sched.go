package metaroce

import (
	"time"
)

// This file keeps the Endpoint's work proportional to the connections that
// have something to do, not to the connections it holds, so that one
// Endpoint can carry thousands of them: a FIFO of connections that may have
// a datagram to send (round robin between them), and a heap of connection
// timers with lazy deletion.

// timerEnt is one connection's deadline; it is stale unless gen matches the
// connection's current timerGen.
type timerEnt struct {
	at  time.Duration
	c   *Conn
	gen uint64
}

// timerHeap is a min-heap of deadlines. It is container/heap's algorithm
// with typed push and pop: container/heap's Push and Pop pass entries as
// `any`, which allocates for every timer filed (several per packet).
type timerHeap []timerEnt

func (h timerHeap) less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].c.id < h[j].c.id
}

func (h *timerHeap) push(t timerEnt) {
	*h = append(*h, t)
	h.up(len(*h) - 1)
}

// pop removes the earliest entry.
func (h *timerHeap) pop() {
	old := *h
	n := len(old) - 1
	old[0], old[n] = old[n], old[0]
	old.down(0, n)
	old[n] = timerEnt{}
	*h = old[:n]
}

// init restores the heap order after arbitrary changes.
func (h timerHeap) init() {
	n := len(h)
	for i := n/2 - 1; i >= 0; i-- {
		h.down(i, n)
	}
}

func (h timerHeap) up(j int) {
	for j > 0 {
		i := (j - 1) / 2 // parent
		if !h.less(j, i) {
			break
		}
		h[i], h[j] = h[j], h[i]
		j = i
	}
}

func (h timerHeap) down(i, n int) {
	for {
		j1 := 2*i + 1
		if j1 >= n || j1 < 0 { // j1 < 0 after int overflow
			break
		}
		j := j1 // left child
		if j2 := j1 + 1; j2 < n && h.less(j2, j1) {
			j = j2 // right child
		}
		if !h.less(j, i) {
			break
		}
		h[i], h[j] = h[j], h[i]
		i = j
	}
}

// touch notes that c may have something to send or a new timer: every
// operation that changes a connection ends with it.
//
// The deadline itself is recomputed lazily (retimeDirty), when the driver
// next asks for the timers: nextTimeout scans every path (acknowledgement
// and probe-timeout deadlines, probes), and touch runs for every datagram
// received, so recomputing it here cost a scan of all paths and a heap
// push per datagram where one per batch gives the same deadlines
// (BenchmarkDatapath).
func (c *Conn) touch() {
	e := c.ep
	if c.removed {
		return
	}
	if !c.inReady {
		c.inReady = true
		e.ready = append(e.ready, c)
	}
	c.markTimer()
}

// markTimer queues c's deadline to be recomputed before the timers are
// next read.
func (c *Conn) markTimer() {
	if !c.timerDirty {
		c.timerDirty = true
		c.ep.dirty = append(c.ep.dirty, c)
	}
}

// retimeDirty recomputes the deadlines of the connections touched since
// the timers were last read. Every reader of the heap calls it first.
func (e *Endpoint) retimeDirty() {
	for i, c := range e.dirty {
		c.timerDirty = false
		e.retime(c)
		e.dirty[i] = nil
	}
	e.dirty = e.dirty[:0]
}

// retime recomputes c's deadline and files it in the heap if it changed.
func (e *Endpoint) retime(c *Conn) {
	d := c.nextTimeout()
	if c.removed || d == c.deadline {
		return
	}
	c.deadline = d
	c.timerGen++
	if d >= 0 {
		e.timers.push(timerEnt{at: d, c: c, gen: c.timerGen})
	}
	// Stale entries are dropped lazily; rebuild when they dominate.
	if len(e.timers) > 2*len(e.list)+64 {
		live := e.timers[:0]
		for _, t := range e.timers {
			if t.gen == t.c.timerGen && !t.c.removed {
				live = append(live, t)
			}
		}
		clear(e.timers[len(live):])
		e.timers = live
		e.timers.init()
	}
}

// nextTimer drops stale heap entries and returns the earliest live one.
func (e *Endpoint) nextTimer() (timerEnt, bool) {
	e.retimeDirty()
	for len(e.timers) > 0 {
		t := e.timers[0]
		if t.gen == t.c.timerGen && !t.c.removed {
			return t, true
		}
		e.timers.pop()
	}
	return timerEnt{}, false
}

// pollReady runs the round robin over connections that may have something
// to send. A connection that yields a datagram goes to the back of the
// queue; one that has nothing leaves it until it is touched again.
func (e *Endpoint) pollReady(now time.Duration, buf []byte, out *Transmit) bool {
	for n := len(e.ready) - e.readyHead; n > 0; n-- {
		c := e.ready[e.readyHead]
		if c.removed {
			e.ready[e.readyHead] = nil
			e.readyHead++
			continue
		}
		if c.poll(now, buf, out) {
			// To the back of the queue, unless it is alone there (the
			// common case of one busy connection: the move cost a slice
			// copy and clear per datagram).
			if e.readyHead < len(e.ready)-1 {
				e.ready[e.readyHead] = nil
				e.readyHead++
				e.ready = append(e.ready, c)
				e.compactReady()
			}
			return true
		}
		e.ready[e.readyHead] = nil
		e.readyHead++
		c.inReady = false
		c.markTimer()
	}
	e.compactReady()
	return false
}

func (e *Endpoint) compactReady() {
	if e.readyHead > 0 && e.readyHead*2 >= len(e.ready) {
		n := copy(e.ready, e.ready[e.readyHead:])
		clear(e.ready[n:])
		e.ready = e.ready[:n]
		e.readyHead = 0
	}
}
