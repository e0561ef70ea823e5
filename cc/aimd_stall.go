package cc

import (
	"math"
	"time"
)

// The stall allowance: the queue that covers the sender's own stalls is no
// price, and a connection at its ceiling keeps its rate through them.

// stallMemory is the time constant over which the largest lateness of a
// paced send (OnSendLate) is forgotten: long against a busy host's stalls
// (several per 100 ms), so that the allowance does not fall between two of
// them, and short enough that a host that has become quiet gives the
// queue back within a few seconds.
const stallMemory = 2 * time.Second

// OnSendLate implements SendLateObserver: it remembers the largest
// lateness of the sender's driver, decaying over stallMemory.
func (a *AIMD) OnSendLate(now, late time.Duration) {
	if late <= 0 {
		return
	}
	if cur := a.decayedLate(now); late >= cur {
		a.lateMax, a.lateAt = late, now
	}
}

func (a *AIMD) decayedLate(now time.Duration) time.Duration {
	if a.lateMax <= 0 {
		return 0
	}
	return time.Duration(float64(a.lateMax) * math.Exp(-float64(now-a.lateAt)/float64(stallMemory)))
}

// stallAllowance is the queueing delay the delay equilibrium does not
// price: the longest recent stall of the sender's driver (OnSendLate), at
// most 2 × QueueShare and half the base round trip. While the sender is
// descheduled only the bottleneck's queue keeps the link busy, and on
// waking it catches up what fell due (metaroce.Config.PacingCatchUp), so a
// queue as long as its stalls costs no link time and a shorter one idles
// the link for the difference. The law answers q − allowance: a connection
// holds its α of queue above the allowance, so connections through one
// bottleneck whose hosts stall alike still hold equal rates, and a host
// that does not stall changes nothing. Bounded because a stall longer than
// half the round trip cannot be caught up anyway (PacingCatchUp ≤ 1), and a
// queue beyond twice the queue share is delay every other flow pays
// (docs/CC.md §4, "A host that stalls").
func (a *AIMD) stallAllowance(now, base time.Duration) time.Duration {
	s := a.decayedLate(now)
	return min(s, 2*a.cfg.QueueShare, base/2)
}

// ceilingWindow is the equilibrium's window for a connection held at its
// ceiling (hint or line rate) whose driver stalls (stallAllowance > 0).
// Clamped to ceiling × the current round trip, every stall's late acks
// would cut the rate at once by the ratio of the round trips. The window
// is ceiling × (base + s + min(s, α/ceiling)), s the allowance: the rate
// stays at the ceiling while the queue is within the allowance and as much
// again (at most the law's own fixed point at the ceiling, α/ceiling, above
// it), and falls as w/rtt beyond. With s = 0 it is ceiling × rtt, so a
// driver that does not stall sees no change; never below ceiling × rtt, so
// a queue already above it does not cut the rate either.
func (a *AIMD) ceilingWindow(ceiling, alpha float64, base, stall time.Duration, rtt float64) float64 {
	s := stall.Seconds()
	return ceiling * math.Max(rtt, base.Seconds()+s+math.Min(s, alpha/ceiling))
}
