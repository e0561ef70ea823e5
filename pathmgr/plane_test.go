package pathmgr

import (
	"math/rand/v2"
	"slices"
	"testing"
)

func TestPathsOnPlane(t *testing.T) {
	s := NewSet(8, DefaultConfig(), rand.New(rand.NewPCG(1, 2)))
	byIndex := func(path int, _ uint16) int { return path % 4 }
	if got := s.PathsOnPlane(nil, 1, byIndex); !slices.Equal(got, []int{1, 5}) {
		t.Fatalf("paths on plane 1: %v, want [1 5]", got)
	}
	// A path already down is not reported again.
	s.MarkDown(0, 5, "test")
	if got := s.PathsOnPlane(nil, 1, byIndex); !slices.Equal(got, []int{1}) {
		t.Fatalf("after path 5 down: %v, want [1]", got)
	}
	// Unknown placement matches no plane.
	unknown := func(int, uint16) int { return -1 }
	if got := s.PathsOnPlane(nil, 1, unknown); len(got) != 0 {
		t.Fatalf("unknown placement: %v, want none", got)
	}
	// By entropy: the map sees the path's current (re-rolled) entropy.
	e := s.Paths[2].Entropy
	byEntropy := func(_ int, ent uint16) int {
		if ent == e {
			return 3
		}
		return 0
	}
	if got := s.PathsOnPlane(nil, 3, byEntropy); !slices.Equal(got, []int{2}) {
		t.Fatalf("by entropy: %v, want [2]", got)
	}
}
