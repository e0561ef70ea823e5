//go:build linux

package gateway

import (
	"time"

	"github.com/mrgw/mrgw/config"
	"github.com/mrgw/mrgw/flowctl"
	"github.com/mrgw/mrgw/internal/liveness"
	"github.com/mrgw/mrgw/metaroce"
	"github.com/mrgw/mrgw/metrics"
	"github.com/mrgw/mrgw/region"
)

// Everything in this file runs on the endpoint's owner goroutine: in
// OnEvent, in the sinks (called from inside metaroce's Receive) and in
// functions handed to netio's Do and Call. Nothing here locks or blocks.

// maxTimed bounds the messages per flow whose completion time is being
// measured (mrgw_message_completion_seconds); beyond it a message is
// relayed but not timed.
const maxTimed = 4096

// minGrant is the smallest credit worth granting, in MTUs: less would
// let a flow move one packet per round trip.
const minGrant = 4

// connInfo is the relay's view of one connection.
type connInfo struct {
	c        *metaroce.Conn
	wan      *wanPeer // nil for a host connection
	endpoint string   // host connections: the registered endpoint name
	instance uint64   // the registering host process (flowctl.Msg.Instance)
	// takenOver: another host took the endpoint over; this connection's
	// pings are not answered with "not registered".
	takenOver bool
	up        bool   // established
	dead      bool   // torn down by the relay; later events are ignored
	next      uint32 // next stream id we allocate for sending on c
	// flows by the stream they use on this connection: in (we receive
	// their data on it) and out (we send their data on it).
	in, out map[uint32]*flow
	// The last reweigh's active flows per class and smallest per-flow
	// share (weighOpened); smallest is 0 before the first.
	counts   map[string]int
	smallest float64
	// live watches a WAN peer for silence (watchSilence).
	live liveness.Watch
	// blackHoles is the connection's PMTU black-hole verdicts logged so
	// far, in all and per plane group (watchSilence logs each new one).
	blackHoles      uint64
	groupBlackHoles []uint64
}

type flowState uint8

const (
	flowOpening flowState = iota + 1
	flowOpen
	flowGone
)

// flow is one host flow through this gateway: data arrives on up/upStream
// and leaves on down/downStream.
type flow struct {
	id                   uint64
	up, down             *connInfo
	upStream, downStream uint32
	state                flowState
	outbound             bool // the source host is local (direction out)
	peerRegion           string
	class                string
	resume, below        uint64
	reserved             int64 // credit reserved from the memory budget
	credit               int64 // credit granted upstream
	held                 int64 // bytes of chunks held now
	msgs                 map[uint64]*relayMsg
	// last is msgs[lastSeq], the message the last chunk went to, or nil:
	// a message's chunks come in runs, and a map lookup per chunk was 3%
	// of a relaying gateway's CPU.
	last    *relayMsg
	lastSeq uint64
	opened  time.Duration
	bytes   uint64
	// active: the flow relayed bytes since the last reweigh (or just
	// opened); lastBytes is bytes at that reweigh.
	active    bool
	lastBytes uint64
	// started: when the first byte of each message of an outbound flow
	// reached this gateway, until DONE covers it (at most maxTimed).
	started map[uint64]time.Duration
	release func([]byte)
	// Outbound flows being opened: the host's OPEN and the destination
	// gateways it went to, so that a gateway that does not know the
	// endpoint can be passed over for the region's next one.
	open  *flowctl.Msg
	tried []*connInfo
}

// msg returns the message seq being relayed, or nil.
func (f *flow) msg(seq uint64) *relayMsg {
	if f.last != nil && f.lastSeq == seq {
		return f.last
	}
	m := f.msgs[seq]
	if m != nil {
		f.last, f.lastSeq = m, seq
	}
	return m
}

// forgetMsg drops message seq.
func (f *flow) forgetMsg(seq uint64) {
	if f.last != nil && f.lastSeq == seq {
		f.last = nil
	}
	delete(f.msgs, seq)
}

