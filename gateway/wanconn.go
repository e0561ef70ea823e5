//go:build linux

package gateway

import (
	"fmt"
	"time"

	"github.com/mrgw/mrgw/flowctl"
	"github.com/mrgw/mrgw/internal/liveness"
	"github.com/mrgw/mrgw/metaroce"
)

// ensureConn opens the WAN connection to p if there is none (dialer side).
func (r *relay) ensureConn(now time.Duration, ep *metaroce.Endpoint, p *wanPeer) {
	if ci := r.wan[p]; ci != nil && !ci.dead {
		return
	}
	c, err := ep.ConnectWith(now, p.id, metaroce.ConnOptions{CC: r.g.wanCC, Paths: r.g.Config().WAN.PathsPerPeer, PMTU: r.g.wanPMTU(r.g.Config())})
	if err != nil {
		r.g.log.Warn("cannot open WAN connection", "peer", p.name, "err", err)
		return
	}
	r.wan[p] = r.info(c)
	p.setState("connecting", "")
}

// keepalive PINGs p on its WAN connection (peerLoop, every wanPingEvery).
// metaroce finds a dead peer only through packets that go unacknowledged:
// a connection with nothing in flight (idle, or every message of its flows
// acknowledged by the peer and waiting for DONE from the destination host)
// never saw its peer die, and its flows stalled until gossip declared the
// peer dead or the control session's keepalives ran out (2.7 s and 3 s in
// the chaos scenario, against wan.dead_after's 500 ms). With a PING in
// flight, a dead peer is silent while waited on, and watchSilence drops the
// connection DeadAfter later, whatever the flows do. The peer answers PONG
// (any version), which the relay ignores.
func (r *relay) keepalive(p *wanPeer) {
	if ci := r.wan[p]; ci != nil && ci.up && !ci.dead {
		r.sendCtl(ci, &flowctl.Msg{Type: flowctl.Ping})
	}
}

// watchSilence drops every WAN connection whose peer has answered
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
func (r *relay) watchSilence(now time.Duration, deadAfter time.Duration) {
	for _, ci := range r.wan {
		if !ci.up || ci.dead {
			continue
		}
		c := ci.c
		st := &c.Stats
		silent, dead := ci.live.Observe(now, liveness.Sample{
			Heard: st.AcksReceived + st.DataReceived, Waiting: c.InflightBytes() > 0, Timeouts: st.Timeouts,
		}, deadAfter)
		if dead {
			r.dropSilent(now, ci, silent)
			continue
		}
		r.logBlackHoles(ci)
	}
}

// dropSilent acts on the liveness verdict: ci's peer has been silent for
// silent while waited on. It is counted (mrgw_peer_silence_drops_total),
// the connection's flows are RESET upstream and it closes.
func (r *relay) dropSilent(now time.Duration, ci *connInfo, silent time.Duration) {
	ci.wan.metrics.SilenceDrop()
	r.dropConn(now, ci, fmt.Sprintf("peer silent: nothing heard from it for %v", silent.Round(time.Millisecond)))
	ci.c.Close(now)
}

// logBlackHoles warns when a WAN connection's path MTU discovery has
// decided that a size stopped crossing a plane: until a retry proves the
// size again, the plane carries smaller datagrams or no data at all, and
// without this line an operator sees only a plane that went quiet.
func (r *relay) logBlackHoles(ci *connInfo) {
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
		r.g.pmtuLog.Warn(ci.wan.name+"/"+r.g.planeName(gr.Group), "path MTU black hole: the size stopped crossing the plane; discovery searches again",
			"peer", ci.wan.name, "plane", r.g.planeName(gr.Group), "datagram_bytes", gr.Size,
			"carries_data", gr.Data, "black_holes", gr.Stats.BlackHoles)
	}
}

// dropPeer ends the WAN connection to p (gossip says it is dead, or its
// control session ended).
func (r *relay) dropPeer(now time.Duration, p *wanPeer, reason string) {
	if ci := r.wan[p]; ci != nil {
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

// silenceLoop observes every WAN peer every DeadAfter/50 (10 ms at the
// default 500 ms; 2 to 100 ms), so that a peer that fell silent is
// dropped within a few percent of DeadAfter after it (relay.watchSilence).
func (g *Gateway) silenceLoop() {
	every := min(max(g.deadAfter/50, 2*time.Millisecond), 100*time.Millisecond)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-g.ctx.Done():
			return
		case <-t.C:
		}
		// Do: nothing waits for it, and a full command queue must not
		// hold up shutdown.
		if err := g.ep.Do(g.ctx, func(now time.Duration, _ *metaroce.Endpoint) { g.relay.watchSilence(now, g.deadAfter) }); err != nil {
			return
		}
	}
}
