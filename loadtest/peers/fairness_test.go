//go:build linux

package peers

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/mrgw/mrgw/internal/report"
	"github.com/mrgw/mrgw/loadtest/tunemu"
)

// TestRTTFairnessRows: a quick rtt-fairness point (mrgw over emu, TCP bbr
// over tunemu when it can run) yields one row per system with three
// flows' shares in RTT order that sum to 1, Jain's index computed from
// the flows, every mrgw flow moving data (without -race: see
// race_on_test.go), and the peer's ratio of Jain indices.
func TestRTTFairnessRows(t *testing.T) {
	ctx := testCtx(t)
	// Long enough that every flow completes 1 MiB messages under load.
	o := Options{Quick: true, Seed: 1, Losses: []float64{0.01}, Systems: []string{MRGW, TCPBBR}, Warmup: time.Second, Duration: 2 * time.Second}
	rows, err := RTTFairness(ctx, o)
	want := 2
	if errors.Is(err, tunemu.ErrUnavailable) {
		t.Logf("TUN rows skipped: %v", err)
		want = 1
	} else if err != nil {
		t.Fatal(err)
	}
	if len(rows) != want {
		t.Fatalf("%d rows, want %d: %+v", len(rows), want, rows)
	}
	var mrgwJain float64
	for _, r := range rows {
		if r.Scenario != "peers-rtt-fairness" || r.Flows != 3 || len(r.Shares) != 3 || r.Loss != 0.01 || r.RTTms != 50 {
			t.Fatalf("row fields: %+v", r)
		}
		sum := r.Shares[0] + r.Shares[1] + r.Shares[2]
		if math.Abs(sum-1) > 0.002 && r.GoodputBps > 0 {
			t.Errorf("%s: shares %v sum to %v", r.System, r.Shares, sum)
		}
		// Jain's index from the shares (scale-free) is the row's.
		if j := report.Jain(r.Shares); r.GoodputBps > 0 && (math.Abs(j-r.Jain) > 0.01 || r.Jain <= 0 || r.Jain > 1) {
			t.Errorf("%s: jain %v, from the shares %v", r.System, r.Jain, j)
		}
		if (r.Fraction <= 0 && !raceEnabled) || math.Abs(r.Fraction-r.GoodputBps/r.CapacityBps) > 1e-9 {
			t.Errorf("%s: utilisation %v", r.System, r.Fraction)
		}
		switch r.System {
		case MRGW:
			mrgwJain = r.Jain
			if r.Emulator != EmuUDP || r.CC != DefaultMRGWCC || r.MRGWRatio != 0 {
				t.Errorf("mrgw row: %+v", r)
			}
			for k, s := range r.Shares {
				if s <= 0 && !raceEnabled {
					t.Errorf("mrgw flow %d (%v) moved nothing: %v", k, FairnessRTTs[k], r.Note)
				}
			}
		case TCPBBR:
			if r.Emulator != EmuTUN || r.CC != "bbr" || r.Streams != 1 {
				t.Errorf("tcp row: %+v", r)
			}
		}
		t.Logf("%s: shares %v jain %.3f utilisation %.3f (%s)", r.System, r.Shares, r.Jain, r.Fraction, r.Note)
	}
	if want == 2 {
		if got := rows[1].MRGWRatio; math.Abs(got-mrgwJain/rows[1].Jain) > 1e-9 {
			t.Errorf("bbr's mrgw ratio %v, want %v", got, mrgwJain/rows[1].Jain)
		}
	}
}

// The scenarios name the systems they cannot run instead of dropping them.
func TestFairnessRefusesOtherSystems(t *testing.T) {
	for _, run := range []func() error{
		func() error {
			_, err := RTTFairness(testCtx(t), Options{Quick: true, Systems: []string{MRGW, KCP}})
			return err
		},
		func() error {
			_, err := PlaneFailure(testCtx(t), Options{Quick: true, Systems: []string{RoCEv2}})
			return err
		},
		func() error {
			_, err := RTTFairness(testCtx(t), Options{Quick: true, RTTs: []time.Duration{time.Millisecond}})
			return err
		},
	} {
		if err := run(); err == nil || (!strings.Contains(err.Error(), "kcp") && !strings.Contains(err.Error(), "rocev2") &&
			!strings.Contains(err.Error(), "round trips")) {
			t.Errorf("error %v", err)
		}
	}
}

