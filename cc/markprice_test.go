package cc

import (
	"math"
	"testing"
	"time"
)

// newPriced returns a one-path AIMD with the long-RTT controllers'
// settings and the marked-fraction price on (cc/longrtt's config), at
// 1 Gbit/s and 50 ms.
func newPriced() *AIMD {
	f := NewAIMD(AIMDConfig{Name: "priced", Growth: func(GrowthState) float64 { return 0 }, RefRTT: 50 * time.Millisecond,
		RTTFair: true, DelayTarget: 25 * time.Millisecond, QueueShare: 10 * time.Millisecond, SearchStart: 1.0 / 256,
		MarkPrice: true, Params: Params{LineRate: 1e9, BaseRTT: 50 * time.Millisecond}})
	return f(1, pkt).(*AIMD)
}

// feed acks one packet every gap for d, each with queueing delay q above
// the 50 ms base, marked or not.
func feed(a *AIMD, now *time.Duration, d, gap, q time.Duration, marked bool) {
	for end := *now + d; *now < end; {
		*now += gap
		s := AckSample{AckedBytes: pkt, RTT: 50*time.Millisecond + q, SRTT: 50*time.Millisecond + q, MinRTT: 50 * time.Millisecond}
		if marked {
			s.MarkedBytes = pkt
		}
		a.OnAck(*now, 0, s)
	}
}

// TestMarkPriceCountsDuringTheSearch: the marked fraction is read from the
// connection's first ack, its search included, so that connections that
// start together read the same F whatever their round trips (before, F
// started at the end of each one's search: the 150 ms flow of
// rtt-fairness came a second late, paid a third of the others' price and
// took twice their rate, Jain 0.907).
func TestMarkPriceCountsDuringTheSearch(t *testing.T) {
	a := newPriced()
	now := time.Duration(0)
	feed(a, &now, 150*time.Millisecond, 100*time.Microsecond, 20*time.Millisecond, true)
	if !a.searching {
		t.Fatalf("the search ended within 150 ms (rate %g): the test needs it running", a.Rate())
	}
	if a.MarkPrice() <= 0 {
		t.Errorf("price %v after 150 ms of marked acks during the search, want > 0", a.MarkPrice())
	}
}

// TestMarkPriceOffWithAHint: with a receiver hint the receiver loop hands
// out the shares and the price stays off (a lone connection at its hint
// paid for its own bursts' marks: TestCCHostStalls 0.745 of the fixed
// window at 50 ms).
func TestMarkPriceOffWithAHint(t *testing.T) {
	hinted, free := newPriced(), newPriced()
	hinted.OnRateHint(0, 125e6)
	n1, n2 := time.Duration(0), time.Duration(0)
	feed(hinted, &n1, 3*time.Second, 100*time.Microsecond, 20*time.Millisecond, true)
	feed(free, &n2, 3*time.Second, 100*time.Microsecond, 20*time.Millisecond, true)
	if hinted.MarkPrice() != 0 {
		t.Errorf("price %v with a hint, want 0", hinted.MarkPrice())
	}
	if free.MarkPrice() <= 0 {
		t.Errorf("price %v without a hint after 3 s of marks, want > 0", free.MarkPrice())
	}
}

// newProbing is newPriced with a growth function (a constant 2% of the
// scale per RefRTT, htcp's step away from congestion) and a line rate of
// 8 Gbit/s: the connection takes less than half its scale, as each of
// several connections at a bottleneck does, so markedShare leaves its
// steering threshold (which the probe's queue test reads) at QueueShare/4.
func newProbing() *AIMD {
	f := NewAIMD(AIMDConfig{Name: "probing", Growth: func(g GrowthState) float64 { return 0.02 * g.LineRate / g.RefRTT.Seconds() },
		RefRTT: 50 * time.Millisecond, RTTFair: true, DelayTarget: 25 * time.Millisecond, QueueShare: 10 * time.Millisecond,
		SearchStart: 1.0 / 256, MarkPrice: true, Params: Params{LineRate: 8e9, BaseRTT: 50 * time.Millisecond}})
	return f(1, pkt).(*AIMD)
}

