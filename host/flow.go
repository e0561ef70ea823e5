//go:build linux

package host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"strings"
	"time"

	"github.com/mrgw/mrgw/flowctl"
	"github.com/mrgw/mrgw/metaroce"
)

// FlowOptions tune a flow.
type FlowOptions struct {
	// Class is the scheduling class the gateways weigh the flow by.
	Class string
}

type flowState uint8

const (
	flowWaiting flowState = iota // no route: retryAt says when to try
	flowOpening                  // OPEN sent on (gw, stream)
	flowOpen                     // OPEN_OK received: data flows
	flowFailed
	flowClosed
)

// Flow is an outgoing flow from this host to one endpoint in another
// region. Its methods are safe for concurrent use; messages are numbered in
// the order Write and Send queue them.
type Flow struct {
	h                             *Host
	id                            uint64
	dstRegion, dstEndpoint, class string

	// Owner goroutine only.
	state        flowState
	opened       bool       // OPEN_OK seen at least once
	openRes      chan error // the first open's outcome (buffered)
	gw           *gateway
	conn         *metaroce.Conn
	stream       uint32
	credit       uint64
	nextSeq      uint64 // next sequence to assign
	doneBelow    uint64 // every sequence below is DONE end to end
	submitNext   uint64 // next sequence to hand to the current stream
	outstanding  uint64 // bytes not DONE (each message counts at least 1)
	maxOutstand  uint64
	segs         []*seg // held segments, in sequence order, from segs[head]
	head         int
	room         signal // fires when outstanding drops or the flow ends
	err          error  // terminal error
	lostAt       time.Duration
	goneAt       time.Duration // first unknown-endpoint refusal in a row, if gone
	gone         bool
	lastErr      error
	retryAt      time.Duration
	openDeadline time.Duration
	attempt      int
	avoid        *gateway
	// The flow's entry in the host's timer queue (flowTimers).
	timerArmed bool
	timerAt    time.Duration
	timerGen   uint64
}

// seg is one segment: one flow sequence, one hop message per submission.
type seg struct {
	seq  uint64
	op   metaroce.Op
	key  uint32
	addr uint64
	data []byte
	pend *Pending
	done bool // DONE end to end
	// The submission on a hop stream that may still read data; nil once
	// that stream completed it, failed it or was abandoned.
	rm       *metaroce.RelayMessage
	rmConn   *metaroce.Conn
	rmStream uint32
}

func (s *seg) cost() uint64 { return max(uint64(len(s.data)), 1) }

// maxSegment caps a segment whatever the credit (bounds a relayed
// message's chunk bookkeeping).
const maxSegment = 1 << 30

// OpenFlow opens a flow to endpoint dstEndpoint of region dstRegion
// through a live gateway and waits for OPEN_OK. A refusal returns a
// *flowctl.Error (errors.As) naming the code, for example unknown endpoint
// or region unreachable; no answer within OpenTimeout returns
// ErrOpenTimeout.
func (h *Host) OpenFlow(ctx context.Context, dstRegion, dstEndpoint string, opts FlowOptions) (*Flow, error) {
	for _, s := range []string{dstRegion, dstEndpoint} {
		if s == "" || len(s) > 255 {
			return nil, fmt.Errorf("host: destination region and endpoint must be 1..255 bytes")
		}
	}
	if len(opts.Class) > 255 {
		return nil, fmt.Errorf("host: class longer than 255 bytes")
	}
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, h.cfg.OpenTimeout)
	defer cancel()
	f := &Flow{h: h, dstRegion: dstRegion, dstEndpoint: dstEndpoint, class: opts.Class,
		openRes: make(chan error, 1), lostAt: -1}
	if err := h.call(ctx, func(now time.Duration) {
		if h.o.closed {
			f.openRes <- ErrClosed
			return
		}
		for f.id == 0 || h.o.flows[f.id] != nil {
			f.id = rand.Uint64()
		}
		h.o.flows[f.id] = f
		f.tryOpen(now)
	}); err != nil {
		return nil, err
	}
	select {
	case err := <-f.openRes:
		if err != nil {
			return nil, err
		}
		h.ctr.flowsOpened.Add(1)
		return f, nil
	case <-ctx.Done():
	}
	// Abandon the attempt, unless it succeeded meanwhile.
	opened := false
	actx, acancel := context.WithTimeout(context.Background(), time.Second)
	defer acancel()
	_ = h.call(actx, func(now time.Duration) {
		if f.opened && f.err == nil {
			opened = true
			return
		}
		f.finish(now, ErrOpenTimeout, flowFailed, true)
	})
	if opened {
		h.ctr.flowsOpened.Add(1)
		return f, nil
	}
	if parent.Err() != nil {
		return nil, parent.Err()
	}
	return nil, fmt.Errorf("%w: %s/%s after %v", ErrOpenTimeout, dstRegion, dstEndpoint, h.cfg.OpenTimeout)
}

