//go:build linux

package gateway_test

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/mrgw/mrgw/loadtest/lab/labtest"

	"github.com/mrgw/mrgw/config"
	"github.com/mrgw/mrgw/gateway"
	"github.com/mrgw/mrgw/host"
	"github.com/mrgw/mrgw/loadtest/lab"
	"github.com/mrgw/mrgw/metaroce"
	"github.com/mrgw/mrgw/netem"
)

// TestThirdRegionJoinsRunningFleet: two regions run with seed-only
// configurations (nothing about the other region); a third region is
// started with seeds only, nothing else is touched and nothing restarts,
// and data moves to it byte-exact. Before fleets a gateway connected only
// to the gateways its regions list named: the third region's flows were
// refused (unknown region) until every configuration was edited and every
// gateway restarted.
func TestThirdRegionJoinsRunningFleet(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	l := labtest.Start(t, ctx, lab.Config{Direct: true, Regions: []lab.Region{
		{Name: lab.RegionA, Site: netem.SiteA, Gateways: 1, Prefix: "euw"},
		{Name: lab.RegionB, Site: netem.SiteB, Gateways: 1, Prefix: "use"},
	}})
	for n, c := range l.Configs {
		if len(c.Regions) != 0 || len(c.Control.PeerNames) != 0 {
			t.Fatalf("%s's configuration names other gateways: regions %v, peer_names %v", n, c.Regions, c.Control.PeerNames)
		}
	}
	before := map[string]*config.Config{}
	for n, g := range l.Gateways {
		before[n] = g.Config()
	}
	src := newHost(t, l, "loader", lab.RegionA)
	dstB := newHost(t, l, "trainer-b", lab.RegionB)
	moveAndCheck(t, ctx, src, dstB, lab.RegionB, 1)

	names, err := l.AddRegion(lab.Region{Name: "ap-south", Gateways: 1, Prefix: "aps"})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	for n, c := range before {
		if l.Gateways[n].Config() != c {
			t.Fatalf("%s's configuration changed", n)
		}
	}
	dstC := newHost(t, l, "trainer-c", "ap-south")
	moveAndCheck(t, ctx, src, dstC, "ap-south", 2)
	// And the other way, from the new region to an old one.
	moveAndCheck(t, ctx, dstC, dstB, lab.RegionB, 3)
	for _, n := range names {
		st := l.Gateways[n].Status()
		if len(st.Peers) != 2 {
			t.Errorf("%s has %d peers, want 2: %+v", n, len(st.Peers), st.Peers)
		}
	}
}

// moveAndCheck sends 40 messages over 4 flows from src to dst and checks
// each arrived once, byte-exact.
func moveAndCheck(t *testing.T, ctx context.Context, src, dst *host.Host, region string, seed uint64) {
	t.Helper()
	// A memory region of its own on dst (newTransfer's key is 7).
	tr := &transfer{t: t, src: src, dst: dst, key: 100 + uint32(seed), region: make([]byte, 4<<20),
		want: map[[2]uint64][]byte{}, addr: map[[2]uint64]uint64{}, got: map[[2]uint64]int{}}
	if err := dst.RegisterMemory(tr.key, tr.region); err != nil {
		t.Fatal(err)
	}
	rctx, rcancel := context.WithCancel(ctx)
	defer rcancel()
	go tr.receive(rctx)
	rng := rand.New(rand.NewPCG(seed, 1))
	var flows []*host.Flow
	for range 4 {
		f, err := lab.OpenFlow(ctx, src, region, dst.Name(), host.FlowOptions{}, t.Logf)
		if err != nil {
			t.Fatalf("open a flow to %s: %v", region, err)
		}
		flows = append(flows, f)
	}
	for i := range 40 {
		if err := tr.send(ctx, flows[i%len(flows)], rng); err != nil {
			t.Fatal(err)
		}
	}
	tr.wait(ctx)
	tr.check()
	for _, f := range flows {
		f.Close()
	}
}

