//go:build linux

package gwload

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/mrgw/mrgw/internal/report"
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

// TestSteppedWorkloadsComplete runs small incast and allreduce scenarios
// through the real gateways: every step must complete with every transfer
// delivered exactly once (no message lost, duplicated, failed or left
// incomplete), and the step figures must be consistent.
func TestSteppedWorkloadsComplete(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the gateway lab for a few seconds")
	}
	for _, w := range []Workload{
		{Pattern: PatternIncast, Flows: 12, MessageSize: "256KiB", Steps: 3},
		{Pattern: PatternAllreduce, Hosts: 4, MessageSize: "512KiB", Steps: 3},
	} {
		t.Run(w.Pattern, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			s := Scenario{
				Name: w.Pattern, Duration: 30 * time.Second, Planes: 2,
				Link:     Link{Rate: "50mbit", Delay: 5 * time.Millisecond, Loss: "0.1%"},
				Workload: w,
			}
			rows, ser, err := Run(ctx, s, Options{Drain: 20 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			r := rows[0]
			t.Logf("%s: steps %d, step %.0f ms (ideal %.0f), jain %.3f, note %q", r.Variant, r.Steps, r.StepMs, r.IdealStepMs, r.Jain, r.Note)
			if r.Steps != w.Steps || len(ser.StepMs) != w.Steps {
				t.Fatalf("%d of %d steps completed (%s)", r.Steps, w.Steps, r.Note)
			}
			if want := w.Steps * r.Flows; r.Messages != want {
				t.Fatalf("%d messages completed, want %d", r.Messages, want)
			}
			if *r.MessagesLost != 0 || *r.MessagesDuplicated != 0 || r.MessagesFailed != 0 || r.Incomplete != 0 {
				t.Fatalf("lost %d duplicated %d failed %d incomplete %d", *r.MessagesLost, *r.MessagesDuplicated, r.MessagesFailed, r.Incomplete)
			}
			if r.IdealStepMs <= 0 || r.StepRatio < 0.9 || r.MaxStepMs < r.StepMs {
				// A step cannot beat the capacity (10% for rounding).
				t.Fatalf("step %.0f ms, ideal %.0f, max %.0f", r.StepMs, r.IdealStepMs, r.MaxStepMs)
			}
			for _, b := range ser.FlowBytes {
				if b != float64(w.Steps)*float64(rowMsg(r)) {
					t.Fatalf("a flow delivered %.0f bytes, want %d", b, w.Steps*rowMsg(r))
				}
			}
		})
	}
}

func rowMsg(r report.Row) int { return int(r.MessageBytes) }
