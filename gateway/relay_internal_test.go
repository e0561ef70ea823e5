//go:build linux

package gateway

import (
	"log/slog"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/mrgw/mrgw/cc"
	_ "github.com/mrgw/mrgw/cc/longrtt" // registers longrtt-htcp
	"github.com/mrgw/mrgw/internal/hrw"
	"github.com/mrgw/mrgw/internal/liveness"
	"github.com/mrgw/mrgw/metaroce"
	"github.com/mrgw/mrgw/metrics"
	"github.com/mrgw/mrgw/pathmgr"
	"github.com/mrgw/mrgw/units"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// relayBench is a relay with WAN connections on a sans-I/O endpoint: no
// sockets, no gossip, no control sessions; what dropConn, wanPeer.dropSilent and
// pickRoute read is real (metaroce.Conn, its controller on the gateway's
// Egress, the peer's metrics and status).
type relayBench struct {
	g  *Gateway
	r  *relay
	ep *metaroce.Endpoint
}

const benchCapacity = 1e9 // bit/s, wan.max_rate_bps

func newRelayBench(t *testing.T) *relayBench {
	t.Helper()
	g := &Gateway{log: slog.New(slog.DiscardHandler), metrics: metrics.New(metrics.WithoutStandardCollectors()),
		egress: newEgress(benchCapacity, 20*time.Millisecond)}
	var err error
	if g.wanCC, err = controller("longrtt-htcp", cc.Params{LineRate: benchCapacity, Egress: g.egress}); err != nil {
		t.Fatal(err)
	}
	ep, err := metaroce.NewEndpoint(metaroce.Config{Paths: 4}, nil)
	if err != nil {
		t.Fatal(err)
	}
	r := &relay{g: g, conns: map[*metaroce.Conn]*connInfo{}, wan: map[*wanPeer]struct{}{},
		hosts: map[string]*connInfo{}, flows: map[uint64]*flow{}}
	g.relay = r
	return &relayBench{g: g, r: r, ep: ep}
}

// conn opens an established WAN connection to a peer gateway named name
// whose controller has sent a packet (so it counts in the Egress).
func (b *relayBench) conn(t *testing.T, name string) *connInfo {
	t.Helper()
	p := &wanPeer{g: b.g, name: name, region: "us-east", id: metaroce.PeerID(len(b.r.wan) + 1),
		metrics: b.g.metrics.Peer(name, "us-east"), state: "up"}
	c, err := b.ep.ConnectWith(0, p.id, metaroce.ConnOptions{CC: b.g.wanCC, Paths: 4})
	if err != nil {
		t.Fatal(err)
	}
	ci := &connInfo{c: c, wan: p, up: true, next: 1, in: map[uint32]*flow{}, out: map[uint32]*flow{}}
	b.r.conns[c] = ci
	p.setConn(ci)
	p.metrics.SetConnected(true)
	c.Controller().OnRateHint(0, units.BitRate(benchCapacity).Bytes())
	c.Controller().OnSent(0, 0, 1400)
	return ci
}

// value reads a counter's or gauge's value.
func value(t *testing.T, c prometheus.Metric) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue() + m.GetGauge().GetValue()
}

// TestDropConnLeavesEgress: a WAN connection the relay drops leaves the
// gateway's egress share at once, so the connections left share the
// capacity between them from their next packet: two, not three. Before,
// nothing told the Egress, and the dropped connection stayed counted for
// 50 windows (2 s at the default 20 ms rtt_hint).
func TestDropConnLeavesEgress(t *testing.T) {
	b := newRelayBench(t)
	cis := []*connInfo{b.conn(t, "use-gw1"), b.conn(t, "use-gw2"), b.conn(t, "use-gw3")}
	if n := b.g.egress.Active(); n != 3 {
		t.Fatalf("%d connections in the egress share, want 3", n)
	}
	b.r.dropConn(time.Millisecond, cis[0], "closed")
	if n := b.g.egress.Active(); n != 2 {
		t.Errorf("after a drop %d connections in the egress share, want 2", n)
	}
	half := cc.EgressUtilisation * float64(units.BitRate(benchCapacity).Bytes()) / 2
	for _, ci := range cis[1:] {
		ctl := ci.c.Controller()
		ctl.OnSent(2*time.Millisecond, 0, 1400)
		if r := float64(ctl.PacingRate()); r > half*1.001 {
			t.Errorf("%s paces at %.4g B/s after the drop, want at most half the capacity %.4g", ci.wan.name, r, half)
		}
		if h := ctl.(*cc.AIMD).Hint(); h < half*0.999 {
			t.Errorf("%s's ceiling %.4g B/s after the drop, want half the capacity %.4g (not a third)", ci.wan.name, h, half)
		}
	}
}

