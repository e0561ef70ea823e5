package gateway

import (
	"testing"

	"github.com/mrgw/mrgw/config"
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
		if got := wanRate(cfg); got != tc.want {
			t.Errorf("%s: wanRate %v, want %v", tc.local, got, tc.want)
		}
	}
	cfg := &config.Config{}
	cfg.WAN.MTU = 1400
	if got := wanRate(cfg); got != 0 {
		t.Errorf("no max rate: %v, want 0 (none)", got)
	}
}
