//go:build linux

package gateway

import (
	"fmt"
	"testing"
)

// TestOpenedWeightMatchesReweigh: on a large connection an OPEN weighs
// only the new flow (weighOpened); its weight must be what a full
// reweigh gives it, here where the new flow's class is not the one with
// the smallest share (then the other flows' weights do not change
// either), for every size of its class.
func TestOpenedWeightMatchesReweigh(t *testing.T) {
	weights := map[string]int{"bulk": 1, "gold": 4}
	weight := func(c string) int { return weights[c] }
	for _, gold := range []int{1, 3, 10, 100} {
		t.Run(fmt.Sprint(gold), func(t *testing.T) {
			out := map[uint32]*flow{}
			stream := uint32(1)
			add := func(class string) *flow {
				f := &flow{class: class, active: true, state: flowOpen, downStream: stream}
				out[stream] = f
				stream++
				return f
			}
			// 1000 bulk flows define the smallest share (1/1000).
			for range 1000 {
				add("bulk")
			}
			for range gold {
				add("gold")
			}
			before, counts, smallest := flowWeights(out, weight)
			got := openedWeight(weight("gold"), counts["gold"], smallest)
			nf := add("gold")
			after, _, _ := flowWeights(out, weight)
			if want := after[nf.downStream]; got != want {
				t.Fatalf("opened gold flow weighs %d, a full reweigh gives %d", got, want)
			}
			for s, w := range before {
				if out[s].class == "bulk" && after[s] != w {
					t.Fatalf("bulk flow %d: %d -> %d: the smallest share moved", s, w, after[s])
				}
			}
		})
	}
	// No flow: no smallest share, and weighOpened falls back to reweigh.
	if _, _, s := flowWeights(map[uint32]*flow{}, weight); s != 0 {
		t.Fatalf("smallest share %v with no flow, want 0", s)
	}
}
