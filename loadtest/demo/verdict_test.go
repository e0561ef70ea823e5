//go:build linux

package demo

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// TestChecksJudgeTheFigures: with the default options, the figures of a
// run on a loaded machine (50 Mbit/s, recovery 107 RTT, a path RTT of
// 221 ms for a 40 ms link) are each reported out of their range, and
// those of a quiet run (265 Mbit/s, 8.4 RTT, 55 ms) in it. Before, both
// reports ended "errors: none" and nothing else.
func TestChecksJudgeTheFigures(t *testing.T) {
	o := Defaults()
	base := Report{Duration: 15, Planes: 4, RTTms: 40, Loss: 0.01, PlaneRateMbit: 50, FailedPlane: 1, FailedAt: 7.5}
	loaded, quiet := base, base
	loaded.GoodputMbit, loaded.RecoveryRTTs, loaded.MeasuredRTTms = 50, 107, 221
	quiet.GoodputMbit, quiet.RecoveryRTTs, quiet.MeasuredRTTms = 265, 8.4, 55
	for _, c := range checks(&loaded, o) {
		want := c.Figure == "duplicates at the destinations" || c.Figure == "errors"
		if c.Met != want {
			t.Errorf("loaded run: %s = %v %s, range %v-%v: met %v, want %v", c.Figure, c.Value, c.Unit, c.Min, c.Max, c.Met, want)
		}
	}
	for _, c := range checks(&quiet, o) {
		if !c.Met {
			t.Errorf("quiet run: %s = %v %s out of %v-%v", c.Figure, c.Value, c.Unit, c.Min, c.Max)
		}
	}
	// The capacity is averaged over the run: 4 planes for half of it, 3
	// for the rest, both ways at 50 Mbit/s.
	if c := checks(&quiet, o)[0]; c.Max != 350 {
		t.Errorf("capacity %v Mbit/s, want 350", c.Max)
	}
	// A run whose goodput never came back is out of range.
	gone := quiet
	gone.RecoveryRTTs = -1
	if c := checks(&gone, o)[1]; c.Met {
		t.Errorf("no recovery judged in range: %+v", c)
	}
	// The printed report states each range and the verdict.
	loaded.Checks = checks(&loaded, o)
	loaded.Machine = Machine{Cores: 2, Load1Start: 5.2, Load1End: 6, Steal: 0, OtherCores: 1.2, EmuLateMeanMs: 2.5, EmuLateMaxMs: 40}
	loaded.Machine.judge(40 * time.Millisecond)
	var out bytes.Buffer
	loaded.Print(&out)
	for _, want := range []string{"expected 157.5-350", "NOT MET", "WARNING: this machine was too busy", "other processes used 1.2 of 2 cores", "emulator delivered datagrams 2.50 ms late", "verdict: 3 of 5 figures out of range on a busy machine"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
}

// TestMachineJudge: each measure alone makes a machine busy; a quiet one
// (no other process, no steal, an emulator late by tens of µs) is not,
// whatever its load average (which counts the demo itself).
func TestMachineJudge(t *testing.T) {
	rtt := 40 * time.Millisecond
	quiet := Machine{Cores: 2, Load1Start: 2.5, Load1End: 3.4, Steal: 0.001, OtherCores: 0.1, EmuLateMeanMs: 0.03, EmuLateMaxMs: 2}
	quiet.judge(rtt)
	if quiet.Busy {
		t.Errorf("a quiet machine judged busy: %v", quiet.Why)
	}
	for name, m := range map[string]Machine{
		"other processes": {Cores: 2, OtherCores: 0.9, EmuLateMeanMs: 0.03},
		"steal":           {Cores: 2, Steal: 0.2, EmuLateMeanMs: 0.03},
		"late mean":       {Cores: 2, EmuLateMeanMs: 1.5},
		"late at most":    {Cores: 2, EmuLateMeanMs: 0.03, EmuLateMaxMs: 30},
	} {
		m.judge(rtt)
		if !m.Busy || len(m.Why) != 1 {
			t.Errorf("%s: busy %v, why %v; want busy for one reason", name, m.Busy, m.Why)
		}
	}
}
