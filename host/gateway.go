//go:build linux

package host

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/mrgw/mrgw/flowctl"
	"github.com/mrgw/mrgw/internal/hrw"
	"github.com/mrgw/mrgw/internal/liveness"
	"github.com/mrgw/mrgw/metaroce"
)

// gwState is where a gateway connection is in its life.
type gwState uint8

const (
	gwDown        gwState = iota // no connection; retryAt says when to try again
	gwConnecting                 // handshake under way
	gwRegistering                // REGISTER sent, waiting for REGISTER_OK
	gwReady                      // registered: flows may use it
)

// gateway is one of the region's gateways, as the host sees it.
type gateway struct {
	idx        int
	addr       netip.AddrPort
	peer       metaroce.PeerID
	conn       *metaroce.Conn
	state      gwState
	since      time.Duration // when the state was entered
	retryAt    time.Duration
	backoff    time.Duration
	nextStream uint32 // next flow stream on conn (0 is the control stream)
	// flows is how many of this host's flows use the gateway now (f.gw):
	// placement's load (pickGateway).
	flows    int
	lastPing time.Duration
	pingSeq  uint64
	// live watches the connection's peer for silence (silentGateway).
	live liveness.Watch
	// refusal: this gateway refused the registration (ErrRefused); the
	// host keeps retrying with backoff unless final says not to.
	refusal    error
	refusedWhy string // the refusal's reason and what to do, without the gateway
	final      bool
	// refusalLogged is when the refusal was last logged, and repeats how
	// many identical ones came since: a refusal that repeats on every
	// retry is logged once per refusalLogEvery.
	refusalLogged time.Duration
	repeats       int
	// unansweredLogged and unanswered do the same for handshakes that
	// went unanswered (a gateway stopped or drained: every attempt, one
	// per OpenTimeout, warned).
	unansweredLogged time.Duration
	unanswered       int
}

// refusalLogEvery: an identical registration refusal is logged at most
// this often (a name in use was logged 14 times in 3 s).
const refusalLogEvery = 30 * time.Second

// maxStreams: a peer keeps receive state for at most 65536 streams per
// connection, stream 0 included, and metaroce never forgets one; a flow
// stream id is never reused on a connection (ResumeStream refuses a stream
// that has seen data), so a connection carries at most this many flows
// over its life. Past that the host reconnects.
const maxStreams = 1<<16 - 1

// GatewayStatus describes one of the region's gateways the host uses.
type GatewayStatus struct {
	Addr  netip.AddrPort
	Ready bool // connected and registered
}

// Gateways returns the state of each gateway connection.
func (h *Host) Gateways() []GatewayStatus {
	var out []GatewayStatus
	_ = h.call(context.Background(), func(time.Duration) {
		for _, g := range h.o.gws {
			out = append(out, GatewayStatus{Addr: g.addr, Ready: g.state == gwReady})
		}
	})
	return out
}

func (h *Host) readyCount() int {
	n := 0
	for _, g := range h.o.gws {
		if g.state == gwReady {
			n++
		}
	}
	return n
}

// connect starts a connection to g.
func (h *Host) connect(now time.Duration, g *gateway) {
	c, err := h.o.mep.Connect(now, g.peer)
	if err != nil {
		h.log.Warn("host: connect to gateway", "gateway", g.addr, "err", err)
		h.gwDown(now, g)
		return
	}
	g.conn = c
	g.state = gwConnecting
	g.since = now
	g.nextStream = 1
	g.live = liveness.Watch{}
	h.o.byConn[c] = g
}

// gwDown records that g has no connection and schedules the next attempt
// with exponential backoff.
func (h *Host) gwDown(now time.Duration, g *gateway) {
	wasReady := g.state == gwReady
	g.state = gwDown
	g.conn = nil
	g.retryAt = now + g.backoff
	g.backoff = min(2*g.backoff, h.cfg.ReconnectMax)
	if wasReady {
		h.o.regSig.fire()
	}
}

// onEvent handles every protocol event, on the owner goroutine.
func (h *Host) onEvent(now time.Duration, ev metaroce.Event) {
	h.o.now = now
	switch ev.Kind {
	case metaroce.EventConnected:
		g := h.o.byConn[ev.Conn]
		if g == nil {
			return
		}
		h.ctr.connects.Add(1)
		g.state = gwRegistering
		g.since = now
		g.lastPing = now
		h.postAll(ev.Conn)
		h.register(ev.Conn)
	case metaroce.EventClosed:
		h.connClosed(now, ev.Conn, ev.Err)
	case metaroce.EventRecvComplete:
		if ev.Stream == flowctl.ControlStream {
			h.ctlComplete(now, ev)
			return
		}
		h.rxComplete(now, ev)
	case metaroce.EventSendComplete:
		if ev.Stream == flowctl.ControlStream {
			return
		}
		h.txComplete(now, ev)
	case metaroce.EventPlacementError:
		h.log.Debug("host: placement refused", "stream", ev.Stream, "seq", ev.Seq, "err", ev.Err)
	}
}

