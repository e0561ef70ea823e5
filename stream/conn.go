//go:build linux

package stream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/mrgw/mrgw/host"
)

// Conn is one end of a stream: a net.Conn over two flows, one each way.
// Data is WRITTEN straight into the peer's receive ring; the peer's
// control records (its window, FIN and reset) land in this end's control
// slots. Read, Write and the deadlines are safe for concurrent use.
type Conn struct {
	m             *Mux
	key           uint32
	region        []byte // control slot, then the receive ring
	win           uint64 // ring size
	local, remote Addr

	wmu sync.Mutex // serializes writers: data keeps its order on the flow

	mu      sync.Mutex
	changed chan struct{} // closed and replaced on every change of state
	out     *host.Flow    // to the peer; nil until the accepting end's reverse flow opens
	peerKey uint32        // the peer's region key
	inFlow  uint64        // the peer's flow to this end
	answers uint64        // the dialer's flow id, carried in every record
	// established is closed once both ends know each other's ring.
	established chan struct{}
	estOnce     sync.Once

	// Receive side.
	nextSeq  uint64                   // next sequence of inFlow to process
	stash    map[uint64]host.Delivery // deliveries that came early
	rcvd     uint64                   // bytes in the ring, in order
	consumed uint64                   // bytes the application read
	told     uint64                   // Consumed in the last record sent
	peer     record                   // the peer's state, merged
	readShut bool                     // Close: nothing more is read

	// Send side.
	sbuf               []byte // copy of the bytes in flight, laid out as the peer's ring
	sent               uint64 // bytes handed to the flow
	released           uint64 // bytes whose WRITEs completed end to end
	inflight           []chunk
	finQueued, finSent bool
	ctlDirty           bool // a record is due
	closed             bool // the application called Close
	closedAt           time.Time
	created            time.Time
	err                error // terminal: reset or failure
	resetOut           uint32

	rdl, wdl time.Time
	kick     chan struct{}
	running  bool          // the worker runs (it tears the stream down)
	done     chan struct{} // closed at teardown
	// bg ends at teardown: the flow's Write waits no longer.
	bg     context.Context
	cancel context.CancelFunc
}

// chunk is a WRITE of stream data in flight.
type chunk struct {
	end uint64
	p   *host.Pending
}

// maxStash bounds the deliveries held until the ones before them arrive.
const maxStash = 4096

func newConn(m *Mux, key uint32, out *host.Flow, local, remote Addr) *Conn {
	w := uint64(m.cfg.Window)
	c := &Conn{m: m, key: key, region: make([]byte, ringBase+w), win: w, local: local, remote: remote,
		out: out, changed: make(chan struct{}), established: make(chan struct{}),
		stash: map[uint64]host.Delivery{}, kick: make(chan struct{}, 1), done: make(chan struct{})}
	c.bg, c.cancel = context.WithCancel(context.Background())
	c.created = time.Now()
	return c
}

// broadcast wakes every waiter (c.mu held).
func (c *Conn) broadcast() {
	close(c.changed)
	c.changed = make(chan struct{})
}

func (c *Conn) poke() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// bindIn binds the dialer's end to the peer's reverse flow (m.mu held).
func (c *Conn) bindIn(flow uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.inFlow != 0 || c.out == nil {
		return false
	}
	c.inFlow = flow
	return true
}

// attachOut gives an accepted end its flow to the dialer and announces
// its ring there.
func (c *Conn) attachOut(f *host.Flow, peerKey uint32) bool {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return false
	}
	c.out, c.peerKey, c.ctlDirty = f, peerKey, true
	c.running = true
	c.mu.Unlock()
	go c.run()
	c.poke()
	return true
}

// deliver processes one delivery of the inbound flow, in sequence order.
func (c *Conn) deliver(d host.Delivery) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return
	}
	if d.Seq != c.nextSeq {
		if d.Seq < c.nextSeq || len(c.stash) >= maxStash {
			c.failLocked(&ResetError{Code: CodeProtocol, Cause: fmt.Errorf("sequence %d out of window (next %d)", d.Seq, c.nextSeq)})
			return
		}
		c.stash[d.Seq] = d
		return
	}
	for {
		if err := c.process(d); err != nil {
			c.failLocked(&ResetError{Code: CodeProtocol, Cause: err})
			return
		}
		c.nextSeq++
		n, ok := c.stash[c.nextSeq]
		if !ok {
			break
		}
		delete(c.stash, c.nextSeq)
		d = n
	}
	c.broadcast()
}