// TestDropConnStatusText: a dropped WAN connection's peer says, in status,
// that its connection is gone and why: state "session" (the control
// session may outlive it by seconds) and the reason after "WAN connection
// down: "; mrgw_peer_connected falls to 0. A peer whose state was not "up"
// keeps it, with the reason.
func TestDropConnStatusText(t *testing.T) {
	b := newRelayBench(t)
	ci := b.conn(t, "use-gw1")
	b.r.dropConn(time.Millisecond, ci, "replaced by a new connection")
	p := ci.wan
	if p.state != "session" || p.lastErr != "WAN connection down: replaced by a new connection" {
		t.Errorf("status after the drop: state %q, error %q; want \"session\", \"WAN connection down: replaced by a new connection\"", p.state, p.lastErr)
	}
	if v := value(t, b.g.metrics.PeerConnected.WithLabelValues("use-gw1", "us-east")); v != 0 {
		t.Errorf("mrgw_peer_connected %v after the drop, want 0", v)
	}
	if _, ok := b.r.wan[p]; ok || p.conn != nil {
		t.Error("the dropped connection is still the peer's WAN connection")
	}
	b.r.dropConn(2*time.Millisecond, ci, "closed") // a second drop (its EventClosed) changes nothing
	if p.lastErr != "WAN connection down: replaced by a new connection" {
		t.Errorf("a second drop rewrote the reason: %q", p.lastErr)
	}

	ci2 := b.conn(t, "use-gw2")
	ci2.wan.state = "connecting"
	b.r.dropConn(time.Millisecond, ci2, "closed")
	if ci2.wan.state != "connecting" || ci2.wan.lastErr != "WAN connection down: closed" {
		t.Errorf("a peer that was connecting: state %q, error %q; want \"connecting\", \"WAN connection down: closed\"", ci2.wan.state, ci2.wan.lastErr)
	}
}

// TestDropSilentCounted: the liveness verdict counts in
// mrgw_peer_silence_drops_total, names the silence in the status text,
// and leaves the egress share.
func TestDropSilentCounted(t *testing.T) {
	b := newRelayBench(t)
	ci := b.conn(t, "use-gw1")
	b.conn(t, "use-gw2")
	ci.wan.dropSilent(time.Second, 512300*time.Microsecond)
	if v := value(t, b.g.metrics.PeerSilenceDrops.WithLabelValues("use-gw1", "us-east")); v != 1 {
		t.Errorf("mrgw_peer_silence_drops_total %v, want 1", v)
	}
	if v := value(t, b.g.metrics.PeerSilenceDrops.WithLabelValues("use-gw2", "us-east")); v != 0 {
		t.Errorf("the other peer's mrgw_peer_silence_drops_total %v, want 0", v)
	}
	if want := "WAN connection down: peer silent: nothing heard from it for 512ms"; ci.wan.lastErr != want {
		t.Errorf("status error %q, want %q", ci.wan.lastErr, want)
	}
	if n := b.g.egress.Active(); n != 1 {
		t.Errorf("%d connections in the egress share, want 1", n)
	}
}

// silence makes ci's peer silent while waited on since at (liveness.Watch
// as watchSilence feeds it).
func silence(ci *connInfo, at time.Duration) {
	ci.live = liveness.Watch{}
	ci.live.Observe(at-time.Millisecond, liveness.Sample{Heard: 1}, time.Second)
	ci.live.Observe(at, liveness.Sample{Heard: 1, Waiting: true}, time.Second)
}

