// Package bulk is the steady message transfer of the plane-failure runs
// (mrgw-lab loadtest datapath --plane-failure and plane-failure-peers): one
// event loop for both. The sender keeps a fixed number of WRITEs of one
// buffer outstanding on its connection until stopped; both ends check that
// every message completes once, in order; Drain waits until every message
// written has completed at both ends.
//
// Sender and Receiver are the two ends' metaroce event handlers (they run
// on the endpoints' goroutines); everything else may be called from any
// goroutine.
package bulk

import (
	"context"
	"sync"
	"time"

	"github.com/mrgw/mrgw/loadtest/recovery"
	"github.com/mrgw/mrgw/metaroce"
)

// Options configure a Transfer.
type Options struct {
	// Outstanding is how many messages the sender keeps queued.
	Outstanding int
	// OnComplete, if set, is called for every message that completes at
	// the receiver for the first time, with the number of messages
	// complete so far in order. It runs with the transfer's lock held: it
	// must not call the Transfer.
	OnComplete func(ev metaroce.Event, complete uint64)
	// FailedOutOfOrder: a receive completion with an error counts as
	// failed and is otherwise ignored (it does not take its place in the
	// order, so it shows as a gap). Without it, it counts as failed and
	// takes its place like any other.
	FailedOutOfOrder bool
}

// Transfer is one steady transfer.
type Transfer struct {
	src  []byte
	opts Options

	mu         sync.Mutex
	stopped    bool
	written    uint64
	sent, recv recovery.Seq
	failed     int // completions with an error, at either end
	sender     *metaroce.Conn
}

// New returns a transfer of messages of src (every message is a WRITE of
// src to key 1, address 0, on stream 0).
func New(src []byte, o Options) *Transfer { return &Transfer{src: src, opts: o} }

// write queues one more message; the lock is held.
func (t *Transfer) write(now time.Duration) {
	if _, err := t.sender.Write(now, 0, 1, 0, t.src); err == nil {
		t.written++
	}
}

// Sender is the sending endpoint's event handler: once connected it keeps
// Outstanding messages queued until Stop.
func (t *Transfer) Sender(now time.Duration, ev metaroce.Event) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch ev.Kind {
	case metaroce.EventConnected:
		t.sender = ev.Conn
		for range t.opts.Outstanding {
			t.write(now)
		}
	case metaroce.EventSendComplete:
		if ev.Err != nil {
			t.failed++
		}
		if t.sent.See(ev.Seq) && !t.stopped {
			t.write(now)
		}
	}
}

// Receiver is the receiving endpoint's event handler.
func (t *Transfer) Receiver(_ time.Duration, ev metaroce.Event) {
	if ev.Kind != metaroce.EventRecvComplete {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if ev.Err != nil {
		t.failed++
		if t.opts.FailedOutOfOrder {
			return
		}
	}
	if t.recv.See(ev.Seq) && t.opts.OnComplete != nil {
		t.opts.OnComplete(ev, t.recv.Next())
	}
}

// SenderConn is the sending connection, nil before it connected.
func (t *Transfer) SenderConn() *metaroce.Conn {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.sender
}

// Stop stops queueing new messages.
func (t *Transfer) Stop() {
	t.mu.Lock()
	t.stopped = true
	t.mu.Unlock()
}

// Counts is what the transfer has seen.
type Counts struct {
	Written    uint64 // messages queued
	Sent, Recv uint64 // messages complete in order at the sender, the receiver
	// Gaps and Dups are completions that skipped messages, and repeated
	// completions, at both ends together.
	Gaps, Dups int
	Failed     int // completions with an error
}

// Incomplete is the messages written and not complete at the receiver.
func (c Counts) Incomplete() int64 { return int64(c.Written - c.Recv) }

// Lost is the messages never delivered in their place: incomplete ones and
// gaps.
func (c Counts) Lost() int64 { return c.Incomplete() + int64(c.Gaps) }

// Done reports whether every message written completed at both ends.
func (c Counts) Done() bool { return c.Sent == c.Written && c.Recv == c.Written }

// Counts returns the counts now.
func (t *Transfer) Counts() Counts {
	t.mu.Lock()
	defer t.mu.Unlock()
	return Counts{Written: t.written, Sent: t.sent.Next(), Recv: t.recv.Next(),
		Gaps: t.sent.Gaps + t.recv.Gaps, Dups: t.sent.Dups + t.recv.Dups, Failed: t.failed}
}

// Drain waits until every message written has completed at both ends
// (call Stop first), checking every 10 ms. It returns the counts, and an
// error if ctx ended or timeout passed first.
func (t *Transfer) Drain(ctx context.Context, timeout time.Duration) (Counts, error) {
	drain, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		c := t.Counts()
		if c.Done() {
			return c, nil
		}
		tm := time.NewTimer(10 * time.Millisecond)
		select {
		case <-tm.C:
		case <-drain.Done():
			tm.Stop()
			return t.Counts(), drain.Err()
		}
	}
}
