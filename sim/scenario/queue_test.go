package scenario

import "testing"

// TestCCStandingQueue is issue 16 item 2: the standing queue at a shared
// marking bottleneck (1 Gbit/s, 50 ms, ECN above 0.1 BDP = 5 ms, 4 BDPs of
// buffer, hints off) must stay at or below QueueBound whatever the number
// of connections, with the link at least 0.95 utilised and Jain's index at
// least 0.95. Before (the delay equilibrium alone): 0 / 20 / 103 / 157 ms
// for 1 / 2 / 10 / 64 connections.
func TestCCStandingQueue(t *testing.T) {
	counts := []int{1, 2, 10, 64, 256}
	if testing.Short() {
		counts = []int{2, 10, 64}
	}
	rows, err := standingQueueRuns(Options{Seed: 1, Scale: 0.5}, []string{CCHTCP}, counts)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		q := standingQueueMs(r)
		t.Logf("%s %-16s frac=%.3f jain=%.3f peak q=%d drops=%d %s", r.CC, r.Variant, r.Fraction, r.Jain, r.MaxQueueBytes, r.QueueDrops, r.Note)
		if q > QueueBoundMs || r.Fraction < 0.95 || r.Jain < 0.95 {
			t.Errorf("%s, %s: standing queue %.1f ms (want <= %g), utilisation %.3f (want >= 0.95), Jain %.3f (want >= 0.95)",
				r.CC, r.Variant, q, QueueBoundMs, r.Fraction, r.Jain)
		}
	}
}