// ID returns the flow id (chosen at random, end to end).
func (f *Flow) ID() uint64 { return f.id }

// Gateway returns the gateway the flow currently goes through (invalid
// while it has none).
func (f *Flow) Gateway() netip.AddrPort {
	var a netip.AddrPort
	_ = f.h.call(context.Background(), func(time.Duration) {
		if f.gw != nil {
			a = f.gw.addr
		}
	})
	return a
}

// Credit returns the credit of the flow's current route.
func (f *Flow) Credit() uint64 {
	var c uint64
	_ = f.h.call(context.Background(), func(time.Duration) { c = f.credit })
	return c
}

// Write WRITEs data to (key, addr) of the destination's memory. A message
// larger than half the credit is cut into segments with consecutive flow
// sequences, each WRITE at its own address. Write blocks while the bytes
// not yet DONE would exceed the credit, until ctx ends. data must stay
// untouched until the Pending completes. On error, a non-nil Pending
// covers the segments already queued: wait for it before reusing data.
func (f *Flow) Write(ctx context.Context, key uint32, addr uint64, data []byte) (*Pending, error) {
	return f.post(ctx, metaroce.OpWrite, key, addr, data)
}

// Send SENDs data to the buffer the destination posted with tag
// (Host.PostRecv). A SEND lands in one buffer, so it is never segmented:
// it must fit in one segment (half the flow's credit), else
// ErrSendTooLarge.
func (f *Flow) Send(ctx context.Context, tag uint64, data []byte) (*Pending, error) {
	return f.post(ctx, metaroce.OpSend, 0, tag, data)
}

func (f *Flow) post(ctx context.Context, op metaroce.Op, key uint32, addr uint64, data []byte) (*Pending, error) {
	h := f.h
	p := &Pending{done: make(chan struct{})}
	off := 0
	var err error
	for {
		var wait <-chan struct{}
		finished := false
		if err = ctx.Err(); err != nil {
			break
		}
		// Not ctx: a Call abandoned on ctx may still run its function
		// later, on the owner goroutine, while this one reads what it
		// writes (err, off, finished, p). The function never blocks;
		// ctx bounds the wait for credit below.
		cerr := h.call(context.Background(), func(now time.Duration) {
			if f.err != nil {
				err = f.err
				return
			}
			size := f.segSize()
			if op == metaroce.OpSend && uint64(len(data)) > size {
				err = fmt.Errorf("%w: %d bytes, segment %d", ErrSendTooLarge, len(data), size)
				return
			}
			for {
				n := int(min(size, uint64(len(data)-off)))
				cost := max(uint64(n), 1)
				if f.outstanding > 0 && (f.outstanding+cost > f.credit || f.nextSeq-f.doneBelow >= uint64(h.cfg.MaxFlowMessages)) {
					wait = f.room.wait()
					return
				}
				f.enqueue(now, &seg{op: op, key: key, addr: addr + uint64(off), data: data[off : off+n], pend: p})
				off += n
				if off >= len(data) {
					p.sealed = true
					finished = true
					return
				}
			}
		})
		if cerr != nil {
			err = cerr
		}
		if finished {
			return p, nil
		}
		if err == nil {
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				err = ctx.Err()
			}
		}
		break
	}
	if p.n == 0 {
		return nil, err
	}
	// Segments were queued: the Pending completes when they do.
	_ = h.ep.Do(context.Background(), func(time.Duration, *metaroce.Endpoint) {
		p.sealed = true
		if p.remaining == 0 {
			p.resolve(p.err)
		}
	})
	return p, err
}

