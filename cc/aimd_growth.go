package cc

import (
	"math"
	"time"
)

// The growth engine: the growth function between congestion signals, and
// the per-round back-offs to marks, delay and loss.

func (a *AIMD) minRate() float64 {
	return 2 * float64(a.pkt) / a.cfg.RefRTT.Seconds() / float64(len(a.paths))
}

func (a *AIMD) scale() float64 {
	return Scale(GrowthState{Rate: a.total, LineRate: float64(a.cfg.Params.LineRate.Bytes()), Hint: a.hint})
}

// grow applies the growth function for the time since path last grew.
func (a *AIMD) grow(now time.Duration, path int) {
	p := &a.paths[path]
	dt := now - p.lastUpdate
	p.lastUpdate = now
	if dt <= 0 || !p.usable {
		return
	}
	if dt > p.srtt {
		dt = p.srtt // after an idle spell, grow by at most one round's worth
	}
	share := 1.0 / float64(len(a.paths))
	if a.total > 0 {
		share = p.rate / a.total
	}
	if a.use.limited {
		// Not while the sender does not use the rate it has (RFC 7661):
		// nothing would test the higher rate, and without a ceiling it
		// would grow without bound.
		return
	}
	// Not while the equilibrium steers, unless only the marked-fraction
	// price holds the rate and the marks have stopped: then the rate
	// probes and the price gives way (priceProbe).
	probe := false
	if a.steering() {
		if !a.priceProbe() {
			return
		}
		probe = true
	}
	var inc float64
	if a.searching {
		// No hint and no congestion yet: double per round trip.
		inc = p.rate * dt.Seconds() * math.Ln2 / p.srtt.Seconds()
	} else {
		g := a.cfg.Growth(GrowthState{
			Rate: a.total, LineRate: float64(a.cfg.Params.LineRate.Bytes()), Hint: a.hint,
			SinceCongestion: now - a.lastCongestion, SRTT: p.srtt, RefRTT: a.cfg.RefRTT,
		})
		inc = g * dt.Seconds() * share
		if probe {
			// Not the growth function's step, which is a fraction of the
			// scale: markPriceProbeStep of the connection's own rate per
			// RefRTT, so that every connection at the bottleneck rises
			// by the same fraction of its rate and n of them together as
			// fast as one, whatever n and whichever controller.
			inc = markPriceProbeStep * a.total * dt.Seconds() / a.cfg.RefRTT.Seconds() * share
		}
	}
	before := a.total
	// Never grow beyond what the receiver allows: rate above the hint would
	// only be stored, not used, and would make the next back-off meaningless.
	ceiling := a.ceiling()
	p.rate += inc
	a.total += inc
	if ceiling > 0 && a.total > ceiling {
		// Take the excess back from the path that grew, so that a path
		// trimmed by marks does not creep back at its siblings' expense.
		back := math.Min(a.total-ceiling, inc)
		p.rate -= back
		a.total -= back
		a.capTo(ceiling)
	}
	if probe && before > 0 && a.total > before {
		a.priceGiveWay(before / a.total)
	}
}

