package cc

import (
	"math"
	"time"
)

// Classic fallback (Params.ClassicFallback; docs/CC.md §4).
//
// A classic-ECN flow (RFC 3168: cut by 30-50% in every marked round trip,
// grow about a packet per round trip from a small window) sharing one
// marking queue with a connection that answers marks more gently keeps only
// what the queue's crossings of the threshold leave it, even against a
// sender that cuts as hard but grows back at its own pace (docs/CC.md §7).
// It grows only if the other sender grows back as slowly as it does. With the fallback on, the connection
// answers a marked round trip as CUBIC does (RFC 9438): the rate is cut to
// fallbackBeta of itself and may then grow back no faster than CUBIC's
// window curve from that cut, for as long as marks keep coming
// (FallbackMemory). Two such senders, or one and a CUBIC flow, through one
// queue cut together on the same marks and grow along the same curve: they
// share it as two CUBIC flows do. This is the fallback that RFC 9331 §4.3
// asks of senders that can meet a classic-ECN queue. The controller cannot
// tell a classic flow's marks from its own, so it costs a lone connection
// whatever its own marks cost: FallbackHeadroom keeps it a little below
// its ceiling, where its own queue drains and makes no marks on a host that
// paces smoothly. Off by default: it is the operator's choice for a WAN
// shared with classic-ECN traffic (docs/OPERATIONS.md).

// fallbackBeta is the multiplicative decrease of a marked round trip under
// the classic fallback: CUBIC's β (RFC 9438 §4.6).
const fallbackBeta = 0.7

// fallbackC is CUBIC's C in packets per second cubed (RFC 9438 §4.2): the
// window curve W(t) = C·(t−K)³ + Wmax the rate follows after a cut.
const fallbackC = 0.4

// fallbackMemory is how long after the last marked ack the fallback holds
// the rate to the window curve; afterwards the controller's own growth
// applies again. Longer than a CUBIC flow's epoch at the WAN's BDPs (8.6 s
// from a cut of a 860-packet window), so that a classic flow that was cut
// is still given the curve's pace while it grows back.
const fallbackMemory = 10 * time.Second

// FallbackHeadroom is the fraction of its ceiling (hint or line rate) a
// connection with the fallback on keeps free: pacing at exactly the link's
// rate leaves the queue a random walk that crosses the marking threshold,
// and under the fallback every crossing is a 30% cut; a few per cent below
// the capacity a smooth sender makes no marks of its own (docs/CC.md §4).
const FallbackHeadroom = 0.03

// fallbackState is the classic fallback's epoch.
type fallbackState struct {
	active bool
	// markAt is the last ack with marks; cutAt the last cut; epoch the
	// start of the current curve.
	markAt, cutAt, epoch time.Duration
	// wmax is the window in packets at the last cut, rtt the round trip
	// the curve converts windows to rates with (the one at the cut: the
	// curve must not move with the queue it causes).
	wmax float64
	rtt  time.Duration
}

// fallbackOn reports whether the connection runs the classic fallback.
func (a *AIMD) fallbackOn() bool { return a.cfg.Params.ClassicFallback }

// headroom is the factor on the connection's ceiling: 1 − FallbackHeadroom
// with the fallback on, else 1.
func (a *AIMD) headroom() float64 {
	if a.fallbackOn() {
		return 1 - FallbackHeadroom
	}
	return 1
}

// fallbackAck runs the classic fallback for an ack: a marked ack at least a
// round trip after the last cut cuts the rate, and while the fallback is
// active the rate is held to the window curve.
func (a *AIMD) fallbackAck(now time.Duration, marked int) {
	if !a.fallbackOn() || a.searching {
		return
	}
	f := &a.fb
	if marked > 0 {
		f.markAt = now
		rtt := a.maxSRTT()
		if rtt > 0 && (!f.active || now-f.cutAt >= rtt) {
			f.active, f.cutAt, f.epoch, f.rtt = true, now, now, rtt
			f.wmax = a.total * rtt.Seconds() / float64(a.pkt)
			a.setTotal(math.Max(a.total*fallbackBeta, a.minRate()*float64(len(a.paths))))
			a.held *= fallbackBeta
			a.lastCongestion = now
		}
	}
	a.fallbackCap(now)
}

// fallbackCap holds the rate to the window curve while the fallback is
// active, and ends it FallbackMemory after the last mark.
func (a *AIMD) fallbackCap(now time.Duration) {
	f := &a.fb
	if !f.active {
		return
	}
	if now-f.markAt > fallbackMemory {
		f.active = false
		return
	}
	if r := f.curveRate(now, a.pkt); r < a.total {
		a.setTotal(math.Max(r, a.minRate()*float64(len(a.paths))))
	}
}

// curveRate is the rate the window curve allows at now: W(t)·pkt/rtt with
// W(t) = FallbackC·(t−K)³ + wmax and K = ∛(wmax·(1−β)/C), so that W(0) is
// β·wmax.
func (f *fallbackState) curveRate(now time.Duration, pkt int) float64 {
	if f.rtt <= 0 {
		return math.Inf(1)
	}
	t := (now - f.epoch).Seconds()
	k := math.Cbrt(f.wmax * (1 - fallbackBeta) / fallbackC)
	w := fallbackC*math.Pow(t-k, 3) + f.wmax
	return w * float64(pkt) / f.rtt.Seconds()
}

// fallbackActive reports whether the classic fallback holds the rate now
// (for metrics and traces).
func (a *AIMD) fallbackActive() bool { return a.fb.active }