// relayMsg is one message being relayed: its message on the next hop and,
// when the two hops' MTUs differ, the next hop's chunks being filled.
type relayMsg struct {
	rm       *metaroce.RelayMessage
	parts    map[uint64]*part
	length   uint64
	supplied uint64 // bytes handed to the next hop
}

type part struct {
	buf    []byte
	filled int
}

// relay is the gateway's flow table and buffer pool.
type relay struct {
	g         *Gateway
	conns     map[*metaroce.Conn]*connInfo
	wan       map[*wanPeer]struct{} // the peers that have a WAN connection (wanPeer.conn)
	hosts     map[string]*connInfo  // registered endpoints
	flows     map[uint64]*flow
	hostPeers int
	adm       *admission // LAN admission (admission.go)
	draining  bool

	// Limits and weights (reloadable).
	memLimit, flowCredit int64
	maxFlows             int
	weights              map[string]int
	hostKeys             map[string][]byte // lan.host_keys by id; empty: no host authentication
	defaultClass         string
	ownRegion            string

	reserved, inUse int64
	free            [][]byte // recycled full-size chunk buffers
	bufSize         int

	health healthState // path-health gossip

	// Counters for status and metrics: messages, and payload bytes
	// relayed from local hosts (towards remote regions) and to them.
	completed, refused, resets uint64
	fromHosts, toHosts         uint64
	// detoured counts routes (OPENs and re-opens sent on) that took
	// another gateway than the one the placement rule (route) picks
	// among all those with an established WAN connection: it was
	// gossip-suspect, silent for suspectAfter (pickRoute), or had
	// refused the flow's endpoint (retryOpen). Status.Flows.Detoured.
	detoured uint64
	// inPlace and copied count chunks relayed in the receive buffer they
	// arrived in (ChunkIn) and chunks copied out of it.
	inPlace, copied uint64
}

func newRelay(g *Gateway, cfg *config.Config) *relay {
	r := &relay{
		g: g, conns: map[*metaroce.Conn]*connInfo{}, wan: map[*wanPeer]struct{}{},
		hosts: map[string]*connInfo{}, flows: map[uint64]*flow{},
		ownRegion: cfg.Node.Region, bufSize: cfg.WAN.MTU,
		health: newHealthState(region.DefaultHealthTTL, func() int {
			if g.cluster == nil { // no gossip yet: no reports either
				return 0
			}
			return g.cluster.HealthBound()
		}),
	}
	r.adm = newAdmission(g)
	r.apply(cfg)
	return r
}

// apply takes the live settings of cfg.
func (r *relay) apply(cfg *config.Config) {
	r.memLimit = cfg.Limits.MemoryBytes
	r.flowCredit = cfg.Limits.FlowCreditBytes
	r.maxFlows = cfg.Limits.MaxFlows
	r.hostKeys = config.ParseHostKeys(cfg.LAN.HostKeys)
	r.weights = map[string]int{}
	for _, c := range cfg.Scheduler.Classes {
		r.weights[c.Name] = c.Weight
	}
	r.defaultClass = cfg.Scheduler.DefaultClass
	// Streams already open take their class's new weight; a flow of a
	// class that is gone moves to the default class.
	for _, f := range r.flows {
		if _, ok := r.weights[f.class]; !ok {
			f.class = r.defaultClass
		}
	}
	for p := range r.wan {
		r.reweigh(p.conn)
	}
}

func (r *relay) weight(class string) int {
	if w, ok := r.weights[class]; ok {
		return w
	}
	if w, ok := r.weights[r.defaultClass]; ok {
		return w
	}
	return 1
}

func (r *relay) info(c *metaroce.Conn) *connInfo {
	ci := r.conns[c]
	if ci == nil {
		ci = &connInfo{c: c, next: 1, in: map[uint32]*flow{}, out: map[uint32]*flow{}}
		// The control stream goes first: its messages are one packet
		// each (OPEN, OPEN_OK, DONE, RESET, PING), and at the default
		// weight of 1 it got one packet per round of the round robin in
		// which every flow gets 8 to 1024 (classes.go). After a failover,
		// with the re-opened flows re-sending their windows, an OPEN_OK
		// waited 0.8 s behind them in the chaos scenario, DONE as long.
		c.SetStreamWeight(flowctl.ControlStream, maxStreamWeight)
		if p := r.g.peerByID(c.Peer()); c.Peer() < hostPeerBase && p != nil {
			ci.wan = p
		}
		r.conns[c] = ci
	}
	return ci
}