// feedFrac acks one packet every gap for d with queueing delay q, one ack
// in every `every` marked (a marked fraction of 1/every).
func feedFrac(a *AIMD, now *time.Duration, d, gap, q time.Duration, every int) {
	for k := 0; ; k++ {
		if *now += gap; *now > d {
			return
		}
		s := AckSample{AckedBytes: pkt, RTT: 50*time.Millisecond + q, SRTT: 50*time.Millisecond + q, MinRTT: 50 * time.Millisecond}
		if every > 0 && k%every == 0 {
			s.MarkedBytes = pkt
		}
		a.OnAck(*now, 0, s)
	}
}

// TestMarkPriceGivesWayAlikeWhateverTheAckTimer: once the marks stop, the
// price gives way to the growth function's probe (priceProbe), and it does
// so alike for a connection whose RTT samples are clean and for one whose
// acks all waited for the receiver's delayed-ack timer (1 ms in the
// simulator at 50-100 ms: a path whose packets come farther apart than
// that). The price's previous fall (after four rounds of a path whose
// samples were all within QueueShare/20 = 0.5 ms of the minimum) read that
// timer as a queue: the clean connection's price was gone within a second
// while the other's stayed, which is how the newcomer at the convergence
// bottleneck, whose sparser paths' acks waited for the timer, kept paying
// more than the incumbent (44 round trips to converge with the weighted
// split; docs/CC.md §4). A dip of a round trip or two (the marking
// bottleneck's own cycle) barely moves the price.
func TestMarkPriceGivesWayAlikeWhateverTheAckTimer(t *testing.T) {
	clean, timer := newProbing(), newProbing()
	var n1, n2 time.Duration
	// 5 s at the threshold with a quarter of the bytes marked: a price of
	// a few QueueShares, which holds the rate (α/p) below half the scale.
	feedFrac(clean, &n1, 5*time.Second, 10*time.Microsecond, 5*time.Millisecond, 4)
	feedFrac(timer, &n2, 5*time.Second, 10*time.Microsecond, 5*time.Millisecond, 4)
	p0 := clean.MarkPrice()
	if p0 < clean.cfg.QueueShare || timer.MarkPrice() != p0 {
		t.Fatalf("prices %v / %v after 5 s of marks, want equal and at least QueueShare", p0, timer.MarkPrice())
	}
	feedFrac(clean, &n1, 5*time.Second+100*time.Millisecond, 10*time.Microsecond, 0, 0)
	feedFrac(timer, &n2, 5*time.Second+100*time.Millisecond, 10*time.Microsecond, time.Millisecond, 0)
	if p := clean.MarkPrice(); p < p0*3/4 {
		t.Errorf("price %v after 2 unmarked round trips, was %v: want it kept (at least 3/4)", p, p0)
	}
	r0 := clean.Rate()
	// 1.5 s: the rates stay below half the scale (8 Gbit/s), as each of
	// several connections' does at a bottleneck, where the steering
	// threshold is QueueShare/4, above the timer's millisecond (above half,
	// a lone connection's markedShare lowers it).
	feedFrac(clean, &n1, 6500*time.Millisecond, 10*time.Microsecond, 0, 0)
	feedFrac(timer, &n2, 6500*time.Millisecond, 10*time.Microsecond, time.Millisecond, 0)
	pc, pt := clean.MarkPrice(), timer.MarkPrice()
	t.Logf("price %v -> %v (clean samples) / %v (timer-delayed acks) after 1.5 s without marks; rate %.3g -> %.3g / %.3g bytes/s",
		p0, pc, pt, r0, clean.Rate(), timer.Rate())
	if pc > p0*3/4 || pt > p0*3/4 {
		t.Errorf("price %v / %v after 1.5 s without marks (was %v), want at most 3/4 of it", pc, pt, p0)
	}
	// The rates, which fairness is about, not the prices: the timer's
	// millisecond is read as queue by both the equilibrium and the give-way,
	// so the timer-delayed connection's price is lower by about that much.
	if rc, rt := clean.Rate(), timer.Rate(); math.Abs(rc-rt) > 0.02*rc {
		t.Errorf("rates %.4g (clean samples) and %.4g (timer-delayed acks) after 1.5 s without marks: want them within 2%%", rc, rt)
	}
	if clean.Rate() <= r0 {
		t.Errorf("rate %.3g after 1.5 s without marks, was %.3g: want the probe to raise it", clean.Rate(), r0)
	}
}