// TestFlowsSpreadEvenlyAndOnlyTheDeadGatewaysMove: us-east has three
// gateways. The 24 flows of a host in eu-west are placed on them 8 each
// (the source gateway routes each flow to the WAN connection carrying
// the fewest); when use-gw2 is killed mid-transfer, only its flows move,
// 4 to each survivor, the flows on use-gw1 and use-gw3 stay, and no
// message is lost or delivered twice.
func TestFlowsSpreadEvenlyAndOnlyTheDeadGatewaysMove(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	l := labtest.Start(t, ctx, lab.Config{Direct: true, Regions: []lab.Region{
		{Name: lab.RegionA, Site: netem.SiteA, Gateways: 1, Prefix: "euw"},
		{Name: lab.RegionB, Site: netem.SiteB, Gateways: 3, Prefix: "use"},
	}})
	src := newHost(t, l, "loader", lab.RegionA)
	dst := newHost(t, l, "trainer", lab.RegionB)
	tr := newTransfer(t, src, dst, 64<<20)
	rctx, rcancel := context.WithCancel(ctx)
	defer rcancel()
	go tr.receive(rctx)
	bgws := l.Names[lab.RegionB]
	const nflows = 24
	gw := l.Gateways["euw-gw1"]
	// Placement departs from the rule only where the source gateway had
	// to (a gateway suspect or silent at that moment, an endpoint refused
	// by one gateway while its host re-registered): Detoured counts each
	// such route, and each excuses one flow more of difference between
	// the gateways' counts.
	detours := gw.Detoured()
	var flows []*host.Flow
	for range nflows {
		f, err := lab.OpenFlow(ctx, src, lab.RegionB, "trainer", host.FlowOptions{}, t.Logf)
		if err != nil {
			t.Fatal(err)
		}
		flows = append(flows, f)
	}
	first := gw.FlowRoutes()
	conns := wanConnsByPeer(t, gw, bgws)
	per := map[string]int{}
	for _, f := range flows {
		per[first[f.ID()]]++
	}
	t.Logf("flows per gateway of %s: %v", lab.RegionB, per)
	if d := gw.Detoured() - detours; uint64(spreadOf(per, bgws)) > 1+d {
		t.Fatalf("flows per gateway %v with %d detours counted: want counts within %d of each other", per, d, 1+d)
	}

	// Writers keep messages in flight on every flow; the victim dies once
	// every flow has completed messages (progress, not time).
	const victim = "use-gw2"
	var wg sync.WaitGroup
	errs := make(chan error, nflows)
	killed := make(chan struct{})
	var mu sync.Mutex
	done := map[uint64]int{}
	for i, f := range flows {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(i), 5))
			after := 0
			for n := 0; n < 60 && after < 5; n++ {
				if err := tr.send(ctx, f, rng); err != nil {
					errs <- err
					return
				}
				tr.mu.Lock()
				p := tr.pending[len(tr.pending)-1]
				tr.mu.Unlock()
				if err := p.Wait(ctx); err != nil {
					errs <- err
					return
				}
				mu.Lock()
				done[f.ID()]++
				mu.Unlock()
				select {
				case <-killed:
					after++
				default:
				}
			}
		}()
	}
	for {
		mu.Lock()
		ready := len(done) == nflows
		mu.Unlock()
		if ready {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("flows made no progress")
		case <-time.After(10 * time.Millisecond):
		}
	}
	detours = gw.Detoured()
	l.Gateways[victim].Close()
	close(killed)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	tr.wait(ctx)
	tr.check()

	after := gw.FlowRoutes()
	survivors := []string{bgws[0], bgws[2]}
	// A survivor whose WAN connection from gw was dropped meanwhile (a
	// silence drop or a control session that timed out while the machine
	// was starved: the connection gw holds to it now is another one, or
	// none) lost its flows as a dead one would; only such a survivor's
	// flows may move, and only such a survivor may be passed over.
	held := wanConnsByPeer(t, gw, survivors)
	lost := map[string]bool{}
	for _, n := range survivors {
		if held[n] == 0 || held[n] != conns[n] {
			lost[n] = true
		}
	}
	if len(lost) > 0 {
		t.Logf("WAN connections from euw-gw1 dropped during the run (their flows may move): %v", lost)
	}
	moved := 0
	perAfter := map[string]int{}
	for _, f := range flows {
		was, now := first[f.ID()], after[f.ID()]
		perAfter[now]++
		switch {
		case now == victim:
			t.Errorf("flow %x still relayed to the killed %s", f.ID(), victim)
		case was != victim && now != was && lost[was]:
			t.Logf("flow %x moved from %s to %s: gw lost its connection to %s", f.ID(), was, now, was)
		case was != victim && now != was:
			t.Errorf("flow %x moved from %s to %s although %s is alive", f.ID(), was, now, was)
		case was == victim:
			moved++
		}
	}
	t.Logf("%d flows of %s moved; flows per gateway now %v", moved, victim, perAfter)
	if d := gw.Detoured() - detours; len(lost) == 0 && uint64(spreadOf(perAfter, survivors)) > 1+d {
		t.Errorf("flows per surviving gateway %v with %d detours counted: want counts within %d of each other", perAfter, d, 1+d)
	}
}

// spreadOf is the difference between the largest and the smallest count
// of the gateways named.
func spreadOf(per map[string]int, names []string) int {
	lo, hi := per[names[0]], per[names[0]]
	for _, n := range names {
		lo, hi = min(lo, per[n]), max(hi, per[n])
	}
	return hi - lo
}