// connClosed fails over everything that used c.
func (h *Host) connClosed(now time.Duration, c *metaroce.Conn, err error) {
	delete(h.o.ctl, c)
	h.rxConnClosed(c)
	cause := ErrGatewayLost
	var flows []*Flow
	for k, f := range h.o.txByStr {
		if k.c == c {
			delete(h.o.txByStr, k)
			if f.conn == c {
				flows = append(flows, f)
			}
		}
	}
	g := h.o.byConn[c]
	delete(h.o.byConn, c)
	if g != nil && g.conn == c {
		if g.state == gwConnecting {
			h.ctr.connFails.Add(1)
		}
		if g.state == gwReady {
			h.log.Warn("host: lost the gateway; reconnecting (flows fail over to the region's other gateways). If it persists, check the gateway runs and its lan.listen is reachable",
				"gateway", g.addr, "err", err)
		} else {
			h.log.Info("host: gateway connection closed", "gateway", g.addr, "err", err)
		}
		h.gwDown(now, g)
	}
	for _, f := range flows {
		f.reroute(now, cause, g)
	}
}

// ctlSink receives stream 0 of every connection. A control message is one
// packet; its bytes are kept until the message completes in order
// (EventRecvComplete), because packets of different paths overtake each
// other and control messages must be read in the order they were sent.
type ctlSink struct{ h *Host }

func (s ctlSink) Chunk(c *metaroce.Conn, hd *metaroce.DataHeader, payload []byte) metaroce.ErrorCode {
	if hd.Offset != 0 || uint64(len(payload)) != hd.MsgLen || len(payload) > flowctl.MaxLen {
		return metaroce.ErrCodeBufferTooSmall
	}
	m := s.h.o.ctl[c]
	if m == nil {
		m = map[uint64][]byte{}
		s.h.o.ctl[c] = m
	}
	// Bounded by the receiver's message window (MaxMessagesAhead) per
	// connection: a message further ahead is refused before the sink.
	m[hd.MsgSeq] = append([]byte(nil), payload...)
	return 0
}

func (h *Host) ctlComplete(now time.Duration, ev metaroce.Event) {
	m := h.o.ctl[ev.Conn]
	b, ok := m[ev.Seq]
	delete(m, ev.Seq)
	if !ok || ev.Err != nil {
		return
	}
	msg, err := flowctl.Decode(b)
	if err != nil {
		h.log.Warn("host: bad control message", "err", err)
		return
	}
	h.dispatch(now, ev.Conn, &msg)
}

func (h *Host) dispatch(now time.Duration, c *metaroce.Conn, m *flowctl.Msg) {
	switch m.Type {
	case flowctl.RegisterOK:
		g := h.o.byConn[c]
		if g == nil || g.conn != c || g.state != gwRegistering {
			return
		}
		g.state = gwReady
		g.since = now
		g.backoff = h.cfg.ReconnectMin
		g.refusal = nil
		g.unanswered = 0
		h.ctr.registrations.Add(1)
		h.o.regSig.fire()
		h.log.Info("host: registered", "gateway", g.addr, "endpoint", h.cfg.Name, "region", h.cfg.Region)
		// Flows waiting for a route try at once.
		h.retryWaiting(now)
	case flowctl.OpenOK:
		if f := h.o.flows[m.Flow]; f != nil {
			f.onOpenOK(now, c, m)
		}
	case flowctl.OpenErr:
		if f := h.o.flows[m.Flow]; f != nil {
			f.onOpenErr(now, c, m)
		}
	case flowctl.Done:
		if f := h.o.flows[m.Flow]; f != nil {
			f.onDone(now, m.Below)
		}
	case flowctl.Reset:
		if f := h.o.flows[m.Flow]; f != nil {
			f.onReset(now, c, m)
		}
	case flowctl.Open:
		h.rxOpen(now, c, m)
	case flowctl.Close:
		h.rxClose(m.Flow)
	case flowctl.Ping:
		h.sendCtl(c, &flowctl.Msg{Type: flowctl.Pong, Seq: m.Seq})
	case flowctl.RegisterErr:
		h.registerErr(now, c, m)
	case flowctl.Pong, flowctl.Register:
	}
}