func (ci *connInfo) peerName() string {
	if ci.wan != nil {
		return ci.wan.name
	}
	return "host:" + ci.endpoint
}

func (r *relay) onEvent(now time.Duration, ev metaroce.Event) {
	switch ev.Kind {
	case metaroce.EventConnected:
		ci := r.info(ev.Conn)
		ci.up = true
		if p := ci.wan; p != nil {
			p.connUp(now, ci)
		}
	case metaroce.EventClosed:
		ci := r.conns[ev.Conn]
		if ci == nil {
			return
		}
		reason := "closed"
		if ev.Err != nil {
			reason = ev.Err.Error()
		}
		r.dropConn(now, ci, reason)
		delete(r.conns, ev.Conn)
	case metaroce.EventSendComplete:
		ci := r.conns[ev.Conn]
		if ci == nil || ev.Stream == flowctl.ControlStream {
			return
		}
		if f := ci.out[ev.Stream]; f != nil {
			f.forgetMsg(ev.Seq)
			if ev.Err != nil && f.state != flowGone {
				// A peer gateway that refuses the message no longer relays
				// the stream: this route cannot deliver it, so the source
				// must re-send it elsewhere (route lost). A destination
				// host that refuses it refused its own memory: anywhere
				// else it fails the same way, so the flow fails (bad
				// request), as the host's own RESET says too; this one
				// goes first, since the host's may arrive after the
				// teardown below and find no flow to follow.
				r.g.log.Debug("relayed message failed", "flow", flowctl.FlowID(f.id), "seq", ev.Seq, "err", ev.Err)
				code, why := flowctl.CodeRouteLost, "next hop refused a message: "
				if ci.wan == nil {
					code, why = flowctl.CodeBadRequest, "destination refused a message: "
				}
				if f.up != nil && !f.up.dead {
					r.sendCtl(f.up, &flowctl.Msg{Type: flowctl.Reset, Flow: f.id, Code: code, Reason: why + ev.Err.Error()})
					r.resets++
				}
				r.teardown(f)
			}
		}
	case metaroce.EventPath:
		ci := r.conns[ev.Conn]
		if ci != nil && ci.wan == nil {
			tr := ev.Transition
			r.g.log.Debug("host path", "peer", ev.Conn.Peer(), "path", tr.Path, "from", tr.From.String(), "to", tr.To.String(), "reason", tr.Reason)
		}
		if ci != nil && ci.wan != nil {
			tr := ev.Transition
			r.g.log.Debug("path", "peer", ci.wan.name, "path", tr.Path, "from", tr.From.String(), "to", tr.To.String(), "reason", tr.Reason)
			r.g.metrics.Path(ci.wan.name, ci.wan.region, r.g.planeName(tr.Path), tr.Path).Transition(tr)
			r.publishPlanes(ci, time.Now(), false)
		}
	case metaroce.EventPlacementError:
		r.g.log.Debug("placement error", "peer", ev.Conn.Peer(), "stream", ev.Stream, "seq", ev.Seq, "err", ev.Err)
	}
}

