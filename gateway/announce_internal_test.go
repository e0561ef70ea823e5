//go:build linux

package gateway

import (
	"net/netip"
	"testing"

	"github.com/mrgw/mrgw/config"
	"github.com/mrgw/mrgw/region"
)

// TestGossipAnnouncesAdvertise: the gossip metadata carries
// control.advertise and wan.planes[].advertise where they are given, the
// listen addresses where not. Before, control.listen was announced as it
// was, 0.0.0.0 for a wildcard, and other regions had to pin the address
// with a regions[].gateways[].control override.
func TestGossipAnnouncesAdvertise(t *testing.T) {
	cfg := config.Default()
	cfg.Node.Name, cfg.Node.Region = "gw1", "r1"
	cfg.Control.Listen, cfg.Control.Advertise = "0.0.0.0:7443", "192.0.2.1:443"
	cfg.WAN.Planes = []config.Plane{
		{Name: "a", Local: "0.0.0.0:15000", Advertise: "192.0.2.1:25000"},
		{Name: "b", Local: "198.51.100.1:15001"},
	}
	rc, err := (&Gateway{}).regionConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if want := netip.MustParseAddrPort("192.0.2.1:443"); rc.Meta.Control != want {
		t.Errorf("announced control %v, want control.advertise %v", rc.Meta.Control, want)
	}
	wantPlanes := []region.Plane{
		{Name: "a", WAN: netip.MustParseAddrPort("192.0.2.1:25000")},
		{Name: "b", WAN: netip.MustParseAddrPort("198.51.100.1:15001")},
	}
	if len(rc.Meta.Planes) != len(wantPlanes) || rc.Meta.Planes[0] != wantPlanes[0] || rc.Meta.Planes[1] != wantPlanes[1] {
		t.Errorf("announced planes %v, want %v", rc.Meta.Planes, wantPlanes)
	}

	// Without advertise, the (specific) listen address is announced.
	cfg.Control.Listen, cfg.Control.Advertise = "198.51.100.1:7443", ""
	if rc, err = (&Gateway{}).regionConfig(cfg); err != nil {
		t.Fatal(err)
	}
	if want := netip.MustParseAddrPort("198.51.100.1:7443"); rc.Meta.Control != want {
		t.Errorf("announced control %v, want control.listen %v", rc.Meta.Control, want)
	}
}
