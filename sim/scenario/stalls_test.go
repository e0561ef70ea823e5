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
// It asserts the stalling-host target of docs/CC.md §7: at 50 and 100 ms,
// htcp at least 0.98 of the fixed window's goodput at 0-5% loss and 0.95 at
// 10%. The points CC.md §7 lists as not met (stallGaps) are held to the
// 10%-loss floor, 0.95, and fail the test once they meet the full target,
// so that the list and CC.md say what the code does. At 10 ms, where 1.5
// BDP is too small to ride the stalls out, htcp must do at least as well
// as the fixed window.
func TestCCHostStalls(t *testing.T) {
	const rate = 200e6
	type point struct {
		rtt  time.Duration
		loss float64
	}
	var points []point
	for _, l := range []float64{0, 0.01, 0.1} {
		points = append(points, point{10 * time.Millisecond, l})
	}
	for _, rtt := range []time.Duration{50 * time.Millisecond, 100 * time.Millisecond} {
		for _, l := range []float64{0, 0.01, 0.05, 0.1} {
			points = append(points, point{rtt, l})
		}
	}
	if testing.Short() {
		points = points[3:5] // 50 ms at 0 and 1%
	}
	// The points where docs/CC.md §7 records the target as not met.
	stallGaps := map[point]bool{
		{50 * time.Millisecond, 0}: true, {50 * time.Millisecond, 0.01}: true, {50 * time.Millisecond, 0.05}: true,
		{100 * time.Millisecond, 0.05}: true,
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
		target := 0.98
		switch {
		case rtt < 50*time.Millisecond:
			target = 1
		case loss >= 0.1:
			target = 0.95
		}
		switch {
		case stallGaps[pt] && ratio >= target:
			t.Errorf("rtt=%v loss=%g: htcp gets %.3f of the fixed window's goodput, which meets the target %.2f: docs/CC.md §7 and stallGaps list it as not met", rtt, loss, ratio, target)
		case stallGaps[pt] && ratio < 0.95:
			t.Errorf("rtt=%v loss=%g: htcp gets %.3f of the fixed window's goodput, want >= 0.95 (the target, %.2f, is not met here: docs/CC.md §7)", rtt, loss, ratio, target)
		case !stallGaps[pt] && ratio < target:
			t.Errorf("rtt=%v loss=%g: htcp gets %.3f of the fixed window's goodput, want >= %.2f", rtt, loss, ratio, target)
		}
	}
}