// dropConn forgets a connection that closed or whose peer is gone: flows
// that came in on it end here; flows that went out on it are RESET
// upstream, so their sources re-open them elsewhere.
func (r *relay) dropConn(now time.Duration, ci *connInfo, reason string) {
	if ci.dead {
		return
	}
	ci.dead = true
	leaveEgress(ci.c)
	for _, f := range ci.out {
		if f.up != nil && !f.up.dead {
			r.sendCtl(f.up, &flowctl.Msg{Type: flowctl.Reset, Flow: f.id, Code: flowctl.CodeRouteLost, Reason: reason})
			r.resets++
		}
		r.teardown(f)
	}
	for _, f := range ci.in {
		r.teardown(f)
	}
	if ci.endpoint != "" && r.hosts[ci.endpoint] == ci {
		delete(r.hosts, ci.endpoint)
	}
	if p := ci.wan; p != nil {
		p.connDown(ci, reason)
	} else if ci.c.Peer() >= hostPeerBase {
		// The host's peer entry goes when its last connection does.
		still := false
		for c, o := range r.conns {
			if o != ci && !o.dead && c.Peer() == ci.c.Peer() {
				still = true
			}
		}
		if !still {
			r.g.ep.RemovePeer(ci.c.Peer())
			r.adm.forget(ci.c.Peer())
		}
	}
	// ci stays in conns, marked dead, until its EventClosed: what still
	// arrives on it is ignored.
}

// teardown forgets a flow: its relayed messages fail (returning their
// buffers), its streams are forgotten, its credit returns to the budget.
func (r *relay) teardown(f *flow) {
	if f.state == flowGone {
		return
	}
	f.state = flowGone
	for seq, m := range f.msgs {
		r.g.log.Debug("relayed message abandoned", "flow", flowctl.FlowID(f.id), "seq", seq, "supplied", m.supplied, "length", m.length)
		m.rm.Fail(errFlowEnded)
		for _, p := range m.parts {
			r.put(f, p.buf)
		}
		f.forgetMsg(seq)
	}
	if f.up != nil {
		delete(f.up.in, f.upStream)
		if !f.up.dead {
			f.up.c.ForgetRecvStream(f.upStream)
		}
	}
	if f.down != nil {
		delete(f.down.out, f.downStream)
		f.down.c.ForgetSendStream(f.downStream)
	}
	r.reserved -= f.reserved
	f.reserved = 0
	r.trimFree()
	if r.flows[f.id] == f {
		delete(r.flows, f.id)
	}
}

// resetAll RESETs every flow upstream (Shutdown) and returns how many.
func (r *relay) resetAll(now time.Duration, code flowctl.Code, reason string) int {
	n := 0
	for _, f := range r.flows {
		if f.up != nil && !f.up.dead {
			r.sendCtl(f.up, &flowctl.Msg{Type: flowctl.Reset, Flow: f.id, Code: code, Reason: reason})
		}
		r.teardown(f)
		n++
	}
	return n
}

func (r *relay) inflightMessages() int {
	n := 0
	for _, f := range r.flows {
		n += len(f.msgs)
	}
	return n
}

func (r *relay) sendCtl(ci *connInfo, m *flowctl.Msg) {
	b, err := flowctl.Append(make([]byte, 0, 64), m)
	if err != nil {
		r.g.log.Warn("cannot encode control message", "type", m.Type, "err", err)
		return
	}
	if _, err := ci.c.Send(r.g.ep.Now(), flowctl.ControlStream, 0, b); err != nil {
		r.g.log.Debug("cannot send control message", "type", m.Type, "err", err)
	}
}

// Chunk is the control stream's sink: every control message is one packet.
func (r *relay) Chunk(c *metaroce.Conn, h *metaroce.DataHeader, payload []byte) metaroce.ErrorCode {
	if h.Offset != 0 || h.MsgLen != uint64(len(payload)) {
		return metaroce.ErrCodeBufferTooSmall
	}
	if c.Peer() >= hostPeerBase {
		r.adm.heard(c.Peer(), r.g.ep.Now())
	}
	m, err := flowctl.Decode(payload)
	if err != nil {
		r.g.log.Debug("bad control message", "peer", c.Peer(), "err", err)
		return 0
	}
	r.handle(r.info(c), &m)
	return 0
}

