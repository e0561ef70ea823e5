package cc

import "math"

// The connection's weight: how many shares of a shared bottleneck it
// stands for. A gateway's WAN connection carries many flows, and the
// connections through one fabric may carry different numbers of them;
// the delay equilibrium gives every connection the same share (each
// keeps the same bytes queued), so a flow's share depends on how many
// others its connection carries. With weight w a connection keeps w
// times the queue share (alpha), and the floor of its overflow cap is
// that of weight 1: at one queue it takes w times the rate of a
// connection of weight 1, as weighted TCP-fairness schemes do.
//
// The weight is relative: the connections through a bottleneck should
// weigh about 1 on average (a connection's flows over the mean of the
// connections'). The queue they hold together is their weights' sum
// times the share of one; absolute flow counts as weights multiply it,
// and where that overflows a shallow buffer the overflow rule
// (aimd_overflow.go) can only fight it with loss.

// maxWeight bounds a connection's weight (SetWeight) from above, and
// 1/maxWeight from below.
const maxWeight = 16

// SetWeight sets the connection's weight (1 by default): its share of a
// shared bottleneck relative to the other connections through it,
// bounded to [1/maxWeight, maxWeight]. A value that is not a positive
// number restores 1.
func (a *AIMD) SetWeight(w float64) {
	if !(w > 0) || math.IsInf(w, 0) {
		w = 1
	}
	a.weight = math.Min(maxWeight, math.Max(1.0/maxWeight, w))
}

// connWeight returns the connection's weight (SetWeight).
func (a *AIMD) connWeight() float64 {
	if a.weight <= 0 {
		return 1
	}
	return a.weight
}
