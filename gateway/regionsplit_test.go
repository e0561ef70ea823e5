package gateway

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/mrgw/mrgw/units"
)

const splitRate = units.BitRate(400e6)

var (
	splitNow = time.Unix(1e9, 0)
	busy     = &demandSample{Rate: 190e6, Limited: true}
	idle     = &demandSample{Rate: 1e5}
)

func heard(w uint32, s *demandSample, age time.Duration) regionMember {
	return regionMember{Weight: w, Heard: true, At: splitNow.Add(-age), demandSample: *s}
}

func checkPart(t *testing.T, what string, got, want units.BitRate) {
	t.Helper()
	// Parts are rounded down to a quantum of the rate.
	if d := got - want; d > 1 || d < -splitRate/demandQuantum {
		t.Errorf("%s: part %.0f bit/s, want %.0f", what, float64(got), float64(want))
	}
}

// TestSplitIdlePeerLends: a busy gateway whose region's other gateway is
// idle takes all but the idle one's floor (1/8 of its static part); an
// idle region splits by weight as the static rule did.
func TestSplitIdlePeerLends(t *testing.T) {
	got := splitRegion(splitRate, splitNow, ownDemand{Weight: 100, Last: busy, Prev: busy}, []regionMember{heard(100, idle, 0)})
	checkPart(t, "busy beside an idle gateway", got, splitRate*15/16)
	got = splitRegion(splitRate, splitNow, ownDemand{Weight: 100, Last: idle, Prev: idle}, []regionMember{heard(100, busy, 0)})
	checkPart(t, "idle beside a busy gateway", got, splitRate/16)

	got = splitRegion(splitRate, splitNow, ownDemand{Weight: 100, Last: idle, Prev: idle}, []regionMember{heard(100, idle, 0)})
	checkPart(t, "both idle", got, splitRate/2)
	got = splitRegion(splitRate, splitNow, ownDemand{Weight: 300, Last: idle, Prev: idle}, []regionMember{heard(100, idle, 0)})
	checkPart(t, "both idle, weights 300:100", got, splitRate*3/4)

	// Three gateways, one busy: it takes all but two floors.
	got = splitRegion(splitRate, splitNow, ownDemand{Weight: 100, Last: busy, Prev: busy},
		[]regionMember{heard(100, idle, 0), heard(100, idle, 0)})
	checkPart(t, "one busy of three", got, splitRate-2*splitRate/3/8)
}

// TestSplitBothBusyByWeight: gateways that are all held back by their
// parts split the rate by node.capacity.
func TestSplitBothBusyByWeight(t *testing.T) {
	got := splitRegion(splitRate, splitNow, ownDemand{Weight: 100, Last: busy, Prev: busy}, []regionMember{heard(100, busy, 0)})
	checkPart(t, "equal weights", got, splitRate/2)
	got = splitRegion(splitRate, splitNow, ownDemand{Weight: 100, Last: busy, Prev: busy}, []regionMember{heard(300, busy, 0)})
	checkPart(t, "weights 100:300", got, splitRate/4)
	got = splitRegion(splitRate, splitNow, ownDemand{Weight: 300, Last: busy, Prev: busy}, []regionMember{heard(100, busy, 0)})
	checkPart(t, "weights 300:100", got, splitRate*3/4)
}

// TestSplitUnlimitedDemand: a gateway that sends less than its part
// without being held back is counted at its rate with headroom, and the
// rest goes to the one that wants more.
func TestSplitUnlimitedDemand(t *testing.T) {
	some := &demandSample{Rate: 80e6}
	got := splitRegion(splitRate, splitNow, ownDemand{Weight: 100, Last: busy, Prev: busy}, []regionMember{heard(100, some, 0)})
	checkPart(t, "beside one sending 80 Mbit/s", got, splitRate-demandHeadroom*80e6)
	// More than its weight's part: water-filling caps it at the level.
	lots := &demandSample{Rate: 300e6}
	got = splitRegion(splitRate, splitNow, ownDemand{Weight: 100, Last: busy, Prev: busy}, []regionMember{heard(100, lots, 0)})
	checkPart(t, "beside one that wants 375 Mbit/s", got, splitRate/2)
}

// TestSplitDemandRises: the borrower gives back as soon as it holds the
// other gateway's report of a rise; the riser takes its part only from
// its next report on, so the two parts never sum to more than the rate.
func TestSplitDemandRises(t *testing.T) {
	// Before: a busy, b idle.
	a := splitRegion(splitRate, splitNow, ownDemand{Weight: 100, Last: busy, Prev: busy}, []regionMember{heard(100, idle, 0)})
	b := splitRegion(splitRate, splitNow, ownDemand{Weight: 100, Last: idle, Prev: idle}, []regionMember{heard(100, busy, 0)})
	checkPart(t, "a before", a, splitRate*15/16)
	checkPart(t, "b before", b, splitRate/16)
	// b's flows fill its floor: its report says limited. b counts the
	// smaller of its last two reports and keeps its floor; a, still
	// holding b's report before, keeps its part: the sum holds.
	b = splitRegion(splitRate, splitNow, ownDemand{Weight: 100, Last: busy, Prev: idle}, []regionMember{heard(100, busy, 0)})
	checkPart(t, "b after its first limited report", b, splitRate/16)
	// The report reaches a, which gives back at once.
	a = splitRegion(splitRate, splitNow, ownDemand{Weight: 100, Last: busy, Prev: busy}, []regionMember{heard(100, busy, 0)})
	checkPart(t, "a on b's report", a, splitRate/2)
	// b's next report: both of its last two say limited.
	b = splitRegion(splitRate, splitNow, ownDemand{Weight: 100, Last: busy, Prev: busy}, []regionMember{heard(100, busy, 0)})
	checkPart(t, "b one exchange later", b, splitRate/2)
	// b goes idle again: it gives back at once, a takes it from b's report.
	b = splitRegion(splitRate, splitNow, ownDemand{Weight: 100, Last: idle, Prev: busy}, []regionMember{heard(100, busy, 0)})
	checkPart(t, "b going idle", b, splitRate/16)
	a = splitRegion(splitRate, splitNow, ownDemand{Weight: 100, Last: busy, Prev: busy}, []regionMember{heard(100, idle, 0)})
	checkPart(t, "a on b's idle report", a, splitRate*15/16)
}

