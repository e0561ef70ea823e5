//go:build linux

package main

import (
	"bytes"
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/mrgw/mrgw/gateway"
)

// A path or control session that has not measured an RTT shows "unknown"
// in the table and has no RTT in the JSON, never 0.
func TestStatusUnknownRTT(t *testing.T) {
	st := gateway.Status{Node: "euw-gw1", Region: "eu-west", Peers: []gateway.PeerStatus{{
		Name: "use-gw1", Region: "us-east", State: "connecting",
		Paths: []gateway.PathStatus{
			{ID: 0, Plane: "plane-a", State: "up", RTT: 40.2, MinRTT: 39.9},
			{ID: 1, Plane: "plane-b", State: "probing"},
		},
	}}}
	var b bytes.Buffer
	printStatus(&b, &st, true)
	out := b.String()
	for _, re := range []string{
		`(?m)^use-gw1\s+us-east\s+connecting\s+unknown\s`,
		`(?m)^0\s+plane-a\s+up\s+40\.2 ms\s+39\.9 ms\s`,
		`(?m)^1\s+plane-b\s+probing\s+unknown\s+unknown\s`,
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("table does not match %s:\n%s", re, out)
		}
	}
	if strings.Contains(out, "0.0 ms") {
		t.Errorf("an unmeasured RTT printed as 0:\n%s", out)
	}

	j, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	var back struct {
		Peers []struct {
			ControlRTT *float64 `json:"control_rtt_ms"`
			Paths      []struct {
				RTT    *float64 `json:"rtt_ms"`
				MinRTT *float64 `json:"min_rtt_ms"`
			} `json:"paths"`
		} `json:"peers"`
	}
	if err := json.Unmarshal(j, &back); err != nil {
		t.Fatal(err)
	}
	p := back.Peers[0]
	if p.ControlRTT != nil || p.Paths[1].RTT != nil || p.Paths[1].MinRTT != nil {
		t.Errorf("unmeasured RTTs in the JSON: %s", j)
	}
	if p.Paths[0].RTT == nil || *p.Paths[0].RTT != 40.2 {
		t.Errorf("measured RTT lost: %s", j)
	}
}

// The WAN rate line says where the rate comes from: none, the gateway's
// own, or its share of the region's.
func TestStatusWANRate(t *testing.T) {
	for _, tc := range []struct {
		st   gateway.Status
		want string
	}{
		{gateway.Status{}, "WAN rate: none configured\n"},
		{gateway.Status{WANRate: 1e9}, "WAN rate 1.00 Gbit/s\n"},
		{gateway.Status{WANRate: 2e8, RegionShare: "100/200"}, "WAN rate 200.0 Mbit/s (the region's rate, share 100/200)\n"},
		{gateway.Status{WANRate: 3.75e8, RegionShare: "100/200", RegionDemand: &gateway.RegionDemandStatus{FairBps: 2e8, PartBps: 3.75e8, DemandBps: 3.6e8, Limited: true}},
			"WAN rate 375.0 Mbit/s (the region's rate by demand: part 375.0 Mbit/s, fair part 200.0 Mbit/s, share 100/200; demand 360.0 Mbit/s, limited by its part)\n"},
	} {
		var b bytes.Buffer
		printStatus(&b, &tc.st, false)
		if !strings.Contains(b.String(), tc.want) {
			t.Errorf("status of %+v lacks %q:\n%s", tc.st, tc.want, b.String())
		}
	}
}
