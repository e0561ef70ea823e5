//go:build linux

package peers

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mrgw/mrgw/internal/report"
)

// synthetic is a recorder with a plane-failure group of two runs (one with
// per-path state) and a fairness run of three flows.
func synthetic() *Recorder {
	n := 20
	mk := func(scenario, group, label string, flows int, paths bool) *recording {
		s := Series{Scenario: scenario, Group: group, Label: label, Warmup: 0.5}
		for k := range flows {
			s.Flows = append(s.Flows, "flow "+string(rune('a'+k)))
		}
		for i := range n {
			t := float64(i+1) * 0.1
			s.T = append(s.T, t)
			row := make([]float64, flows)
			for k := range row {
				row[k] = float64(k+1) * 10e6
			}
			s.Bps = append(s.Bps, row)
			if paths {
				s.PathT = append(s.PathT, t)
				s.PathRTTms = append(s.PathRTTms, []float64{50, 51, 0})
				s.PathCwnd = append(s.PathCwnd, []float64{64 << 10, 32 << 10, 0})
			}
		}
		if scenario == "peers-plane-failure" {
			s.Faults = []Fault{{At: 1, Label: "plane fails"}}
		}
		return &recording{s: s}
	}
	return &Recorder{runs: []*recording{
		mk("peers-plane-failure", "4 planes, rtt 50ms, loss 0%", "mrgw", 1, true),
		mk("peers-plane-failure", "4 planes, rtt 50ms, loss 0%", "tcp-cubic", 8, false),
		mk("peers-rtt-fairness", "mrgw, loss 1%", "mrgw", 3, false),
	}}
}

func TestPlotWritesDocumentedFiles(t *testing.T) {
	rows := []report.Row{
		{Scenario: "peers-loss-sweep", System: MRGW, RTTms: 50, Loss: 0.01, Fraction: 0.9},
		{Scenario: "peers-loss-sweep", System: MRGW, RTTms: 50, Loss: 0, Fraction: 0.92},
		{Scenario: "peers-loss-sweep", System: TCPCubic, Streams: 8, RTTms: 50, Loss: 0, Fraction: 0.95},
		{Scenario: "peers-planes", System: MRGW, RTTms: 50, Planes: 2, Fraction: 0.9},
		{Scenario: "peers-completion-time", System: MRGW, RTTms: 50, Loss: 0.01, MessageBytes: 1 << 20, Messages: 5, P50ms: 80, P99ms: 120},
		{Scenario: "peers-completion-time", System: MRGW, RTTms: 50, Loss: 0.01, MessageBytes: 4 << 20, Messages: 5, P50ms: 150, P99ms: 300},
		{Scenario: "peers-completion-time", System: QUIC, RTTms: 50, Loss: 0.01, MessageBytes: 1 << 20, Messages: 0}, // nothing completed: left out
	}
	for _, format := range []string{"svg", "png"} {
		dir := t.TempDir()
		files, err := Plot(dir, format, rows, synthetic())
		if err != nil {
			t.Fatal(err)
		}
		want := []string{
			"peers-loss-sweep-fraction-rtt-50ms",
			"peers-planes-fraction-rtt-50ms",
			"peers-completion-time-rtt-50ms-loss-1",
			"peers-plane-failure-00-4_planes_rtt_50ms_loss_0-goodput",
			"peers-plane-failure-00-4_planes_rtt_50ms_loss_0-mrgw-path-rtt",
			"peers-plane-failure-00-4_planes_rtt_50ms_loss_0-mrgw-path-cwnd",
			"peers-rtt-fairness-00-mrgw_loss_1-goodput",
			"peers-rtt-fairness-00-mrgw_loss_1-shares",
		}
		var got []string
		for _, f := range files {
			if filepath.Dir(f) != dir || filepath.Ext(f) != "."+format {
				t.Errorf("file %s: not a .%s in %s", f, format, dir)
			}
			got = append(got, filepath.Base(f[:len(f)-len(format)-1]))
			fi, err := os.Stat(f)
			if err != nil || fi.Size() == 0 {
				t.Errorf("%s: missing or empty (%v)", f, err)
			}
		}
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("%s files:\n got %q\nwant %q", format, got, want)
		}
	}
	if _, err := Plot(t.TempDir(), "gif", rows, nil); err == nil {
		t.Error("format gif accepted")
	}
}

