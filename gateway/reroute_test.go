//go:build linux

package gateway_test

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/mrgw/mrgw/host"
	"github.com/mrgw/mrgw/loadtest/lab"
)

// TestOpenReachesHostRegisteredAtOneGateway: a destination host known to
// only one gateway of its pair (its other connection is down, here never
// made) is still reachable by every flow. A source gateway picks the
// destination gateway by flow id; the one that does not know the endpoint
// answers "unknown endpoint" and the source gateway must try the region's
// other gateway instead of failing the flow (before: about half of the
// flows were refused, on every retry, until the host's FailAfter).
func TestOpenReachesHostRegisteredAtOneGateway(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	l := startLab(t, ctx, lab.Config{OneWay: 5 * time.Millisecond})
	src := newHost(t, l, "src", lab.RegionA)
	only := l.HostGateways(lab.RegionB)[1:] // use-gw2 alone
	dst, err := host.New(host.Config{Name: "dst", Region: lab.RegionB, Gateways: only, Key: l.HostKey, DeadAfter: time.Second, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dst.Close() })
	tr := newTransfer(t, src, dst, 1<<20)
	rctx, rcancel := context.WithCancel(ctx)
	defer rcancel()
	go tr.receive(rctx)
	rng := rand.New(rand.NewPCG(3, 4))
	const flows = 12 // all twelve on one destination gateway by chance: 1 in 4096
	for i := range flows {
		f, err := src.OpenFlow(ctx, lab.RegionB, "dst", host.FlowOptions{})
		if err != nil {
			t.Fatalf("flow %d of %d: %v", i+1, flows, err)
		}
		if err := tr.send(ctx, f, rng); err != nil {
			t.Fatal(err)
		}
	}
	tr.wait(ctx)
	tr.check()
	if st := l.Gateways["use-gw1"].Status(); st.Flows.Active != 0 {
		t.Fatalf("use-gw1, which does not know the host, carries %d flows", st.Flows.Active)
	}
}
