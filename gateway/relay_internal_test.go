//go:build linux

package gateway

import (
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/mrgw/mrgw/cc"
	_ "github.com/mrgw/mrgw/cc/longrtt" // registers longrtt-htcp
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
func TestPickRouteTwoPasses(t *testing.T) {
	b := newRelayBench(t)
	first, second := b.conn(t, "use-gw1"), b.conn(t, "use-gw2")
	cands := []*connInfo{first, second}
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
