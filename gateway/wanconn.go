//go:build linux

package gateway

import (
	"fmt"
	"time"

	"github.com/mrgw/mrgw/flowctl"
	"github.com/mrgw/mrgw/internal/liveness"
	"github.com/mrgw/mrgw/metaroce"
)

// The WAN connection of a wanPeer (wanpeer.go), on the endpoint's owner
// goroutine: in functions handed to netio's Do and Call and in the relay's
// OnEvent. Nothing here locks anything but the peer's status, or blocks.

// ensureConn opens the WAN connection to the peer if there is none
// (dialer side; hold calls it every 200 ms).
func (p *wanPeer) ensureConn(now time.Duration, ep *metaroce.Endpoint) {
	if ci := p.conn; ci != nil && !ci.dead {
		return
	}
	g := p.g
	c, err := ep.ConnectWith(now, p.id, metaroce.ConnOptions{CC: g.wanCC, Paths: g.Config().WAN.PathsPerPeer, PMTU: g.wanPMTU(g.Config())})
	if err != nil {
		g.log.Warn("cannot open WAN connection", "peer", p.name, "err", err)
		return
	}
	p.setConn(g.relay.info(c))
	p.setState("connecting", "")
}

// setConn makes ci the peer's WAN connection.
func (p *wanPeer) setConn(ci *connInfo) {
	p.conn = ci
	p.g.relay.wan[p] = struct{}{}
}

// connUp: ci, a connection to the peer (opened by either side), is
// established. It becomes the peer's WAN connection; one it replaces is
// dropped (the peer opened a new connection: it lost the old one).
func (p *wanPeer) connUp(now time.Duration, ci *connInfo) {
	r := p.g.relay
	if old := p.conn; old != nil && old != ci {
		r.dropConn(now, old, "replaced by a new connection")
		old.c.Close(now)
	}
	p.setConn(ci)
	r.applyReports(now, ci)
	p.setState("up", "")
	p.metrics.SetConnected(true)
	p.g.log.Info("WAN connection up", "peer", p.name, "paths", len(ci.c.Paths().Paths))
}

// connDown: the relay dropped ci, a connection to the peer (dropConn). If
// it was the peer's WAN connection the peer has none now, and its status
// says so and why.
func (p *wanPeer) connDown(ci *connInfo, reason string) {
	if p.conn == ci {
		p.conn = nil
		delete(p.g.relay.wan, p)
		p.metrics.SetConnected(false)
		// Status said "up" until the control session ended, which may be
		// seconds later: say the connection is gone, and why.
		p.mu.Lock()
		if p.state == "up" {
			p.state, p.since = "session", time.Now()
		}
		p.lastErr = "WAN connection down: " + reason
		p.mu.Unlock()
	}
	p.g.log.Info("WAN connection down", "peer", p.name, "reason", reason)
}

// drop ends the WAN connection to the peer, and any other connection to
// it still open (gossip says it is dead, its control session ended, or it
// was removed).
func (p *wanPeer) drop(now time.Duration, reason string) {
	r := p.g.relay
	if ci := p.conn; ci != nil {
		r.dropConn(now, ci, reason)
		ci.c.Close(now)
	}
	for c, ci := range r.conns {
		if ci.wan == p && !ci.dead {
			r.dropConn(now, ci, reason)
			c.Close(now)
		}
	}
}

// keepalive PINGs the peer on its WAN connection (hold, every
// wanPingEvery). metaroce finds a dead peer only through packets that go
// unacknowledged: a connection with nothing in flight (idle, or every
// message of its flows acknowledged by the peer and waiting for DONE from
// the destination host) never saw its peer die, and its flows stalled
// until gossip declared the peer dead or the control session's keepalives
// ran out (2.7 s and 3 s in the chaos scenario, against wan.dead_after's
// 500 ms). With a PING in flight, a dead peer is silent while waited on,
// and watchSilence drops the connection DeadAfter later, whatever the
// flows do. The peer answers PONG (any version), which the relay ignores.
func (p *wanPeer) keepalive() {
	if ci := p.conn; ci != nil && ci.up && !ci.dead {
		p.g.relay.sendCtl(ci, &flowctl.Msg{Type: flowctl.Ping})
	}
}

