//go:build linux

package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/mrgw/mrgw/gateway"
	"github.com/mrgw/mrgw/loadtest/lab"
	"github.com/mrgw/mrgw/loadtest/lab/labtest"
)

// TestProbeThroughLab: `mrgw probe` against the lab's us-east region from
// euw-gw1, over the emulator (4 ECMP planes, 20 ms RTT, 2% loss): per
// peer, one configured plane whose 16 source ports reached several of the
// emulator's planes, with RTT, loss and MTU; as a table and as JSON, in a
// few seconds.
func TestProbeThroughLab(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	l := labtest.Start(t, ctx, lab.Config{Admin: true, OneWay: 10 * time.Millisecond, Loss: 0.02, Seed: 3})
	admin := l.Gateways["euw-gw1"].AdminAddr()
	// The probe runs on euw-gw1's WAN connections: both were up at
	// WaitReady, but on a starved machine one may be dropped as silent and
	// dialled again right after (load 17: "use-gw1: planes []"), so wait
	// until both are up again (progress, bounded by ctx).
	for up := 0; up < 2; {
		up = 0
		for _, p := range l.Gateways["euw-gw1"].Status().Peers {
			if p.State == "up" {
				up++
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("euw-gw1 has %d WAN connections up, want 2", up)
		case <-time.After(20 * time.Millisecond):
		}
	}
	start := time.Now()
	out, errOut, err := run(t, "probe", "--admin", admin, "--region", "us-east", "--rounds", "40", "--every", "25ms", "--json")
	if err != nil {
		t.Fatalf("probe: %v %s", err, errOut)
	}
	took := time.Since(start)
	var res gateway.ProbeResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if len(res.Peers) != 2 {
		t.Fatalf("peers %+v", res.Peers)
	}
	for _, p := range res.Peers {
		if len(p.Planes) != 1 {
			t.Fatalf("%s: planes %+v", p.Name, p.Planes)
		}
		pl := p.Planes[0]
		t.Logf("%s %s: %d paths, rtt %.2f/%.2f/%.2f ms, loss %.1f%%, ecn %.1f%%, pmtu %d (%s, data %v), ecmp paths %d (%s)",
			p.Name, pl.Plane, pl.Paths, pl.RTTMin, pl.RTTAvg, pl.RTTMax, 100*pl.Loss, 100*pl.ECN, pl.PMTU, pl.PMTUState, pl.Data, pl.ECMPPaths, pl.ECMPMethod)
		if pl.Paths != 16 || pl.Sent != 16*40 || pl.ECMPMethod != "emulator" || pl.ECMPPaths < 2 || pl.ECMPPaths > 4 {
			t.Errorf("%s: %+v", p.Name, pl)
		}
		if pl.RTTMin < 19 || pl.RTTMin > 30 || pl.Loss <= 0 || pl.Loss > 0.1 || pl.PMTU != 1400+56+28 || !pl.Data {
			// pmtu: the lab's 1,400 bytes of payload behind wire v2's
			// 28-byte DATA header and the 28-byte envelope, plus IPv4 and
			// UDP (the gateways agree version 2 with each other).
			t.Errorf("%s: rtt %.2f ms, loss %.3f (both directions at 2%%: about 4%%), pmtu %d (want %d)", p.Name, pl.RTTMin, pl.Loss, pl.PMTU, 1400+56+28)
		}
	}
	t.Logf("probe took %v", took)
	table, _, err := run(t, "probe", "--admin", admin, "--region", "us-east", "--rounds", "5", "--every", "10ms")
	if err != nil || !strings.Contains(table, "ECMP PATHS") || !strings.Contains(table, "use-gw1") || !strings.Contains(table, "(emulator)") {
		t.Fatalf("table: %v\n%s", err, table)
	}
	t.Logf("\n%s", table)
	if _, _, err := run(t, "probe", "--admin", admin, "--region", "nowhere"); err == nil {
		t.Fatal("a probe of an unknown region succeeded")
	}
}
