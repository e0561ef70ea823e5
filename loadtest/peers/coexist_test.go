//go:build linux

package peers

import (
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/mrgw/mrgw/internal/report"
	"github.com/mrgw/mrgw/loadtest/tunemu"
)

// TestCoexistenceQuick: the baseline pair and mrgw against cubic share one
// tunemu bottleneck; both flows of each pair move bytes, and the rows carry
// every field the report needs (shares summing to one, the pair's
// utilisation, competitor, starvation verdict, the cubic flow's share
// relative to the baseline) under the documented JSON names.
func TestCoexistenceQuick(t *testing.T) {
	if err := tunemu.Check(); err != nil {
		t.Skip(err)
	}
	ctx := testCtx(t)
	o := quick()
	o.Duration = 1500 * time.Millisecond
	o.Pairs = []string{"tcp-cubic+tcp-cubic", "mrgw+tcp-cubic"}
	rows, err := Coexistence(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 4 {
		t.Fatalf("%d rows, want 4: %+v", len(rows), rows)
	}
	want := [][2]string{{TCPCubic, TCPCubic}, {TCPCubic, TCPCubic}, {MRGW, TCPCubic}, {TCPCubic, MRGW}}
	for i, r := range rows {
		if r.System != want[i][0] || r.Competitor != want[i][1] {
			t.Errorf("row %d: %s against %s, want %s against %s", i, r.System, r.Competitor, want[i][0], want[i][1])
		}
		if r.Scenario != ScenarioCoexist || r.Emulator != EmuTUN || r.RTTms != 20 || r.Loss != 0 || r.Planes != 1 ||
			r.CapacityBps != DefaultCapacityBps || r.CC == "" || r.Starved == nil {
			t.Errorf("row %d fields: %+v", i, r)
		}
		if r.GoodputBps <= 0 || r.GoodputBps > r.CapacityBps {
			t.Errorf("row %d: %s goodput %.0f outside (0, capacity]", i, r.System, r.GoodputBps)
		}
		if *r.Starved != (r.Share < StarvedShare) {
			t.Errorf("row %d: starved %v with share %.3f", i, *r.Starved, r.Share)
		}
		if r.System == MRGW && (r.Paths != DefaultPaths || r.CC != DefaultMRGWCC) {
			t.Errorf("mrgw row: %+v", r)
		}
		if strings.HasPrefix(r.System, "tcp-") && (r.Streams != 1 || r.CC != "cubic" || !strings.Contains(r.Note, "ce-acked=")) {
			t.Errorf("tcp row: %+v", r)
		}
	}
	for i := 0; i < len(rows); i += 2 {
		a, b := rows[i], rows[i+1]
		if a.Variant != b.Variant || a.Utilization != b.Utilization || a.Jain != b.Jain {
			t.Errorf("pair %d rows disagree: %+v / %+v", i/2, a, b)
		}
		if s := a.Share + b.Share; math.Abs(s-1) > 1e-9 {
			t.Errorf("pair %s: shares sum to %v", a.Variant, s)
		}
		if u := (a.GoodputBps + b.GoodputBps) / a.CapacityBps; math.Abs(u-a.Utilization) > 1e-9 {
			t.Errorf("pair %s: utilisation %v, goodputs say %v", a.Variant, a.Utilization, u)
		}
		t.Logf("%s: %s %.1f Mbit/s (share %.3f), %s %.1f Mbit/s (share %.3f), utilisation %.3f; %s",
			a.Variant, a.System, a.GoodputBps/1e6, a.Share, b.System, b.GoodputBps/1e6, b.Share, a.Utilization, b.Note)
	}
	if rows[1].RelBaseline != 0 || rows[3].RelBaseline <= 0 ||
		math.Abs(rows[3].RelBaseline-rows[3].Share/rows[1].Share) > 1e-9 {
		t.Errorf("rel_baseline: baseline %v, cubic against mrgw %v (shares %v, %v)",
			rows[1].RelBaseline, rows[3].RelBaseline, rows[1].Share, rows[3].Share)
	}
	var b strings.Builder
	if err := report.WriteJSON(&b, rows[3:]); err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(b.String()), &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"system", "competitor", "share", "utilization", "rel_baseline", "starved", "goodput_bps", "emulator", "variant"} {
		if _, ok := m[k]; !ok {
			t.Errorf("JSON row lacks %q: %s", k, b.String())
		}
	}
}

// TestMRGWBulkThroughTUN: Options.MRGWEmulator sends mrgw's bulk run
// through tunemu (the loss sweep's --emulator tunemu), and a bad name is
// refused.
func TestMRGWBulkThroughTUN(t *testing.T) {
	if err := tunemu.Check(); err != nil {
		t.Skip(err)
	}
	ctx := testCtx(t)
	o := quick()
	o.MRGWEmulator = EmuTUN
	o = o.withDefaults()
	l := o.link(1, 100e6, 20*time.Millisecond, 0.01)
	r, err := Bulk(ctx, Peer{System: MRGW}, l, o.Warmup, o.Duration, o)
	if err != nil {
		t.Fatal(err)
	}
	if r.GoodputBps <= 0 || r.GoodputBps > l.Capacity() || r.Emulator != EmuTUN || r.PlanesUsed != 1 {
		t.Errorf("mrgw over tunemu: %+v", r)
	}
	t.Logf("mrgw over tunemu: %.1f Mbit/s, %d retransmits", r.GoodputBps/1e6, r.Retransmits)
	o.MRGWEmulator = "tun"
	if _, err := Bulk(ctx, Peer{System: MRGW}, l, o.Warmup, o.Duration, o); err == nil || errors.Is(err, tunemu.ErrUnavailable) {
		t.Errorf("emulator %q: err %v, want a refusal", o.MRGWEmulator, err)
	}
}

func TestParsePair(t *testing.T) {
	if p, err := ParsePair(" mrgw + tcp-cubic "); err != nil || p != (Pair{MRGW, TCPCubic}) {
		t.Errorf("ParsePair: %v %v", p, err)
	}
	for _, s := range []string{"", "mrgw", "mrgw+quic", "kcp+tcp-cubic", "mrgw+tcp-cubic+tcp-bbr"} {
		if _, err := ParsePair(s); err == nil {
			t.Errorf("ParsePair(%q) accepted", s)
		}
	}
}