func (r *relay) handle(ci *connInfo, m *flowctl.Msg) {
	if ci.dead {
		return
	}
	switch m.Type {
	case flowctl.Register:
		if ci.wan != nil {
			return
		}
		r.register(ci, m)
	case flowctl.Open:
		r.open(ci, m)
	case flowctl.OpenOK:
		if f := r.flows[m.Flow]; f != nil && f.down == ci && f.state == flowOpening {
			credit := min(int64(m.Credit), f.reserved)
			f.credit = credit
			// Give back what the downstream did not grant.
			r.reserved -= f.reserved - credit
			f.reserved = credit
			r.trimFree()
			f.state = flowOpen
			r.sendCtl(f.up, &flowctl.Msg{Type: flowctl.OpenOK, Flow: f.id, Credit: uint64(credit)})
			r.g.log.Debug("flow open", "flow", flowctl.FlowID(f.id), "credit", credit)
		}
	case flowctl.OpenErr:
		if f := r.flows[m.Flow]; f != nil && f.down == ci {
			if m.Code == flowctl.CodeUnknownEndpoint && r.retryOpen(f) {
				return
			}
			r.sendCtl(f.up, &flowctl.Msg{Type: flowctl.OpenErr, Flow: f.id, Code: m.Code, Reason: m.Reason})
			r.teardown(f)
		}
	case flowctl.Done:
		if f := r.flows[m.Flow]; f != nil && f.down == ci {
			if m.Below > f.below {
				if f.outbound {
					r.completed += m.Below - f.below
					r.g.metrics.MessagesCompleted.WithLabelValues(f.peerRegion, metrics.DirOut).Add(float64(m.Below - f.below))
					now := r.g.ep.Now()
					for seq, t := range f.started {
						if seq < m.Below {
							r.g.metrics.MessageCompletion.WithLabelValues(f.peerRegion).Observe((now - t).Seconds())
							delete(f.started, seq)
						}
					}
				} else {
					r.g.metrics.MessagesCompleted.WithLabelValues(f.peerRegion, metrics.DirIn).Add(float64(m.Below - f.below))
				}
				f.below = m.Below
			}
			r.sendCtl(f.up, m)
		}
	case flowctl.Reset:
		if f := r.flows[m.Flow]; f != nil && f.down == ci {
			r.sendCtl(f.up, m)
			r.resets++
			r.teardown(f)
		}
	case flowctl.Close:
		if f := r.flows[m.Flow]; f != nil && f.up == ci {
			if f.down != nil && !f.down.dead {
				r.sendCtl(f.down, m)
			}
			r.teardown(f)
		}
	case flowctl.Ping:
		r.ping(ci, m)
	}
}

func (r *relay) refuse(ci *connInfo, m *flowctl.Msg, code flowctl.Code, reason, metric string) {
	r.refused++
	r.g.metrics.FlowRefused(metric)
	r.sendCtl(ci, &flowctl.Msg{Type: flowctl.OpenErr, Flow: m.Flow, Code: code, Reason: reason})
	r.g.log.Debug("flow refused", "flow", flowctl.FlowID(m.Flow), "dst", m.DstRegion+"/"+m.DstEndpoint, "code", code.String(), "reason", reason)
}

