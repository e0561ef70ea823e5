//go:build linux

package host

import (
	"context"
	"fmt"
	"time"

	"github.com/mrgw/mrgw/flowctl"
	"github.com/mrgw/mrgw/metaroce"
)

// rxFlowIdle is how long the dedup state of an incoming flow that has no
// stream left is kept: long enough for any failover to resume it.
const rxFlowIdle = 10 * time.Minute

// rxSweepEvery is how often rxTick looks for idle incoming flows.
const rxSweepEvery = time.Second

// rxState is the destination side, on the owner goroutine.
type rxState struct {
	flows    map[uint64]*rxFlow
	streams  map[streamKey]*rxFlow
	overflow []queued // completions waiting for room in Received, in order
	ovHead   int
	posted   map[uint64][]byte // receive buffers posted through PostRecv, not yet filled
	// lastSweep is when rxTick last looked for idle flows.
	lastSweep time.Duration
}

func (r *rxState) init() {
	r.flows = map[uint64]*rxFlow{}
	r.streams = map[streamKey]*rxFlow{}
	r.posted = map[uint64][]byte{}
}

// rxFlow is an incoming flow: its identity, the connection DONE goes back
// on, and which sequences were already reported.
type rxFlow struct {
	id                     uint64
	srcRegion, srcEndpoint string
	conn                   *metaroce.Conn // of the latest OPEN
	streams                int            // live (connection, stream) bindings
	idleSince              time.Duration
	seen                   dedup
	queued                 map[uint64]bool // completed, waiting in overflow
	closed                 bool
}

type queued struct {
	rf *rxFlow
	d  Delivery
}

// rxOpen answers an OPEN from a gateway: the stream is resumed at the
// flow's resume point before OPEN_OK, so the first data packet finds it
// ready.
func (h *Host) rxOpen(now time.Duration, c *metaroce.Conn, m *flowctl.Msg) {
	refuse := func(code flowctl.Code, reason string) {
		h.sendCtl(c, &flowctl.Msg{Type: flowctl.OpenErr, Flow: m.Flow, Code: code, Reason: reason})
	}
	rx := &h.o.rx
	k := streamKey{c, m.Stream}
	rf := rx.flows[m.Flow]
	switch {
	case m.DstEndpoint != h.cfg.Name || (m.DstRegion != "" && m.DstRegion != h.cfg.Region):
		refuse(flowctl.CodeUnknownEndpoint, fmt.Sprintf("this host is %s/%s", h.cfg.Region, h.cfg.Name))
		return
	case h.o.closed:
		refuse(flowctl.CodeDraining, "host closing")
		return
	case m.Stream == flowctl.ControlStream || rx.streams[k] != nil:
		refuse(flowctl.CodeBadRequest, fmt.Sprintf("stream %d in use", m.Stream))
		return
	case rf != nil && (rf.srcRegion != m.SrcRegion || rf.srcEndpoint != m.SrcEndpoint):
		refuse(flowctl.CodeBadRequest, "flow id in use by another source")
		return
	}
	// A message this host already reported is never placed again: the
	// stream starts after the last one, so that a copy re-sent from an
	// older resume point cannot overwrite memory the application took
	// back after its Delivery (a ring the source has filled anew).
	resume := m.Resume
	if rf != nil && rf.seen.below > resume {
		resume = rf.seen.below
		// The copies the source re-sends below resume are dropped
		// unplaced: count them as the duplicates they are.
		h.ctr.duplicates.Add(resume - m.Resume)
	}
	if err := c.ResumeStream(m.Stream, resume); err != nil {
		refuse(flowctl.CodeBadRequest, err.Error())
		return
	}
	if rf != nil && rf.conn != nil && rf.conn != c && !rf.conn.Closed() {
		// The flow re-opened through another gateway of this region. The
		// one it came through before may still hold its old instance:
		// gateways place flows by their own load, so the source's new
		// gateway can pick another destination gateway than its old one
		// did, and the old source gateway, which lost only its host (the
		// host's connection to it dropped), dropped the flow without a
		// word downstream. That instance would keep its credit
		// reservation until its WAN connection closed. RESET ends it
		// there; the gateway passes it upstream, where the flow's current
		// instance (if any) takes another route and ignores it.
		h.sendCtl(rf.conn, &flowctl.Msg{Type: flowctl.Reset, Flow: m.Flow, Code: flowctl.CodeRouteLost, Reason: "the flow re-opened through another gateway"})
	}
	if rf == nil {
		// Messages below the resume point completed before (this host
		// may have restarted since): they are not reported again.
		rf = &rxFlow{id: m.Flow, srcRegion: m.SrcRegion, srcEndpoint: m.SrcEndpoint,
			seen: dedup{below: m.Resume}, queued: map[uint64]bool{}}
		rx.flows[m.Flow] = rf
	}
	rf.conn = c
	rf.streams++
	rx.streams[k] = rf
	h.sendCtl(c, &flowctl.Msg{Type: flowctl.OpenOK, Flow: m.Flow, Credit: h.cfg.ReceiveCredit})
	if rf.seen.below > m.Resume {
		// The source re-sends from an older point than what completed
		// here: tell it at once instead of waiting for the duplicates.
		h.sendDone(rf)
	}
}