// sendCtl sends one control message on c's stream 0 (a SEND with tag 0).
func (h *Host) sendCtl(c *metaroce.Conn, m *flowctl.Msg) bool {
	if c == nil || c.Closed() {
		return false
	}
	b, err := flowctl.Append(make([]byte, 0, 64), m)
	if err != nil {
		h.log.Warn("host: encode control message", "type", m.Type, "err", err)
		return false
	}
	if _, err := c.Send(h.o.now, flowctl.ControlStream, 0, b); err != nil {
		h.log.Debug("host: send control message", "type", m.Type, "err", err)
		return false
	}
	return true
}

// tick runs the timers: reconnects, registration deadlines, pings, flow
// retries and deadlines, deliveries waiting for room.
func (h *Host) tick(now time.Duration) {
	h.o.now = now
	if h.o.closed {
		return
	}
	for _, g := range h.o.gws {
		switch g.state {
		case gwDown:
			if g.final {
				continue
			}
			if now >= g.retryAt {
				h.connect(now, g)
			}
		case gwConnecting:
			// metaroce retransmits the INIT over at least OpenTimeout
			// (handshakeRetries); its last interval is as long as all
			// the others, so the attempt ends here and the next one
			// starts after the backoff.
			if now-g.since > h.cfg.OpenTimeout {
				if g.unanswered == 0 || now-g.unansweredLogged >= refusalLogEvery {
					h.log.Warn("host: no answer to the handshake; connecting again until it answers (check the gateway runs and its lan.listen is reachable)",
						"gateway", g.addr, "waited", (now - g.since).Round(time.Millisecond), "unanswered_before", g.unanswered)
					g.unansweredLogged = now
				}
				g.unanswered++
				g.conn.Close(now) // EventClosed reconnects
			}
		case gwRegistering:
			if now-g.since > h.cfg.OpenTimeout {
				h.log.Warn("host: no REGISTER_OK", "gateway", g.addr)
				g.conn.Close(now) // EventClosed reconnects
			}
		case gwReady:
			if h.silentGateway(now, g) {
				continue
			}
			if g.nextStream >= maxStreams && !h.gwInUse(g) {
				g.conn.Close(now)
			} else if now-g.lastPing >= h.cfg.PingEvery {
				g.lastPing = now
				g.pingSeq++
				h.sendCtl(g.conn, &flowctl.Msg{Type: flowctl.Ping, Seq: g.pingSeq})
			}
		}
	}
	h.runTimers(now)
	h.rxTick(now)
}

// silentGateway fails over from g when it has answered nothing for
// DeadAfter while something waited for its answer (internal/liveness):
// its flows re-open through the other gateways now, and the connection is
// closed. metaroce would close it only once every path had been down for
// DeadAfter, and paths go down one by one on timeouts of their own: in
// the chaos scenario hosts failed over 0.7 to 0.8 s after a gateway was
// killed, for a DeadAfter of 500 ms (docs/results/reliability.md). The PING every
// PingEvery keeps something waiting for a live gateway's answer.
func (h *Host) silentGateway(now time.Duration, g *gateway) bool {
	c := g.conn
	st := &c.Stats
	silent, dead := g.live.Observe(now, liveness.Sample{
		Heard: st.AcksReceived + st.DataReceived, Waiting: c.InflightBytes() > 0, Timeouts: st.Timeouts,
	}, h.cfg.DeadAfter)
	if !dead {
		return false
	}
	h.ctr.silent.Add(1)
	h.connClosed(now, c, fmt.Errorf("%w: nothing heard from it for %v", ErrGatewaySilent, silent.Round(time.Millisecond)))
	// Its EventClosed finds nothing left to fail over.
	c.Close(now)
	return true
}

// gwInUse reports whether a flow still uses g's connection.
func (h *Host) gwInUse(g *gateway) bool { return g.flows > 0 }

