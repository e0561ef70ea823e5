//go:build linux

package apps

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/mrgw/mrgw/internal/report"
	"github.com/mrgw/mrgw/loadtest/tunemu"
)

// TestAppsSmoke runs the benchmark at its smallest: one RTT, one loss
// rate, iperf3 for 1 s after 1 s of warm-up, a 4 MiB copy, every system
// over 4 planes of 10 Mbit/s; kernel TCP is skipped, and the test says
// so, when namespaces cannot be created here, iperf3 likewise when it is
// not installed. It checks that every row that could run is there and
// sane, that the copies arrived byte for byte, and that the targets and
// plots are drawn from the rows. No figure is held to a threshold.
func TestAppsSmoke(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute) // a bound on a hang, not a measure
	defer cancel()
	o := Options{
		PlaneRateBps: 10e6, RTTs: []time.Duration{20 * time.Millisecond}, Losses: []float64{0.01},
		Warmup: time.Second, Duration: time.Second, FileSize: 4 << 20, CopyLimit: 3 * time.Minute,
		Dir: t.TempDir(),
	}
	rows, err := Run(ctx, o)
	noTUN := errors.Is(err, tunemu.ErrUnavailable)
	noIperf := errors.Is(err, ErrMissingProgram)
	switch {
	case noTUN || noIperf:
		t.Logf("skipped rows: %v", err)
	case err != nil:
		t.Fatalf("Run: %v (rows so far: %d)", err, len(rows))
	}
	want := map[[2]string]bool{}
	for _, w := range AllWorkloads {
		for _, s := range AllSystems {
			kernel := s == TCPCubic || s == TCPBBR
			iperf := w != Copy && s != MRGWTransport
			if applies(s, w) && !(kernel && noTUN) && !(iperf && noIperf) {
				want[[2]string{w, s}] = true
			}
		}
	}
	got := map[[2]string]report.Row{}
	for _, r := range rows {
		k := [2]string{r.Workload, r.System}
		if _, dup := got[k]; dup {
			t.Errorf("%v twice", k)
		}
		got[k] = r
		if !want[k] {
			t.Errorf("unexpected row %v", k)
		}
		if r.Scenario != Scenario || r.RTTms != 20 || r.Loss != 0.01 || r.Planes != 4 || r.CapacityBps != 40e6 {
			t.Errorf("%v: scenario %q rtt %v loss %v planes %d capacity %v", k, r.Scenario, r.RTTms, r.Loss, r.Planes, r.CapacityBps)
		}
		if r.Streams != streams(r.Workload) {
			t.Errorf("%v: %d streams", k, r.Streams)
		}
		// Goodput within the link: at most the capacity (a tenth more for
		// the edges of iperf3's own intervals). A window of 1 s may hold
		// no whole 1 MiB message under the race detector, so zero is
		// possible; the copies below show that every system moves data.
		if r.GoodputBps < 0 || r.Fraction > 1.1 || r.Fraction != r.GoodputBps/r.CapacityBps {
			t.Errorf("%v: goodput %v, fraction %v", k, r.GoodputBps, r.Fraction)
		}
		if !(r.CPUCores > 0) || r.CPUCores > 64 {
			t.Errorf("%v: cpu_cores %v", k, r.CPUCores)
		}
		wantEmu := "emu"
		if r.System == TCPCubic || r.System == TCPBBR {
			wantEmu = "tunemu"
			if r.CC != r.System[len("tcp-"):] {
				t.Errorf("%v: cc %q", k, r.CC)
			}
			if r.EmulatorOK == nil {
				t.Errorf("%v: no emulator self-check", k)
			}
		}
		if r.Emulator != wantEmu {
			t.Errorf("%v: emulator %q", k, r.Emulator)
		}
		if r.Workload == Copy && r.System != MRGWTransport && r.System != TCPCubic && !strings.Contains(r.Note, "sha256 equal") {
			// Only kernel cubic may not finish 4 MiB at 1% loss within
			// minutes; the others must have copied it, byte for byte.
			t.Errorf("%v: copy not complete: %s", k, r.Note)
		}
		if adapter(r.System) && r.MRGWRatio != 0 {
			t.Errorf("%v: an adapter row with mrgw_ratio %v", k, r.MRGWRatio)
		}
		if !adapter(r.System) && r.GoodputBps > 0 && r.MRGWRatio <= 0 && hasAdapter(rows, r) {
			t.Errorf("%v: no mrgw_ratio", k)
		}
		t.Logf("%-9s %-14s %7.2f Mbit/s  fraction %.3f  cpu %.2f  %s", r.Workload, r.System, r.GoodputBps/1e6, r.Fraction, r.CPUCores, r.Note)
	}
	for k := range want {
		if _, ok := got[k]; !ok {
			t.Errorf("no row %v", k)
		}
	}

	ts := Targets(rows)
	adapters := 0
	for _, r := range rows {
		if adapter(r.System) {
			adapters++
		}
	}
	if len(ts) != len(wants)*adapters {
		t.Errorf("%d targets for %d adapter rows", len(ts), adapters)
	}
	for _, tg := range ts {
		b, ran := got[[2]string{tg.Workload, tg.Against}]
		ran = ran && b.GoodputBps > 0
		if tg.Missing == ran {
			t.Errorf("target %+v: missing %v, the row ran: %v", tg, tg.Missing, ran)
		}
	}
	var md strings.Builder
	if err := WriteTargets(&md, ts); err != nil || !strings.Contains(md.String(), "targets met") {
		t.Errorf("WriteTargets: %v\n%s", err, md.String())
	}

	dir := t.TempDir()
	files, err := Plot(dir, "svg", rows)
	if err != nil {
		t.Fatal(err)
	}
	workloads := map[string]bool{}
	for _, r := range rows {
		workloads[r.Workload] = true
	}
	if len(files) != len(workloads) {
		t.Errorf("%d plots for %d workloads at one rtt: %v", len(files), len(workloads), files)
	}
	for _, f := range files {
		if fi, err := os.Stat(f); err != nil || fi.Size() == 0 {
			t.Errorf("plot %s: %v", f, err)
		}
	}
}