// TestGoodputPlotShares: a lone run of several flows gets a line per flow
// and their shares after the warm-up; a group of runs a line per run.
func TestGoodputPlotShares(t *testing.T) {
	runs := synthetic().Runs()
	spec, shares := goodputPlot("s", "g", runs[2:3])
	if len(spec.Lines) != 3 || len(shares) != 3 {
		t.Fatalf("%d lines, %d shares; want 3 and 3", len(spec.Lines), len(shares))
	}
	// Flows at 10, 20 and 30 Mbit/s throughout.
	for k, want := range []float64{1.0 / 6, 2.0 / 6, 3.0 / 6} {
		if d := shares[k] - want; d > 1e-9 || d < -1e-9 {
			t.Errorf("share %d = %v, want %v", k, shares[k], want)
		}
	}
	spec, shares = goodputPlot("s", "g", runs[:2])
	if len(spec.Lines) != 2 || shares != nil || len(spec.Marks) != 1 {
		t.Fatalf("%d lines, shares %v, %d marks; want 2, nil, 1", len(spec.Lines), shares, len(spec.Marks))
	}
	// tcp-cubic's 8 flows of 10..80 Mbit/s are summed: 360 Mbit/s.
	if y := spec.Lines[1].Y[0]; y != 360 {
		t.Errorf("summed goodput %v Mbit/s, want 360", y)
	}
}

// TestSampler: the sampler records each counter's rate and the path
// probe's state at the same instants, marks faults, and stops; a run
// without a Recorder is not sampled.
func TestSampler(t *testing.T) {
	rec := NewRecorder()
	o := Options{Record: rec}
	ctx := o.record(context.Background(), "sc", "g", "mrgw")
	// Each read of a counter moves it on by a fixed step, so every
	// sample's rates are in the ratio of the steps.
	var na, nb atomic.Uint64
	ca := func() uint64 { return na.Add(1) * 1000 }
	cb := func() uint64 { return nb.Add(1) * 3000 }
	setPathProbe(ctx, func(context.Context) ([]float64, []float64) { return []float64{50}, []float64{1 << 16} })
	stop := sample(ctx, []func() uint64{ca, cb}, 0, time.Second)
	// Wait (bounded) for three samples.
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline) && len(rec.Runs()[0].T) < 3; {
		time.Sleep(20 * time.Millisecond)
	}
	mark(ctx, "fault")
	stop()
	s := rec.Runs()[0]
	n := len(s.T)
	if n < 3 {
		t.Fatalf("%d samples in 20 s", n)
	}
	if len(s.Bps) != n || len(s.PathT) != n || len(s.PathRTTms) != n || len(s.PathCwnd) != n {
		t.Fatalf("lengths: T %d, Bps %d, PathT %d, rtt %d, cwnd %d", n, len(s.Bps), len(s.PathT), len(s.PathRTTms), len(s.PathCwnd))
	}
	var sa, sb float64
	for i := range n {
		if i > 0 && s.T[i] <= s.T[i-1] {
			t.Errorf("T not increasing: %v", s.T)
		}
		sa, sb = s.Bps[i][0], s.Bps[i][1]
		if sa <= 0 || sb < 2.999*sa || sb > 3.001*sa {
			t.Errorf("sample %d: rates %v and %v: want the second 3 times the first", i, sa, sb)
		}
	}
	if len(s.Faults) != 1 || s.Faults[0].At < s.T[n-1] {
		t.Errorf("faults %v, want one after %v", s.Faults, s.T[n-1])
	}
	if !slices.Equal(s.Flows, []string{"flow 0", "flow 1"}) {
		t.Errorf("flows %q", s.Flows)
	}
	time.Sleep(150 * time.Millisecond)
	if len(rec.Runs()[0].T) != n {
		t.Error("sampled after stop")
	}
	// Not recording: no series, nothing to stop.
	plain := Options{}
	ctx = plain.record(context.Background(), "sc", "g", "x")
	if seriesOf(ctx) != nil {
		t.Error("a series without a Recorder")
	}
	sample(ctx, []func() uint64{ca}, 0, time.Second)()
}

func TestSampleIntervalBounds(t *testing.T) {
	for _, total := range []time.Duration{time.Second, 100 * time.Second, time.Hour} {
		iv := sampleInterval(total)
		if iv < SampleInterval || int64(total/iv) > MaxSamples {
			t.Errorf("run of %v: interval %v gives %d samples (max %d)", total, iv, total/iv, MaxSamples)
		}
	}
}

func TestRecorderBounded(t *testing.T) {
	o := Options{Record: NewRecorder()}
	for range MaxRuns + 5 {
		o.record(context.Background(), "sc", "g", "x")
	}
	if n := len(o.Record.Runs()); n != MaxRuns {
		t.Errorf("%d runs kept, want %d", n, MaxRuns)
	}
}

// TestSmooth: a trailing mean over the window, weighted by interval.
func TestSmooth(t *testing.T) {
	x := []float64{0.1, 0.2, 0.3, 0.4, 0.6}
	y := []float64{0, 84, 0, 84, 42}
	got := smooth(x, y, 0.25)
	// At 0.4: the samples at 0.4, 0.3 and 0.2 (the one 0.3 before is
	// out); at 0.6, the 0.2 s one at 0.6 and 0.4's.
	want := []float64{0, 42, 28, 56, (42*0.2 + 84*0.1) / 0.3}
	for i := range want {
		if d := got[i] - want[i]; d > 1e-9 || d < -1e-9 {
			t.Errorf("smooth[%d] = %v, want %v", i, got[i], want[i])
		}
	}
}
