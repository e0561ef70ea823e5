package sim

import "time"

// eventKind says what an event does. Events are typed rather than closures so that the
// per-packet events of links and hosts are plain values in the heap and allocate nothing.
type eventKind uint8

const (
	evFunc     eventKind = iota // call fn (user events, Every, fault schedulers)
	evTxDone                    // link finished serializing its current datagram
	evArrive                    // the datagram at the head of a link's wire reaches the far end
	evHostWake                  // a host's timer may be due
	evHostPoll                  // a host should drain Poll (start, Kick, burst yield)
)

// event is one entry of the queue. gen lets links and hosts invalidate events already in the
// heap (a link flushed by going down, a host timer superseded by an earlier one) without
// searching the heap: a stale event is simply ignored when it pops.
type event struct {
	at   time.Duration
	seq  uint64
	gen  uint64
	kind eventKind
	link *Link
	host *Host
	fn   func()
}

// eventQueue is a binary min-heap of events ordered by (at, seq). seq is the insertion order,
// which makes equal-time events run first-in first-out and the whole run deterministic.
type eventQueue struct {
	items []event
	seq   uint64
}

func (q *eventQueue) len() int { return len(q.items) }

// before reports whether a must run before b.
func before(a, b *event) bool { return a.at < b.at || (a.at == b.at && a.seq < b.seq) }

// push adds e. Sifting moves a hole rather than swapping: each level copies one event, not two.
func (q *eventQueue) push(e event) {
	e.seq = q.seq
	q.seq++
	q.items = append(q.items, event{})
	items := q.items
	i := len(items) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !before(&e, &items[p]) {
			break
		}
		items[i] = items[p]
		i = p
	}
	items[i] = e
}

// pop removes and returns the earliest event. The queue must not be empty.
func (q *eventQueue) pop() event {
	items := q.items
	n := len(items) - 1
	top := items[0]
	last := items[n]
	items[n] = event{} // release pointers for the GC
	items = items[:n]
	q.items = items
	if n == 0 {
		return top
	}
	// Sift last down from the root.
	i := 0
	for {
		c := 2*i + 1
		if c >= n {
			break
		}
		if r := c + 1; r < n && before(&items[r], &items[c]) {
			c = r
		}
		if !before(&items[c], &last) {
			break
		}
		items[i] = items[c]
		i = c
	}
	items[i] = last
	return top
}

// peekAt returns the time of the earliest event. The queue must not be empty.
func (q *eventQueue) peekAt() time.Duration { return q.items[0].at }
