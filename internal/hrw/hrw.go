// Package hrw is weighted rendezvous (highest-random-weight) hashing: of a
// set of nodes, each key goes to the node with the highest score, a
// pseudo-random function of (key, node) scaled by the node's weight. A
// node joining takes only the keys it now scores highest for, and a node
// leaving gives up only its own keys, each to the node that scored next
// for it: nothing else moves. Over many keys a node gets a share
// proportional to its weight (the logarithmic method of Schindelhauer
// and Schomaker, "Weighted distributed hash tables", 2005).
//
// Hosts and gateways break ties with it when they place a flow where they
// carry fewest flows (host.pickGateway, the gateway's route choice): among
// equally loaded gateways a flow goes to the one ranked first for its id.
package hrw

import (
	"math"
	"slices"
)

// Score is node's score for key at weight (weights ≤ 0 score as the
// lowest possible). It depends only on its arguments.
func Score(key uint64, node string, weight float64) float64 {
	if weight <= 0 {
		return math.Inf(-1)
	}
	h := mix(key ^ mix(fnv(node)))
	// u uniform in (0, 1): 53 bits, never 0 or 1.
	u := (float64(h>>11) + 0.5) / (1 << 53)
	return -weight / math.Log(u)
}

// Rank returns the indices 0..n-1 of nodes ordered by descending score for
// key; name(i) and weight(i) describe node i. Ties (equal scores: equal
// names) keep index order.
func Rank(key uint64, n int, name func(int) string, weight func(int) float64) []int {
	idx := make([]int, n)
	score := make([]float64, n)
	for i := range n {
		idx[i] = i
		score[i] = Score(key, name(i), weight(i))
	}
	slices.SortStableFunc(idx, func(a, b int) int {
		switch {
		case score[a] > score[b]:
			return -1
		case score[a] < score[b]:
			return 1
		}
		return 0
	})
	return idx
}

// fnv is 64-bit FNV-1a.
func fnv(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}

// mix is splitmix64's finaliser: every input bit affects every output bit.
func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}
