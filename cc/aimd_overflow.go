package cc

import (
	"math"
	"time"
)

// The drop-tail overflow rule: while the delay equilibrium steers, loss
// significantly above the connection's random-loss floor means the
// bottleneck's buffer is shallower than the queue the connections through
// it hold, and their queue share shrinks.
//
// Why: the equilibrium keeps α = QueueShare × scale per connection in the
// bottleneck's queue, n·α in all, where scale is the connection's hint or
// egress level. When those ceilings overcommit a bottleneck (two gateways
// of a region each told the whole fabric's capacity, each receiver sharing
// it out as if it were alone), n·α is more than the queue the fabric can
// hold: 4 connections told half of a 100 Mbit/s fabric hold 20 ms, a whole
// 20 ms drop-tail buffer, and lost a third of their packets to it, while
// the equilibrium, reading only the delay, saw nothing to answer. The
// per-path loss test cannot see it either: spread over 16 paths a
// connection sends a handful of packets per path and round trip, too few
// for a loss rate. So the connection counts its loss over its own round
// trips, all paths together.
//
// Every connection through the bottleneck must read its overflows alike,
// or their shares drift apart: the cap on the queue share is each
// connection's own, cut when it reads an overflow, and one cut more than
// another's costs it a share for tens of seconds. Its rounds therefore
// last a fixed time (overflowRoundRTTs), long enough that every
// connection's round spans the overflow, however few packets a slow one
// has in it; and a round is an overflow where random loss at the
// connection's floor would rarely make it (unlikelyAtFloor) and its loss
// rate is overflowAbove above the floor, not above a multiple of it
// (LossFactor). Under 1% random loss the mild overflows of a queue held
// near its buffer lose 2-5%, across three times the floor: the noisier
// rates of a slow connection's smaller rounds crossed it more often than
// a fast one's, which cut the slow one more and drove the shares apart.
// The significance test errs the other way: a fast connection's rounds
// hold more packets and show an overflow more surely, which pulls the
// shares together.
//
// A cut takes off overflowCut, or the round's loss rate above the floor
// if more: every connection through the queue loses about the same
// fraction of its packets, so the cuts keep the caps' ratios, and an
// overflow that lost a third of the packets (connections started at
// hints that sum to twice the fabric) is answered in one cut, not over
// many rounds of overflow.
//
// While the cap binds, the hint's rises stand back (setHint): the
// receiver, whose senders the fabric holds back, hands them out ever
// more, up to several times the fabric, and a rise half-way to that
// overflows the buffer every second or so (a fifth to a third of the
// packets lost through planes that do not mark). And the equilibrium
// steers from a quarter of the capped share's queue (steerFrom), not the
// whole share's: the queue a capped share holds is below the whole
// share's threshold, and the growth function, which knows nothing of the
// cap, would take over and fill the buffer.

const (
	// overflowMinPkts and overflowMinLost: a connection round counts only
	// with this many packets in it (acked and lost) and this many lost,
	// so that random loss of a few packets is no overflow.
	overflowMinPkts = 32
	overflowMinLost = 3
	// overflowRoundRTTs is the length of a connection round in smoothed
	// round trips: an overflow lasts about one, and a round of two holds
	// it whole whatever the round's phase.
	overflowRoundRTTs = 2
	// overflowMaxRounds bounds a connection round, in smoothed round
	// trips, while it waits for overflowMinPkts packets.
	overflowMaxRounds = 16
	// overflowSignificance bounds the probability that a round read as
	// an overflow was random loss at the connection's floor
	// (unlikelyAtFloor).
	overflowSignificance = 1e-3
	// overflowAbove is the loss rate above the floor below which no
	// round is an overflow: a lossy plane moves the connection's loss
	// rate with the part of its rate on that plane, beyond what the
	// significance test allows for.
	overflowAbove = 0.005
	// overflowFloorStep is the most the random-loss floor rises per
	// connection round.
	overflowFloorStep = 0.001
	// overflowCut is the least an overflow takes off the queue share,
	// and what it takes, at once, off the rate: small, so that the share
	// a connection holds is the mean of many cuts, and shares that a few
	// cuts more or less set apart stay close.
	overflowCut = 0.1
	// overflowMaxCut bounds one cut of the queue share.
	overflowMaxCut = 0.5
	// overflowMinShare bounds the cap on the queue share from below, as a
	// fraction of the whole share of weight 1 (SetWeight).
	overflowMinShare = 1.0 / 16
	// overflowRegrow is the time over which the cap grows back by the
	// whole queue share:
	// slow against the round trips in which an overflow shows, so that a
	// too-shallow buffer overflows again only every few seconds.
	overflowRegrow = 120 * time.Second
)

// overflowState is the connection-wide loss count of the drop-tail rule.
type overflowState struct {
	acked, lost int           // bytes in the current connection round
	timedOut    int           // of lost, the bytes declared by probe timeouts
	start       time.Duration // when the round began
	floor       float64       // the connection's random-loss floor
	// cap bounds the equilibrium's queue share alpha, bytes (0: none);
	// at is when it was last cut or grown.
	cap   float64
	at    time.Duration
	cutAt time.Duration // the last overflow: its echo is not a new one
	// startRate and prevStart are the connection's rate at the start of
	// the current round and of the one before: the rate at which the
	// packets a round's acks report were sent.
	startRate, prevStart float64
}