// endRound closes path's round: it folds the marked fraction into alpha,
// updates the loss floor and backs off once if the round saw congestion.
func (a *AIMD) endRound(now time.Duration, path int) {
	p := &a.paths[path]
	acked, marked, lost := p.roundAcked, p.roundMarked, p.roundLost
	p.roundAcked, p.roundMarked, p.roundLost, p.roundPkts = 0, 0, 0, 0
	p.roundStart = now
	roundMin, roundMax := p.roundMinRTT, p.roundMaxRTT
	p.roundMinRTT, p.roundMaxRTT = 0, 0
	if roundMax > 0 && roundMax < p.rttHi {
		p.rttHi -= (p.rttHi - roundMax) / 4
	}
	frac := 0.0
	if acked > 0 {
		frac = float64(marked) / float64(acked)
	}
	p.alpha += a.cfg.Gain * (frac - p.alpha)
	if a.cfg.QueueShare > 0 && !a.searching {
		// Only a standing queue counts: every sample of the round was
		// delayed (its smallest too), as by a queue another flow keeps
		// above the marking threshold. A burst of the sender's own (a
		// late wake-up on a busy host) marks some packets but delays only
		// those: the round's samples spread over more than the queue its
		// smallest one saw.
		//
		// The spread allowed is QueueShare/4, and a quarter of the
		// smallest queue while the connection runs at its hint
		// (atHint): a deep queue that moves but never drains stands too
		// (an unevenly hashed plane's), while a stalling host's own
		// bursts spread over several times their smallest queue and
		// still do not count. Only at the hint: a connection below it is
		// still converging, and the queues it meets then move because
		// every connection there moves; counting them would make it
		// yield the room it is to take.
		qmin, spread := roundMin-p.minRTT, roundMax-roundMin
		standing := roundMin > 0 && qmin >= a.cfg.QueueShare/4 &&
			(spread < a.cfg.QueueShare/4 || a.atHint() && spread < qmin/4)
		if frac > 0 && standing && a.steering() {
			a.markMem += (1 - a.markMem) / 4
		} else if a.markMem > 0 {
			// Every path's rounds decay it: n paths, n rounds per srtt.
			a.markMem *= math.Exp(-p.srtt.Seconds() / markMemory.Seconds() / float64(len(a.paths)))
		}
	}
	lossRate := 0.0
	if acked+lost > 0 {
		lossRate = float64(lost) / float64(acked+lost)
	}
	// The loss floor: random loss that is always there. It falls fast and
	// rises slowly, so a burst of congestive loss barely moves it while a
	// lossy path's steady rate is learnt within a few tens of rounds.
	lossCongestion := false
	switch {
	case acked+lost < 8*a.pkt:
		// Too few packets for a loss rate: keep the floor as it is.
	case !p.floorSet:
		p.floorSet = true
		p.lossFloor = lossRate
	default:
		lossCongestion = lossRate > a.cfg.LossFactor*p.lossFloor+a.cfg.LossAbove && lost >= 4*a.pkt
		if lossRate < p.lossFloor {
			p.lossFloor += (lossRate - p.lossFloor) / 4
		} else {
			p.lossFloor += (lossRate - p.lossFloor) / 32
		}
	}
	// Queueing delay: the round's smallest RTT sample above the minimum.
	// A standing queue delays every packet of the round; timer lateness and
	// ack delay only some, so the smallest sample filters them out.
	cur := p.srtt
	if roundMin > 0 && roundMin < cur {
		cur = roundMin
	}
	qdelay := cur - p.minRTT
	target := a.cfg.DelayTarget + time.Duration(a.cfg.DelayTargetFrac*float64(p.minRTT))
	if n := 2 * p.rttDev; target > 0 && n > target {
		target = n
	}
	// With the delay equilibrium on, the queueing delay is its signal, not
	// a cut of its own; without a scale (no line rate, no hint) there is
	// no equilibrium, and the engine keeps its own back-offs.
	equilibrium := a.cfg.QueueShare > 0 && a.eqScaled()
	delayed := target > 0 && qdelay > target && !equilibrium

	cut := 0.0
	if frac > 0 && (!a.cfg.RTTFair || a.searching && !equilibrium) {
		cut = p.alpha / 2
		if a.searching {
			// The end of the search: the last round overshot by up to 2x.
			cut = 0.5
			p.alpha = frac
		}
	}
	if delayed {
		cut = math.Max(cut, 0.25*math.Min(1, float64(qdelay-target)/float64(target)))
	}
	if lost > 0 && (frac > 0 || delayed) && !a.steering() && lossRate > a.cfg.LossFactor*p.lossFloor {
		// Loss with other signs of congestion: a full queue. Not while
		// the delay equilibrium steers: it reads a full queue as a long
		// queueing delay and answers it itself, as it answers the marks
		// (a mark is no separate back-off then either). And not loss at
		// the path's random floor: a lossy path that also sees a mark,
		// which a sender's burst after a late wake-up makes, lost those
		// packets anyway; without this test random loss would cut a path
		// in most rounds.
		cut = math.Max(cut, 0.3)
	}
	if lossCongestion {
		cut = math.Max(cut, math.Min(0.5, lossRate-p.lossFloor))
	}
	if cut == 0 || now < p.cwrUntil {
		return
	}
	if a.cfg.RTTFair && !a.searching {
		cut *= p.srtt.Seconds() / a.cfg.RefRTT.Seconds()
	}
	if cut > a.cfg.MaxCut {
		cut = a.cfg.MaxCut
	}
	a.searching = false
	a.lastCongestion = now
	p.cwrUntil = now + p.srtt
	old := p.rate
	p.rate *= 1 - cut
	if m := a.minRate(); p.rate < m {
		p.rate = m
	}
	a.total += p.rate - old
	a.held *= 1 - cut
}

// markedBackoff is the RTT-fair reaction to ECN: every marked byte takes
// MarkGain/RefRTT bytes per second off the path's rate. A path whose bytes
// are marked at fraction F then loses MarkGain·F·rate/RefRTT per second,
// whatever its round trip, which balances the growth (also per second) at
// the same rate for every flow that sees the same F. Reacting per byte
// rather than per round also spreads the back-off smoothly over the round.
func (a *AIMD) markedBackoff(now time.Duration, path int, marked int) {
	p := &a.paths[path]
	dec := a.cfg.MarkGain * float64(marked) / a.cfg.RefRTT.Seconds()
	if dec > p.rate/2 {
		dec = p.rate / 2
	}
	old := p.rate
	p.rate -= dec
	if m := a.minRate(); p.rate < m {
		p.rate = m
	}
	a.total += p.rate - old
	a.held = math.Max(0, a.held-dec)
	a.lastCongestion = now
}

// OnLoss implements Controller.
func (a *AIMD) OnLoss(now time.Duration, path int, bytes int) {
	a.paths[path].roundLost += bytes
	a.ovf.lost += bytes
}