// TestPlaneFailureRows: quick plane failure with mrgw and 8-stream TCP
// cubic. mrgw loses and duplicates no message and moves data before and
// after the failure; the TCP stream whose plane failed stalls (and the rows
// carry mrgw's ratio per phase).
func TestPlaneFailureRows(t *testing.T) {
	ctx := testCtx(t)
	// 1.5 s after the first second: enough for mrgw to complete 1 MiB
	// messages once the dead plane's paths are down, even under -race.
	o := Options{Quick: true, Seed: 1, Systems: []string{MRGW, TCPCubic}, Duration: 2500 * time.Millisecond}
	rows, err := PlaneFailure(ctx, o)
	want := 6
	if errors.Is(err, tunemu.ErrUnavailable) {
		t.Logf("TUN rows skipped: %v", err)
		want = 3
	} else if err != nil {
		t.Fatal(err)
	}
	if len(rows) != want {
		t.Fatalf("%d rows, want %d: %+v", len(rows), want, rows)
	}
	phases := []string{PhaseBefore, PhaseFirst, PhaseSustained}
	mrgw := map[string]float64{}
	for i, r := range rows {
		if r.Scenario != "peers-plane-failure" || r.Planes != PlaneFailurePlanes || r.Variant != phases[i%3] || r.Fault == "" {
			t.Fatalf("row %d fields: %+v", i, r)
		}
		t.Logf("%s %s: %.3f of capacity, ratio %.2f, %s", r.System, r.Variant, r.Fraction, r.MRGWRatio, r.Note)
		switch r.System {
		case MRGW:
			mrgw[r.Variant] = r.GoodputBps
			if r.MessagesLost == nil || *r.MessagesLost != 0 || r.MessagesDuplicated == nil || *r.MessagesDuplicated != 0 || r.MessagesFailed != 0 {
				t.Errorf("mrgw %s: lost %v duplicated %v failed %d", r.Variant, r.MessagesLost, r.MessagesDuplicated, r.MessagesFailed)
			}
			// The first second may complete nothing on a loaded machine
			// (in-order completion waits for the dead plane's repairs).
			if r.GoodputBps <= 0 && r.Variant != PhaseFirst && !raceEnabled {
				t.Errorf("mrgw moved nothing in phase %s", r.Variant)
			}
		case TCPCubic:
			if r.Streams != 8 || r.CC != "cubic" || r.MessagesLost != nil {
				t.Errorf("tcp row: %+v", r)
			}
			if r.GoodputBps > 0 && math.Abs(r.MRGWRatio-mrgw[r.Variant]/r.GoodputBps) > 1e-9 {
				t.Errorf("tcp %s: ratio %v", r.Variant, r.MRGWRatio)
			}
		}
	}
}

// TestPlaneFailureTCPStalls: the stream on the failed plane delivers
// nothing once the plane is down and holds bytes its sender had accepted,
// and the failure dropped packets.
func TestPlaneFailureTCPStalls(t *testing.T) {
	if err := tunemu.Check(); err != nil {
		t.Skip(err)
	}
	o := Options{Quick: true, Seed: 1}.withDefaults()
	l := o.link(PlaneFailurePlanes, o.CapacityBps, 50*time.Millisecond, 0)
	r, err := pfTCP(testCtx(t), "cubic", l, timeline{warmup: 300 * time.Millisecond, before: 300 * time.Millisecond, after: 1500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if r.onPlane < 1 || r.stalled < 1 || r.stalled > r.onPlane || r.downDrops == 0 || r.stuck == 0 {
		t.Fatalf("%d of %d streams cross the failed plane %d, %d stalled holding %d bytes, %d packets dropped by the failure",
			r.onPlane, r.flows, r.plane, r.stalled, r.stuck, r.downDrops)
	}
	t.Logf("%d of %d streams cross plane %d, %d stalled; %.1f/%.1f/%.1f Mbit/s", r.onPlane, r.flows, r.plane, r.stalled,
		r.bps[0]/1e6, r.bps[1]/1e6, r.bps[2]/1e6)
}