// process applies one in-order delivery (c.mu held).
func (c *Conn) process(d host.Delivery) error {
	if d.Key != c.key {
		return fmt.Errorf("message to key %#x on stream %#x", d.Key, c.key)
	}
	if d.Addr < ringBase && d.Addr%slotSize == 0 && d.Len == slotSize {
		return c.control()
	}
	pos := c.rcvd % c.win
	switch {
	case d.Addr != ringBase+pos:
		return fmt.Errorf("data at ring offset %d, expected %d", d.Addr-ringBase, pos)
	case d.Len == 0 || d.Len > c.win-pos:
		return fmt.Errorf("data of %d bytes at ring offset %d of %d", d.Len, pos, c.win)
	case c.rcvd+d.Len-c.consumed > c.win:
		return fmt.Errorf("peer wrote past the window")
	case c.peer.Flags&flagFin != 0 && c.rcvd+d.Len > c.peer.FinAt:
		return fmt.Errorf("data after FIN")
	}
	c.rcvd += d.Len
	c.m.ctr.bytesReceived.Add(d.Len)
	if c.readShut {
		// Data after Close: as TCP, answer with a reset.
		c.resetLocked(CodeClosed, errors.New("data arrived after Close"))
	}
	return nil
}

// control reads the peer's records from the slots and merges them (c.mu
// held). A slot the peer has not written yet is all zeros.
func (c *Conn) control() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var b [ringBase]byte
	if err := c.m.h.ReadMemory(ctx, c.key, 0, b[:]); err != nil {
		return fmt.Errorf("read control slots: %w", err)
	}
	hadAccept := c.peer.Flags&flagAccept != 0
	for i := 0; i < ringBase; i += slotSize {
		slot := b[i : i+slotSize]
		if !slices.ContainsFunc(slot, func(x byte) bool { return x != 0 }) {
			continue
		}
		r, err := parseRecord(slot)
		if err != nil {
			return err
		}
		if r.Answers != c.answers {
			return fmt.Errorf("record answers flow %016x, stream is %016x", r.Answers, c.answers)
		}
		c.peer.merge(r)
	}
	first := !hadAccept && c.peer.Flags&flagAccept != 0
	if first {
		if c.peer.Window < 4096 || c.peer.RingKey < keyBase {
			return fmt.Errorf("peer ring key %#x, window %d", c.peer.RingKey, c.peer.Window)
		}
		c.sbuf = make([]byte, c.peer.Window)
		if c.peerKey == 0 {
			// The dialer learns the listener's ring: answer with its own.
			c.peerKey = c.peer.RingKey
			c.ctlDirty = true
			c.running = true
			go c.run()
			c.poke()
		}
		c.estOnce.Do(func() { close(c.established) })
	}
	if c.peer.Flags&flagReset != 0 && c.err == nil {
		c.m.ctr.resets.Add(1)
		c.err = &ResetError{Code: c.peer.Code, Remote: true}
		c.estOnce.Do(func() { close(c.established) })
		c.poke()
		if !c.running {
			c.teardownLocked()
		}
	}
	if c.peer.Flags&flagFin != 0 && (c.peer.FinAt < c.rcvd) {
		return fmt.Errorf("FIN at %d below the %d bytes received", c.peer.FinAt, c.rcvd)
	}
	c.poke()
	return nil
}

// Read reads stream data in order; io.EOF after the peer's CloseWrite.
func (c *Conn) Read(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		switch {
		case c.readShut:
			return 0, net.ErrClosed
		case c.consumed < c.rcvd:
			if len(p) == 0 {
				return 0, nil
			}
			pos := c.consumed % c.win
			n := min(uint64(len(p)), c.rcvd-c.consumed, c.win-pos)
			copy(p, c.region[ringBase+pos:ringBase+pos+n])
			c.consumed += n
			// Tell the peer every quarter window, so a sender that filled
			// the window never waits for the whole of it to be read.
			if c.consumed-c.told >= c.win/4 {
				c.ctlDirty = true
				c.poke()
			}
			return int(n), nil
		case c.err != nil:
			return 0, c.err
		case c.peer.Flags&flagFin != 0 && c.rcvd == c.peer.FinAt:
			return 0, io.EOF
		}
		if err := c.wait(c.rdl); err != nil {
			return 0, err
		}
	}
}

// wait waits for a change of state or the deadline (c.mu held, released
// while waiting).
func (c *Conn) wait(deadline time.Time) error { return c.waitOr(deadline, nil) }

