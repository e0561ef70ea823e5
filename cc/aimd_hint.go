package cc

import (
	"math"
	"time"

	"github.com/mrgw/mrgw/units"
)

// The receiver's hint and the egress level: the ceiling the connection
// acts on, and how its rate rises towards it.

// effHint is the ceiling the hint logic acts on: the receiver's hint and
// the sending gateway's egress level, whichever is lower and known.
func (a *AIMD) effHint() float64 {
	h := a.rcvHint
	if a.egLevel > 0 && (h <= 0 || a.egLevel < h) {
		h = a.egLevel
	}
	return h * a.headroom()
}

// hintStepMarked is the part of the gap to the hint that a calm connection
// closes per round trip while it remembers marks at a standing queue
// (markMem at least markMemCalm), instead of half: it is then yielding to
// whatever pushes the queue up (markedShare), and half-gap steps would undo
// that. Not nothing: a lone connection whose own queue stands above a
// shallow marking threshold yields too, and on a host that stalls it needs
// the small steps to refill the link.
const hintStepMarked = 1.0 / 32

// markMemCalm is the memory of marks at a standing queue (markMem) from
// which the hint's rise takes hintStepMarked steps.
const markMemCalm = 0.05

// atHintFrac is the part of its hint from which a connection is at it
// (atHint): where setHint's rises towards the hint stop.
const atHintFrac = 0.9

// atHint reports whether the connection runs at its hint (at least
// atHintFrac of it): it holds the whole share its receiver and its egress
// allow, so a queue it meets is not one it is still converging through.
func (a *AIMD) atHint() bool {
	return a.hint > 0 && a.total >= atHintFrac*a.hint
}

// OnRateHint implements Controller. The first hint, and a hint that rises
// while the connection sees no congestion, set the rate at once: the
// receiver knows its share better than any search could find it. A hint
// below the current rate cuts it at once. With Params.Egress, the hint
// acted on is the smaller of the receiver's and the egress level.
func (a *AIMD) OnRateHint(now time.Duration, hint units.ByteRate) {
	if float64(hint) <= 0 {
		return
	}
	a.rcvHint = min(float64(hint), MaxRate)
	a.setHint(now, a.effHint())
	a.fallbackCap(now)
}

// setHint acts on a new value of the connection's ceiling (OnRateHint).
func (a *AIMD) setHint(now time.Duration, bps float64) {
	if bps <= 0 {
		return
	}
	a.use.advance(now, a.PacingRate())
	bps = min(bps, MaxRate)
	prev := a.hint
	a.hint = bps
	// Calm: no back-off for two round trips, and no standing queue that
	// the delay equilibrium answers. The equilibrium's answers are no
	// back-offs (they do not set lastCongestion), so without the second
	// test a hint far above the connection's share of a fabric bottleneck
	// would lift the rate half-way to the hint every round trip while the
	// equilibrium pulled it back (TestHintRiseStandsBackWhileSteering).
	// The threshold is the full queue share's quarter, not the steering
	// threshold that markedShare lowers: a lone connection on a stalling
	// host needs the rises at a shallow queue. Never calm while a
	// drop-tail overflow's cap binds (aimd_overflow.go): the hints
	// overcommit the bottleneck, and a rise towards them overflows it.
	calm := now-a.lastCongestion > 2*a.maxSRTT() && !a.queueStands() && a.ovf.cap <= 0
	if prev == 0 || (bps > prev*1.05 && calm) {
		a.searching = false
		if a.total < bps {
			a.setTotal(bps)
		}
		a.lastHintRise = now
	} else if calm && !a.searching && !a.use.limited && a.total < atHintFrac*bps && now-a.lastHintRise > a.maxSRTT() {
		// Well below the receiver's share with no congestion for two round
		// trips (our own back-offs left us there, and the queue behind them
		// has drained): close half the gap per round trip. Binary increase
		// towards the hint reaches the share in a few round trips instead
		// of crawling there additively, without overshooting a bottleneck
		// elsewhere in the fabric, whose marks stop it again.
		step := 0.5
		if a.markMem >= markMemCalm {
			step = hintStepMarked
		}
		a.setTotal(a.total + (bps-a.total)*step)
		a.lastHintRise = now
	} else if bps > prev && a.held > a.total {
		// The receiver releases (part of) a hold-back it imposed: return
		// to the rate the connection had before it, as far as allowed.
		// Its own back-offs since then are already taken off held.
		a.setTotal(math.Min(a.held, bps))
	}
	if a.held > 0 && a.held <= a.total {
		a.held = 0
	}
	if before := a.total; a.capTo(bps) && prev > 0 {
		if before > a.held {
			a.held = before
		}
		// A lower hint is a back-off the receiver made for us: what the
		// next round reports was sent before it.
		for i := range a.paths {
			a.paths[i].cwrUntil = now + a.paths[i].srtt
		}
	}
}

// ceiling is the highest rate the connection may hold: the receiver's hint
// or the line rate, whichever is lower and known, and never above MaxRate.
func (a *AIMD) ceiling() float64 {
	c := MaxRate
	if a.hint > 0 && a.hint < c {
		c = a.hint
	}
	if lr := float64(a.cfg.Params.LineRate.Bytes()) * a.headroom(); lr > 0 && lr < c {
		c = lr
	}
	return c
}
