package scenario

import (
	"testing"
	"time"

	"github.com/mrgw/mrgw/cc"
)

// TestCCHostStalls reproduces, deterministically, what the real-socket loss
// sweep (loadtest/peers through the UDP emulator on a shared 2-core
// machine) showed: the drivers stall for milliseconds several times per
// 100 ms, the sender catches up in a burst (PacingCatchUp 0.5, as the load
// test runs), the burst makes a queue and ECN marks that are not
// congestion, and acks held by a stall come back late. The link is the
// load test's: 200 Mbit/s, one plane, a drop-tail queue of one BDP, marks
// above a tenth of it, 16 paths, MTU 1400, the receiver's hints at the
// capacity. longrtt-htcp is compared with a fixed, unpaced window of 1.5
// BDP on the same link (the load test's "fixed-1.5bdp" row), which fills
// the queue and so rides the stalls out.
//
// The target is htcp at least 0.98 of the fixed window's
// goodput at 0-5% loss and 0.95 at 10%, at 50 and 100 ms. What this test
// asserts is what is met, so that it guards it: at 100 ms at least 0.975
// at every loss (0.981 / 0.981 / 0.979 / 0.990 at 0 / 1 / 5 / 10%), at 50 ms
// 0.975 at 10% (0.981) and 0.95 at 0-5% (0.956 / 0.958 / 0.967: **the
// target is not met there**, nor at 100 ms and 5%); at 10 ms, where the
// fixed window's 1.5 BDP is too small to ride the stalls out, 0.92. What
// is left is the receiver's drain (cc.FairShare's drain): with a gain of
// 1/64 instead of 1/16 every point is at 0.987 or above, but the regions
// scenario then misses its target after the plane failure (docs/CC.md §7).
// Before the delay equilibrium's stall allowance and ceiling window
// (docs/CC.md §4, "A host that stalls") htcp kept 0.937 / 0.940 / 0.945 /
// 0.959 of the fixed window at 50 ms and 0.969 / 0.967 / 0.969 / 0.974 at
// 100 ms: it paced 6% below its ceiling on average, and the link idled
// whenever a stall outlasted its queue of about 5 ms. Before the fixes of
// docs/CC.md §7 (the receiver's drain held back up to half the capacity at
// every burst of marks; random loss in a round with a mark was cut as a
// full queue) it got 0.84 at 50 ms without loss and 0.74 at 1%.
func TestCCHostStalls(t *testing.T) {
	const rate = 200e6
	type point struct {
		rtt  time.Duration
		loss float64
		want float64
	}
	var points []point
	for _, l := range []float64{0, 0.01, 0.1} {
		points = append(points, point{10 * time.Millisecond, l, 0.92})
	}
	for _, rtt := range []time.Duration{50 * time.Millisecond, 100 * time.Millisecond} {
		for _, l := range []float64{0, 0.01, 0.05, 0.1} {
			want := 0.975
			if rtt == 50*time.Millisecond && l < 0.1 {
				want = 0.95 // the target is 0.98: not met (see above)
			}
			points = append(points, point{rtt, l, want})
		}
	}
	if testing.Short() {
		points = points[3:5] // 50 ms at 0 and 1%
	}
	stalls := HostStalls{Every: 30 * time.Millisecond, Max: 12 * time.Millisecond}
	for _, pt := range points {
		rtt, loss := pt.rtt, pt.loss
		bdp := rate / 8 * rtt.Seconds()
		s := Setup{Planes: 1, RateBps: rate, RTT: rtt, Loss: loss, Paths: 16, MTU: 1400,
			QueueBytes: int(bdp), ECNThreshold: int(bdp / 10), Duration: 8 * time.Second, Warmup: 3 * time.Second,
			Seed: 1, HostStalls: stalls, PacingCatchUp: 0.5}
		fixed := s
		fixed.NoHints, fixed.WindowBDPs = true, 1.5 // unpaced: no hint to pace at
		rf, err := Run(fixed)
		if err != nil {
			t.Fatal(err)
		}
		f, err := cc.Lookup(CCHTCP, cc.Params{LineRate: rate, BaseRTT: rtt})
		if err != nil {
			t.Fatal(err)
		}
		s.CC = f
		rh, err := Run(s)
		if err != nil {
			t.Fatal(err)
		}
		ratio := rh.GoodputBps / rf.GoodputBps
		t.Logf("rtt=%v loss=%g: htcp %.3f, fixed-1.5bdp %.3f of capacity (htcp/fixed %.3f), htcp peak queue %.2f BDP",
			rtt, loss, rh.GoodputBps/rate, rf.GoodputBps/rate, ratio, float64(rh.MaxQueueBytes)/bdp)
		if ratio < pt.want {
			t.Errorf("rtt=%v loss=%g: htcp gets %.3f of the fixed window's goodput, want >= %.2f", rtt, loss, ratio, pt.want)
		}
	}
}
