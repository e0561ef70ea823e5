package cc

import (
	"math"
	"time"
)

// The marked-fraction price (AIMDConfig.MarkPrice): the fraction of bytes
// marked at a bottleneck, as a virtual queue the delay equilibrium answers.

// markPriceBeta, markPriceTau, markPriceTauGrowth and markPriceRelax shape
// the marked-fraction price (AIMDConfig.MarkPrice): a connection whose
// running marked fraction is F adds QueueShare × (e^(markPriceBeta·F) − 1)
// to the queueing delay its delay equilibrium answers; F is a time-weighted
// running mean of the acks' marked fractions over markPriceTau ×
// (1 + markPriceTauGrowth·F); and the equilibrium's window relaxes
// towards its target by at most markPriceRelax per round trip. The marks
// are a relay (the queue is above the threshold or not), and the relay
// and the running mean make a limit cycle whose swing grows with β/τ: a
// large β keeps F low at a given number of connections
// (F = ln(n + 1 − K/QueueShare)/β), so the queue sits above the threshold
// for less of each cycle, and a longer mean at high F slows the price's
// fall when the marks stop (docs/CC.md §2, "Tuning").
const (
	markPriceBeta      = 12.0
	markPriceTau       = 5 * time.Second
	markPriceTauGrowth = 4.0
	markPriceRelax     = 0.25
	// markPriceProbeStep is how fast a connection probes past the price
	// once the marks stop (priceProbe): this fraction of its own rate per
	// RefRTT, the same for every controller, so that n connections rise
	// together as fast as one.
	markPriceProbeStep = 0.015
)

// markPrice is the price of the marks at a marking bottleneck, in seconds
// of virtual queue. With the queueing delay alone as the
// price, n connections each keeping α = QueueShare × scale in the queue
// hold n·QueueShare of it: the price must grow with n, and a delay that
// grows with n is a queue that does. A bottleneck that marks above a
// threshold K gives a second price that can grow while the queue does not:
// the fraction F of bytes marked, i.e. of the time the queue is above K.
// The equilibrium answers p = q + V(F), V = QueueShare·(e^(βF) − 1), so at
// equilibrium q + V(F) = n·QueueShare·scale/capacity: once that passes K,
// F settles where V makes up the rest while the queue hovers about K
// (marks raise F, the rates fall until the queue drops below K, which
// stops the marks). The map is exponential so that F between 0 and 1 spans
// prices of 1 to e^β connections (e^12 ≈ 160,000). Every connection
// through the bottleneck measures the same F over the same time, so V,
// like q, is common to them and the rates α/p stay equal (F is read from
// the connection's first ack for that reason: see OnAck). A newcomer
// starts at F = 0; its search into the marked queue reads the marks the
// incumbents read at the same time, which is how it catches up. Zero
// while priceOn is false.
func (a *AIMD) markPrice() time.Duration {
	if a.mkF <= 0 || !a.priceOn() {
		return 0
	}
	return time.Duration(float64(a.cfg.QueueShare) * math.Expm1(markPriceBeta*a.mkF))
}

// priceOn reports whether the marked-fraction price acts: MarkPrice is set
// and the connection has no receiver hint (nor egress level). With a hint
// the receiver loop hands out the shares (§3 of docs/CC.md: max-min over
// measured demand) and the connection's scale is its share, so its delay
// equilibrium keeps QueueShare at its share's rate, not the line rate's;
// the price is for the bottleneck no receiver sees (the fabric, hints
// off). And a lone connection at its hint would pay for marks that are its
// own (a stalling host's catch-up bursts, or balance's per-plane queues).
// The alternatives measured are in docs/CC.md §2, "Tuning".
func (a *AIMD) priceOn() bool {
	return a.cfg.MarkPrice && a.hint <= 0
}

// priceProbe reports whether the rate probes past the marked-fraction
// price: the price acts (priceOn, F > 0), the connection is not
// searching, no ack has carried a mark for a round trip (the connection's
// rate-weighted srtt), i.e. the bottleneck's queue has been below its
// marking threshold for that long, and the connection's own queueing
// delay is below its steering threshold (steerFrom: QueueShare/4, lower
// while markedShare yields). The last test is for a classic-ECN flow in
// the same queue: it keeps the queue below the threshold but not empty,
// and on the marks alone the probe would take back the room markedShare
// yielded.
//
// Why: F is a mean over seconds (markPriceTau), so when the load falls (a
// competitor leaves) the price would hold the rate at α/V over an empty
// queue for seconds. The marks, unlike the RTT samples (which a receiver's
// delayed-ack timer inflates differently per connection), are common to
// every connection through the bottleneck, so the probe starts alike for
// all of them. The rate then rises by markPriceProbeStep of itself per
// RefRTT and the price gives way by as much (priceGiveWay). In a dip of
// the relay the queue comes back within a round trip or two and the marks
// stop the probe; after a load drop the probe goes on until the link is
// full. The alternatives tried are in docs/CC.md §2, "Tuning".
func (a *AIMD) priceProbe() bool {
	if !a.priceOn() || a.mkF <= 0 || a.searching {
		return false
	}
	_, q, srtt := a.connDelay()
	return srtt > 0 && a.mkLast-a.mkMarkAt >= srtt && q < a.steerFrom(a.scale())
}

// priceGiveWay lowers the marked-fraction price after the probe raised the
// rate by 1/k: the equilibrium's rate is α/p (p = q + V), so p × k keeps
// the probed rate the equilibrium's own rather than one the law pulls back
// to where it was.
func (a *AIMD) priceGiveWay(k float64) {
	_, q, _ := a.connDelay()
	v := max(0, time.Duration(float64(q+a.markPrice())*k)-q)
	a.mkF = math.Log1p(float64(v)/float64(a.cfg.QueueShare)) / markPriceBeta
}

// markSample folds one ack into the running marked fraction, weighted by
// the time since the previous ack: a mean over time, whatever the
// connection's rate.
func (a *AIMD) markSample(now time.Duration, acked, marked int) {
	if acked <= 0 {
		return
	}
	if !a.mkStarted {
		// The connection's first sample starts the clock: weighted
		// by the time since the connection began (or since 0), one
		// marked ack would set the price at its maximum.
		a.mkStarted, a.mkLast, a.mkMarkAt = true, now, now
		return
	}
	if marked > 0 {
		a.mkMarkAt = now
	}
	dt := max(0, now-a.mkLast)
	a.mkLast = now
	tau := markPriceTau.Seconds() * (1 + markPriceTauGrowth*a.mkF)
	w := dt.Seconds() / tau
	a.mkF += math.Min(1, w) * (math.Min(1, float64(marked)/float64(acked)) - a.mkF)
}

// MarkPrice returns the connection's marked-fraction price (0 unless
// AIMDConfig.MarkPrice), for tests and plots.
func (a *AIMD) MarkPrice() time.Duration { return a.markPrice() }
