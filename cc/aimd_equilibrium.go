package cc

import (
	"math"
	"time"
)

// The delay equilibrium (AIMDConfig.QueueShare): FAST's law on the
// connection's window while its paths queue, and the queue share it keeps
// at a marking bottleneck (markedShare).

// connDelay returns the connection's minimum RTT, queueing delay (smoothed
// RTT above the minimum) and smoothed RTT, each weighted by path rate.
func (a *AIMD) connDelay() (base, q, srtt time.Duration) {
	var b, qq, sr, wsum float64
	for i := range a.paths {
		p := &a.paths[i]
		if !p.usable || p.rate <= 0 {
			continue
		}
		b += p.rate * float64(p.minRTT)
		qq += p.rate * float64(max(0, p.srtt-p.minRTT))
		sr += p.rate * float64(p.srtt)
		wsum += p.rate
	}
	if wsum <= 0 {
		return 0, 0, 0
	}
	return time.Duration(b / wsum), time.Duration(qq / wsum), time.Duration(sr / wsum)
}

// equilibrium is the delay equilibrium (QueueShare), run on every ack: the
// connection's window w follows FAST's law continuously,
// dw/dt = γ/rtt · (α − w·q/rtt), and the rate is w over the current round
// trip, so that, as with a window, the rate falls the moment the queue
// grows, before the law has had a round trip to react.
func (a *AIMD) equilibrium(now time.Duration) {
	base, q, srtt := a.connDelay()
	if srtt <= 0 || base <= 0 || !a.eqScaled() {
		return
	}
	dt := now - a.eqLast
	a.eqLast = now
	scale := a.scale()
	// The bytes this connection keeps queued; beyond twice the delay
	// target every connection's share shrinks alike (as 1/q), which bounds
	// the queue n connections hold to about sqrt(n·QueueShare·2·target)
	// while keeping their rates equal.
	// It is bounded by what the last drop-tail overflows left
	// (overflowAlpha).
	alpha := a.overflowAlpha(now, a.alpha())
	if lim := 2 * a.cfg.DelayTarget; lim > 0 && q > lim {
		alpha *= float64(lim) / float64(q)
	}
	rtt := (base + q).Seconds()
	// The price the law answers: the queueing delay, plus the marked
	// fraction's price with AIMDConfig.MarkPrice (markPrice).
	p := q + a.markPrice()
	// The queue that covers the sender's own stalls is no price
	// (stallAllowance); the search's end and the steering threshold still
	// read the whole queue.
	stall := a.stallAllowance(now, base)
	lawQ := max(0, q-stall)
	lawP := lawQ + a.markPrice()
	if a.searching {
		// The search ends once the connection holds its share of the queue:
		// from there the equilibrium steers.
		if a.total*p.Seconds() >= alpha {
			a.searching = false
			a.eqW = a.total * rtt
			a.eqSet = a.total
		}
		return
	}
	if p < a.steerFrom(scale) {
		// An (almost) empty queue says nothing about a share: the growth
		// function probes for capacity.
		a.eqW = 0
		return
	}
	if a.eqW <= 0 || a.eqSet <= 0 {
		a.eqW = a.total * rtt
	} else if a.total != a.eqSet {
		// A back-off (marks, loss, a lower hint) or a raised hint changed
		// the rate since the last step: the window follows it.
		a.eqW *= a.total / a.eqSet
	}
	if dt > srtt {
		dt = srtt
	}
	g := a.cfg.EqGain
	if g <= 0 {
		g = 0.7
	}
	if dt > 0 && a.priceOn() {
		// dw/dt = γ/rtt · (α − w·p/rtt), integrated exactly over dt: w
		// relaxes towards α·rtt/p at the rate γ·p/rtt², at most
		// markPriceRelax per round trip. With a price of seconds the
		// uncapped rate is many times per round trip: an Euler step
		// overshoots, and an uncapped exact step follows every swing of
		// the queue.
		if ps := lawP.Seconds(); ps > 0 {
			target := alpha * rtt / ps
			k := math.Min(g*ps/rtt, markPriceRelax) / rtt
			a.eqW = target + (a.eqW-target)*math.Exp(-k*dt.Seconds())
		}
	} else if dt > 0 {
		a.eqW += g / rtt * (alpha - a.eqW*lawQ.Seconds()/rtt) * dt.Seconds()
	}
	a.eqW = math.Max(a.eqW, a.minRate()*float64(len(a.paths))*rtt)
	r := a.eqW / rtt
	if ceiling := a.ceiling(); r > ceiling {
		r = ceiling
		a.eqW = a.ceilingWindow(ceiling, alpha, base, stall, rtt)
	}
	if a.use.limited && r > a.total {
		// The equilibrium, too, raises only a rate the sender uses.
		r = a.total
		a.eqW = r * rtt
	}
	if r < a.total {
		a.held = math.Max(0, a.held-(a.total-r))
	}
	a.setTotal(r)
	a.eqSet = a.total
}

