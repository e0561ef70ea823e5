package pathmgr

import (
	"math"
	"testing"
)

// TestPickWeightedFollowsWeights: with room everywhere, each path carries
// packets in proportion to its weight, and no path gets more than its
// quantum in a row.
func TestPickWeightedFollowsWeights(t *testing.T) {
	s := newTestSet(4)
	weights := []float64{1, 1, 2, 0.5}
	weight := func(i int) float64 { return weights[i] }
	window := func(int) int { return 1 << 30 }
	counts := make([]int, 4)
	last, run, maxRun := -1, 0, 0
	const picks = 4500 // 1000 laps of total weight 4.5
	for k := 0; k < picks; k++ {
		i := s.PickWeighted(1000, window, weight)
		if i < 0 {
			t.Fatal("no path picked with room everywhere")
		}
		counts[i]++
		if i == last {
			run++
		} else {
			last, run = i, 1
		}
		maxRun = max(maxRun, run)
	}
	for i, w := range weights {
		want := float64(picks) * w / 4.5
		if math.Abs(float64(counts[i])-want) > 2 {
			t.Errorf("path %d (weight %g): %d packets, want %.0f", i, w, counts[i], want)
		}
	}
	if maxRun > 2 {
		t.Errorf("%d packets in a row on one path; the largest quantum is 2", maxRun)
	}
}

// TestPickWeightedSplitsPlanesByRate is the case round robin gets wrong
// (docs/CC.md §2, the split): two planes of equal capacity, ECMP hashed 4
// paths onto one and 12 onto the other. The controller gives each plane
// half of the connection (per path: 2 on the first plane, 2/3 on the
// second, relative to the mean). Round robin sends each plane its share
// of the paths, a quarter and three quarters; the weighted pick sends
// half to each.
func TestPickWeightedSplitsPlanesByRate(t *testing.T) {
	plane := func(i int) int {
		if i < 4 {
			return 0
		}
		return 1
	}
	weight := func(i int) float64 {
		if plane(i) == 0 {
			return 2
		}
		return 2.0 / 3
	}
	window := func(int) int { return 1 << 30 }
	const picks = 16000
	var rr, wt [2]int
	s := newTestSet(16)
	for k := 0; k < picks; k++ {
		rr[plane(s.Pick(1000, window))]++
	}
	s = newTestSet(16)
	for k := 0; k < picks; k++ {
		wt[plane(s.PickWeighted(1000, window, weight))]++
	}
	if rr[0] != picks/4 {
		t.Errorf("round robin: plane 0 got %d of %d packets, want a quarter", rr[0], picks)
	}
	// Within one lap (8 packets a plane): the picks may stop mid-lap.
	if math.Abs(float64(wt[0])-picks/2) > 8 {
		t.Errorf("weighted: plane 0 got %d of %d packets, want half", wt[0], picks)
	}
}

// TestPickWeightedWindowsAndState: a path without room loses its turn and
// what it saved (no burst when its window reopens); a suspect path takes
// its turns at its weight as an up one does; -1 when nothing has room;
// weights too small to ever reach a packet do not stall the connection,
// and then an up path is preferred.
func TestPickWeightedWindowsAndState(t *testing.T) {
	s := newTestSet(4)
	open := []bool{false, true, true, true}
	window := func(i int) int {
		if open[i] {
			return 1 << 30
		}
		return 0
	}
	one := func(int) float64 { return 1 }
	for k := 0; k < 300; k++ {
		if i := s.PickWeighted(1000, window, one); i == 0 || i < 0 {
			t.Fatalf("pick %d: path %d, want one with room", k, i)
		}
	}
	open[0] = true
	got := 0
	for k := 0; k < 8; k++ {
		if s.PickWeighted(1000, window, one) == 0 {
			got++
		}
	}
	if got != 2 {
		t.Errorf("path 0 got %d of the 8 packets after its window reopened, want its share, 2", got)
	}

	// A suspect path gets its weight's part, here a sixteenth of an up
	// path's (docs/CC.md §2): the weighted split leaves the up paths
	// room, so a suspect path sent only when they had none was never
	// sent anything again, and never acked back up.
	s.Paths[1].State = Suspect
	small := func(i int) float64 {
		if i == 1 {
			return 1.0 / 16
		}
		return 1
	}
	counts := make([]int, 4)
	const picks = 49 * 40 // 40 laps of total weight 3 + 1/16
	for k := 0; k < picks; k++ {
		counts[s.PickWeighted(1000, window, small)]++
	}
	if counts[1] < 39 || counts[1] > 41 {
		t.Errorf("suspect path of weight 1/16: %d of %d packets, want 40 (%v)", counts[1], picks, counts)
	}
	open[0], open[2], open[3] = false, false, false
	if i := s.PickWeighted(1000, window, small); i != 1 {
		t.Errorf("only the suspect path has room: picked %d, want 1", i)
	}
	open[1] = false
	if i := s.PickWeighted(1000, window, small); i != -1 {
		t.Errorf("no room anywhere: picked %d, want -1", i)
	}

	// Tiny weights: a path with room is still picked, an up one first.
	s = newTestSet(4)
	s.Paths[0].State = Suspect
	tiny := func(int) float64 { return 1e-9 }
	all := func(int) int { return 1 << 30 }
	if i := s.PickWeighted(1000, all, tiny); i != 1 {
		t.Errorf("weights of 1e-9, path 0 suspect: picked %d, want 1, the first up path with room", i)
	}
}

// TestPickWeightedAllocatesNothing: the sprayer runs per packet.
func TestPickWeightedAllocatesNothing(t *testing.T) {
	s := newTestSet(64)
	weights := make([]float64, 64)
	for i := range weights {
		weights[i] = 0.5 + float64(i%4)/2
	}
	weight := func(i int) float64 { return weights[i] }
	window := func(int) int { return 1 << 30 }
	if a := testing.AllocsPerRun(1000, func() { s.PickWeighted(1000, window, weight) }); a != 0 {
		t.Errorf("%.1f allocations per pick, want 0", a)
	}
}
