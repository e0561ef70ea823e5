//go:build linux

package gateway_test

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/mrgw/mrgw/loadtest/lab/labtest"

	"github.com/mrgw/mrgw/host"
	"github.com/mrgw/mrgw/loadtest/lab"
	"github.com/mrgw/mrgw/metaroce"
	"github.com/mrgw/mrgw/units"
)

// TestHostReceiveCapacityBoundsGatewayRate: a host that declares its
// receive capacity has the destination gateways' LAN controllers paced
// within it (a rate hint), and Status lists the connection to it. Without
// a hint the gateways' dc-aimd on the LAN hop had no scale at all (no
// lan.max_rate_bps): its rate fell to zero when the host's paths went down
// for a moment, or grew without bound (mrgw-lab loadtest incast, --trace).
func TestHostReceiveCapacityBoundsGatewayRate(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	l := labtest.Start(t, ctx, lab.Config{OneWay: 5 * time.Millisecond})
	const capacity units.BitRate = 400e6
	src := newHost(t, l, "src", lab.RegionA)
	dst, err := host.New(host.Config{Name: "dst", Region: lab.RegionB, Gateways: l.HostGateways(lab.RegionB), Key: l.HostKey,
		DeadAfter: time.Second, OpenTimeout: hostOpenTimeout, Logger: labtest.Logger(), Protocol: metaroce.Config{ReceiveCapacity: capacity}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dst.Close() })
	tr := newTransfer(t, src, dst, 64<<20)
	rctx, rcancel := context.WithCancel(ctx)
	defer rcancel()
	go tr.receive(rctx)
	rng := rand.New(rand.NewPCG(3, 4))
	var flows []*host.Flow
	for range 4 {
		f, err := lab.OpenFlow(ctx, src, lab.RegionB, "dst", host.FlowOptions{}, t.Logf)
		if err != nil {
			t.Fatal(err)
		}
		flows = append(flows, f)
	}
	for i := range 200 {
		if err := tr.send(ctx, flows[i%len(flows)], rng); err != nil {
			t.Fatal(err)
		}
	}
	tr.wait(ctx)
	tr.check()
	// The status snapshot is refreshed periodically: wait for one that
	// shows the link after the traffic.
	seen := 0
	for seen == 0 && ctx.Err() == nil {
		seen = 0
		for _, n := range l.Names[lab.RegionB] {
			for _, hl := range l.Gateways[n].Status().HostLinks {
				if hl.Endpoint != "dst" || hl.Sent == 0 {
					continue
				}
				seen++
				if hl.PacingBps <= 0 || hl.PacingBps > capacity.Bytes()*1.001 {
					t.Fatalf("%s -> dst paced at %.0f B/s, want within (0, %.0f]", n, float64(hl.PacingBps), float64(capacity.Bytes()))
				}
				if hl.PathsUp == 0 {
					t.Errorf("%s -> dst: no path up after a transfer", n)
				}
			}
		}
		if seen == 0 {
			time.Sleep(100 * time.Millisecond)
		}
	}
	if seen == 0 {
		t.Fatal("no gateway status listed a host link to dst that carried data")
	}
}