// alpha is the bytes the connection keeps queued at the delay
// equilibrium, before beyond-the-target shrinking and overflows: its
// queue share of its scale times its weight (aimd_weight.go), less what
// markedShare yields.
func (a *AIMD) alpha() float64 {
	scale := a.scale()
	return a.cfg.QueueShare.Seconds() * scale * a.connWeight() * a.markedShare(scale)
}

// queueStands reports whether the connection's paths hold a queue of at
// least a quarter of its full queue share (QueueShare/4, whatever
// markedShare made of the steering threshold): a queue the delay
// equilibrium answers, during which the hint's rises stand back.
func (a *AIMD) queueStands() bool {
	if a.cfg.QueueShare <= 0 || a.searching || !a.eqScaled() {
		return false
	}
	_, q, _ := a.connDelay()
	return q >= a.cfg.QueueShare/4
}

// markMemory is the time over which the memory of marks seen while the
// delay equilibrium steers decays: longer than a classic flow's recovery
// from one cut at the bottlenecks in question (tens of round trips), so
// that a flow that yields its queue share once it has starved a classic
// competitor keeps yielding while that competitor grows back.
const markMemory = 10 * time.Second

// markedShare is the factor on the equilibrium's queue share α at a
// marking bottleneck. A queue share α = QueueShare × scale above the
// marking threshold starves any flow that reacts to marks the classic way
// (RFC 3168: cut by 0.3-0.5 per marked round trip): the queue never falls
// below the threshold, so it is marked in every round trip and the classic
// flow sits at two packets (docs/CC.md §4). The connection cannot
// tell such a flow from another equilibrium connection, so it reads its own
// part of the capacity: with n equilibrium connections of the same scale
// each takes scale/n, and while it takes no more than markedShareFrom of
// its scale the share is whole (two connections or more). Above that,
// while marks persist, the share falls steeply, to markedShareMin at
// markedShareTo: a connection that
// takes more than half the bottleneck while the queue is marked yields to
// whatever pushes the queue up, before the queue reaches the threshold, so
// a classic flow grows into the room without being marked in every round
// trip.
func (a *AIMD) markedShare(scale float64) float64 {
	if a.markMem <= 0 || scale <= 0 {
		return 1
	}
	x := a.total / scale / a.connWeight() // the part of one share's scale
	m := 1 - (x-markedShareFrom)/(markedShareTo-markedShareFrom)*(1-markedShareMin)
	m = math.Min(1, math.Max(markedShareMin, m))
	return 1 - math.Min(1, 2*a.markMem)*(1-m)
}

// markedShareFrom, markedShareTo and markedShareMin shape markedShare: the
// queue share is whole while the connection takes at most markedShareFrom
// of its scale, and markedShareMin of it from markedShareTo on.
const (
	markedShareFrom = 0.5
	markedShareTo   = 0.65
	markedShareMin  = 0.2
)

// eqScaled reports whether the equilibrium has an absolute scale for α (a
// line rate or a hint). Measured against the connection's own rate, α/q
// would make the rate grow or decay exponentially with the sign of
// QueueShare − q: no equilibrium at all.
func (a *AIMD) eqScaled() bool {
	return a.cfg.Params.LineRate > 0 || a.hint > 0
}

// steering reports whether the delay equilibrium, not the growth function,
// sets the connection's rate now.
func (a *AIMD) steering() bool {
	if a.cfg.QueueShare <= 0 || a.searching || !a.eqScaled() {
		return false
	}
	_, q, _ := a.connDelay()
	return q+a.markPrice() >= a.steerFrom(a.scale())
}

// steerFrom is the queueing delay from which the equilibrium steers: a
// quarter of the queue share it holds, so that where marks made it hold
// less (markedShare), it also takes over from the growth function at a
// shallower queue, before the growth function's probing pushes the queue
// past the marking threshold; and where a drop-tail overflow capped the
// share (overflowFrac), before the growth function refills the buffer.
func (a *AIMD) steerFrom(scale float64) time.Duration {
	return time.Duration(float64(a.cfg.QueueShare/4) * a.markedShare(scale) * a.overflowFrac())
}