// segSize is the largest segment: half the credit (docs/GATEWAY.md), so
// that one segment can be in flight while the next one is sent.
func (f *Flow) segSize() uint64 {
	return min(max(f.credit/2, 1), maxSegment)
}

// Close ends the flow: CLOSE goes to the gateway, and messages not yet
// complete fail with ErrFlowClosed (wait for their Pendings first to
// finish gracefully).
func (f *Flow) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	err := f.h.call(ctx, func(now time.Duration) { f.finish(now, ErrFlowClosed, flowClosed, true) })
	if errors.Is(err, ErrClosed) {
		return nil
	}
	return err
}

// closeLocked closes the flow on the owner goroutine.
func (f *Flow) closeLocked(now time.Duration, err error, sendClose bool) {
	f.finish(now, err, flowClosed, sendClose)
}

// enqueue assigns the next sequence to s and hands it to the stream.
func (f *Flow) enqueue(now time.Duration, s *seg) {
	s.seq = f.nextSeq
	f.nextSeq++
	f.segs = append(f.segs, s)
	f.outstanding += s.cost()
	f.maxOutstand = max(f.maxOutstand, f.outstanding)
	p := s.pend
	if p.n == 0 {
		p.first = s.seq
	}
	p.n++
	p.remaining++
	f.pump(now)
}

// seg returns the held segment with sequence seq, or nil.
func (f *Flow) seg(seq uint64) *seg {
	if f.head >= len(f.segs) {
		return nil
	}
	base := f.segs[f.head].seq
	if seq < base || seq >= f.nextSeq {
		return nil
	}
	return f.segs[f.head+int(seq-base)]
}

// pump hands every queued segment not yet on the current stream to it, in
// order and with its own flow sequence: a stream resumed at R receives R,
// R+1, ... whatever happened on the stream before.
func (f *Flow) pump(now time.Duration) {
	delete(f.h.o.blocked, f)
	if f.state != flowOpen {
		return
	}
	mtu := f.conn.MTU()
	for f.submitNext < f.nextSeq {
		s := f.seg(f.submitNext)
		rm, err := f.conn.WriteRelay(f.stream, s.seq, s.op, s.key, s.addr, uint64(len(s.data)), nil)
		if err != nil {
			// Queue full: the tick retries (runTimers pumps the blocked
			// flows only). Closed: EventClosed fails over.
			f.h.o.blocked[f] = struct{}{}
			return
		}
		for off := 0; ; off += mtu {
			end := min(off+mtu, len(s.data))
			if err := rm.Supply(uint64(off), s.data[off:end]); err != nil {
				// Cannot happen with chunks cut at the connection's MTU.
				f.h.log.Error("host: supply", "flow", flowctl.FlowID(f.id), "seq", s.seq, "err", err)
				rm.Fail(err)
				f.reroute(now, err, nil)
				return
			}
			if end >= len(s.data) {
				break
			}
		}
		s.rm, s.rmConn, s.rmStream = rm, f.conn, f.stream
		f.submitNext++
	}
}

// backoff is the delay before attempt n (n ≥ 1) to open the flow again.
func (f *Flow) backoff() time.Duration {
	d := f.h.cfg.ReconnectMin << min(f.attempt, 16)
	return min(d, f.h.cfg.ReconnectMax)
}

// tryOpen sends OPEN through a live gateway, resuming at the oldest
// sequence not yet DONE; with none live it waits and tries again.
func (f *Flow) tryOpen(now time.Duration) {
	h := f.h
	if f.lostAt >= 0 && now-f.lostAt >= h.cfg.FailAfter {
		f.finish(now, f.noRoute(), flowFailed, false)
		return
	}
	if f.gone && now-f.goneAt >= h.cfg.GoneAfter {
		f.finish(now, f.goneErr(f.lastErr), flowFailed, false)
		return
	}
	g := h.pickGateway(f.id, f.attempt, f.avoid)
	if g == nil {
		f.state = flowWaiting
		f.attempt++
		f.retryAt = now + f.backoff()
		f.arm()
		return
	}
	f.use(g)
	f.submitNext = f.doneBelow
	h.o.txByStr[streamKey{f.conn, f.stream}] = f
	ok := h.sendCtl(f.conn, &flowctl.Msg{Type: flowctl.Open, Flow: f.id, Stream: f.stream, Resume: f.doneBelow,
		SrcRegion: h.cfg.Region, SrcEndpoint: h.cfg.Name, DstRegion: f.dstRegion, DstEndpoint: f.dstEndpoint, Class: f.class})
	if !ok {
		f.abandonStream()
		f.state = flowWaiting
		f.attempt++
		f.retryAt = now + f.backoff()
		f.arm()
		return
	}
	f.state = flowOpening
	f.openDeadline = now + h.cfg.OpenTimeout
	f.arm()
	f.trim()
}

