package scenario

import (
	"testing"
	"time"

	"github.com/mrgw/mrgw/internal/report"
	"github.com/mrgw/mrgw/metaroce"
	"github.com/mrgw/mrgw/sim"
)

// These tests check the transport's published targets in the simulator at a
// reduced scale (10 Gbit/s instead of 100, 20 RTTs). Results are
// deterministic for a seed, so they are not timing tests.

func runOrFail(t *testing.T, s Setup) Result {
	t.Helper()
	r, err := Run(s)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestLossSweepTargets(t *testing.T) {
	for _, rtt := range []time.Duration{10 * time.Microsecond, 50 * time.Millisecond} {
		base := Setup{RateBps: 10e9, RTT: rtt, Paths: 8, Duration: 20 * rtt, Warmup: 4 * rtt, Seed: 1}
		if base.Duration < 4*time.Millisecond {
			base.Duration, base.Warmup = 4*time.Millisecond, time.Millisecond
		}
		free := runOrFail(t, base).GoodputBps
		if free < 0.95*base.RateBps {
			t.Fatalf("rtt %v: loss-free goodput %.2f Gbit/s is below 95%% of capacity", rtt, free/1e9)
		}
		for _, c := range []struct{ loss, min float64 }{{0.01, 0.95}, {0.10, 0.85}} {
			s := base
			s.Loss = c.loss
			got := runOrFail(t, s).GoodputBps / free
			t.Logf("rtt %v loss %g: %.3f of loss-free", rtt, c.loss, got)
			if got < c.min {
				t.Errorf("rtt %v loss %g: goodput is %.3f of loss-free, target %.2f", rtt, c.loss, got, c.min)
			}
		}
	}
}

// TestRoCEv2BaselineCollapsesUnderLoss checks that the baseline is a real
// go-back-N: loss-free it matches mrgw, at 1% loss on a long path it falls
// far behind.
func TestRoCEv2BaselineCollapsesUnderLoss(t *testing.T) {
	base := Setup{Mode: metaroce.ModeRoCEv2, RateBps: 10e9, RTT: 10 * time.Millisecond, Duration: 200 * time.Millisecond, Warmup: 40 * time.Millisecond, Seed: 1}
	free := runOrFail(t, base).GoodputBps
	if free < 0.95*base.RateBps {
		t.Fatalf("loss-free RoCEv2 goodput %.2f Gbit/s", free/1e9)
	}
	base.Loss = 0.01
	lossy := runOrFail(t, base)
	if lossy.GoodputBps > 0.5*free || lossy.Retransmits == 0 {
		t.Fatalf("RoCEv2 at 1%% loss keeps %.3f of loss-free with %d retransmits; go-back-N should collapse", lossy.GoodputBps/free, lossy.Retransmits)
	}
}

func TestPlanesScaleLinearly(t *testing.T) {
	var one float64
	for _, p := range []int{1, 8} {
		r := runOrFail(t, Setup{Planes: p, RateBps: 10e9, RTT: 10 * time.Microsecond, Paths: 16 * p, WindowBDPs: 3, Duration: 4 * time.Millisecond, Warmup: time.Millisecond, Seed: 2})
		if p == 1 {
			one = r.GoodputBps
			continue
		}
		eff := r.GoodputBps / (one * float64(p))
		t.Logf("%d planes: efficiency %.3f", p, eff)
		if eff < 0.95 {
			t.Errorf("%d planes: scaling efficiency %.3f, target 0.95", p, eff)
		}
	}
}

// TestPlaneBlackMidTransfer: one of 8 planes goes black mid-run; paths that
// hashed onto it are detected, re-rolled and the connection keeps at least
// 7/8 of the capacity afterwards.
func TestPlaneBlackMidTransfer(t *testing.T) {
	s := Setup{Planes: 8, RateBps: 10e9, RTT: 100 * time.Microsecond, Paths: 64, WindowBDPs: 3, Duration: 30 * time.Millisecond, Warmup: 15 * time.Millisecond, Seed: 4}
	s.Faults = func(n *sim.Network) { n.Plane(3).ScheduleDown(10*time.Millisecond, true) }
	r := runOrFail(t, s)
	frac := r.GoodputBps / r.CapacityBps
	t.Logf("after the failure: %.3f of the original capacity", frac)
	if frac < 7.0/8*0.95 {
		t.Errorf("goodput after a plane failure is %.3f of capacity, want at least 7/8", frac)
	}
	down := 0
	for _, c := range r.Senders {
		for _, p := range c.Paths().Paths {
			if p.Timeouts > 0 {
				down++
			}
		}
	}
	if down == 0 {
		t.Error("no path noticed the failed plane")
	}
}

// TestManyConnections: 2,000 concurrent connections share 8 planes: the
// endpoint's scheduler keeps up, the fabric stays busy and shares are fair.
func TestManyConnections(t *testing.T) {
	s := Setup{Planes: 8, RateBps: 1e9, RTT: 10 * time.Microsecond, Flows: 2000, Paths: 4, MsgSize: 16 << 10,
		WindowBDPs: 3, QueueBytes: 1 << 20, Duration: 200 * time.Millisecond, Warmup: 50 * time.Millisecond, Seed: 9, MeasureState: true}
	r := runOrFail(t, s)
	frac := r.GoodputBps / r.CapacityBps
	jain := report.Jain(r.PerFlowBps)
	perConn := float64(r.StateBytes) / 4000
	t.Logf("2000 connections: %.3f of capacity, Jain %.3f, %.0f bytes of state per connection end", frac, jain, perConn)
	if frac < 0.8 || jain < 0.8 {
		t.Errorf("2000 connections: %.3f of capacity, Jain %.3f; want at least 0.8 each", frac, jain)
	}
	if perConn > 256<<10 {
		t.Errorf("%.0f bytes of state per connection end: not bounded as designed", perConn)
	}
}
