package gateway

import (
	"math"
	"slices"
	"time"

	"github.com/mrgw/mrgw/units"
)

// The demand-aware split of wan.region_rate_bps (docs/GATEWAY.md, "The
// region's rate"). Every gateway of the region measures its own WAN
// demand and sends it to the region's other gateways every demandEvery;
// each computes its own part from the last reports with splitRegion, the
// same function over the same inputs, so that the parts agree.
const (
	// demandEvery is how often a gateway measures its demand, sends it
	// and re-reads its part: the direct probes' cadence.
	demandEvery = regionProbeEvery
	// demandStale: a report older than this (four exchanges lost) no
	// longer says what its gateway sends now.
	demandStale = 4 * demandEvery
	// demandFloor is the least part of a live gateway, as a fraction of
	// its static fair part: an idle gateway starts a flow at once at this
	// part, and grows within two exchanges (its report says it is limited,
	// the others give back, it takes the water-filled part). The rest is
	// lent to the busy gateways: with one busy gateway of two it takes
	// 15/16 of the region's rate.
	demandFloor = 0.125
	// demandHeadroom: a gateway that sends r without being held back by
	// its part wants r × demandHeadroom, so that it can grow into its part
	// without being limited first.
	demandHeadroom = 1.25
	// demandLimited: a gateway that sent at least this fraction of its
	// part of the region's rate was held back by it, and wants more.
	// Below 1/demandHeadroom, so that a gateway given demandHeadroom ×
	// its rate does not count as limited.
	demandLimited = 0.9
	// demandQuantum: parts are rounded down to 1/demandQuantum of the
	// region's rate, so that a small change of a measured rate does not
	// re-apply the ceilings to every connection.
	demandQuantum = 4096
)

// demandSample is one gateway's demand over one exchange: the rate its
// WAN connections carried (on the wire, the larger direction) and whether
// its part of the region's rate held it back.
type demandSample struct {
	Rate    units.BitRate
	Limited bool
}

// regionMember is another live gateway of the region as splitRegion sees
// it: its node.capacity weight and its last report, received at At.
type regionMember struct {
	Weight uint32
	Heard  bool // a report of it was received
	At     time.Time
	demandSample
}

// ownDemand is this gateway's weight and the last two reports it sent
// (nil: none yet).
type ownDemand struct {
	Weight     uint32
	Last, Prev *demandSample
}

// want is how much of rate a gateway with static part static asks for
// after reporting s: all of it when its part limited it, else its rate
// with headroom, at least the floor.
func want(s demandSample, static, rate float64) float64 {
	if s.Limited {
		return rate
	}
	return min(rate, max(demandFloor*static, demandHeadroom*float64(s.Rate)))
}

// splitRegion is this gateway's part of the region's rate at now: the
// rate split max-min by node.capacity weight over what the region's live
// gateways want (water-filling), and when they want less than the rate in
// all, what each wants plus its weight's part of the rest.
//
// What a gateway wants: a gateway heard from wants what its last report
// says (want); one never heard from its static part (weight ÷ the region's
// weight, today's rule), and so does this gateway before its first
// report; one whose report is older than demandStale at least its static
// part, and at least what it last said, since it may still be sending at
// that. This gateway counts the smaller of what its last two reports say:
// another gateway holds one of the two (or the one before, when a report
// was lost), and the split is monotone (a gateway's part never falls when
// it wants more, never rises when another does), so the parts computed
// by the region's gateways sum to at most the rate whenever each holds
// the other's last or second-last report.
func splitRegion(rate units.BitRate, now time.Time, self ownDemand, others []regionMember) units.BitRate {
	r := float64(rate)
	if r <= 0 {
		return rate
	}
	total := float64(max(self.Weight, 1))
	for _, m := range others {
		total += float64(max(m.Weight, 1))
	}
	static := func(w uint32) float64 { return r * float64(max(w, 1)) / total }
	type claim struct{ want, weight float64 }
	claims := make([]claim, 0, len(others)+1)
	sw := static(self.Weight)
	ownWant := func(s *demandSample) float64 {
		if s == nil {
			return sw
		}
		return want(*s, sw, r)
	}
	mine := min(ownWant(self.Last), ownWant(self.Prev))
	claims = append(claims, claim{mine, float64(max(self.Weight, 1))})
	for _, m := range others {
		st := static(m.Weight)
		w := st
		if m.Heard {
			w = want(m.demandSample, st, r)
			if now.Sub(m.At) > demandStale {
				w = max(w, st)
			}
		}
		claims = append(claims, claim{w, float64(max(m.Weight, 1))})
	}
	sum := 0.0
	for _, c := range claims {
		sum += c.want
	}
	var part float64
	if sum <= r {
		part = mine + (r-sum)*claims[0].weight/total
	} else {
		// Water-filling: the claims in order of want per weight; each
		// below the level of what is left gets its want, the others the
		// level × their weight.
		order := slices.Clone(claims[1:])
		order = append(order, claims[0])
		slices.SortStableFunc(order, func(a, b claim) int {
			x, y := a.want/a.weight, b.want/b.weight
			switch {
			case x < y:
				return -1
			case x > y:
				return 1
			}
			return 0
		})
		left, weight := r, total
		level := math.Inf(1)
		for _, c := range order {
			if c.want <= left/weight*c.weight {
				left -= c.want
				weight -= c.weight
				continue
			}
			level = left / weight
			break
		}
		part = min(mine, level*claims[0].weight)
	}
	// Rounded down to a quantum (the tolerance absorbs float error in an
	// exact fraction such as 1/2), never above the rate.
	q := r / demandQuantum
	return units.BitRate(min(r, math.Floor(part/q+1e-9)*q))
}
