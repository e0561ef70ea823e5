//go:build linux

package gwload

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mrgw/mrgw/internal/report"
	"github.com/mrgw/mrgw/loadtest/recovery"
)

// TestSmokePlaneFailure runs a short bulk transfer through the real
// gateways with a plane failing mid-run: every message must arrive exactly
// once, and the row and plots must be produced.
func TestSmokePlaneFailure(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the gateway lab for a few seconds")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
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
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			s := Scenario{
				Name: w.Pattern, Duration: 30 * time.Second, Planes: 2,
				Link:     Link{Rate: "50mbit", Delay: 5 * time.Millisecond, Loss: "0.1%"},
				Workload: w,
			}
			var trace bytes.Buffer
			rows, ser, err := Run(ctx, s, Options{Drain: 20 * time.Second, Trace: &trace})
			if err != nil {
				t.Fatal(err)
			}
			r := rows[0]
			// The note lists every step's time; the trace has a line per
			// bin naming the WAN connections that carried the steps.
			if f := strings.Fields(strings.SplitN(r.Note, ";", 2)[0]); len(f) != 2+w.Steps || f[0] != "steps" {
				t.Errorf("note %q does not list the %d step times", r.Note, w.Steps)
			}
			if n := strings.Count(trace.String(), "\n"); n < len(ser.T)-1 || !strings.Contains(trace.String(), " >use-gw") {
				t.Errorf("trace: %d lines for %d bins, or no WAN connection in it", n, len(ser.T))
			}
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
			files, err := Plot(t.TempDir(), w.Pattern, "svg", ser)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.ContainsFunc(files, func(f string) bool { return strings.HasSuffix(f, "-steps.svg") }) {
				t.Errorf("no step-time plot among %v", files)
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

// TestFairnessSources runs three source regions at different round trips
// through one destination gateway: every message must arrive exactly once,
// every region must get a real share, and the row's Jain index must be
// the one its per-region shares give (one flow per region) and above the
// bound that a share of at least a tenth each implies.
func TestFairnessSources(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the gateway lab for a few seconds")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s := Scenario{
		Name: "fairness", Duration: 5 * time.Second, Planes: 2,
		Link:       Link{Rate: "20mbit", Delay: 2 * time.Millisecond},
		Sources:    []Source{{RTT: 4 * time.Millisecond}, {RTT: 10 * time.Millisecond}, {RTT: 30 * time.Millisecond}},
		Workload:   Workload{Pattern: PatternBulk, Flows: 3, Hosts: 1, MessageSize: "64KiB", Window: 16},
		FlowCredit: "4MiB",
	}
	rows, ser, err := Run(ctx, s, Options{Drain: 15 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	r := rows[0]
	t.Logf("%s: goodput %.1f Mbit/s, shares %v, jain %.3f, note %q", r.Variant, r.GoodputBps/1e6, r.Shares, r.Jain, r.Note)
	if *r.MessagesLost != 0 || *r.MessagesDuplicated != 0 || r.MessagesFailed != 0 || r.Incomplete != 0 || r.Messages < 30 {
		t.Fatalf("messages %d lost %d duplicated %d failed %d incomplete %d", r.Messages, *r.MessagesLost, *r.MessagesDuplicated, r.MessagesFailed, r.Incomplete)
	}
	if len(r.Shares) != 3 || len(ser.FlowBytes) != 3 {
		t.Fatalf("shares %v, flows %d", r.Shares, len(ser.FlowBytes))
	}
	var sum float64
	for _, x := range r.Shares {
		sum += x
		if x < 0.1 {
			t.Fatalf("a region got %.3f of the bytes (shares %v)", x, r.Shares)
		}
	}
	if sum < 0.99 || sum > 1.01 {
		t.Fatalf("shares sum to %v", sum)
	}
	// The least fair split with every share >= 0.1: (0.1, 0.1, 0.8).
	bound := report.Jain([]float64{0.1, 0.1, 0.8})
	if j := report.Jain(r.Shares); j < bound || r.Jain < bound || j-r.Jain > 0.01 || r.Jain-j > 0.01 {
		t.Fatalf("jain %.3f, from the shares %.3f, bound %.3f", r.Jain, j, bound)
	}
}

// TestFaultRecovery: recovery is measured on the cumulative delivered
// bytes (loadtest/recovery): a dip of 0.5 s after a fault at 5 s recovers
// about 0.5 s later (plus the 4-RTT window), a dip that lasts to the end
// does not recover.
func TestFaultRecovery(t *testing.T) {
	start := time.Unix(1000, 0)
	rtt := 40 * time.Millisecond
	series := func(dipEnd time.Duration) recovery.Series {
		var s recovery.Series
		var tot uint64
		s.Add(start, 0)
		for el := 10 * time.Millisecond; el <= 10*time.Second; el += 10 * time.Millisecond {
			rate := uint64(12500) // 10 Mbit/s per 10 ms
			if el > 5*time.Second && el <= dipEnd {
				rate /= 10
			}
			tot += rate
			s.Add(start.Add(el), tot)
		}
		return s
	}
	msec, rtts := faultRecovery(series(5500*time.Millisecond), start, 5, 10*time.Second, rtt, 0.75)
	if msec < 500 || msec > 500+4*40+20 || rtts != msec/40 {
		t.Fatalf("recovered after %.0f ms = %.2f RTT, want 500..680 ms", msec, rtts)
	}
	if msec, rtts := faultRecovery(series(20*time.Second), start, 5, 10*time.Second, rtt, 0.75); msec != -1 || rtts != -1 {
		t.Fatalf("recovered (%.0f ms) although goodput never came back", msec)
	}
}
