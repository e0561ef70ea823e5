//go:build linux

package gateway_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mrgw/mrgw/config"
	"github.com/mrgw/mrgw/gateway"
	"github.com/mrgw/mrgw/host"
	"github.com/mrgw/mrgw/loadtest/lab"
	"github.com/mrgw/mrgw/metaroce"
	"github.com/mrgw/mrgw/netem"
)

// wanPMTU returns the path MTU discovery of g's WAN connection (the one
// connection that runs it), nil before it is established.
func wanPMTU(t *testing.T, ctx context.Context, g *gateway.Gateway) []metaroce.PMTUGroup {
	t.Helper()
	var out []metaroce.PMTUGroup
	if err := g.Endpoint().Call(ctx, func(_ time.Duration, ep *metaroce.Endpoint) {
		for _, c := range ep.Conns() {
			if p := c.PMTU(); p != nil {
				out = p
			}
		}
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// slowestPathRTT is the largest smoothed RTT among g's WAN paths (its
// status snapshot, refreshed every StatsEvery), 0 before any is measured.
func slowestPathRTT(g *gateway.Gateway) time.Duration {
	var ms float64
	for _, p := range g.Status().Peers {
		for _, pa := range p.Paths {
			ms = max(ms, pa.RTT)
		}
	}
	return time.Duration(ms * float64(time.Millisecond))
}

// sizeDrops sums the datagrams the emulators dropped for size, both ways.
func sizeDrops(pl *planeLab) []uint64 {
	out := make([]uint64, len(pl.emus))
	for k, e := range pl.emus {
		st := e.Stats()
		out[k] = st.Links[netem.AtoB][0].SizeDrops + st.Links[netem.BtoA][0].SizeDrops
	}
	return out
}

// TestPMTUThroughEmulator is PLPMTUD through the loopback emulator: plane
// p0 clamped to a 1,280-byte MTU, p1 to 9,000, wan.mtu 8916 (the gateways
// speak wire version 2 to each other: a full data datagram of 8972 bytes,
// a 9,000-byte IP packet). Each plane settles on
// its own size within a few round trips; afterwards nothing is dropped for
// size while a host transfer runs (data uses only the plane that carries
// it); then the clamps swap mid-run and each plane follows (p1 by the
// confirmation, p0 by the raise timer). The figures are in docs/RESULTS.md.
func TestPMTUThroughEmulator(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	const oneWay = 10 * time.Millisecond
	const confirm, raise = 300 * time.Millisecond, 4 * time.Second
	var logs lockedBuffer // the gateways' warnings: the black hole must be logged
	pl := newPlaneLab(t, planeLabConfig{planes: 2, paths: 8, oneWay: oneWay,
		gws:  map[string][]string{"west": {"w1"}, "east": {"e1"}},
		mtus: []int{1280, 9000}, maxDatagram: 9100,
		tweak: func(_ string, c *config.Config) { c.WAN.MTU = 8916 },
		options: func(o *gateway.Options) {
			// RetryInterval as long as the raise: the retries of a full
			// data datagram on a plane settled below it (1 s, 3 s, ...)
			// are dropped for size by design, and this test counts
			// every such drop after settling as a failure.
			o.PMTU = metaroce.PMTUConfig{ConfirmInterval: confirm, RaiseInterval: raise, RetryInterval: raise}
			// The search runs on one WAN connection for the whole test:
			// one dropped as silent and dialled again (under -race at
			// load 12-16 the gateways went unscheduled past the plane
			// lab's 1 s DeadAfter) starts a fresh search, and the swap
			// below would be judged on it. Liveness is not what this
			// test is about: 10 s of silence, and 10 control keepalives.
			base := o.Protocol
			o.Protocol = func(p *metaroce.Config) {
				base(p)
				p.DeadAfter = 10 * time.Second
			}
			o.ControlMisses = 40
			o.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))

		}})
	g := pl.gws["w1"]
	var start time.Time
	var groups []metaroce.PMTUGroup
	settled := func(want0, want1 int) time.Duration {
		t.Helper()
		for {
			groups = wanPMTU(t, ctx, g)
			if groups != nil && start.IsZero() {
				start = time.Now()
			}
			if len(groups) == 2 && groups[0].State == metaroce.PMTUComplete && groups[1].State == metaroce.PMTUComplete &&
				groups[0].Size <= want0 && groups[0].Size > want0-16 && groups[1].Size <= want1 && groups[1].Size > want1-16 {
				return time.Since(start)
			}
			select {
			case <-ctx.Done():
				t.Fatalf("not settled on %d and %d: %+v", want0, want1, groups)
			case <-time.After(2 * time.Millisecond):
			}
		}
	}
	took := settled(1280-28, 9000-28)
	t.Logf("settled: p0 %d bytes (1,280 MTU), p1 %d (9,000 MTU) %v after the connection came up (RTT %v); probes p0 %d sent %d lost, p1 %d sent %d lost",
		groups[0].Size, groups[1].Size, took.Round(time.Millisecond), 2*oneWay,
		groups[0].Stats.ProbesSent, groups[0].Stats.ProbesLost, groups[1].Stats.ProbesSent, groups[1].Stats.ProbesLost)
	// Forty round trips as the connection measured them, not as the
	// emulator was configured: on a starved machine every round trip, a
	// probe's included, takes longer than the emulator's 20 ms (under
	// -race at load 12-16 settling took 3.8 s, 190 configured RTTs, the
	// paths' smoothed RTT then up to tens of ms), and the search is judged
	// in the round trips it had.
	if rtt := max(2*oneWay, slowestPathRTT(g)); took > 40*rtt {
		t.Errorf("settling took %v, more than 40 RTTs (%v, the slowest path's smoothed RTT or the emulator's)", took, rtt)
	}
	if groups[0].Data || !groups[1].Data {
		t.Fatalf("data on p0 %v, p1 %v; want only p1 (the data datagram is 8972 bytes)", groups[0].Data, groups[1].Data)
	}

	// A host transfer through the WAN connection, while nothing may be
	// dropped for size.
	pl.waitReady(t, ctx)
	src := pl.hostVia(t, "src", "w1")
	dst := pl.hostVia(t, "dst", "e1")
	const region = 8 << 20
	if err := dst.RegisterMemory(1, make([]byte, region)); err != nil {
		t.Fatal(err)
	}
	f, err := lab.OpenFlow(ctx, src, "east", "dst", host.FlowOptions{}, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var written atomic.Int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		data := make([]byte, 64<<10)
		for i := range 4000 { // bounded: at most 250 MiB
			if _, err := f.Write(wctx, 1, uint64(i*len(data))%(region-uint64(len(data))), data); err != nil {
				return
			}
			written.Add(1)
			select {
			case <-wctx.Done():
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	defer func() { wcancel(); wg.Wait() }()
	before := sizeDrops(pl)
	time.Sleep(time.Second)
	after := sizeDrops(pl)
	t.Logf("steady 1 s with a host transfer (%d KiB written): size drops p0 %d, p1 %d", written.Load()*64, after[0]-before[0], after[1]-before[1])
	for k := range after {
		if after[k] != before[k] {
			st := pl.emus[k].Stats()
			t.Errorf("plane p%d: %d datagrams dropped for size after settling (the last dropped: %d bytes A→B, %d B→A)",
				k, after[k]-before[k], st.Links[netem.AtoB][0].SizeDropLast, st.Links[netem.BtoA][0].SizeDropLast)
		}
	}

	// The clamps swap: p1 shrinks to 1,500 (found by the confirmation),
	// p0 grows to 9,000 (found by the raise timer).
	if err := pl.emus[1].SetMTU(0, 1500); err != nil {
		t.Fatal(err)
	}
	if err := pl.emus[0].SetMTU(0, 9000); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	var lowered time.Duration
	for lowered == 0 {
		groups = wanPMTU(t, ctx, g)
		if len(groups) != 2 {
			t.Fatalf("the WAN connection is gone during the swap (%d groups): %+v", len(groups), g.Status().Peers)
		}
		if groups[1].State == metaroce.PMTUComplete && groups[1].Size <= 1500-28 && groups[1].Size > 1500-28-16 {
			lowered = time.Since(start)
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("p1 did not follow its clamp down to 1500: %+v", groups)
		case <-time.After(2 * time.Millisecond):
		}
	}
	took = settled(9000-28, 1500-28)
	t.Logf("clamps swapped: p1 down to %d bytes after %v (confirmation every %v), p0 up to %d after %v (raise timer %v); black holes p1 %d",
		groups[1].Size, lowered.Round(time.Millisecond), confirm, groups[0].Size, took.Round(time.Millisecond), raise, groups[1].Stats.BlackHoles)
	if !groups[0].Data || groups[1].Data {
		t.Fatalf("after the swap: data on p0 %v, p1 %v; want only p0", groups[0].Data, groups[1].Data)
	}
	// p1's shrink is found either by a black-hole verdict (confirmations
	// lost in a row), which the gateway must log at warn (watchSilence,
	// within DeadAfter/50), or by a search that suspects the size first
	// (PROTOCOL.md §6a), which is not a verdict.
	for groups[1].Stats.BlackHoles > 0 && !strings.Contains(logs.String(), "path MTU black hole") {
		select {
		case <-ctx.Done():
			t.Fatalf("p1's black hole (%d verdicts) was never logged; warnings:\n%s", groups[1].Stats.BlackHoles, logs.String())
		case <-time.After(5 * time.Millisecond):
		}
	}
	// After re-settling only probes may be too big: a size the search
	// only suspected is tried again (PROTOCOL.md §6a), and that probe is
	// dropped by the clamp by design. DATA never is: at most as many
	// drops as probes sent in the window.
	probesBefore := wanPMTU(t, ctx, g)
	before = sizeDrops(pl)
	time.Sleep(time.Second)
	after = sizeDrops(pl)
	probesAfter := wanPMTU(t, ctx, g)
	t.Logf("steady 1 s after the swap: size drops p0 %d, p1 %d", after[0]-before[0], after[1]-before[1])
	for k := range after {
		probes := probesAfter[k].Stats.ProbesSent - probesBefore[k].Stats.ProbesSent
		if after[k]-before[k] > probes {
			st := pl.emus[k].Stats()
			t.Errorf("plane p%d: %d datagrams dropped for size after re-settling, only %d of them probes (the last dropped: %d bytes A→B, %d B→A; groups %+v)",
				k, after[k]-before[k], probes, st.Links[netem.AtoB][0].SizeDropLast, st.Links[netem.BtoA][0].SizeDropLast, probesAfter)
		}
	}
	// Status and metrics show it.
	time.Sleep(300 * time.Millisecond) // a status snapshot
	st := g.Status()
	if len(st.Peers) != 1 || len(st.Peers[0].PMTU) != 2 {
		t.Fatalf("status pmtu: %+v", st.Peers)
	}
	p0 := st.Peers[0].PMTU[0]
	if p0.Plane != "p0" || p0.PMTU != p0.Datagram+28 || p0.PMTU < 9000-16 || !p0.Data || p0.DataDatagram != 8972 {
		t.Fatalf("status of p0: %+v", p0)
	}
	t.Logf("status: %s", fmt.Sprintf("%+v", st.Peers[0].PMTU))
}