// overflowAlpha returns the equilibrium's queue share alpha (bytes)
// bounded by the cap the last overflows left, grown back since by the
// whole share per overflowRegrow; the cap goes once it no longer binds.
// A cap in bytes, not a factor on alpha: alpha follows the hint, and a
// hint that rises while the bottleneck overflows (a receiver whose
// senders are all held back elsewhere hands out more) must not undo it.
// It grows back additively and is cut multiplicatively, so that the caps
// of connections through one bottleneck, which see its overflows at
// different moments, converge (Chiu and Jain): grown back by a fraction
// of itself, a cap twice another's stayed so, and so did their rates.
func (a *AIMD) overflowAlpha(now time.Duration, alpha float64) float64 {
	o := &a.ovf
	if o.cap <= 0 {
		return alpha
	}
	if dt := now - o.at; dt > 0 {
		o.cap += alpha * dt.Seconds() / overflowRegrow.Seconds()
		o.at = now
	}
	if o.cap >= alpha {
		o.cap = 0
		return alpha
	}
	return o.cap
}

// overflowFrac is the part of the queue share (alpha) that the overflow
// cap leaves: 1 without a cap.
func (a *AIMD) overflowFrac() float64 {
	full := a.alpha()
	if a.ovf.cap <= 0 || full <= 0 {
		return 1
	}
	return math.Min(1, a.ovf.cap/full)
}

// overflowAck counts an ack's bytes and closes the connection's round
// once it lasted overflowRoundRTTs smoothed round trips and holds
// overflowMinPkts packets (or lasted overflowMaxRounds round trips). It
// does not wait for losses: a round that closes at its overflowMinLost-th
// loss reads a high rate from a few random losses in a short round, and
// a slow connection's rounds are the short ones.
func (a *AIMD) overflowAck(now time.Duration, acked int) {
	o := &a.ovf
	o.acked += acked
	_, _, srtt := a.connDelay()
	if srtt <= 0 || now-o.start < overflowRoundRTTs*srtt {
		return
	}
	n, lost := o.acked+o.lost, o.lost-o.timedOut
	if n < overflowMinPkts*a.pkt && now-o.start < overflowMaxRounds*srtt {
		return
	}
	o.acked, o.lost, o.timedOut, o.start = 0, 0, 0, now
	sentAt := o.prevStart
	if sentAt <= 0 {
		sentAt = a.total
	}
	defer func() { o.prevStart, o.startRate = o.startRate, a.total }()
	if n < overflowMinPkts*a.pkt {
		return
	}
	rate := float64(lost) / float64(n)
	// Only below the hint: a connection held there by the fabric's queue,
	// not by its receiver or egress, whose shares then overcommit the
	// fabric. At its hint the shares fit, and loss is a plane's failure or
	// random loss, not the queue the hints made.
	excess := lost >= overflowMinLost*a.pkt && rate > o.floor+overflowAbove && a.steering() &&
		a.hint > 0 && a.total < atHintFrac*a.hint && unlikelyAtFloor(lost/a.pkt, float64(n)/float64(a.pkt)*o.floor)
	if excess {
		// The arrivals exceeded the service by the loss rate: the rate the
		// lost packets were sent at, less as much, is what the bottleneck
		// carried. Once per two round trips (not on the echo of the last
		// cut) the queue share is cut by the loss above the floor (at least
		// overflowCut) and the rate by overflowCut too, so that the queue
		// the connections hold falls below the buffer.
		target := sentAt * (1 - math.Min(0.5, rate))
		if now-o.cutAt >= 2*srtt {
			full := a.alpha()
			cut := math.Max(overflowCut, math.Min(overflowMaxCut, rate-o.floor))
			c := a.overflowAlpha(now, full) * (1 - cut)
			o.cap, o.at, o.cutAt = math.Max(overflowMinShare*full/a.connWeight(), c), now, now
			target = math.Min(target, a.total*(1-overflowCut))
		}
		if target < a.total {
			a.lastCongestion = now
			a.setTotal(math.Max(target, a.minRate()*float64(len(a.paths))))
			// The rate a receiver's hold-back left is forgotten: a hint
			// that rises next must not restore a rate the bottleneck
			// could not carry.
			a.held = 0
		}
	}
	// The floor learns the random loss from every round, overflows
	// included, but rises by at most overflowFloorStep per round: random
	// loss, which cutting the rate does not stop, is learnt within a few
	// tens of rounds (and cut for meanwhile), while an overflow, which the
	// cut ends within a round or two, barely moves it. It falls fast.
	if rate < o.floor {
		o.floor += (rate - o.floor) / 4
	} else {
		o.floor += math.Min((rate-o.floor)/8, overflowFloorStep)
	}
}

// unlikelyAtFloor reports whether random loss expected to take mean
// packets of a round takes lost or more with a probability below
// overflowSignificance (the Poisson tail). The round's loss rate alone is
// no test on a round of a few tens of packets: three random losses in
// one, at a 1% floor about one round in a hundred, read as a rate of
// several percent.
func unlikelyAtFloor(lost int, mean float64) bool {
	if mean <= 0 {
		return true
	}
	term := math.Exp(-mean) // P(X = 0)
	below := 0.0            // P(X < i)
	for i := 0; i < lost; i++ {
		below += term
		term *= mean / float64(i+1)
	}
	return 1-below < overflowSignificance
}

// OnTimeoutLoss implements TimeoutLossObserver: the overflow rule counts
// only the losses gaps declare. A plane that fails takes every packet in
// flight on its paths, which time out; counted, they cut connections that
// run below their hints as if the queue had overflowed, and the shares
// after the failure went astray.
func (a *AIMD) OnTimeoutLoss(now time.Duration, path int, bytes int) {
	a.ovf.timedOut += bytes
}