// rxComplete handles a message of an incoming flow that completed in
// memory: it is reported once per (flow, sequence), and DONE answers it,
// duplicates included.
func (h *Host) rxComplete(now time.Duration, ev metaroce.Event) {
	rx := &h.o.rx
	rf := rx.streams[streamKey{ev.Conn, ev.Stream}]
	if rf == nil {
		h.log.Debug("host: message on an unknown stream", "stream", ev.Stream, "seq", ev.Seq)
		return
	}
	rf.idleSince = now
	if ev.Err != nil {
		// Refused here (unknown key, out of bounds, no posted buffer):
		// sending it again would fail the same way, so the source must
		// fail the flow, not re-route it.
		h.sendCtl(rf.conn, &flowctl.Msg{Type: flowctl.Reset, Flow: rf.id, Code: flowctl.CodeBadRequest,
			Reason: fmt.Sprintf("message %d refused: %v", ev.Seq, ev.Err)})
		return
	}
	if rf.seen.has(ev.Seq) || rf.queued[ev.Seq] {
		h.ctr.duplicates.Add(1)
		h.sendDone(rf)
		return
	}
	if !rf.seen.room(ev.Seq) {
		// Only a source far outside its credit gets here; not reporting
		// (and not acknowledging) keeps exactly-once.
		h.log.Warn("host: dedup window full, message not reported", "flow", flowctl.FlowID(rf.id), "seq", ev.Seq)
		return
	}
	if ev.Op == metaroce.OpSend {
		delete(rx.posted, ev.Addr)
	}
	d := Delivery{Flow: rf.id, SrcRegion: rf.srcRegion, SrcEndpoint: rf.srcEndpoint, Seq: ev.Seq,
		Op: ev.Op, Key: ev.Key, Addr: ev.Addr, Len: ev.Len}
	h.drainOverflow()
	if rx.ovHead == len(rx.overflow) {
		select {
		case h.recv <- d:
			h.delivered(rf, d)
			return
		default:
		}
	}
	// The application is behind: the completion waits, and so does its
	// DONE, which holds the source back through its credit.
	rx.overflow = append(rx.overflow, queued{rf, d})
	rf.queued[d.Seq] = true
}

// delivered records that d reached the application and acknowledges it.
func (h *Host) delivered(rf *rxFlow, d Delivery) {
	h.ctr.delivered.Add(1)
	h.ctr.deliveredBytes.Add(d.Len)
	before := rf.seen.below
	rf.seen.add(d.Seq)
	if rf.seen.below != before {
		h.sendDone(rf)
	}
}

// drainOverflow moves waiting completions into Received while it has room.
func (h *Host) drainOverflow() {
	rx := &h.o.rx
	for rx.ovHead < len(rx.overflow) {
		q := rx.overflow[rx.ovHead]
		select {
		case h.recv <- q.d:
		default:
			return
		}
		rx.overflow[rx.ovHead] = queued{}
		rx.ovHead++
		delete(q.rf.queued, q.d.Seq)
		h.delivered(q.rf, q.d)
	}
	rx.overflow, rx.ovHead = rx.overflow[:0], 0
}

// sendDone reports the flow's completion watermark on the connection its
// latest OPEN came by.
func (h *Host) sendDone(rf *rxFlow) {
	if rf.closed || rf.conn == nil {
		return
	}
	if h.sendCtl(rf.conn, &flowctl.Msg{Type: flowctl.Done, Flow: rf.id, Below: rf.seen.below}) {
		h.ctr.doneSnt.Add(1)
	}
}

// rxClose forgets a flow its source closed.
func (h *Host) rxClose(flow uint64) {
	rx := &h.o.rx
	rf := rx.flows[flow]
	if rf == nil {
		return
	}
	rf.closed = true
	delete(rx.flows, flow)
	for k, v := range rx.streams {
		if v == rf {
			delete(rx.streams, k)
		}
	}
}

// rxConnClosed drops the stream bindings of a closed connection; the
// flows' dedup state stays, for the failover that follows.
func (h *Host) rxConnClosed(c *metaroce.Conn) {
	rx := &h.o.rx
	for k, rf := range rx.streams {
		if k.c == c {
			delete(rx.streams, k)
			rf.streams--
			rf.idleSince = h.o.now
			if rf.conn == c {
				rf.conn = nil
			}
		}
	}
}

func (h *Host) rxTick(now time.Duration) {
	h.drainOverflow()
	// The idle sweep walks every incoming flow (10,000 at the receiving
	// host of mrgw-lab loadtest connections): once per rxSweepEvery, not every
	// tick; an idle flow's state is kept for minutes anyway.
	if now-h.o.rx.lastSweep < rxSweepEvery {
		return
	}
	h.o.rx.lastSweep = now
	for id, rf := range h.o.rx.flows {
		if rf.streams == 0 && now-rf.idleSince > rxFlowIdle && len(rf.queued) == 0 {
			delete(h.o.rx.flows, id)
		}
	}
}

// PostRecv posts buf to receive the SEND tagged tag, on every gateway
// connection (a SEND may come through either gateway, and after a failover
// through the other one). metaroce cannot withdraw a posted buffer, so the
// postings on the connections the SEND did not use stay: use each tag
// once. Read buf after the SEND's Delivery.
func (h *Host) PostRecv(ctx context.Context, tag uint64, buf []byte) error {
	var err error
	if cerr := h.call(ctx, func(time.Duration) {
		if _, ok := h.o.rx.posted[tag]; ok {
			err = metaroce.ErrDuplicateTag
			return
		}
		h.o.rx.posted[tag] = buf
		for _, g := range h.o.gws {
			if g.conn != nil && !g.conn.Closed() {
				_ = g.conn.PostRecv(tag, buf)
			}
		}
	}); cerr != nil {
		return cerr
	}
	return err
}

// postAll posts every buffer not yet filled on a new connection.
func (h *Host) postAll(c *metaroce.Conn) {
	for tag, buf := range h.o.rx.posted {
		_ = c.PostRecv(tag, buf)
	}
}
