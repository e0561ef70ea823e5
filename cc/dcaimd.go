package cc

import "time"

// newDCAIMD returns the data-center controller, "dc-aimd": the AIMD engine
// with DCTCP's back-off (once per own round trip, by half the running marked
// fraction), a queueing-delay target of 50 µs plus half the path's minimum
// RTT, and additive growth of 5% of the connection's scale (its hint, else
// its line rate, else its own rate) per round trip. Inside one data center
// round trips are alike, so per-RTT growth is fair enough there and reacts
// fastest; the long-RTT controllers in cc/longrtt grow per unit of time.
func newDCAIMD(p Params) Factory {
	dt := p.DelayTarget
	if dt == 0 {
		dt = 50 * time.Microsecond
	}
	return NewAIMD(AIMDConfig{
		Name:            "dc-aimd",
		Growth:          dcGrowth,
		DelayTarget:     dt,
		DelayTargetFrac: 0.5,
		Params:          p,
	})
}

func dcGrowth(g GrowthState) float64 {
	return 0.05 * Scale(g) / g.SRTT.Seconds()
}

// Scale is the rate a growth function measures its steps against: the
// receiver's hint or the line rate, whichever is lower and known, else the
// connection's own rate.
func Scale(g GrowthState) float64 {
	s := g.Hint
	if g.LineRate > 0 && (s == 0 || g.LineRate < s) {
		s = g.LineRate
	}
	if s == 0 {
		s = g.Rate
	}
	return s
}