// TestSplitStaleAndAbsent: a gateway never heard from counts at its
// static part, so does this one before its first report, and one whose
// report is stale counts at least at its static part and at least at
// what it last said.
func TestSplitStaleAndAbsent(t *testing.T) {
	never := regionMember{Weight: 100}
	got := splitRegion(splitRate, splitNow, ownDemand{Weight: 100, Last: busy, Prev: busy}, []regionMember{never})
	checkPart(t, "beside a gateway never heard from", got, splitRate/2)
	// Before its first report a gateway counts at its static part, and
	// until its second at no more: beside an idle gateway that is its
	// static part and half of what the idle one leaves of the other half.
	static, floor := splitRate/2, splitRate/2*demandFloor
	got = splitRegion(splitRate, splitNow, ownDemand{Weight: 100}, []regionMember{heard(100, idle, 0)})
	checkPart(t, "before its first report", got, static+(splitRate-static-floor)/2)
	got = splitRegion(splitRate, splitNow, ownDemand{Weight: 100, Last: busy}, []regionMember{heard(100, idle, 0)})
	checkPart(t, "after its first report", got, static+(splitRate-static-floor)/2)
	got = splitRegion(splitRate, splitNow, ownDemand{Weight: 100, Last: busy, Prev: busy}, []regionMember{heard(100, idle, 0)})
	checkPart(t, "after its second report", got, splitRate-floor)

	got = splitRegion(splitRate, splitNow, ownDemand{Weight: 100, Last: busy, Prev: busy}, []regionMember{heard(100, idle, demandStale)})
	checkPart(t, "an idle report just fresh", got, splitRate*15/16)
	got = splitRegion(splitRate, splitNow, ownDemand{Weight: 100, Last: busy, Prev: busy}, []regionMember{heard(100, idle, demandStale+time.Millisecond)})
	checkPart(t, "an idle report gone stale", got, splitRate/2)
	got = splitRegion(splitRate, splitNow, ownDemand{Weight: 100, Last: busy, Prev: busy}, []regionMember{heard(300, busy, time.Minute)})
	checkPart(t, "a stale busy report", got, splitRate/4)
	got = splitRegion(splitRate, splitNow, ownDemand{Weight: 100, Last: busy, Prev: busy}, nil)
	checkPart(t, "alone", got, splitRate)
	if got := splitRegion(0, splitNow, ownDemand{Weight: 100, Last: busy}, []regionMember{never}); got != 0 {
		t.Errorf("no region rate: part %v, want 0", got)
	}
}

// TestSplitNeverOvercommits: whatever the demands and weights, gateways
// that each hold every other's last or second-last report compute parts
// that sum to at most the rate.
func TestSplitNeverOvercommits(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	sample := func() *demandSample {
		switch rng.IntN(4) {
		case 0:
			return &demandSample{}
		case 1:
			return &demandSample{Rate: splitRate, Limited: true}
		}
		return &demandSample{Rate: units.BitRate(rng.Float64()) * splitRate, Limited: rng.IntN(3) == 0}
	}
	for trial := range 20000 {
		n := 1 + rng.IntN(16)
		weights := make([]uint32, n)
		last, prev := make([]*demandSample, n), make([]*demandSample, n)
		for i := range n {
			weights[i] = uint32(1 + rng.IntN(400))
			switch rng.IntN(4) { // none sent yet, one, or two and more
			case 0:
			case 1:
				last[i] = sample()
			default:
				last[i], prev[i] = sample(), sample()
			}
		}
		var sum units.BitRate
		for i := range n {
			var others []regionMember
			for j := range n {
				if j == i {
					continue
				}
				s := last[j]
				if rng.IntN(2) == 0 {
					s = prev[j] // the latest not arrived yet
				}
				m := regionMember{Weight: weights[j]}
				if s != nil {
					m = heard(weights[j], s, time.Duration(rng.IntN(int(2*demandStale))))
				}
				others = append(others, m)
			}
			sum += splitRegion(splitRate, splitNow, ownDemand{Weight: weights[i], Last: last[i], Prev: prev[i]}, others)
		}
		if sum > splitRate*(1+1e-9) {
			t.Fatalf("trial %d: %d gateways' parts sum to %.0f bit/s, above the rate %.0f", trial, n, float64(sum), float64(splitRate))
		}
	}
}