func (f *Flow) noRoute() error {
	if f.lastErr == nil {
		return fmt.Errorf("%w for %v", ErrNoRoute, f.h.cfg.FailAfter)
	}
	return fmt.Errorf("%w for %v: %w", ErrNoRoute, f.h.cfg.FailAfter, f.lastErr)
}

// goneErr is the error of a flow whose destination no gateway of its region
// knows.
func (f *Flow) goneErr(cause error) error {
	return &goneError{region: f.dstRegion, endpoint: f.dstEndpoint, cause: cause}
}

// goneError says that the destination endpoint is registered nowhere and
// what to do about it.
type goneError struct {
	region, endpoint string
	cause            error
}

func (e *goneError) Error() string {
	return fmt.Sprintf("host: %s/%s is not registered at any gateway of %s: the receiver exited or never started; start it, or check the endpoint name",
		e.region, e.endpoint, e.region)
}

func (e *goneError) Is(target error) bool { return target == ErrEndpointGone }
func (e *goneError) Unwrap() error        { return e.cause }

// refusedError says that the destination refused a message for good
// (RESET, bad request), and what to do about it.
type refusedError struct {
	region, endpoint string
	cause            *flowctl.Error
}

func (e *refusedError) Error() string {
	what := "check what the sender writes"
	switch {
	case strings.Contains(e.cause.Reason, metaroce.ErrUnknownKey.Error()):
		what = "the receiver deregistered that memory or exited; check the memory key the sender writes to"
	case strings.Contains(e.cause.Reason, metaroce.ErrOutOfBounds.Error()):
		what = "the write reaches outside the receiver's memory region; check the address and length"
	}
	return fmt.Sprintf("host: %s/%s refused the flow (%v): %s", e.region, e.endpoint, e.cause, what)
}

func (e *refusedError) Is(target error) bool { return target == ErrMessageRefused }
func (e *refusedError) Unwrap() error        { return e.cause }

// retryWaiting re-opens every waiting flow now (a gateway became ready).
func (h *Host) retryWaiting(now time.Duration) {
	for _, f := range h.o.flows {
		if f.state == flowWaiting {
			f.retryAt = now
			f.tryOpen(now)
		}
	}
}

// reroute moves the flow off its current stream after a failure and opens
// it again, avoiding avoid when another gateway is live. The first retry
// is immediate; repeated failures back off.
func (f *Flow) reroute(now time.Duration, cause error, avoid *gateway) {
	if f.state == flowFailed || f.state == flowClosed {
		return
	}
	f.abandonStream()
	if f.lostAt < 0 {
		f.lostAt = now
	}
	f.lastErr = cause
	f.avoid = avoid
	if fe := (*flowctl.Error)(nil); !errors.As(cause, &fe) || fe.Code != flowctl.CodeUnknownEndpoint {
		f.gone = false
	}
	f.h.ctr.reopens.Add(1)
	if f.nextSeq > f.doneBelow {
		f.h.ctr.resumedReopens.Add(1)
	}
	// One line per loss of the route; the attempts that follow it are
	// counted (Stats.Reopens) and logged at debug level.
	lvl := slog.LevelInfo
	if f.attempt > 0 {
		lvl = slog.LevelDebug
	}
	f.h.log.Log(context.Background(), lvl, "host: re-opening flow", "flow", flowctl.FlowID(f.id), "resume", f.doneBelow, "unfinished", f.nextSeq-f.doneBelow, "cause", cause)
	f.state = flowWaiting
	f.retryAt = now
	if f.attempt > 0 {
		f.retryAt = now + f.backoff()
	}
	f.attempt++
	if f.retryAt <= now {
		f.tryOpen(now)
		return
	}
	f.arm()
}

