package cc

import (
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

// TestMarkPriceFallsWhenTheQueueEmpties: after the marks stop and the
// queue is gone (a competitor left), the price goes within a second, not
// over MarkPriceTau (one of two flows left and the other took 8.8 s to
// carry 0.95 of the link, TestVariantsDifferOnlyWhileProbing).
func TestMarkPriceFallsWhenTheQueueEmpties(t *testing.T) {
	a := newPriced()
	now := time.Duration(0)
	feed(a, &now, 5*time.Second, 100*time.Microsecond, 20*time.Millisecond, true)
	p0 := a.MarkPrice()
	if p0 < a.cfg.QueueShare {
		t.Fatalf("price %v after 5 s of marks, want at least QueueShare", p0)
	}
	// A dip of the queue for a round or two (the marking bottleneck's own
	// cycle) barely moves it.
	feed(a, &now, 100*time.Millisecond, 100*time.Microsecond, 0, false)
	if p := a.MarkPrice(); p < p0*3/4 {
		t.Errorf("price %v after 2 empty rounds, was %v: want it kept (at least 3/4)", p, p0)
	}
	feed(a, &now, time.Second, 100*time.Microsecond, 0, false)
	if p, lim := a.MarkPrice(), a.cfg.QueueShare/4; p >= lim {
		t.Errorf("price %v after 1.1 s without marks or queue (was %v), want below %v", p, p0, lim)
	}
}
