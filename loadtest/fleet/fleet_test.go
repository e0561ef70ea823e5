//go:build linux

package fleet

import (
	"context"
	"os"
	"testing"
	"time"
)

// TestFleetShort: 8 gateways in 4 regions, 4 planes, real memberlist on
// loopback. It asserts correctness only (never how fast): every plane
// verdict, death and new region reaches every gateway that needs it, no
// broadcast is lost, no down verdict evicted, tables within their bound.
func TestFleetShort(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 8 gateways' gossip (~30 s)")
	}
	o := Options{Gateways: 8, Regions: 4, Planes: 4, Failures: 4, Deaths: 1, Joins: 1,
		Steady: 2 * time.Second, Storm: 6 * time.Second, Flap: 1500 * time.Millisecond,
		EventTimeout: 20 * time.Second}
	if testing.Verbose() {
		o.Progress = os.Stderr
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rep, err := Run(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rep.Rows {
		t.Logf("%-20s n=%-3d p50 %6.0f ms  p99 %6.0f ms  max %6.0f ms  sent %7.0f B/s  health %6.0f B/s  verdicts %d/%d  queued %d  lost %d  missed %d",
			r.Event, r.Samples, r.P50ms, r.P99ms, r.MaxMs, r.BytesSentPerS, r.HealthBytesPerS,
			r.VerdictsMax, r.VerdictBound, r.QueuedMax, r.BroadcastsLost, r.Missed)
		switch {
		case r.Missed > 0:
			t.Errorf("%s: %d deliveries missed", r.Event, r.Missed)
		case r.BroadcastsLost > 0 || r.DownEvicted > 0 || r.WatchDropped > 0:
			t.Errorf("%s: %d broadcasts lost, %d down verdicts evicted, %d reports dropped", r.Event, r.BroadcastsLost, r.DownEvicted, r.WatchDropped)
		case r.VerdictsMax > r.VerdictBound:
			t.Errorf("%s: %d verdicts held, bound %d", r.Event, r.VerdictsMax, r.VerdictBound)
		}
		want := map[string]int{"plane_verdict": 4, "gateway_dead": 1, "region_join": 1}[r.Event]
		if want > 0 && r.Samples != want {
			t.Errorf("%s: %d events, want %d", r.Event, r.Samples, want)
		}
	}
	if !rep.OK() {
		t.Error("report not OK")
	}
}
