package cc

import (
	"math"
	"time"
)

// The split of a connection's rate over its paths: balance moves rate
// towards the paths with the shorter queues, and the sender sprays by the
// split (Splitter).

// balanceGain is how fast the split of a connection's rate over its paths
// follows the paths' own queueing delays: per round trip, a path's share
// moves by up to this fraction (e^±0.06), towards the paths whose queues
// are shorter than the connection's mean. Every step reaches the planes
// (the sender sprays by the split), so a larger gain swings them and a
// smaller one is slow to lift a plane ECMP hashed few paths onto
// (docs/CC.md §2, "Tuning").
const balanceGain = 0.06

// balanceDeadBand is the part of the reference (d, in balance) within which
// a path's queue counts as the connection's mean: paths through one
// bottleneck differ only by noise (which path a burst's packets took), and
// integrating that noise would move real traffic between paths of one
// queue. A wider band slows the split where planes really differ
// (docs/CC.md §2, "Tuning").
const balanceDeadBand = 0.05

// splitDamp is the proportional part of the split (SplitWeight): a path
// whose queue is longer than the connection's mean is sent up to
// e^splitDamp less than its rate says, at once, while balance moves the
// rate itself. Without it the split is a double integrator (balance
// integrates the queue difference into the rate, the plane's queue
// integrates the rate) and swings; with it, a damped one. It must stay
// small: the queue it answers is a round trip old, and such a loop is
// stable only for splitDamp·rtt/ref below π/2.
const splitDamp = 0.1

// balance moves the connection's rate between its paths after each path's
// own queueing delay (splitQueue), keeping the total:
// a path whose queue is longer than the connection's rate-weighted mean q̄
// loses share, one whose queue is shorter gains, in proportion to the
// difference relative to q̄ (bounded by ±1), balanceGain per round trip.
// This is a gradient step towards equal queueing delay on every path that
// carries traffic (a Wardrop equilibrium): over disjoint planes, whatever
// the number of paths ECMP hashed onto each and whatever each plane's
// capacity, every plane ends up with the same queue, so none idles while
// another holds a standing queue. Paths through one queue see the same
// delay and are left as they are (the coupling of a shared bottleneck is
// unchanged). The total is the equilibrium's or the growth function's; this
// only splits it. The split reaches the wire through the sprayer, which
// sends each path in proportion to SplitWeight (Splitter).
//
// Each path steps on its own acks (path is the one acked), by the time
// since its previous step but at most one round trip: its queue is known
// only from its own RTT samples, so a path that is sent a packet every
// few round trips moves by one round trip's step per sample, not by every
// round trip it had no news in (stepping every path on every ack would
// integrate a sparse path's last, stale reading). Where the samples are
// dense the steps over a round trip add up to one round trip's step.
func (a *AIMD) balance(now time.Duration, path int) {
	p := &a.paths[path]
	dt := now - p.balAt
	p.balAt = now
	if !p.usable || p.rate <= 0 {
		return
	}
	n := 0
	for i := range a.paths {
		if a.paths[i].usable && a.paths[i].rate > 0 {
			n++
		}
	}
	if n < 2 || dt <= 0 || a.total <= 0 {
		return
	}
	qbar, srtt := a.splitDelay()
	if srtt <= 0 {
		return
	}
	dt = min(dt, srtt)
	// Differences are measured against the mean queue, but never against
	// less than half the queue share or a quarter of the round trip: a
	// few milliseconds of difference between planes whose queues are
	// nearly empty is noise to be moved slowly, not a signal to act on at
	// full gain.
	ref := max(qbar, min(a.cfg.QueueShare/2, srtt/4))
	floor := a.total / float64(n) / 16
	d := float64(qbar-splitQueue(p)) / float64(ref)
	d = math.Max(-1, math.Min(1, d))
	if math.Abs(d) <= balanceDeadBand {
		d = 0
	} else {
		d -= math.Copysign(balanceDeadBand, d)
	}
	p.rate = math.Max(floor, p.rate*math.Exp(balanceGain*d*dt.Seconds()/srtt.Seconds()))
	total := a.total
	a.retotal()
	a.setTotal(total)
	a.balN, a.balQ, a.balRef = n, qbar, ref
}

// Splits implements Splitter: a connection with a queue share splits its
// rate over its paths after their own queues (balance), and the sender
// sprays by that split.
func (a *AIMD) Splits() bool { return a.cfg.QueueShare > 0 && len(a.paths) > 1 }

// SplitWeight implements Splitter: the path's rate over the connection's
// mean per path, times exp(-splitDamp·(q_p − q̄)/ref) (q_p the path's queue,
// q̄ and ref balance's).
func (a *AIMD) SplitWeight(path int) float64 {
	p := &a.paths[path]
	if !p.usable || a.total <= 0 {
		return 0
	}
	n := a.balN
	if n <= 0 {
		n = len(a.paths)
	}
	w := p.rate / a.total * float64(n)
	if a.balRef > 0 {
		w *= a.splitFactor(p)
	}
	return w
}

// splitFactor is SplitWeight's exp(-splitDamp·(q_p − q̄)/ref), kept per
// path beside the three durations it was computed from: the sender asks
// for the weight at each of the path's turns, about once per datagram,
// while those change only with balance and the path's RTT samples, and
// math.Exp was most of the lookup (BenchmarkSplitWeight). The same
// durations give the same factor, so the split is exactly what it was.
func (a *AIMD) splitFactor(p *aimdPath) float64 {
	q := splitQueue(p)
	if !p.splitOK || q != p.splitQ || a.balQ != p.splitBalQ || a.balRef != p.splitRef {
		d := float64(a.balQ-q) / float64(a.balRef)
		p.splitF = math.Exp(splitDamp * math.Max(-1, math.Min(1, d)))
		p.splitQ, p.splitBalQ, p.splitRef, p.splitOK = q, a.balQ, a.balRef, true
	}
	return p.splitF
}

// rttLoRise is the inverse of the gain with which rttLo follows an RTT
// sample above it: srtt's (RFC 6298), so that a queue that really grows is
// read as fast as the smoothed RTT reads it.
const rttLoRise = 8

// splitQueue is path p's queueing delay as balance reads it: the smaller of
// its smoothed RTT and rttLo (which falls to a lower sample at once and
// rises by 1/8 per sample), above the path's own minimum. A standing queue
// delays every packet, a host's stall or a burst only some: a path the
// split sends little gets few samples, and one late ack must not keep its
// queue reading high for many round trips. Against the path's own minimum
// (ownMin), so that a longer path's propagation is not read as a queue.
func splitQueue(p *aimdPath) time.Duration {
	r := p.srtt
	if p.rttLo > 0 && p.rttLo < r {
		r = p.rttLo
	}
	return max(0, r-p.ownMin)
}

// splitDelay returns the connection's queueing delay as balance measures
// it (splitQueue) and its smoothed RTT, both weighted by path rate.
func (a *AIMD) splitDelay() (q, srtt time.Duration) {
	var qq, sr, wsum float64
	for i := range a.paths {
		p := &a.paths[i]
		if !p.usable || p.rate <= 0 {
			continue
		}
		qq += p.rate * float64(splitQueue(p))
		sr += p.rate * float64(p.srtt)
		wsum += p.rate
	}
	if wsum <= 0 {
		return 0, 0
	}
	return time.Duration(qq / wsum), time.Duration(sr / wsum)
}