// wanConnsByPeer returns the ids of g's established WAN connections to
// the gateways named (0: none).
func wanConnsByPeer(t *testing.T, g *gateway.Gateway, names []string) map[string]uint64 {
	t.Helper()
	ids := map[metaroce.PeerID]string{}
	for _, n := range names {
		if id, ok := g.PeerID(n); ok {
			ids[id] = n
		}
	}
	out := map[string]uint64{}
	err := g.Endpoint().Call(context.Background(), func(_ time.Duration, ep *metaroce.Endpoint) {
		for _, c := range ep.Conns() {
			if n, ok := ids[c.Peer()]; ok && c.Established() && !c.Closed() {
				out[n] = c.ID()
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestEightFlowsTwoPerGatewayPair: two hosts of eu-west open 4 flows each
// to one host of us-east, two gateways per region. Each host puts 2 on
// each of its gateways, and each gateway 2 on each WAN connection: the
// four gateway pairs carry 2 flows each (rendezvous hashing alone put
// them 1/1/2/4 in the two-pairs load test). A re-open (of a flow a
// starved gateway reset) or a detour counted excuses one flow off.
func TestEightFlowsTwoPerGatewayPair(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	l := labtest.Start(t, ctx, lab.Config{Direct: true})
	srcs := []*host.Host{newHost(t, l, "h0", lab.RegionA), newHost(t, l, "h1", lab.RegionA)}
	newHost(t, l, "dst", lab.RegionB)
	agws := l.Names[lab.RegionA]
	excuses := func() (n uint64) {
		for _, g := range agws {
			n += l.Gateways[g].Detoured()
		}
		for _, h := range srcs {
			n += h.Stats().Reopens
		}
		return n
	}
	before := excuses()
	var flows []*host.Flow
	for i := range 8 {
		f, err := lab.OpenFlow(ctx, srcs[i%2], lab.RegionB, "dst", host.FlowOptions{}, t.Logf)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		flows = append(flows, f)
	}
	pairs := map[string]int{}
	for _, a := range agws {
		routes := l.Gateways[a].FlowRoutes()
		for _, f := range flows {
			if b, ok := routes[f.ID()]; ok {
				pairs[a+"->"+b]++
			}
		}
	}
	t.Logf("flows per gateway pair: %v", pairs)
	off, placed := 0, 0
	for _, a := range agws {
		for _, b := range l.Names[lab.RegionB] {
			n := pairs[a+"->"+b]
			placed += n
			off += max(n-2, 2-n)
		}
	}
	if placed != 8 {
		t.Fatalf("%d of 8 flows open at a gateway pair: %v", placed, pairs)
	}
	// A flow off its pair leaves one pair short and one over: two off.
	if d := excuses() - before; uint64(off) > 2*d {
		t.Fatalf("flows per gateway pair %v, want 2 each (%d re-opens and detours excuse %d off)", pairs, d, 2*d)
	}
}

// TestRegionRateSplitByGossip: gateways given their region's WAN capacity
// (wan.region_rate_bps) pace at their part of it among the region's live
// gateways, and a gateway that leaves gives its part to the others: two
// gateways of a region told 400 Mbit/s take 200 each, and the one left
// takes all 400. The key set by a reload takes the region's membership
// as it already is.
func TestRegionRateSplitByGossip(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	const rate = 400e6
	l := labtest.Start(t, ctx, lab.Config{Direct: true})
	for n, g := range l.Gateways {
		if v := gauge(t, g.Metrics().WANRateBps); v != 0 {
			t.Fatalf("%s paces at %.0f bit/s with no rate configured, want 0 (none)", n, v)
		}
		next := *g.Config()
		next.WAN.RegionRateBps = rate
		if err := g.Reload(&next); err != nil {
			t.Fatal(err)
		}
	}
	waitRate := func(name string, want float64) {
		t.Helper()
		g := l.Gateways[name]
		for gauge(t, g.Metrics().WANRateBps) != want {
			if ctx.Err() != nil {
				t.Fatalf("%s paces at %.0f bit/s, want %.0f", name, gauge(t, g.Metrics().WANRateBps), want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	for _, n := range []string{"euw-gw1", "euw-gw2", "use-gw1", "use-gw2"} {
		waitRate(n, rate/2)
	}
	if err := l.Gateways["euw-gw2"].Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	waitRate("euw-gw1", rate)
	waitRate("use-gw1", rate/2) // the other region's split is its own
}

// TestRegionRateSurvivesAKilledGateway: a gateway killed without a
// goodbye stops answering the survivor's direct probes, and the survivor
// takes its part of wan.region_rate_bps long before gossip declares it
// dead (here made to take at least 50 s: suspicion × 100).
func TestRegionRateSurvivesAKilledGateway(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	const rate = 400e6
	l := labtest.Start(t, ctx, lab.Config{Direct: true, RegionRateBps: rate, SuspicionMult: 100})
	g := l.Gateways["euw-gw1"]
	for gauge(t, g.Metrics().WANRateBps) != rate/2 {
		if ctx.Err() != nil {
			t.Fatalf("euw-gw1 paces at %.0f bit/s, want %.0f", gauge(t, g.Metrics().WANRateBps), rate/2)
		}
		time.Sleep(20 * time.Millisecond)
	}
	l.Gateways["euw-gw2"].Close()
	for gauge(t, g.Metrics().WANRateBps) != rate {
		if ctx.Err() != nil {
			t.Fatalf("euw-gw1 paces at %.0f bit/s after euw-gw2 was killed, want %.0f", gauge(t, g.Metrics().WANRateBps), rate)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if gw, _ := g.Cluster().View().Gateway("euw-gw2"); !gw.State.Live() {
		t.Fatalf("gossip declared euw-gw2 %s before the survivor took its part: the test shows nothing about direct probes", gw.State)
	}
}