// use puts the flow on a new stream of g's connection.
func (f *Flow) use(g *gateway) {
	f.gw, f.conn, f.stream = g, g.conn, g.nextStream
	g.flows++
	g.nextStream++
}

// abandonStream stops using the current stream: its submissions are
// failed so that metaroce never reads their data again (the bytes may be
// reused once DONE), and its completions are ignored from now on.
func (f *Flow) abandonStream() {
	if f.conn != nil {
		delete(f.h.o.txByStr, streamKey{f.conn, f.stream})
	}
	if f.gw != nil {
		f.gw.flows--
	}
	for _, s := range f.segs[f.head:] {
		if s.rm != nil {
			s.rm.Fail(errAbandoned)
			s.rm = nil
		}
	}
	f.gw, f.conn = nil, nil
	f.trim()
}

var errAbandoned = errors.New("host: stream abandoned by failover")

func (f *Flow) onOpenOK(now time.Duration, c *metaroce.Conn, m *flowctl.Msg) {
	if f.state != flowOpening || f.conn != c {
		return
	}
	if m.Credit == 0 {
		f.onOpenErr(now, c, &flowctl.Msg{Type: flowctl.OpenErr, Flow: f.id, Code: flowctl.CodeNoCapacity, Reason: "zero credit"})
		return
	}
	f.credit = m.Credit
	f.state = flowOpen
	f.attempt = 0
	f.avoid = nil
	f.gone = false
	if f.outstanding == 0 {
		f.lostAt = -1 // otherwise DONE progress proves the route
	}
	first := !f.opened
	f.opened = true
	f.pump(now)
	f.room.fire()
	if first {
		f.openRes <- nil
	}
}

func (f *Flow) onOpenErr(now time.Duration, c *metaroce.Conn, m *flowctl.Msg) {
	if f.state != flowOpening || f.conn != c {
		return
	}
	ferr := &flowctl.Error{Code: m.Code, Reason: m.Reason}
	if !f.opened {
		var err error = ferr
		if m.Code == flowctl.CodeUnknownEndpoint {
			err = f.goneErr(ferr)
		}
		f.finish(now, err, flowFailed, false)
		return
	}
	if m.Code == flowctl.CodeUnknownEndpoint {
		// The sending gateway asked every gateway of the destination's
		// region. A receiver whose gateway restarted registers again
		// within GoneAfter; one that exited never does.
		if !f.gone {
			f.gone, f.goneAt = true, now
		}
		if now-f.goneAt >= f.h.cfg.GoneAfter {
			f.finish(now, f.goneErr(ferr), flowFailed, false)
			return
		}
	}
	f.reroute(now, ferr, f.gw)
}

func (f *Flow) onReset(now time.Duration, c *metaroce.Conn, m *flowctl.Msg) {
	if f.conn != c || (f.state != flowOpen && f.state != flowOpening) {
		return // about a stream already abandoned
	}
	ferr := &flowctl.Error{Code: m.Code, Reason: m.Reason}
	if m.Code == flowctl.CodeBadRequest {
		// The destination refused a message (unknown key, out of bounds):
		// re-sending it elsewhere would fail the same way.
		f.finish(now, &refusedError{region: f.dstRegion, endpoint: f.dstEndpoint, cause: ferr}, flowFailed, false)
		return
	}
	f.reroute(now, ferr, f.gw)
}

// onDone records end-to-end completion of every sequence below below.
// DONE is trusted whichever connection it came by: it is the
// destination's word.
func (f *Flow) onDone(now time.Duration, below uint64) {
	below = min(below, f.nextSeq)
	if below <= f.doneBelow {
		return
	}
	for seq := f.doneBelow; seq < below; seq++ {
		if s := f.seg(seq); s != nil && !s.done {
			s.done = true
			f.outstanding -= s.cost()
		}
	}
	f.doneBelow = below
	if f.state == flowOpen {
		f.lostAt = -1
	}
	f.trim()
	f.room.fire()
}