// Write writes p to the stream. It returns once every byte is copied
// into the send window; they reach the peer in order, and a later error
// (the peer reset the stream) shows in the next call.
func (c *Conn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	written := 0
	for len(p) > 0 {
		c.mu.Lock()
		if err := c.writeErr(); err != nil {
			c.mu.Unlock()
			return written, err
		}
		c.reap()
		space := uint64(0)
		if c.sbuf != nil {
			w := uint64(len(c.sbuf))
			space = min(c.peer.Consumed, c.released) + w - c.sent
			space = min(space, uint64(len(p)), w-c.sent%w, uint64(c.m.cfg.MaxMessage))
		}
		if space == 0 {
			var head <-chan struct{}
			if len(c.inflight) > 0 {
				head = c.inflight[0].p.Done()
			}
			err := c.waitOr(c.wdl, head)
			c.mu.Unlock()
			if err != nil {
				return written, err
			}
			continue
		}
		w := uint64(len(c.sbuf))
		pos := c.sent % w
		buf := c.sbuf[pos : pos+space]
		copy(buf, p[:space])
		c.sent += space
		end := c.sent
		out, key := c.out, c.peerKey
		c.mu.Unlock()
		// The flow blocks only on the gateways' credit, which covers at
		// least a window; its context ends with the stream.
		pnd, err := out.Write(c.bg, key, ringBase+pos, buf)
		if err != nil {
			c.mu.Lock()
			c.failUndeliveredLocked(err)
			c.mu.Unlock()
			return written, c.errNow()
		}
		c.mu.Lock()
		c.inflight = append(c.inflight, chunk{end: end, p: pnd})
		if c.finQueued || c.closed {
			// The worker waits for this WRITE before it finishes.
			c.poke()
		}
		c.mu.Unlock()
		c.m.ctr.bytesSent.Add(space)
		written += int(space)
		p = p[space:]
	}
	return written, nil
}

// writeErr is why Write cannot go on (c.mu held).
func (c *Conn) writeErr() error {
	switch {
	case c.err != nil:
		return c.err
	case c.closed:
		return net.ErrClosed
	case c.finQueued:
		return fmt.Errorf("stream: write after CloseWrite")
	}
	return nil
}

func (c *Conn) errNow() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// waitOr is wait that also wakes when ch closes (a nil ch never does).
func (c *Conn) waitOr(deadline time.Time, ch <-chan struct{}) error {
	changed := c.changed
	var timer <-chan time.Time
	if !deadline.IsZero() {
		d := time.Until(deadline)
		if d <= 0 {
			return os.ErrDeadlineExceeded
		}
		t := time.NewTimer(d)
		defer t.Stop()
		timer = t.C
	}
	c.mu.Unlock()
	defer c.mu.Lock()
	select {
	case <-changed:
	case <-ch:
	case <-timer:
		return os.ErrDeadlineExceeded
	}
	return nil
}

// reap releases the send window behind the WRITEs that completed, in
// order (c.mu held). A failed WRITE fails the stream.
func (c *Conn) reap() {
	n := 0
	for _, ch := range c.inflight {
		select {
		case <-ch.p.Done():
		default:
			goto out
		}
		if err := ch.p.Err(); err != nil {
			c.failUndeliveredLocked(err)
			return
		}
		c.released = ch.end
		n++
	}
out:
	if n > 0 {
		c.inflight = append(c.inflight[:0], c.inflight[n:]...)
		c.broadcast()
	}
}

// CloseWrite sends FIN once the bytes written so far are queued: the peer
// reads them, then io.EOF. Reading goes on.
//
// It does not wait for a Write blocked on the window: that Write fails
// (net.ErrClosed for Close), and FIN's total counts every byte a Write had
// already handed to the flow. The receiver reads to that total before its
// EOF, whatever order the FIN and those bytes arrive in.
func (c *Conn) CloseWrite() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return c.err
	}
	if !c.finQueued {
		c.finQueued, c.ctlDirty = true, true
		c.broadcast()
		c.poke()
	}
	return nil
}

// Close closes both directions: FIN goes after the data written, the
// stream is torn down once the peer has finished too (or after Linger).
// Unread data, or data arriving later, resets the stream, as in TCP.
func (c *Conn) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed, c.closedAt = true, time.Now()
	c.readShut = true
	switch {
	case c.err != nil:
	case c.consumed < c.rcvd:
		c.resetLocked(CodeClosed, errors.New("closed with unread data"))
	case !c.finQueued:
		c.finQueued, c.ctlDirty = true, true
	}
	c.broadcast()
	c.poke()
	return nil
}

// Reset aborts the stream: the peer's Read and Write fail with a
// *ResetError (errors.Is ErrReset), unsent data is dropped.
func (c *Conn) Reset() error {
	c.abort(CodeAborted, nil, true)
	return nil
}

