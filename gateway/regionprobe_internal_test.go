//go:build linux

package gateway

import "testing"

// A region gateway is silent after regionProbeMisses probes missed in a
// row, and no longer once it answers one; one probe at a time each; a
// gateway that left the region is forgotten.
func TestRegionProbeStanding(t *testing.T) {
	p := newRegionProbe()
	if !p.start("gw2") || p.start("gw2") {
		t.Fatal("a second probe of gw2 started while one was in flight")
	}
	if p.observe("gw2", false) || p.silent("gw2") {
		t.Fatal("one missed probe made gw2 silent")
	}
	if !p.start("gw2") {
		t.Fatal("no probe of gw2 after the last one ended")
	}
	if !p.observe("gw2", false) || !p.silent("gw2") {
		t.Fatal("two missed probes in a row did not make gw2 silent")
	}
	if p.observe("gw2", false) {
		t.Error("a third miss reported a change of standing")
	}
	if !p.observe("gw2", true) || p.silent("gw2") {
		t.Fatal("an answered probe did not end gw2's silence")
	}
	p.observe("gw3", false)
	p.observe("gw3", false)
	p.prune(map[string]bool{"gw2": true})
	if p.silent("gw3") {
		t.Error("gw3 left the region and is still counted silent")
	}
}