// TestPickRouteTwoPasses: routing's first pass passes over a connection
// whose peer has been silent for the suspect threshold (two PING
// intervals) while waited on, and one with no usable path; the second
// pass takes the first in rendezvous order when nothing else is left.
// Equal loads: the first in rendezvous order.
func TestPickRouteTwoPasses(t *testing.T) {
	b := newRelayBench(t)
	first, second := b.conn(t, "use-gw1"), b.conn(t, "use-gw2")
	cands := []routeCand{{ci: first, weight: 1}, {ci: second, weight: 1}}
	const suspect = 125 * time.Millisecond
	now := time.Second
	if got := pickRoute(cands, now, suspect); got != first {
		t.Fatalf("both fine: picked %v, want the first in rendezvous order", got.wan.name)
	}
	silence(first, now-suspect+time.Millisecond)
	if got := pickRoute(cands, now, suspect); got != first {
		t.Errorf("first silent just under the threshold: picked %s, want use-gw1", got.wan.name)
	}
	silence(first, now-suspect)
	if got := pickRoute(cands, now, suspect); got != second {
		t.Errorf("first silent for two PING intervals: picked %s, want use-gw2", got.wan.name)
	}
	silence(second, now-time.Second)
	if got := pickRoute(cands, now, suspect); got != first {
		t.Errorf("both silent: picked %s, want the first anyway (second pass)", got.wan.name)
	}
	second.live = liveness.Watch{}
	first.live = liveness.Watch{}
	for i := range first.c.Paths().Paths {
		first.c.Paths().Paths[i].State = pathmgr.Down
	}
	if got := pickRoute(cands, now, suspect); got != second {
		t.Errorf("first with no usable path: picked %s, want use-gw2", got.wan.name)
	}
	if got := pickRoute(cands[:1], now, suspect); got != first {
		t.Errorf("only a connection with no usable path: picked %v, want it (second pass)", got)
	}
	if got := pickRoute(nil, now, suspect); got != nil {
		t.Errorf("no candidate: picked %s, want none", got.wan.name)
	}
}

// TestSuspectAfter: routing's suspect threshold is two PING intervals,
// or DeadAfter/4 without PINGs.
func TestSuspectAfter(t *testing.T) {
	g := &Gateway{deadAfter: 500 * time.Millisecond, wanPingEvery: 500 * time.Millisecond / 8}
	if s := g.suspectAfter(); s != 125*time.Millisecond {
		t.Errorf("suspect after %v with PINGs every %v, want 125ms", s, g.wanPingEvery)
	}
	g.wanPingEvery = 100 * time.Millisecond
	if s := g.suspectAfter(); s != 200*time.Millisecond {
		t.Errorf("suspect after %v with PINGs every 100ms, want 200ms", s)
	}
	g.wanPingEvery = 0
	if s := g.suspectAfter(); s != 125*time.Millisecond {
		t.Errorf("suspect after %v without PINGs, want DeadAfter/4 = 125ms", s)
	}
}

// TestReportEvictionsCounted: an unexpired path-health report that gives
// way in the relay's full report table counts in
// mrgw_path_health_reports_evicted_total (it was a warn line only).
func TestReportEvictionsCounted(t *testing.T) {
	b := newRelayBench(t)
	b.r.health = newHealthState(time.Hour, func() int { return 0 })
	p := &wanPeer{name: "use-gw1", region: "us-east"}
	max := b.r.health.reports.Bound()
	for i := range max + 3 {
		b.r.onReport(time.Duration(i)*time.Microsecond, "gw"+strconv.Itoa(i), p, 0, pathmgr.Up)
	}
	if n := b.r.health.reports.Evicted(); n != 3 {
		t.Fatalf("the table evicted %d reports, want 3 (bound %d)", n, max)
	}
	if v := value(t, b.g.metrics.HealthReportsEvicted); v != 3 {
		t.Errorf("mrgw_path_health_reports_evicted_total %v, want 3", v)
	}
}

// carry puts a flow of id on ci as open does (its stream in ci.out).
func carry(ci *connInfo, id uint64) *flow {
	f := &flow{id: id, down: ci, downStream: ci.next, state: flowOpening, outbound: true}
	ci.out[f.downStream] = f
	ci.next++
	return f
}