// open handles OPEN from a host (we are the source gateway) or from a peer
// gateway (we are the destination gateway).
func (r *relay) open(ci *connInfo, m *flowctl.Msg) {
	if m.Stream == flowctl.ControlStream {
		r.refuse(ci, m, flowctl.CodeBadRequest, "stream 0 is the control stream", metrics.RefuseBadRequest)
		return
	}
	if r.draining {
		r.refuse(ci, m, flowctl.CodeDraining, "", metrics.Other)
		return
	}
	if old := r.flows[m.Flow]; old != nil {
		// The flow re-opens (failover, or a retry): its old instance is
		// stale whichever hop it used.
		r.teardown(old)
	}
	if len(r.flows) >= r.maxFlows {
		r.refuse(ci, m, flowctl.CodeNoCapacity, "limits.max_flows reached", metrics.RefuseLimit)
		return
	}
	grant := min(r.flowCredit, r.memLimit-r.reserved)
	if grant < int64(minGrant*r.bufSize) {
		r.refuse(ci, m, flowctl.CodeNoCapacity, "limits.memory_bytes reserved by other flows", metrics.RefuseLimit)
		return
	}
	var down *connInfo
	var peerRegion string
	outbound := ci.wan == nil
	if outbound {
		if m.DstRegion == "" || m.DstRegion == r.ownRegion {
			r.refuse(ci, m, flowctl.CodeBadRequest, "destination region must be another region", metrics.RefuseBadRequest)
			return
		}
		var code flowctl.Code
		var why string
		down, code, why = r.route(m.Flow, m.DstRegion)
		if down == nil {
			r.refuse(ci, m, code, why, metrics.RefuseNoRoute)
			return
		}
		peerRegion = m.DstRegion
	} else {
		if m.DstRegion != r.ownRegion {
			r.refuse(ci, m, flowctl.CodeBadRequest, "destination region is "+m.DstRegion+", this gateway serves "+r.ownRegion, metrics.RefuseBadRequest)
			return
		}
		down = r.hosts[m.DstEndpoint]
		if down == nil || down.dead {
			r.refuse(ci, m, flowctl.CodeUnknownEndpoint, m.DstEndpoint, metrics.RefuseNoRoute)
			return
		}
		peerRegion = m.SrcRegion
	}
	if err := ci.c.ResumeStream(m.Stream, m.Resume); err != nil {
		r.refuse(ci, m, flowctl.CodeBadRequest, "stream already in use", metrics.RefuseBadRequest)
		return
	}
	f := &flow{
		id: m.Flow, up: ci, down: down, upStream: m.Stream, downStream: down.next,
		state: flowOpening, outbound: outbound, peerRegion: peerRegion, class: m.Class,
		resume: m.Resume, below: m.Resume, reserved: grant, msgs: map[uint64]*relayMsg{},
		opened: r.g.ep.Now(),
	}
	if outbound {
		f.started = map[uint64]time.Duration{}
	}
	if _, ok := r.weights[f.class]; !ok {
		f.class = r.defaultClass
	}
	f.release = func(b []byte) { r.put(f, b) }
	down.next++
	if down.next == 0 {
		down.next = 1
	}
	r.reserved += grant
	r.flows[f.id] = f
	ci.in[f.upStream] = f
	down.out[f.downStream] = f
	if outbound {
		o := *m
		f.open, f.tried = &o, []*connInfo{down}
	}
	f.active = true
	if down.wan != nil {
		r.weighOpened(down, f)
	}
	// Bound before OPEN goes on: no data can arrive on an unbound stream.
	ci.c.BindSink(f.upStream, &flowSink{r: r, f: f})
	fw := *m
	fw.Stream = f.downStream
	r.sendCtl(down, &fw)
	r.g.log.Debug("flow opening", "flow", flowctl.FlowID(f.id), "resume", f.resume, "up_stream", f.upStream, "down_stream", f.downStream, "outbound", outbound, "next", down.peerName())
}

// retryOpen sends an outbound flow's OPEN to the next gateway of the
// destination region after one answered that it does not know the
// endpoint. A host registers at every gateway of its region, but while one
// of its connections is down (reconnecting) only the other knows it: the
// flows that route picked the first for would be refused on every retry
// until the host's FailAfter (loadtest incast 64→1: "flow refused:
// unknown endpoint: b0" for 30 s). Nothing was sent on the refused
// stream: data waits for OPEN_OK's credit.
func (r *relay) retryOpen(f *flow) bool {
	if !f.outbound || f.state != flowOpening || f.open == nil {
		return false
	}
	// The flow leaves the refusing connection first, so that it does not
	// count in that connection's load (route's choice and its detour).
	old := f.down
	delete(old.out, f.downStream)
	next, _, _ := r.routeExcept(f.id, f.peerRegion, f.tried)
	if next == nil {
		old.out[f.downStream] = f
		return false
	}
	old.c.ForgetSendStream(f.downStream)
	r.reweigh(old)
	f.down, f.downStream = next, next.next
	next.next++
	if next.next == 0 {
		next.next = 1
	}
	next.out[f.downStream] = f
	r.weighOpened(next, f)
	f.tried = append(f.tried, next)
	fw := *f.open
	fw.Stream = f.downStream
	r.sendCtl(next, &fw)
	r.g.log.Debug("flow re-routed: endpoint unknown at the first gateway", "flow", flowctl.FlowID(f.id), "next", next.peerName())
	return true
}

