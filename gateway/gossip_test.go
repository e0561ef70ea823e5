//go:build linux

package gateway_test

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/mrgw/mrgw/gateway"
	"github.com/mrgw/mrgw/host"
	"github.com/mrgw/mrgw/loadtest/lab"
	"github.com/mrgw/mrgw/pathmgr"
)

// TestPlaneReportAvoidedByPeer: w1 carries traffic to e1 when plane p2
// fails; w1 and e1 (whose flow-control messages go back over the same
// connection) see the failure themselves (timeouts) and publish it,
// whichever first. w2, whose connection to e1 is idle and so has seen
// nothing, must take its paths over p2 down on their report, and then carry its own traffic to e1
// without sending a data packet on p2 (without the report it would spray
// onto p2 and lose those packets until its own timeouts fired).
func TestPlaneReportAvoidedByPeer(t *testing.T) {
	const planes, failed = 4, 2
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	// w2's connection to e1 must stay idle, with no PING on it either
	// (they would time out on p2 and take its paths down by themselves).
	pl := newPlaneLab(t, planeLabConfig{planes: planes, paths: 8, gws: map[string][]string{"west": {"w1", "w2"}, "east": {"e1"}},
		options: func(o *gateway.Options) { o.WANPingEvery = -1 }})
	pl.waitReady(t, ctx)
	w2 := pl.gws["w2"]
	e1, ok := w2.PeerID("e1") // the same at w1 and w2: a hash of the name
	if !ok {
		t.Fatal("w2 has no peer e1")
	}
	before := planePaths(t, w2, e1, failed, planes)
	if len(before) != 2 {
		t.Fatalf("w2 has %d paths to e1 over p%d, want 2", len(before), failed)
	}
	for _, p := range before {
		if p.state != pathmgr.Up {
			t.Fatalf("w2's paths over p%d before the failure: %+v", failed, before)
		}
	}

	src1 := pl.hostVia(t, "src1", "w1")
	src2 := pl.hostVia(t, "src2", "w2")
	dst := pl.hostVia(t, "dst", "e1")
	tr := newTransfer(t, src1, dst, 64<<20)
	rctx, rcancel := context.WithCancel(ctx)
	defer rcancel()
	go tr.receive(rctx)
	f1, err := lab.OpenFlow(ctx, src1, "east", "dst", host.FlowOptions{}, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	// Traffic through w1 before, during and after the failure.
	stop := make(chan struct{})
	sendErr := make(chan error, 1)
	go func() {
		defer close(sendErr)
		for n := 0; n < 2000; n++ {
			select {
			case <-stop:
				return
			default:
			}
			if err := tr.send(ctx, f1, rng); err != nil {
				sendErr <- err
				return
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	time.Sleep(300 * time.Millisecond)
	if err := pl.emus[failed].Fail(0); err != nil {
		t.Fatal(err)
	}

	// w2 takes its p2 paths down on the report, having timed out on none.
	var after []pathInfo
	for {
		after = planePaths(t, w2, e1, failed, planes)
		down := 0
		for _, p := range after {
			if !p.state.Usable() {
				down++
			}
		}
		if down == len(after) {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("w2 still uses p%d: %+v (paths avoided %d)", failed, after, w2.Status().PathsAvoided)
		case <-time.After(20 * time.Millisecond):
		}
	}
	for i, p := range after {
		if p.timeouts != before[i].timeouts || p.sent != before[i].sent {
			t.Fatalf("w2 sent or timed out on p%d before avoiding it: before %+v after %+v", failed, before, after)
		}
	}
	// The status snapshot follows within one StatsEvery.
	for w2.Status().PathsAvoided < 2 {
		select {
		case <-ctx.Done():
			t.Fatalf("w2 counts %d paths avoided on reports, want at least 2", w2.Status().PathsAvoided)
		case <-time.After(20 * time.Millisecond):
		}
	}

	// Now w2 carries traffic of its own: nothing goes onto p2.
	rng2 := rand.New(rand.NewPCG(5, 6))
	f2, err := lab.OpenFlow(ctx, src2, "east", "dst", host.FlowOptions{}, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	for range 100 {
		if err := tr.send(ctx, f2, rng2); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	if err := <-sendErr; err != nil {
		t.Fatal(err)
	}
	tr.wait(ctx)
	tr.check()
	final := planePaths(t, w2, e1, failed, planes)
	for i, p := range final {
		if p.sent != before[i].sent || p.state.Usable() {
			t.Fatalf("w2 sent data on the failed plane after the report: before %+v now %+v", before, final)
		}
	}
	t.Logf("w2 avoided p%d on a report: %d paths, 0 data packets sent on it, %d messages delivered", failed, w2.Status().PathsAvoided, len(tr.want))
}