// routeAmong is routeExcept's choice among conns, the peers' weights
// given: candidates in weighted rendezvous order of the flow id, routed
// by pickRoute.
func routeAmong(id uint64, conns []*connInfo, weight []float64, suspect []bool) *connInfo {
	order := hrw.Rank(id, len(conns), func(i int) string { return conns[i].wan.name }, func(i int) float64 { return weight[i] })
	var cands []routeCand
	for _, k := range order {
		cands = append(cands, routeCand{ci: conns[k], weight: weight[k], suspect: suspect != nil && suspect[k]})
	}
	slices.SortStableFunc(cands, func(a, b routeCand) int {
		if a.suspect == b.suspect {
			return 0
		}
		if a.suspect {
			return 1
		}
		return -1
	})
	return pickRoute(cands, time.Second, 125*time.Millisecond)
}

// TestPickRouteBalanced: two gateways of eu-west route 8 and then 64
// flows (random ids, in turn) to the two gateways of us-east: each
// gateway's flows on its two WAN connections differ by at most one after
// every flow, so the four gateway pairs carry 2 each of 8 flows, 16 each
// of 64. With weights 1 and 3, 8 flows go 2 and 6.
func TestPickRouteBalanced(t *testing.T) {
	for _, n := range []int{8, 64} {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(n), 3))
			src := []*relayBench{newRelayBench(t), newRelayBench(t)}
			var conns [][]*connInfo
			for _, b := range src {
				conns = append(conns, []*connInfo{b.conn(t, "use-gw1"), b.conn(t, "use-gw2")})
			}
			for i := range n {
				s := i % 2
				ci := routeAmong(rng.Uint64()|1, conns[s], []float64{1, 1}, nil)
				carry(ci, uint64(i))
				if a, b := len(conns[s][0].out), len(conns[s][1].out); a-b > 1 || b-a > 1 {
					t.Fatalf("after %d flows gateway %d carries %d and %d", i+1, s, a, b)
				}
			}
			for s := range src {
				for _, ci := range conns[s] {
					if len(ci.out) != n/4 {
						t.Errorf("pair %d->%s carries %d of %d flows, want %d", s, ci.wan.name, len(ci.out), n, n/4)
					}
				}
			}
		})
	}
	b := newRelayBench(t)
	conns := []*connInfo{b.conn(t, "use-gw1"), b.conn(t, "use-gw2")}
	rng := rand.New(rand.NewPCG(1, 3))
	for i := range 8 {
		carry(routeAmong(rng.Uint64()|1, conns, []float64{1, 3}, nil), uint64(i))
	}
	if len(conns[0].out) != 2 || len(conns[1].out) != 6 {
		t.Errorf("weights 1 and 3: %d and %d of 8 flows, want 2 and 6", len(conns[0].out), len(conns[1].out))
	}
}

// TestPickRouteAliveFirst: a gossip-suspect peer carrying nothing is
// passed over for an alive one carrying more, unless no alive peer can
// carry the flow.
func TestPickRouteAliveFirst(t *testing.T) {
	b := newRelayBench(t)
	conns := []*connInfo{b.conn(t, "use-gw1"), b.conn(t, "use-gw2")}
	for i := range 5 {
		carry(conns[0], uint64(i))
	}
	suspect := []bool{false, true}
	if got := routeAmong(1, conns, []float64{1, 1}, suspect); got != conns[0] {
		t.Fatalf("picked suspect %s over alive use-gw1", got.wan.name)
	}
	for i := range conns[0].c.Paths().Paths {
		conns[0].c.Paths().Paths[i].State = pathmgr.Down
	}
	if got := routeAmong(1, conns, []float64{1, 1}, suspect); got != conns[1] {
		t.Fatalf("alive use-gw1 has no usable path: picked %s, want the suspect use-gw2", got.wan.name)
	}
}