// pickGateway chooses a ready gateway for flow id: the one carrying the
// fewest of this host's flows, ties going to the one that ranks first in
// rendezvous hashing of the id over the region's gateways (internal/hrw,
// keyed by their addresses). Hashing alone is even only over many flows:
// 8 flows of two hosts landed 1/1/2/4 on four gateway pairs. A flow is
// placed only when it opens or re-opens, so a gateway that goes away
// moves only its own flows and one that comes back takes new and
// re-opened flows until it carries its share. avoid (the gateway a flow
// just lost) is passed over when another is ready; from the third
// attempt on, attempts rotate through the ready ones in that order, so a
// gateway that keeps refusing a flow is not asked for ever.
//
// Least loaded over all ready gateways rather than the better of the
// two ranked first ("two choices"): the host knows its own load exactly
// and places one flow at a time, so the herding that two random choices
// guard against cannot happen, and only the full comparison keeps each
// host's flows within one of each other on any number of gateways (two
// choices can leave a third gateway empty). With two gateways the rules
// coincide. The rank as tie-break spreads the hosts, which do not see
// each other's load: each puts its first flow where the hash says.
func (h *Host) pickGateway(id uint64, attempt int, avoid *gateway) *gateway {
	gws := h.o.gws
	var live []*gateway
	for _, k := range hrw.Rank(id, len(gws), func(i int) string { return gws[i].addr.String() }, func(int) float64 { return 1 }) {
		g := gws[k]
		if g.state == gwReady && g.nextStream < maxStreams {
			live = append(live, g)
		}
	}
	if len(live) > 1 && avoid != nil {
		for i, g := range live {
			if g == avoid {
				live = append(live[:i], live[i+1:]...)
				break
			}
		}
	}
	if len(live) == 0 {
		return nil
	}
	slices.SortStableFunc(live, func(a, b *gateway) int { return a.flows - b.flows })
	if attempt <= 1 {
		return live[0]
	}
	return live[(attempt-1)%len(live)]
}

// register sends REGISTER on c: the name, this process's instance, the
// takeover flag and, with a Key, the MAC that authenticates it.
func (h *Host) register(c *metaroce.Conn) {
	m := &flowctl.Msg{Type: flowctl.Register, Endpoint: h.cfg.Name, Region: h.cfg.Region, Instance: h.instance}
	if h.cfg.Takeover {
		m.Flags |= flowctl.FlagTakeover
	}
	if k := h.cfg.Key; k != nil {
		m.KeyID = k.ID
		m.Time = uint64(time.Now().Unix())
		m.MAC = flowctl.RegisterMAC(k.Secret, m, c.ID())
	}
	h.sendCtl(c, m)
}

// registerErr handles REGISTER_ERR: a refused registration, a name taken
// over, or a registration the gateway no longer has.
func (h *Host) registerErr(now time.Duration, c *metaroce.Conn, m *flowctl.Msg) {
	g := h.o.byConn[c]
	if g == nil || g.conn != c {
		return
	}
	who := h.cfg.Region + "/" + h.cfg.Name
	var what string
	switch m.Code {
	case flowctl.CodeNotRegistered:
		// The gateway lost our registration: register again.
		h.log.Warn("host: the gateway lost this host's registration; registering again", "gateway", g.addr, "endpoint", who)
		wasReady := g.state == gwReady
		g.state = gwRegistering
		g.since = now
		h.register(c)
		if wasReady {
			h.o.regSig.fire()
		}
		return
	case flowctl.CodeDuplicate:
		what = "the name is in use by another running host: stop that host, choose another name (--name), or take the name over (--takeover)"
	case flowctl.CodeUnauthenticated:
		what = "give this host a credential (--key-file): a key and its secret from the gateways' lan.host_keys"
		g.final = true
	case flowctl.CodeTakenOver:
		what = "another host took this name over: this host no longer receives for it; restart it under another name if both must run"
		g.final = true
	case flowctl.CodeUnknownRegion:
		what = "give --region the region of the gateways this host uses, or --gateway the gateways of its region"
		g.final = true
	default:
		what = "see the gateway's log"
	}
	why := m.Reason + "; " + what
	refusal := fmt.Errorf("%w: gateway %v refused %s: %s", ErrRefused, g.addr, who, why)
	switch {
	case !h.o.started && g.final:
		// New returns it at once: said once, by its caller. A refusal
		// New waits out (a name held by another host) is logged below,
		// once, so that the wait has a reason.
	case g.refusal == nil || g.refusal.Error() != refusal.Error() || now-g.refusalLogged >= refusalLogEvery:
		if g.repeats > 0 {
			h.log.Error(refusal.Error(), "repeated", g.repeats)
		} else {
			h.log.Error(refusal.Error())
		}
		g.refusalLogged, g.repeats = now, 0
	default:
		g.repeats++
	}
	g.refusal, g.refusedWhy = refusal, why
	h.ctr.connFails.Add(1)
	c.Close(now) // EventClosed: gwDown, and a retry with backoff unless final
	h.gwDown(now, g)
	delete(h.o.byConn, c)
	h.o.regSig.fire()
}