// ResetCode is Reset with the application's own reason, a code from
// CodeApplication up, which the peer's ResetError carries.
func (c *Conn) ResetCode(code uint32) error {
	if code < CodeApplication {
		return fmt.Errorf("stream: reset code %d below CodeApplication", code)
	}
	c.abort(code, nil, true)
	return nil
}

// abort resets the stream with code and tears it down; tell sends the
// reset to the peer.
func (c *Conn) abort(code uint32, cause error, tell bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	c.readShut = true
	if c.err == nil {
		if tell {
			c.resetLocked(code, cause)
		} else {
			c.failLocked(&ResetError{Code: code, Cause: cause})
		}
	}
	c.broadcast()
	c.poke()
}

// resetLocked fails the stream and has the worker tell the peer (c.mu held).
func (c *Conn) resetLocked(code uint32, cause error) {
	if c.err != nil {
		return
	}
	c.m.ctr.resets.Add(1)
	c.err = &ResetError{Code: code, Cause: cause}
	c.resetOut, c.ctlDirty = code, true
	c.estOnce.Do(func() { close(c.established) })
	c.broadcast()
	c.poke()
	if !c.running {
		// No route to tell the peer on yet: tear down at once.
		c.teardownLocked()
	}
}

// fail fails the stream without telling the peer (the route is gone or the
// peer broke the protocol).
func (c *Conn) fail(err *ResetError) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.failLocked(err)
}

// failUndeliveredLocked fails the stream on a WRITE its flow could not
// deliver (c.mu held). A peer that resets the stream tears it down only
// once its reset record has landed in this end's slot, so a WRITE refused
// by the torn-down stream can complete before this end has read that
// record: the slot is read first, and the peer's reset, when it is there,
// is the reason the application sees.
func (c *Conn) failUndeliveredLocked(cause error) {
	if c.err == nil && c.peer.Flags&flagAccept != 0 {
		_ = c.control()
	}
	c.failLocked(&ResetError{Code: CodeUnreachable, Cause: cause})
}

func (c *Conn) failLocked(err *ResetError) {
	if c.err == nil {
		c.m.ctr.resets.Add(1)
		c.err = err
		if err.Code == CodeProtocol {
			c.resetOut, c.ctlDirty = CodeProtocol, true
		}
	}
	c.estOnce.Do(func() { close(c.established) })
	c.broadcast()
	c.poke()
	if !c.running || c.resetOut == 0 {
		c.teardownLocked()
	}
}

// teardownLocked releases the stream (c.mu held): its flow closes, its
// key keeps a tombstone for Linger.
func (c *Conn) teardownLocked() {
	select {
	case <-c.done:
		return
	default:
	}
	close(c.done)
	c.cancel()
	if c.err == nil {
		c.err = net.ErrClosed
	}
	c.broadcast()
	out := c.out
	go func() {
		if out != nil {
			out.Close()
		}
		c.m.forget(c)
	}()
}