// get returns a buffer of n bytes charged to f, or nil if f's reservation
// or the memory limit would be exceeded.
func (r *relay) get(f *flow, n int) []byte {
	if !r.charge(f, n) {
		return nil
	}
	var b []byte
	if n == r.bufSize && len(r.free) > 0 {
		b = r.free[len(r.free)-1]
		r.free[len(r.free)-1] = nil
		r.free = r.free[:len(r.free)-1]
	} else {
		b = make([]byte, n)
	}
	return b[:n]
}

// charge counts n more bytes held by f, if its credit and the memory
// limit allow. DONE can overtake the next hop's acknowledgements (an ack
// lost on the WAN is repaired a round trip later), so a flow may briefly
// hold more than its credit: allow twice as much. A host that ignores its
// credit is stopped here; memory_bytes bounds the sum regardless.
func (r *relay) charge(f *flow, n int) bool {
	if f.held+int64(n) > 2*f.reserved+int64(2*r.bufSize) || r.inUse+int64(n) > r.memLimit {
		return false
	}
	f.held += int64(n)
	r.inUse += int64(n)
	return true
}

// uncharge gives back n bytes charged to f.
func (r *relay) uncharge(f *flow, n int) {
	f.held -= int64(n)
	r.inUse -= int64(n)
}

// put returns a buffer charged to f: a full-size one is kept for reuse
// while freeBound allows, a receive buffer kept by ChunkIn goes back to
// the endpoint's spares.
func (r *relay) put(f *flow, b []byte) {
	r.uncharge(f, len(b))
	switch {
	case cap(b) == r.bufSize:
		if len(r.free) < r.freeBound() {
			r.free = append(r.free, b[:cap(b)])
		}
	case r.g.ep != nil:
		r.g.ep.ReturnRxBuf(b)
	}
}

// minFree is how many full-size buffers the relay keeps for reuse
// whatever the flows' credit.
const minFree = 1024

// freeBound is how many full-size buffers the relay keeps for reuse: with
// those in use, as many as its flows may hold (twice their credit, as get
// allows them, within memory_bytes), and at least minFree. Flows that
// relay at their credit then take every buffer from the pool: kept to
// 1024 buffers, four flows of 4 MiB credit allocated one buffer per chunk
// beyond them, and the allocations with the collector's work on them were
// about 8% of a relaying gateway's CPU (loadtest relay-cost's profile).
// What the pool holds is released as flows end (trimFree).
func (r *relay) freeBound() int {
	if r.bufSize <= 0 {
		return minFree
	}
	keep := (min(2*r.reserved, r.memLimit) - r.inUse) / int64(r.bufSize)
	return int(max(keep, minFree))
}

// trimFree drops the pooled buffers beyond freeBound (the flows'
// reservations shrank).
func (r *relay) trimFree() {
	if n := r.freeBound(); len(r.free) > n {
		clear(r.free[n:])
		r.free = r.free[:n]
	}
}

// flowSink relays one flow's incoming stream, chunk by chunk.
type flowSink struct {
	r *relay
	f *flow
}

// Chunk copies one arriving chunk into the pool and supplies it to the
// flow's message on the next hop, which sends it as soon as its window
// allows.
func (s *flowSink) Chunk(c *metaroce.Conn, h *metaroce.DataHeader, payload []byte) metaroce.ErrorCode {
	code, _ := s.chunk(h, payload, nil)
	return code
}

// ChunkIn is Chunk for a chunk that arrived in buf, a receive buffer the
// relay may keep: when both hops cut the message alike, the chunk goes on
// where it lies instead of being copied out (buf is charged to the flow
// and given back to the endpoint when the next hop has it acknowledged).
func (s *flowSink) ChunkIn(c *metaroce.Conn, h *metaroce.DataHeader, payload, buf []byte) (metaroce.ErrorCode, bool) {
	return s.chunk(h, payload, buf)
}

