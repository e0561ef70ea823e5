// Package longrtt holds the congestion controllers for millisecond round
// trips, the WAN side of the gateway: "longrtt-htcp" and "longrtt-scalable".
// Importing the package registers both with cc.Register.
//
// Both are the cc.AIMD engine (DCTCP-style back-off in proportion to the
// fraction of bytes marked, delay as a second signal, loss tolerated up to
// its running floor, paths coupled, the receiver's hint as start and
// ceiling) with two changes that make them fair across round trips:
//
//   - Growth is per unit of time, measured against a reference round trip
//     (RefRTT, default 50 ms), never per own round trip: a 150 ms flow's rate
//     grows as fast, in bytes per second per second, as a 10 ms flow's.
//   - Back-off is per unit of time too: a path's cut per round is scaled by
//     srtt/RefRTT, so a 10 ms path cutting fifteen times while a 150 ms path
//     cuts once takes fifteen small cuts, not fifteen full ones.
//
// With the same marked fraction at a shared bottleneck, growth and back-off
// then balance at the same rate whatever the round trip.
//
// Once a queue forms, neither growth function sets the rate: a delay
// equilibrium does (cc.AIMDConfig.QueueShare, after FAST TCP): every
// connection keeps the same number of bytes in the shared queue, so rates
// are equal whatever the round trips, the link stays full without a
// sawtooth, and a newcomer converges to its share in tens of round trips
// where AIMD against threshold ECN marking took more than sixty. At a
// bottleneck that marks ECN and that no receiver hint covers, the
// marked-fraction price (cc.AIMDConfig.MarkPrice) is added to the delay
// the equilibrium answers, so that the queue stays near the marking
// threshold however many connections share it. The two
// controllers differ only in how they probe a link whose queue is empty
// (htcp about 1.3 times faster when the line rate is the bottleneck's,
// TestVariantsDifferOnlyWhileProbing); longrtt-htcp is the one to use, and
// longrtt-scalable stays registered as a configuration name (docs/CC.md §4).
// docs/CC.md gives the reasoning and the literature (H-TCP,
// Scalable TCP, Hybla, FAST, DCTCP, RFC 6356).
//
// It imports only cc: never metaroce, nor any socket, metrics, configuration or
// gossip package (internal/layering checks it).
package longrtt

import (
	"time"

	"github.com/mrgw/mrgw/cc"
)

// DefaultRefRTT is the reference round trip of both controllers.
const DefaultRefRTT = 50 * time.Millisecond

// DefaultDelayTarget is the queueing delay above a path's minimum RTT that
// both read as congestion. It is absolute, the same for every path: flows
// that share a queue see the same queueing delay, and a target that grew
// with the path's round trip would make short flows back off first.
const DefaultDelayTarget = 25 * time.Millisecond

// DefaultQueueShare is the queueing delay, at the line rate, that each
// connection keeps in a shared bottleneck's queue (the delay equilibrium of
// cc.AIMDConfig.QueueShare): two connections hold about 20 ms where no
// marks make a price (drop-tail; 3 ms at a 5 ms marking threshold). The
// equilibrium's fairness converges by about γ·q/rtt per round trip, so the
// queue it holds must be a sizeable fraction of the round trip for a
// newcomer at 100 ms to reach its share in tens of round trips (docs/CC.md
// §4).
const DefaultQueueShare = 10 * time.Millisecond

// SearchStart is the fraction of the line rate a connection without a
// receiver hint starts its search at (when above 10 packets per base RTT):
// the search then takes as many round trips to find a share at 100 Gbit/s
// as at 1 Gbit/s.
const SearchStart = 1.0 / 256

func init() {
	cc.Register("longrtt-htcp", func(p cc.Params) cc.Factory { return NewHTCP(p) })
	cc.Register("longrtt-scalable", func(p cc.Params) cc.Factory { return NewScalable(p) })
}

func config(name string, p cc.Params, g cc.Growth) cc.AIMDConfig {
	ref := p.RefRTT
	if ref == 0 {
		ref = DefaultRefRTT
	}
	dt := p.DelayTarget
	if dt == 0 {
		dt = DefaultDelayTarget
	}
	return cc.AIMDConfig{
		Name:            name,
		Growth:          g,
		RefRTT:          ref,
		RTTFair:         true,
		DelayTarget:     dt,
		DelayTargetFrac: 0,
		QueueShare:      DefaultQueueShare,
		SearchStart:     SearchStart,
		MarkPrice:       true,
		Params:          p,
	}
}

// HTCP growth constants: the base step is 0.5% of the connection's scale
// per reference RTT; after a quiet spell of one RefRTT the step grows as
// H-TCP's alpha(Δ) = 1 + 10Δ + (Δ/2)², with Δ counted in units of 4 RefRTT,
// up to 4 times the base step.
const (
	htcpBase     = 0.005
	htcpMaxAlpha = 4
)

// NewHTCP returns "longrtt-htcp": additive growth that depends on the time
// since the last back-off (H-TCP, Leith and Shorten 2004), in units of a
// reference round trip rather than seconds and as a fraction of the
// connection's scale rather than packets, so that it means the same at
// 1 Gbit/s and at 100 Gbit/s.
func NewHTCP(p cc.Params) cc.Factory {
	return cc.NewAIMD(config("longrtt-htcp", p, HTCPGrowth))
}

// HTCPGrowth is longrtt-htcp's growth function.
func HTCPGrowth(g cc.GrowthState) float64 {
	x := float64(g.SinceCongestion-g.RefRTT) / float64(4*g.RefRTT)
	alpha := 1.0
	if x > 0 {
		alpha = 1 + 10*x + (x/2)*(x/2)
	}
	if alpha > htcpMaxAlpha {
		alpha = htcpMaxAlpha
	}
	return htcpBase * alpha * cc.Scale(g) / g.RefRTT.Seconds()
}

// Scalable growth constants: 1% of the current rate per reference RTT
// (multiplicative, like Scalable TCP's 0.01 per ack) plus 0.5% of the scale
// (additive, which is what makes two flows converge: pure multiplicative
// increase against multiplicative decrease keeps their ratio for ever).
// A larger multiplicative term would dominate and make the equilibrium
// follow small differences in the marked fraction the flows see.
const (
	scalableMI = 0.01
	scalableAI = 0.005
)

// NewScalable returns "longrtt-scalable": growth in proportion to the current
// rate per reference RTT (Scalable TCP, Kelly 2003), so recovering after a
// back-off takes the same number of reference RTTs at any speed, plus an
// additive term for convergence.
func NewScalable(p cc.Params) cc.Factory {
	return cc.NewAIMD(config("longrtt-scalable", p, ScalableGrowth))
}

// ScalableGrowth is longrtt-scalable's growth function.
func ScalableGrowth(g cc.GrowthState) float64 {
	return (scalableMI*g.Rate + scalableAI*cc.Scale(g)) / g.RefRTT.Seconds()
}