// TestOptionsRefused: options that cannot run are refused before anything
// starts, naming what is wrong.
func TestOptionsRefused(t *testing.T) {
	for _, c := range []struct {
		o    Options
		want string
	}{
		{Options{Systems: []string{"tcp-reno"}}, `unknown system "tcp-reno"`},
		{Options{Workloads: []string{"scp"}}, `unknown workload "scp"`},
		{Options{Warmup: 1500 * time.Millisecond}, "whole seconds"},
		{Options{Losses: []float64{1}}, "loss 1 outside"},
		{Options{Window: 1024}, "window 1024"},
	} {
		err := c.o.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: err = %v, want %q", c.o, err, c.want)
		}
		if _, err := Run(context.Background(), c.o); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Run %+v: err = %v, want %q", c.o, err, c.want)
		}
	}
}

// TestWindow: the stream window holds twice the WAN's bandwidth-delay
// product, from 4 MiB up, and the gateways' credit twice the window.
func TestWindow(t *testing.T) {
	o := Options{}.withDefaults()
	for _, c := range []struct {
		rtt  time.Duration
		want int
	}{{50 * time.Millisecond, 4 << 20}, {150 * time.Millisecond, 8 << 20}, {time.Second, 64 << 20}} {
		p := point{rtt: c.rtt}
		if w := o.window(p); w != c.want {
			t.Errorf("rtt %v: window %d, want %d", c.rtt, w, c.want)
		}
		if cr := o.labConfig(p).FlowCreditBytes; cr != int64(2*c.want) {
			t.Errorf("rtt %v: credit %d", c.rtt, cr)
		}
	}
}

// hasAdapter says whether r's workload ran through an adapter at r's
// point and moved something.
func hasAdapter(rows []report.Row, r report.Row) bool {
	for _, a := range rows {
		if adapter(a.System) && sameGroup(a, r) {
			return a.GoodputBps > 0
		}
	}
	return false
}
