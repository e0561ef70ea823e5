package gateway

import (
	"testing"

	"github.com/mrgw/mrgw/config"
	"github.com/mrgw/mrgw/region"
	"github.com/mrgw/mrgw/units"
)

// TestWANRateTakesOutHeaders: wan.max_rate_bps is a rate on the wire; the
// controllers are given it less each datagram's AEAD envelope and IP and
// UDP headers, so that paced at it they fill the link and no more.
func TestWANRateTakesOutHeaders(t *testing.T) {
	for _, tc := range []struct {
		local string
		want  units.BitRate
	}{
		{"10.0.0.1:4791", units.BitRate(1e9 * 1428.0 / 1484.0)},
		{"[2001:db8::1]:4791", units.BitRate(1e9 * 1428.0 / 1504.0)},
	} {
		cfg := &config.Config{}
		cfg.WAN.MTU, cfg.WAN.MaxRateBps = 1400, 1e9
		cfg.WAN.Planes = []config.Plane{{Name: "p0", Local: tc.local}}
		if got := wanRate(cfg, regionPart{}); got != tc.want {
			t.Errorf("%s: wanRate %v, want %v", tc.local, got, tc.want)
		}
	}
	cfg := &config.Config{}
	cfg.WAN.MTU = 1400
	if got := wanRate(cfg, regionPart{}); got != 0 {
		t.Errorf("no max rate: %v, want 0 (none)", got)
	}
}

// TestRegionShare: a gateway's part of wan.region_rate_bps is its
// node.capacity over the sum over its region's live gateways (itself
// included; other regions, dead and departed gateways do not count), and
// with wan.max_rate_bps too it takes the smaller.
func TestRegionShare(t *testing.T) {
	cfg := &config.Config{}
	cfg.Node = config.Node{Name: "euw-gw1", Region: "eu-west"} // capacity 0: the default, 100
	cfg.WAN.RegionRateBps = 1e9
	gw := func(name string, capacity uint32, st region.State) region.Gateway {
		return region.Gateway{Name: name, Meta: region.Meta{Region: "eu-west", Capacity: capacity}, State: st}
	}
	view := region.View{Self: "euw-gw1", Regions: map[string][]region.Gateway{
		"eu-west": {
			gw("euw-gw1", 0, region.Alive), // itself: counted once, from its own configuration
			gw("euw-gw2", 300, region.Alive),
			gw("euw-gw3", 0, region.Suspect), // routed to, so counted
			gw("euw-gw4", 500, region.Dead),
			gw("euw-gw5", 500, region.Left),
		},
		"us-east": {gw("use-gw1", 900, region.Alive)},
	}}
	s := shareOf(cfg, view, func(string) bool { return false })
	if s != (regionShare{mine: 100, total: 500}) {
		t.Fatalf("share %+v, want 100 of 500", s)
	}
	if s3 := shareOf(cfg, view, func(n string) bool { return n == "euw-gw3" }); s3 != (regionShare{mine: 100, total: 400}) {
		t.Errorf("with euw-gw3 silent to direct probes: share %+v, want 100 of 400", s3)
	}
	if got, want := wanWire(cfg, regionPart{share: s}), units.BitRate(2e8); got != want {
		t.Errorf("region rate alone: %v, want %v", got, want)
	}
	cfg.WAN.MaxRateBps = 1e8
	if got, want := wanWire(cfg, regionPart{share: s}), units.BitRate(1e8); got != want {
		t.Errorf("max rate below the share: %v, want %v", got, want)
	}
	cfg.WAN.MaxRateBps = 5e8
	if got, want := wanWire(cfg, regionPart{share: s}), units.BitRate(2e8); got != want {
		t.Errorf("share below the max rate: %v, want %v", got, want)
	}
	if got, want := wanWire(cfg, regionPart{}), units.BitRate(5e8); got != want {
		t.Errorf("alone before gossip: %v, want the smaller of the whole region rate and the max rate, %v", got, want)
	}
	cfg.WAN.RegionRateBps = 0
	if got, want := wanWire(cfg, regionPart{share: s}), units.BitRate(5e8); got != want {
		t.Errorf("no region rate: %v, want the max rate %v", got, want)
	}
	if unpackShare(packShare(s)) != s {
		t.Errorf("share does not survive packing: %+v", unpackShare(packShare(s)))
	}
}
