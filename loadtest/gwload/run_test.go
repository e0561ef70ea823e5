//go:build linux

package gwload

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestSmokePlaneFailure runs a short bulk transfer through the real
// gateways with a plane failing mid-run: every message must arrive exactly
// once, and the row and plots must be produced.
func TestSmokePlaneFailure(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the gateway lab for a few seconds")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	s := Scenario{
		Name: "smoke", Duration: 3 * time.Second, Planes: 2,
		Link:     Link{Rate: "20mbit", Delay: 5 * time.Millisecond, Loss: "0.5%"},
		Workload: Workload{Pattern: PatternBulk, Flows: 4, Hosts: 2, MessageSize: "64KiB"},
		Faults:   []Fault{{At: 1500 * time.Millisecond, Kind: FaultPlaneFail, Target: "1"}},
	}
	rows, ser, err := Run(ctx, s, Options{Drain: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 {
		t.Fatalf("%d rows", len(rows))
	}
	r := rows[0]
	t.Logf("%+v", r)
	if r.MessagesLost == nil || *r.MessagesLost != 0 || r.MessagesDuplicated == nil || *r.MessagesDuplicated != 0 {
		t.Fatalf("lost %v duplicated %v, want 0 and 0", r.MessagesLost, r.MessagesDuplicated)
	}
	if r.Messages < 10 || r.GoodputBps <= 0 || r.Fraction <= 0 || r.Fraction > 1.05 {
		t.Fatalf("messages %d goodput %v fraction %v", r.Messages, r.GoodputBps, r.Fraction)
	}
	if r.MessagesFailed != 0 || r.Incomplete != 0 {
		t.Fatalf("failed %d incomplete %d", r.MessagesFailed, r.Incomplete)
	}
	if r.Fault == "" || len(ser.Faults) != 1 || r.Jain <= 0 {
		t.Fatalf("fault %q marks %v jain %v", r.Fault, ser.Faults, r.Jain)
	}
	if len(ser.T) < 20 || len(ser.FlowBytes) != 4 {
		t.Fatalf("series: %d bins, %d flows", len(ser.T), len(ser.FlowBytes))
	}
	dir := t.TempDir()
	files, err := Plot(dir, "smoke", "svg", ser)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 2 {
		t.Fatalf("plots %v", files)
	}
	for _, f := range files {
		if st, err := os.Stat(f); err != nil || st.Size() == 0 || filepath.Dir(f) != dir {
			t.Fatalf("plot %s: %v", f, err)
		}
	}
}