// chunk relays one arriving chunk, keeping buf (if not nil) rather than
// copying payload where it can; kept reports that it did.
func (s *flowSink) chunk(h *metaroce.DataHeader, payload, buf []byte) (code metaroce.ErrorCode, kept bool) {
	r, f := s.r, s.f
	if f.state != flowOpen || f.down == nil || f.down.dead {
		r.g.log.Debug("chunk refused: flow not open", "flow", flowctl.FlowID(f.id), "state", f.state, "seq", h.MsgSeq)
		return metaroce.ErrCodeNoBuffer, false
	}
	m := f.msg(h.MsgSeq)
	if m == nil {
		rm, err := f.down.c.WriteRelay(f.downStream, h.MsgSeq, h.Op, h.Key, h.Addr, h.MsgLen, f.release)
		if err != nil {
			r.g.log.Debug("cannot relay message", "flow", flowctl.FlowID(f.id), "seq", h.MsgSeq, "err", err)
			return metaroce.ErrCodeNoBuffer, false
		}
		m = &relayMsg{rm: rm, length: h.MsgLen}
		f.msgs[h.MsgSeq] = m
		f.last, f.lastSeq = m, h.MsgSeq
		if f.outbound && len(f.started) < maxTimed {
			if _, ok := f.started[h.MsgSeq]; !ok {
				f.started[h.MsgSeq] = r.g.ep.Now()
			}
		}
	}
	mtu := uint64(f.down.c.MTU())
	off, n := h.Offset, uint64(len(payload))
	if f.outbound {
		r.fromHosts += n
	} else {
		r.toHosts += n
	}
	f.bytes += n
	if off%mtu == 0 && n <= mtu && (n == mtu || off+n == h.MsgLen) {
		// Same chunking on both hops: straight through, in the buffer
		// it arrived in or in one copy.
		// A kept buffer is charged whole (about a tenth more than its
		// chunk); where that does not fit the credit or the memory
		// limit, the chunk is copied into one of its own size.
		if buf != nil && r.charge(f, len(buf)) {
			if err := m.rm.SupplyIn(off, payload, buf); err != nil {
				r.uncharge(f, len(buf)) // not kept: the endpoint reuses it
				return metaroce.ErrCodeNoBuffer, false
			}
			m.supplied += n
			r.inPlace++
			return 0, true
		}
		b := r.get(f, int(n))
		if b == nil {
			r.refusedChunk(f)
			return metaroce.ErrCodeNoBuffer, false
		}
		copy(b, payload)
		if err := m.rm.Supply(off, b); err != nil {
			r.put(f, b)
			return metaroce.ErrCodeNoBuffer, false
		}
		m.supplied += n
		r.copied++
		return 0, false
	}
	// Different MTUs: fill the next hop's chunks and supply each when full.
	if m.parts == nil {
		m.parts = map[uint64]*part{}
	}
	for pos := off; pos < off+n; {
		j := pos / mtu
		start := j * mtu
		clen := min(mtu, h.MsgLen-start)
		p := m.parts[j]
		if p == nil {
			b := r.get(f, int(clen))
			if b == nil {
				r.refusedChunk(f)
				return metaroce.ErrCodeNoBuffer, false
			}
			p = &part{buf: b}
			m.parts[j] = p
		}
		take := min(start+clen, off+n) - pos
		copy(p.buf[pos-start:], payload[pos-off:pos-off+take])
		p.filled += int(take)
		pos += take
		if uint64(p.filled) == clen {
			delete(m.parts, j)
			if err := m.rm.Supply(start, p.buf); err != nil {
				r.put(f, p.buf)
				return metaroce.ErrCodeNoBuffer, false
			}
			m.supplied += clen
		}
	}
	r.copied++
	return 0, false
}

// refusedChunk logs a chunk refused for want of credit or memory.
func (r *relay) refusedChunk(f *flow) {
	r.g.log.Debug("chunk refused: over the flow's credit or the memory limit", "flow", flowctl.FlowID(f.id), "held", f.held, "reserved", f.reserved, "in_use", r.inUse)
}
