//go:build linux

package fleet

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestFleetShort: 8 gateways in 4 regions, 4 planes, real memberlist on
// loopback. It asserts correctness only (never how fast): every plane
// verdict, death and new region reaches every gateway that needs it (a
// death or join within memberlist's push/pull bound: a gateway that
// missed the broadcast, as one did on a loaded CI machine, has it by
// anti-entropy; see membershipWait), no
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
		t.Logf("%-20s n=%-3d p50 %6.0f ms  p99 %6.0f ms  max %6.0f ms  sent %7.0f B/s  health %6.0f B/s  verdicts %d/%d  queued %d  lost %d  missed %d  late %d",
			r.Event, r.Samples, r.P50ms, r.P99ms, r.MaxMs, r.BytesSentPerS, r.HealthBytesPerS,
			r.VerdictsMax, r.VerdictBound, r.QueuedMax, r.BroadcastsLost, r.Missed, r.Late)
		if r.Missed > 0 {
			t.Errorf("%s: %d deliveries missed", r.Event, r.Missed)
		}
		if r.BroadcastsLost > 0 || r.DownEvicted > 0 || r.WatchDropped > 0 {
			t.Errorf("%s: %d broadcasts lost, %d down verdicts evicted, %d reports dropped", r.Event, r.BroadcastsLost, r.DownEvicted, r.WatchDropped)
		}
		if r.VerdictsMax > r.VerdictBound {
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

// A run whose timeout passes returns what it measured, the step it cut
// short marked partial and naming the timeout; it used to return no rows
// at all (a 128-gateway run bounded by `timeout 1500` printed nothing).
// 1 ms passes while the fleet forms, whatever the machine's load.
func TestFleetTimeoutKeepsRows(t *testing.T) {
	rep, err := Run(context.Background(), Options{Gateways: 4, Regions: 2, Planes: 2, Timeout: time.Millisecond})
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("error %v, want one matching ErrTimeout", err)
	}
	if rep == nil || len(rep.Rows) == 0 {
		t.Fatal("no rows")
	}
	last := rep.Rows[len(rep.Rows)-1]
	if !strings.Contains(last.Partial, "timeout of 1ms") || last.Gateways != 4 || last.Planes != 2 {
		t.Errorf("last row %s: partial %q, %d gateways × %d planes; want the timeout named, 4 × 2", last.Event, last.Partial, last.Gateways, last.Planes)
	}
	if len(rep.Notes) == 0 || !strings.Contains(rep.Notes[0], "timeout of 1ms") {
		t.Errorf("notes %q, want the timeout named", rep.Notes)
	}
	if rep.OK() {
		t.Error("a run cut short is OK")
	}
}

// A run stopped mid-way (here ctx ends once the steady state is
// measured, as an interrupt would) keeps the rows of the steps it
// finished, unmarked, and marks the one it was in.
func TestFleetStopKeepsMeasuredRows(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	o := Options{Gateways: 4, Regions: 2, Planes: 2, Steady: 500 * time.Millisecond,
		Progress: cancelOn{"steady:", cancel}}
	rep, err := Run(ctx, o)
	if err == nil || errors.Is(err, ErrTimeout) {
		t.Fatalf("error %v, want the cancellation", err)
	}
	var events []string
	for _, r := range rep.Rows {
		events = append(events, r.Event)
		if done := r.Event == "form" || r.Event == "steady"; done != (r.Partial == "") {
			t.Errorf("%s: partial %q", r.Event, r.Partial)
		}
	}
	if want := []string{"form", "steady", "plane_verdict"}; !slices.Equal(events, want) {
		t.Fatalf("rows %v, want %v", events, want)
	}
	if p := rep.Rows[2].Partial; !strings.Contains(p, "context canceled") {
		t.Errorf("plane_verdict partial %q, want the reason", p)
	}
}

// cancelOn cancels when a progress line contains s.
type cancelOn struct {
	s      string
	cancel context.CancelFunc
}

func (c cancelOn) Write(p []byte) (int, error) {
	if strings.Contains(string(p), c.s) {
		c.cancel()
	}
	return len(p), nil
}
