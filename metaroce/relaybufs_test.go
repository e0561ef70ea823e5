package metaroce

import (
	"math/rand/v2"
	"testing"
)

// TestRelayBufsMatchesMap: random supplies and releases in any order, and
// the all-release of a failed message, against a map of the chunks held.
// It fails on a window that loses a chunk moving its front or growing
// backwards, or that reports a chunk it no longer holds.
func TestRelayBufsMatchesMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for round := range 200 {
		var r relayBufs
		model := map[int][]byte{}
		released := map[int]bool{}
		chunks := 1 + rng.IntN(300)
		for step := range 2000 {
			i := rng.IntN(chunks)
			if rng.IntN(2) == 0 {
				if _, ok := model[i]; ok || released[i] {
					continue
				}
				var b []byte
				if rng.IntN(50) != 0 {
					b = []byte{byte(i), byte(i >> 8)}
				}
				r.put(i, b, nil)
				model[i] = b
			} else {
				b, ok := r.take(i)
				mb, mok := model[i]
				if ok != mok || ok && (len(b) != len(mb) || len(b) > 0 && b[0] != mb[0]) {
					t.Fatalf("round %d step %d: take(%d) = %v %v, want %v %v", round, step, i, b, ok, mb, mok)
				}
				if ok {
					delete(model, i)
					released[i] = true
				}
			}
			if r.n != len(model) {
				t.Fatalf("round %d step %d: %d held, want %d", round, step, r.n, len(model))
			}
			j := rng.IntN(chunks)
			b, ok := r.get(j)
			if mb, mok := model[j]; ok != mok || len(b) != len(mb) {
				t.Fatalf("round %d step %d: get(%d) = %v %v, want %v %v", round, step, j, b, ok, mb, mok)
			}
		}
		got := 0
		r.all(func([]byte) { got++ })
		if got != len(model) || r.n != 0 {
			t.Fatalf("round %d: all released %d, want %d (%d left)", round, got, len(model), r.n)
		}
		if _, ok := r.get(0); ok {
			t.Fatalf("round %d: a chunk held after all", round)
		}
	}
}

// TestRelayBufsBounded: chunks supplied and released in a sliding window
// of a long message keep the slice at about the window, not the message.
func TestRelayBufsBounded(t *testing.T) {
	var r relayBufs
	const window = 64
	buf := make([]byte, 1)
	for i := range 100000 {
		r.put(i, buf, nil)
		if i >= window {
			if _, ok := r.take(i - window); !ok {
				t.Fatalf("chunk %d not held", i-window)
			}
		}
	}
	if cap(r.held) > 4*window {
		t.Fatalf("%d slots for a window of %d chunks", cap(r.held), window)
	}
}
