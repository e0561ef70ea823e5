package gateway

import (
	"testing"
	"time"

	"github.com/mrgw/mrgw/cc"
	_ "github.com/mrgw/mrgw/cc/longrtt" // registers longrtt-htcp
	"github.com/mrgw/mrgw/config"
)

// TestWANParamsCarryEgress: the WAN controllers' parameters carry the
// gateway's egress share of wan.max_rate_bps, so that
// two connections told the whole capacity by their receivers pace at
// half of it each, not at all of it (the line rate capped each connection
// alone); an unlimited rate has no Egress; a live reload sets the new
// capacity on the Egress the open connections hold, and a reload to
// unlimited lifts their ceiling.
func TestWANParamsCarryEgress(t *testing.T) {
	const capacity = 1e9 // bit/s
	cfg, g := egressGateway(capacity)
	p := wanParams(cfg, wanRate(cfg, regionPart{}), g.egress)
	if p.Egress == nil || p.Egress != g.egress || p.LineRate != wanRate(cfg, regionPart{}) || p.BaseRTT != 50*time.Millisecond {
		t.Fatalf("wanParams = %+v, want the gateway's Egress, line rate %g, base RTT 50ms", p, float64(wanRate(cfg, regionPart{})))
	}
	f, err := controller("longrtt-htcp", p)
	if err != nil {
		t.Fatal(err)
	}
	const pkt = 1400
	c1, c2 := f(4, pkt), f(4, pkt)
	whole := wanRate(cfg, regionPart{}).Bytes() // the capacity less the datagrams' headers
	c1.OnRateHint(0, whole)                     // each receiver has no other sender
	c2.OnRateHint(0, whole)
	// Both send for a second at what they may.
	var now time.Duration
	for now < time.Second {
		now += 100 * time.Microsecond
		for _, c := range []cc.Controller{c1, c2} {
			for b := float64(c.PacingRate()) * 100e-6; b > 0; b -= pkt {
				c.OnSent(now, 0, pkt)
			}
		}
	}
	half := cc.EgressUtilisation * float64(whole) / 2
	for i, c := range []cc.Controller{c1, c2} {
		if r := float64(c.PacingRate()); r > 1.01*half || r < 0.9*half {
			t.Errorf("connection %d paces at %.4g B/s, want its egress share %.4g (capacity %.4g)", i, r, half, float64(whole))
		}
	}

	old := g.egress
	g.reloadEgress(wanRate(cfg, regionPart{}) / 2)
	if g.egress != old {
		t.Fatal("a new capacity replaced the Egress: the open connections would not see it")
	}
	if l, want := float64(old.Level(now)), cc.EgressUtilisation*float64(whole)/2/2; l != want {
		t.Errorf("after a reload to half the capacity the level is %.4g B/s, want %.4g (the equal split of the new capacity for two)", l, want)
	}

	g.reloadEgress(0)
	cfg.WAN.MaxRateBps = 0
	if g.egress != old || wanParams(cfg, wanRate(cfg, regionPart{}), g.egress).Egress != old {
		t.Fatal("a reload to an unlimited wan.max_rate_bps dropped the Egress the open connections hold")
	}
	c1.OnSent(now+time.Millisecond, 0, pkt)
	if r := float64(c1.PacingRate()); r < float64(whole) {
		t.Errorf("after a reload to an unlimited rate the connection paces at %.4g B/s, want its receiver's hint %.4g", r, float64(whole))
	}
}

// TestReloadEgressZeroAndBack: wan.max_rate_bps reloaded to 0 (unlimited)
// and back to a limit shares the limit among the connections that stayed
// open all along. reloadEgress dropped the Egress on the reload to 0 and
// made a new one for the limit, which only connections opened after it
// shared: the two open ones kept the dropped Egress at capacity 0 and each
// paced at its receiver's hint, the whole capacity, twice the limit in
// total.
func TestReloadEgressZeroAndBack(t *testing.T) {
	const capacity = 1e9 // bit/s
	cfg, g := egressGateway(capacity)
	f, err := controller("longrtt-htcp", wanParams(cfg, wanRate(cfg, regionPart{}), g.egress))
	if err != nil {
		t.Fatal(err)
	}
	const pkt = 1400
	whole := wanRate(cfg, regionPart{}).Bytes()
	conns := []cc.Controller{f(4, pkt), f(4, pkt)}
	for _, c := range conns {
		c.OnRateHint(0, whole) // each receiver has no other sender
	}
	var now time.Duration
	send := func(d time.Duration) {
		for end := now + d; now < end; {
			now += 100 * time.Microsecond
			for _, c := range conns {
				for b := float64(c.PacingRate()) * 100e-6; b > 0; b -= pkt {
					c.OnSent(now, 0, pkt)
				}
			}
		}
	}
	send(time.Second)
	g.reloadEgress(0)
	send(time.Second)
	for i, c := range conns {
		if r := float64(c.PacingRate()); r < float64(whole) {
			t.Errorf("unlimited: connection %d paces at %.4g B/s, want its receiver's hint %.4g", i, r, float64(whole))
		}
	}
	g.reloadEgress(wanRate(cfg, regionPart{}))
	send(time.Second)
	half := cc.EgressUtilisation * float64(whole) / 2
	for i, c := range conns {
		if r := float64(c.PacingRate()); r > 1.01*half || r < 0.9*half {
			t.Errorf("limit back: connection %d paces at %.4g B/s, want its egress share %.4g of %.4g", i, r, half, float64(whole))
		}
	}
}

// egressGateway is a gateway of one region at 50 ms whose WAN is limited
// to capacity bit/s, with the Egress New would give it.
func egressGateway(capacity int64) (*config.Config, *Gateway) {
	cfg := &config.Config{}
	cfg.WAN.MaxRateBps, cfg.WAN.MTU = capacity, 1400
	cfg.Regions = []config.Region{{RTTHint: 50 * time.Millisecond}}
	return cfg, &Gateway{egress: newEgress(wanRate(cfg, regionPart{}), slowestHint(cfg))}
}

// TestWANParamsCarryClassicFallback: wan.classic_fallback reaches the WAN
// controllers' parameters (off unless set), so that the operator's choice
// for a WAN shared with classic-ECN traffic is the controllers' too.
func TestWANParamsCarryClassicFallback(t *testing.T) {
	cfg, g := egressGateway(1e9)
	if wanParams(cfg, wanRate(cfg, regionPart{}), g.egress).ClassicFallback {
		t.Fatal("the classic fallback is on without wan.classic_fallback")
	}
	cfg.WAN.ClassicFallback = true
	if !wanParams(cfg, wanRate(cfg, regionPart{}), g.egress).ClassicFallback {
		t.Fatal("wan.classic_fallback: true does not reach the controllers' parameters")
	}
}
