package hrw

import (
	"fmt"
	"math"
	"testing"
)

func top(key uint64, names []string, w []float64) string {
	return names[Rank(key, len(names), func(i int) string { return names[i] }, func(i int) float64 { return w[i] })[0]]
}

// Shares follow the weights, and removing a node moves only its keys.
func TestSharesAndMinimalMovement(t *testing.T) {
	names := []string{"b1", "b2", "b3"}
	w := []float64{100, 100, 200}
	const keys = 40000
	count := map[string]int{}
	owner := make([]string, keys)
	for k := range keys {
		owner[k] = top(uint64(k)*0x9e3779b97f4a7c15+7, names, w)
		count[owner[k]]++
	}
	for i, n := range names {
		want := w[i] / 400
		if got := float64(count[n]) / keys; math.Abs(got-want) > 0.02 {
			t.Errorf("%s: share %.3f, want %.3f", n, got, want)
		}
	}
	// b2 leaves: only its keys move.
	left := []string{"b1", "b3"}
	lw := []float64{100, 200}
	for k := range keys {
		now := top(uint64(k)*0x9e3779b97f4a7c15+7, left, lw)
		if owner[k] != "b2" && now != owner[k] {
			t.Fatalf("key %d moved from %s to %s although %s stayed", k, owner[k], now, owner[k])
		}
	}
	// b4 joins: keys move only to it.
	more := append(names, "b4")
	mw := append(w, 100)
	moved := 0
	for k := range keys {
		now := top(uint64(k)*0x9e3779b97f4a7c15+7, more, mw)
		if now != owner[k] {
			if now != "b4" {
				t.Fatalf("key %d moved from %s to %s", k, owner[k], now)
			}
			moved++
		}
	}
	if got := float64(moved) / keys; math.Abs(got-0.2) > 0.02 {
		t.Errorf("b4 took %.3f of the keys, want 0.2", got)
	}
}

func TestScoreStable(t *testing.T) {
	// The order must not change between releases: hosts and gateways of
	// different versions rank flows alike.
	got := fmt.Sprint(Rank(42, 4, func(i int) string { return fmt.Sprintf("gw%d", i+1) }, func(int) float64 { return 1 }))
	if want := "[0 2 1 3]"; got != want {
		t.Errorf("Rank(42) = %s, want %s", got, want)
	}
	if s := Score(1, "x", 0); !math.IsInf(s, -1) {
		t.Errorf("weight 0 scores %v", s)
	}
}