// TestDropConnMovesOnlyItsFlows: of three WAN connections carrying 10
// flows each, one is dropped: its flows end here (their sources re-open
// them), the others' stay on their connections, and the re-opened ones
// route to the two left, 15 each.
func TestDropConnMovesOnlyItsFlows(t *testing.T) {
	b := newRelayBench(t)
	conns := []*connInfo{b.conn(t, "use-gw1"), b.conn(t, "use-gw2"), b.conn(t, "use-gw3")}
	rng := rand.New(rand.NewPCG(5, 5))
	on := map[uint64]*connInfo{}
	for range 30 {
		id := rng.Uint64() | 1
		ci := routeAmong(id, conns, []float64{1, 1, 1}, nil)
		b.r.flows[id] = carry(ci, id)
		on[id] = ci
	}
	for _, ci := range conns {
		if len(ci.out) != 10 {
			t.Fatalf("%s carries %d of 30 flows, want 10", ci.wan.name, len(ci.out))
		}
	}
	lost := conns[1]
	b.r.dropConn(time.Millisecond, lost, "closed")
	left := []*connInfo{conns[0], conns[2]}
	for id, ci := range on {
		_, still := b.r.flows[id]
		switch {
		case ci == lost && still:
			t.Fatalf("flow %x of the dropped connection still relayed", id)
		case ci != lost && (!still || b.r.flows[id].down != ci || ci.out[b.r.flows[id].downStream] != b.r.flows[id]):
			t.Fatalf("flow %x of %s moved or ended", id, ci.wan.name)
		case ci == lost:
			b.r.flows[id] = carry(routeAmong(id, left, []float64{1, 1}, nil), id)
		}
	}
	for _, ci := range left {
		if len(ci.out) != 15 {
			t.Errorf("%s carries %d of 30 flows after the drop, want 15", ci.wan.name, len(ci.out))
		}
	}
}

// TestRelayKeepsBufferWithinLimits: a chunk whose receive buffer fits the
// flow's credit and the memory limit is relayed in that buffer, charged
// whole, and the buffer is given back when the next hop is done with it;
// a chunk whose buffer does not fit but whose payload does is copied into
// a buffer of its own size, so keeping buffers refuses nothing that
// copying would have taken.
func TestRelayKeepsBufferWithinLimits(t *testing.T) {
	b := newRelayBench(t)
	ci := b.conn(t, "use-gw1")
	r := b.r
	mtu := ci.c.MTU()
	r.bufSize = mtu
	r.memLimit = 1 << 20
	f := &flow{id: 1, state: flowOpen, down: ci, downStream: 7, reserved: 1 << 20, msgs: map[uint64]*relayMsg{}}
	var released [][]byte
	f.release = func(buf []byte) { released = append(released, buf); r.put(f, buf) }
	s := &flowSink{r: r, f: f}
	h := &metaroce.DataHeader{Op: metaroce.OpWrite, Key: 1, MsgSeq: 0, MsgLen: uint64(2 * mtu)}
	kept := make([]byte, mtu+200)
	payload := kept[100 : 100+mtu]
	if code, ok := s.ChunkIn(nil, h, payload, kept); code != 0 || !ok {
		t.Fatalf("first chunk: code %v, kept %v; want 0, kept", code, ok)
	}
	if f.held != int64(len(kept)) || r.inUse != int64(len(kept)) {
		t.Fatalf("held %d, in use %d after keeping a %d-byte buffer", f.held, r.inUse, len(kept))
	}
	// Room left for the payload, not for a whole buffer.
	r.memLimit = r.inUse + int64(mtu) + 100
	h.Offset = uint64(mtu)
	other := make([]byte, mtu+200)
	if code, ok := s.ChunkIn(nil, h, other[100:100+mtu], other); code != 0 || ok {
		t.Fatalf("second chunk at the limit: code %v, kept %v; want 0, copied", code, ok)
	}
	if r.inPlace != 1 || r.copied != 1 || f.held != int64(len(kept)+mtu) {
		t.Fatalf("in place %d, copied %d, held %d; want 1, 1, %d", r.inPlace, r.copied, f.held, len(kept)+mtu)
	}
	// The message fails: both buffers come back, the kept one whole.
	f.msg(0).rm.Fail(metaroce.ErrClosed)
	if len(released) != 2 || f.held != 0 || r.inUse != 0 {
		t.Fatalf("released %d buffers, held %d, in use %d; want 2, 0, 0", len(released), f.held, r.inUse)
	}
	if len(released[0]) != len(kept) && len(released[1]) != len(kept) {
		t.Errorf("released buffers of %d and %d bytes; the kept one (%d) was not given back whole", len(released[0]), len(released[1]), len(kept))
	}
}
