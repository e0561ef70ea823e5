package scenario

import (
	"testing"

	"github.com/mrgw/mrgw/cc"
	"github.com/mrgw/mrgw/cc/longrtt"

	"github.com/mrgw/mrgw/internal/report"
)

// checkStandingQueue asserts the standing-queue target on its rows: the
// standing queue at most QueueBoundMs, the link at least 0.95 utilised and
// Jain's index at least 0.95.
func checkStandingQueue(t *testing.T, rows []report.Row) {
	t.Helper()
	for _, r := range rows {
		q := standingQueueMs(r)
		t.Logf("%s %-16s frac=%.3f jain=%.3f peak q=%d drops=%d %s", r.CC, r.Variant, r.Fraction, r.Jain, r.MaxQueueBytes, r.QueueDrops, r.Note)
		if q > QueueBoundMs || r.Fraction < 0.95 || r.Jain < 0.95 {
			t.Errorf("%s, %s: standing queue %.1f ms (want <= %g), utilisation %.3f (want >= 0.95), Jain %.3f (want >= 0.95)",
				r.CC, r.Variant, q, QueueBoundMs, r.Fraction, r.Jain)
		}
	}
}

// TestCCStandingQueue is the standing-queue target on the registered long-RTT
// controllers (longrtt-htcp, longrtt-scalable; the marked-fraction price,
// cc.AIMDConfig.MarkPrice, is on in both): the standing queue at a shared
// marking bottleneck (1 Gbit/s, 50 ms, ECN above 0.1 BDP = 5 ms, 4 BDPs of
// buffer, hints off) stays below QueueBoundMs (10 ms, a fifth of the base
// round trip) from 1 to 256 connections, with utilisation and Jain's index
// at least 0.95. With the delay equilibrium alone (without the price) they
// kept 0 / 20 / 106 / 157 / 200 ms. The default scale: 1 Gbit/s is the
// scenario's default rate, and the full length (400 round trips), since the
// price takes seconds to settle at 256 connections.
func TestCCStandingQueue(t *testing.T) {
	t.Parallel()
	counts := QueueCounts
	if testing.Short() {
		counts = []int{2, 64}
	}
	rows, err := standingQueueRuns(Options{Seed: 1}, LongRTTControllers, counts)
	if err != nil {
		t.Fatal(err)
	}
	checkStandingQueue(t, rows)
}

// TestCCStandingQueueFewPaths is the same target with one and two paths per
// connection at 10 connections: the previous fall of the price (after
// rounds of a path whose RTT samples were all within 0.5 ms of the
// minimum) read the receiver's delayed-ack timer as a queue, and held the
// bound at 10 connections of 4 paths only because there every ack waited
// for that timer; with 1 or 2 paths per connection the packets of a path
// came closer than the timer, the price fell in every dip of its own relay
// cycle, and the queue stood at 32 / 18 ms (docs/CC.md §4).
func TestCCStandingQueueFewPaths(t *testing.T) {
	if testing.Short() {
		t.Skip("two full-length runs of 10 connections (about 20 s of CPU)")
	}
	for _, paths := range []int{1, 2} {
		rows, err := standingQueueRunsPaths(Options{Seed: 1}, []string{"longrtt-htcp"}, []int{10}, paths)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%d path(s) per connection", paths)
		checkStandingQueue(t, rows)
	}
}

// noPrice names, in this test binary only, longrtt-htcp without the
// marked-fraction price: the delay equilibrium alone, whose standing queue
// is known in closed form (n × QueueShare).
const noPrice = "longrtt-htcp-noprice"

func init() {
	cc.Register(noPrice, func(p cc.Params) cc.Factory {
		return cc.NewAIMD(cc.AIMDConfig{Name: noPrice, Growth: longrtt.HTCPGrowth, RefRTT: longrtt.DefaultRefRTT, RTTFair: true,
			DelayTarget: longrtt.DefaultDelayTarget, QueueShare: longrtt.DefaultQueueShare, SearchStart: longrtt.SearchStart, Params: p})
	})
}

// TestStandingQueueScenarioMeasures checks the scenario's measurement, which
// the target above depends on, on the delay equilibrium alone (longrtt-htcp
// without the price): two connections hold about 2 × QueueShare (20 ms) of
// standing queue, fairly, with the link full; a lone connection at its line
// rate holds none.
func TestStandingQueueScenarioMeasures(t *testing.T) {
	rows, err := standingQueueRuns(Options{Seed: 1, Scale: 0.25}, []string{noPrice}, []int{1, 2})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		t.Logf("%s %-16s frac=%.3f jain=%.3f %s", r.CC, r.Variant, r.Fraction, r.Jain, r.Note)
	}
	if q := standingQueueMs(rows[0]); q > 1 || rows[0].Fraction < 0.95 {
		t.Errorf("1 connection: standing queue %.2f ms (want ~0), utilisation %.3f", q, rows[0].Fraction)
	}
	if q := standingQueueMs(rows[1]); q < 15 || q > 25 || rows[1].Jain < 0.95 || rows[1].Fraction < 0.95 {
		t.Errorf("2 connections: standing queue %.2f ms (want about 20), Jain %.3f, utilisation %.3f", q, rows[1].Jain, rows[1].Fraction)
	}
}