// txComplete: the current stream's hop acknowledged (or failed) a
// submission, so metaroce no longer reads its data.
func (h *Host) txComplete(now time.Duration, ev metaroce.Event) {
	f := h.o.txByStr[streamKey{ev.Conn, ev.Stream}]
	if f == nil {
		return
	}
	s := f.seg(ev.Seq)
	if s == nil || s.rm == nil || s.rmConn != ev.Conn || s.rmStream != ev.Stream {
		return
	}
	s.rm = nil
	if ev.Err != nil && !errors.Is(ev.Err, metaroce.ErrClosed) {
		// The gateway refused the message on this hop: it will never be
		// DONE through this stream. Not the destination's word: a gateway
		// refuses data on a stream it no longer relays (torn down by a
		// failover) with metaroce.ErrNotRelayed (an unknown memory key
		// from gateways of earlier releases); the destination's refusal
		// comes as RESET (bad request).
		f.reroute(now, fmt.Errorf("hop refused message %d: %w", ev.Seq, ev.Err), f.gw)
		return
	}
	f.trim()
}

// trim releases the oldest segments that are DONE and no longer read by
// any stream (and, on the current stream, were handed to it: a stream
// resumed at R must see every sequence from R, or its receiver would wait
// for the hole forever).
func (f *Flow) trim() {
	limit := f.doneBelow
	if f.state == flowOpen || f.state == flowOpening {
		limit = min(limit, f.submitNext)
	}
	for f.head < len(f.segs) {
		s := f.segs[f.head]
		if !s.done || s.rm != nil || s.seq >= limit {
			break
		}
		f.segs[f.head] = nil
		f.head++
		f.h.ctr.segsDone.Add(1)
		f.h.ctr.bytesDone.Add(uint64(len(s.data)))
		s.pend.segDone()
	}
	if f.head > 0 && f.head*2 >= len(f.segs) {
		n := copy(f.segs, f.segs[f.head:])
		clear(f.segs[n:])
		f.segs = f.segs[:n]
		f.head = 0
	}
}

// finish ends the flow: every message not yet complete fails with err.
func (f *Flow) finish(now time.Duration, err error, final flowState, sendClose bool) {
	if f.state == flowFailed || f.state == flowClosed {
		return
	}
	if sendClose && f.conn != nil && (f.state == flowOpen || f.state == flowOpening) {
		f.h.sendCtl(f.conn, &flowctl.Msg{Type: flowctl.Close, Flow: f.id})
	}
	f.abandonStream()
	f.state = final
	f.err = err
	f.h.o.timers.cancel(f)
	delete(f.h.o.blocked, f)
	for _, s := range f.segs[f.head:] {
		s.pend.resolve(err)
	}
	clear(f.segs)
	f.segs, f.head = nil, 0
	f.outstanding = 0
	f.room.fire()
	if !f.opened {
		select {
		case f.openRes <- err:
		default:
		}
	}
	delete(f.h.o.flows, f.id)
	if final == flowFailed && f.opened {
		f.h.log.Warn(MsgFlowFailed, "flow", flowctl.FlowID(f.id), "err", err)
	}
}

// MsgFlowFailed is the message of the warning logged when an open flow
// fails; every message pending on the flow fails with the same error, so
// a program that reports those (mrgw host send) may leave the line out.
const MsgFlowFailed = "host: flow failed"

// Pending is the completion of one Write or Send: every segment DONE end to
// end, or an error.
type Pending struct {
	done chan struct{}
	err  error // set before done is closed

	// Owner goroutine only (first and n are final once Write returns).
	first     uint64
	n         int
	remaining int
	sealed    bool // every segment is queued
	resolved  bool
}

func (p *Pending) resolve(err error) {
	if p.resolved {
		return
	}
	p.resolved = true
	p.err = err
	close(p.done)
}

func (p *Pending) segDone() {
	p.remaining--
	if p.remaining == 0 && p.sealed {
		p.resolve(nil)
	}
}

// Wait returns when the message is in the destination's memory end to end
// (nil) or failed (its error), or ctx's error.
func (p *Pending) Wait(ctx context.Context) error {
	select {
	case <-p.done:
		return p.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Done is closed when the message completes or fails.
func (p *Pending) Done() <-chan struct{} { return p.done }

// Err returns the outcome once Done is closed (nil before).
func (p *Pending) Err() error {
	select {
	case <-p.done:
		return p.err
	default:
		return nil
	}
}

// Seqs returns the flow sequences of the message's segments: first, and
// how many.
func (p *Pending) Seqs() (first uint64, n int) { return p.first, p.n }
