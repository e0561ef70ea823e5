package scenario

import (
	"math"
	"testing"

	"github.com/mrgw/mrgw/metaroce"
)

func TestRegionsMaxMinShares(t *testing.T) {
	s := DefaultRegions(Options{RateBps: 40e9}) // 1 Gbit/s per plane, 4 Gbit/s per segment
	payload := 4096.0 / float64(4096+metaroce.DataHeaderLen)
	c := 4e9 * payload
	check := func(name string, got, want []float64) {
		t.Helper()
		for i := range want {
			if math.Abs(got[i]-want[i]) > 1e-6*c {
				t.Errorf("%s: pair %v share %.4g, want %.4g (all %v)", name, s.Pairs[i], got[i], want[i], got)
			}
		}
	}
	// Every segment carries three pairs: a third each.
	third := []float64{c / 3, c / 3, c / 3, c / 3, c / 3}
	check("steady", s.maxMinShares([]float64{4e9, 4e9, 4e9}, payload), third)
	s.NoHints = true
	check("steady, no hints", s.maxMinShares([]float64{4e9, 4e9, 4e9}, payload), third)
	s.NoHints = false
	// B–C at 3/4: A→C, A→D, B→D get a quarter each; A→B and C→D take the
	// rest of A–B and C–D.
	check("B–C at 3/4", s.maxMinShares([]float64{4e9, 3e9, 4e9}, payload), []float64{c / 2, c / 4, c / 4, c / 4, c / 2})
	// Two pairs into one receiver over one segment, a third pair elsewhere.
	s.SegmentDelays = s.SegmentDelays[:2]
	s.Pairs = []RegionPair{{0, 2}, {1, 2}, {0, 1}}
	check("line of 3", s.maxMinShares([]float64{4e9, 4e9}, payload), []float64{c / 2, c / 2, c / 2})
}

// TestRegionsMaxMinDefaults is the max-min target across regions, at the regions
// defaults (`mrgw-lab sim regions`: 2.5 Gbit/s per plane, 10 Gbit/s per
// segment, 11 s; about 30 s of CPU, skipped with -short), with the
// receivers' hints on: in the steady window and after B–C's plane 1 fails,
// every pair within ±10% of its max-min share, every segment at least
// 0.95 utilised, and no queue drops. Before the sending gateways shared
// their capacity (cc.Egress) and the hint's rises stood back while the
// delay equilibrium steered (cc.AIMD.setHint), pairs got 0.68-1.14 of
// their shares and segments 0.83-0.97, with 43,153 drops on A–B in the
// steady window (docs/results/regions.md).
func TestRegionsMaxMinDefaults(t *testing.T) {
	if testing.Short() {
		t.Skip("about 30 s of CPU")
	}
	t.Parallel()
	s := DefaultRegions(Options{Seed: 1})
	r, err := RunRegions(s)
	if err != nil {
		t.Fatal(err)
	}
	checkRegions(t, s, r, 0.10, 0.95, true)
}

// TestRegionsSharedLongHaul runs the regions topology at a tenth of a
// plane's default rate (0.25 Gbit/s per plane, 1 Gbit/s per segment; a few
// seconds of CPU) with the real controllers and hints. The targets there
// are looser than at the defaults (TestRegionsMaxMinDefaults), since a
// tenth of the rate holds a tenth of the packets per round trip and the
// rates move in coarser steps: every pair within 15% of its max-min share
// and every segment at least 0.9 utilised, in both windows, with no queue
// drops (measured: pairs 0.960-1.008 of their shares in the steady window,
// 0.893-1.014 after the fault, the lowest A→B, whose paths must move to the
// plane that A→C and A→D no longer use; segments 0.929-0.979).
func TestRegionsSharedLongHaul(t *testing.T) {
	s := DefaultRegions(Options{Seed: 1, RateBps: 10e9})
	r, err := RunRegions(s)
	if err != nil {
		t.Fatal(err)
	}
	checkRegions(t, s, r, 0.15, 0.9, true)
}

// checkRegions asserts a regions run: two windows, every pair within tol of
// its max-min share, every segment at least util busy and, if noDrops, no
// queue drops on any segment.
func checkRegions(t *testing.T, s RegionsSetup, r RegionsResult, tol, util float64, noDrops bool) {
	t.Helper()
	for _, rw := range regionRows(s, r) {
		t.Logf("%-18s %-12s share/capacity %.3g goodput %.3g fraction %.3f jain %.3f peak queue %d drops %d shares %.3f",
			rw.Variant, rw.Note, rw.CapacityBps, rw.GoodputBps, rw.Fraction, rw.Jain, rw.MaxQueueBytes, rw.QueueDrops, rw.Shares)
	}
	if len(r.Windows) != 2 || r.Unroute != 0 {
		t.Fatalf("%d windows, %d unroutable datagrams; want 2 and 0", len(r.Windows), r.Unroute)
	}
	for _, w := range r.Windows {
		for i, p := range s.Pairs {
			if frac := w.PairBps[i] / w.FairBps[i]; math.Abs(frac-1) > tol {
				t.Errorf("%s: pair %s→%s at %.3f of its max-min share, want within %.0f%%", w.Name, regionName(p.From), regionName(p.To), frac, 100*tol)
			}
		}
		for k, u := range w.SegUtil {
			if u < util {
				t.Errorf("%s: segment %s–%s utilised %.3f, want >= %g", w.Name, regionName(k), regionName(k+1), u, util)
			}
			if noDrops && w.SegDrops[k] != 0 {
				t.Errorf("%s: segment %s–%s dropped %d datagrams, want none", w.Name, regionName(k), regionName(k+1), w.SegDrops[k])
			}
		}
	}
}

func TestRegionsRejectsBadSetups(t *testing.T) {
	good := DefaultRegions(Options{RateBps: 10e9})
	for name, mut := range map[string]func(*RegionsSetup){
		"no pairs":         func(s *RegionsSetup) { s.Pairs = nil },
		"pair to itself":   func(s *RegionsSetup) { s.Pairs = []RegionPair{{1, 1}} },
		"unknown region":   func(s *RegionsSetup) { s.Pairs = []RegionPair{{0, 4}} },
		"backwards pair":   func(s *RegionsSetup) { s.Pairs = []RegionPair{{2, 1}} },
		"no gateways":      func(s *RegionsSetup) { s.Gateways = 0 },
		"fault too late":   func(s *RegionsSetup) { s.Settle = s.Duration },
		"no such plane":    func(s *RegionsSetup) { s.FaultPlane = s.Planes },
		"no such segment":  func(s *RegionsSetup) { s.FaultSegment = 3 },
		"warm-up too long": func(s *RegionsSetup) { s.Warmup = s.Duration },
	} {
		s := good
		mut(&s)
		if _, err := RunRegions(s); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