// silenceLoop observes every WAN peer every DeadAfter/50 (10 ms at the
// default 500 ms; 2 to 100 ms), so that a peer that fell silent is
// dropped within a few percent of DeadAfter after it (watchSilence).
func (g *Gateway) silenceLoop() {
	every := min(max(g.deadAfter/50, 2*time.Millisecond), 100*time.Millisecond)
	g.ticking(every, func() bool {
		// Do: nothing waits for it, and a full command queue must not
		// hold up shutdown.
		return g.ep.Do(g.ctx, func(now time.Duration, _ *metaroce.Endpoint) {
			for p := range g.relay.wan {
				p.watchSilence(now, g.deadAfter)
			}
		}) == nil
	})
}

// watchSilence drops the peer's WAN connection if the peer has answered
// nothing for DeadAfter while something waited for its answer
// (internal/liveness; silenceLoop runs it every DeadAfter/50): its flows
// are RESET upstream now and their sources re-open them elsewhere.
// metaroce would close the connection only once every path had been
// down for DeadAfter, and paths go down one by one on timeouts of their
// own (an idle path that is still up never times out): in the chaos
// scenario the last path to a killed gateway went down 0.4 to 1.7 s after
// the kill and flows leaving through it stalled up to 2.3 s for a
// wan.dead_after of 500 ms (docs/RESULTS.md). The PING every
// wanPingEvery keeps something waiting for a live peer's answer.
func (p *wanPeer) watchSilence(now time.Duration, deadAfter time.Duration) {
	ci := p.conn
	if ci == nil || !ci.up || ci.dead {
		return
	}
	c := ci.c
	st := &c.Stats
	silent, dead := ci.live.Observe(now, liveness.Sample{
		Heard: st.AcksReceived + st.DataReceived, Waiting: c.InflightBytes() > 0, Timeouts: st.Timeouts,
	}, deadAfter)
	if dead {
		p.dropSilent(now, silent)
		return
	}
	p.logBlackHoles()
}

// dropSilent acts on the liveness verdict: the peer has been silent for
// silent while waited on. It is counted (mrgw_peer_silence_drops_total),
// the connection's flows are RESET upstream and it closes.
func (p *wanPeer) dropSilent(now time.Duration, silent time.Duration) {
	ci := p.conn
	p.metrics.SilenceDrop()
	p.g.relay.dropConn(now, ci, fmt.Sprintf("peer silent: nothing heard from it for %v", silent.Round(time.Millisecond)))
	ci.c.Close(now)
}

// logBlackHoles warns when the WAN connection's path MTU discovery has
// decided that a size stopped crossing a plane: until a retry proves the
// size again, the plane carries smaller datagrams or no data at all, and
// without this line an operator sees only a plane that went quiet.
func (p *wanPeer) logBlackHoles() {
	ci, g := p.conn, p.g
	n := ci.c.PMTUBlackHoles()
	if n == ci.blackHoles {
		return
	}
	ci.blackHoles = n
	for _, gr := range ci.c.PMTU() {
		for len(ci.groupBlackHoles) <= gr.Group {
			ci.groupBlackHoles = append(ci.groupBlackHoles, 0)
		}
		if gr.Stats.BlackHoles == ci.groupBlackHoles[gr.Group] {
			continue // no new verdict on this plane
		}
		ci.groupBlackHoles[gr.Group] = gr.Stats.BlackHoles
		g.pmtuLog.Warn(p.name+"/"+g.planeName(gr.Group), "path MTU black hole: the size stopped crossing the plane; discovery searches again",
			"peer", p.name, "plane", g.planeName(gr.Group), "datagram_bytes", gr.Size,
			"carries_data", gr.Data, "black_holes", gr.Stats.BlackHoles)
	}
}