// run sends this end's records and tears the stream down when both ends
// are finished: the worker of one stream.
func (c *Conn) run() {
	var lastCtl *host.Pending
	var watch <-chan struct{}         // a completion the worker waits for
	var slots [ctlSlots]*host.Pending // the record last written to each slot
	next := 0                         // the slot the next record goes to
	tick := min(c.m.cfg.Linger, c.m.cfg.KeepAlive)
	if c.m.cfg.KeepAlive < 0 {
		tick = c.m.cfg.Linger
	}
	timer := time.NewTimer(tick)
	defer timer.Stop()
	for {
		ticked := false
		select {
		case <-c.done:
			return
		case <-c.kick:
		case <-watch:
		case <-timer.C:
			timer.Reset(tick)
			ticked = true
		}
		if lastCtl != nil && isDone(lastCtl) && lastCtl.Err() != nil {
			// A record could not reach the peer: its flow failed.
			c.mu.Lock()
			c.failUndeliveredLocked(lastCtl.Err())
			c.mu.Unlock()
			lastCtl = nil
		}
		c.mu.Lock()
		c.reap()
		if c.peer.Flags&flagAccept == 0 && c.err == nil && time.Since(c.created) >= c.m.cfg.Linger {
			// An accepted stream whose dialer never confirmed it (it
			// gave up, or died) is not kept.
			c.resetLocked(CodeAborted, errors.New("the dialer did not confirm the stream within the linger time"))
		}
		if ticked && c.m.cfg.KeepAlive > 0 && c.err == nil && (lastCtl == nil || isDone(lastCtl)) {
			// Keepalive: a record in flight finds out whether the
			// peer is still there.
			c.ctlDirty = true
		}
		if c.finQueued && !c.finSent && c.err == nil {
			// No Write adds to c.sent once finQueued is set, so FinAt
			// is exact; a data WRITE still being handed to the flow may
			// follow the record, and the receiver waits for it.
			c.finSent, c.ctlDirty = true, true
		}
		var rec []byte
		var slotBusy <-chan struct{}
		if c.ctlDirty && slots[next] != nil && !isDone(slots[next]) {
			// The record this slot holds may still land: writing over it
			// now could let it land over the newer one.
			slotBusy = slots[next].Done()
		} else if c.ctlDirty {
			c.ctlDirty = false
			r := record{Flags: flagAccept, RingKey: c.key, Window: uint32(c.win), Consumed: c.consumed, Answers: c.answers}
			if c.finSent {
				r.Flags |= flagFin
				r.FinAt = c.sent
			}
			if c.resetOut != 0 {
				r.Flags |= flagReset
				r.Code = c.resetOut
			}
			c.told = c.consumed
			rec = appendRecord(make([]byte, 0, slotSize), r)
		}
		out, key, failed := c.out, c.peerKey, c.err != nil
		c.mu.Unlock()
		if rec != nil {
			ctx, cancel := context.WithTimeout(c.bg, 30*time.Second)
			p, err := out.Write(ctx, key, uint64(next*slotSize), rec)
			cancel()
			if err != nil {
				c.fail(&ResetError{Code: CodeUnreachable, Cause: err})
				continue
			}
			lastCtl, slots[next] = p, p
			next = (next + 1) % ctlSlots
		}
		if slotBusy != nil {
			// Send the record (a reset's too) once its slot is free.
			watch = slotBusy
			continue
		}
		if failed {
			// The reset record is queued: wait for it to arrive (or
			// give up), then release the stream.
			if lastCtl != nil {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				_ = lastCtl.Wait(ctx)
				cancel()
			}
			c.mu.Lock()
			c.teardownLocked()
			c.mu.Unlock()
			return
		}
		watch = c.maybeFinish(lastCtl)
	}
}

// maybeFinish tears the stream down once the application closed it, every
// byte sent is in the peer's memory, the FIN with it, and the peer's FIN
// has been read; or resets it once the peer has had Linger to finish. It
// returns the completion to wait for before looking again.
func (c *Conn) maybeFinish(lastCtl *host.Pending) <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.closed {
		return nil
	}
	if time.Since(c.closedAt) >= c.m.cfg.Linger {
		c.resetLocked(CodeAborted, errors.New("peer did not finish within the linger time"))
		return nil
	}
	if len(c.inflight) > 0 {
		return c.inflight[0].p.Done()
	}
	if !c.finSent || lastCtl == nil {
		return nil
	}
	if !isDone(lastCtl) {
		return lastCtl.Done()
	}
	if c.peer.Flags&flagFin != 0 && c.rcvd == c.peer.FinAt {
		c.teardownLocked()
	}
	return nil
}

func isDone(p *host.Pending) bool {
	select {
	case <-p.Done():
		return true
	default:
		return false
	}
}

// LocalAddr returns this end's address (port 0 for a dialer).
func (c *Conn) LocalAddr() net.Addr { return c.local }

// RemoteAddr returns the peer's address (port 0 for the dialer's end).
func (c *Conn) RemoteAddr() net.Addr { return c.remote }

// SetDeadline sets both deadlines.
func (c *Conn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rdl, c.wdl = t, t
	c.broadcast()
	return nil
}

// SetReadDeadline bounds Read: past it, Read fails with
// os.ErrDeadlineExceeded (a net.Error whose Timeout is true).
func (c *Conn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rdl = t
	c.broadcast()
	return nil
}

// SetWriteDeadline bounds Write's wait for window.
func (c *Conn) SetWriteDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.wdl = t
	c.broadcast()
	return nil
}

var _ net.Conn = (*Conn)(nil)

// Route returns the local gateway this end's flow to the peer goes
// through now (invalid before the flow opens or while it has none).
func (c *Conn) Route() netip.AddrPort {
	c.mu.Lock()
	out := c.out
	c.mu.Unlock()
	if out == nil {
		return netip.AddrPort{}
	}
	return out.Gateway()
}

// ConnStats count one stream end's bytes.
type ConnStats struct {
	// Sent: bytes Write handed to the flow; Acked: of those, the bytes in
	// the peer's memory end to end; Received: bytes in this end's ring;
	// Read: bytes the application read.
	Sent, Acked, Received, Read uint64
}

// Stats returns a snapshot of the stream's counters.
func (c *Conn) Stats() ConnStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return ConnStats{Sent: c.sent, Acked: c.released, Received: c.rcvd, Read: c.consumed}
}
