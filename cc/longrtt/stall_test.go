package longrtt

import (
	"testing"
	"time"

	"github.com/mrgw/mrgw/cc"

	"github.com/mrgw/mrgw/units"
)

// stallLink is one connection at its ceiling: line rate and receiver's hint
// both at ceil bytes/s, minimum RTT base.
type stallLink struct {
	a          *cc.AIMD
	now        time.Duration
	ceil       float64
	base       time.Duration
	minR, sumR float64
	n          int
}

func newStallLink(t *testing.T, ceil float64, base time.Duration) *stallLink {
	t.Helper()
	f, err := cc.Lookup("longrtt-htcp", cc.Params{LineRate: units.ByteRate(ceil).Bits(), BaseRTT: base})
	if err != nil {
		t.Fatal(err)
	}
	l := &stallLink{a: f(1, pkt).(*cc.AIMD), ceil: ceil, base: base}
	l.a.OnRateHint(0, units.ByteRate(ceil))
	return l
}

// feed acks what the controller sends for d, every RTT sample showing a
// queueing delay of q; it records the smallest and the mean pacing rate
// over d, as fractions of the ceiling.
func (l *stallLink) feed(q, d time.Duration) {
	l.minR, l.sumR, l.n = 2, 0, 0
	end := l.now + d
	for l.now < end {
		l.now += time.Duration(10 * pkt / float64(l.a.PacingRate()) * 1e9)
		l.a.OnSent(l.now, 0, 10*pkt)
		l.a.OnAck(l.now, 0, cc.AckSample{AckedBytes: 10 * pkt, RTT: l.base + q, SRTT: l.base + q, MinRTT: l.base})
		l.a.OnRateHint(l.now, units.ByteRate(l.ceil))
		r := float64(l.a.PacingRate()) / l.ceil
		l.minR = min(l.minR, r)
		l.sumR += r
		l.n++
	}
}

func (l *stallLink) mean() float64 { return l.sumR / float64(l.n) }

// TestCeilingHeldWhileStalling: a connection at its ceiling whose driver
// stalls for 6 ms keeps pacing at the ceiling while its queueing delay
// rises within the allowance and as much again (here from 4 to 11 ms).
// Before, the equilibrium's window was clamped to ceiling × the current
// round trip, so every rise of the RTT (on a stalling host, late acks)
// cut the rate at once by the ratio of the round trips (here 54/61 =
// 0.885) and the law took round trips to grow it back. Without stalls the
// clamp is as it was.
func TestCeilingHeldWhileStalling(t *testing.T) {
	const ceil = 25e6 // 200 Mbit/s
	base := 50 * time.Millisecond
	for _, stall := range []time.Duration{0, 6 * time.Millisecond} {
		l := newStallLink(t, ceil, base)
		for i := 0; i < 30; i++ {
			if stall > 0 {
				l.a.OnSendLate(l.now, stall)
			}
			l.feed(4*time.Millisecond, 100*time.Millisecond)
		}
		if m := l.mean(); m < 0.99 {
			t.Fatalf("stall %v, setup: mean rate %.3f of the ceiling at a 4 ms queue, want the ceiling", stall, m)
		}
		l.feed(11*time.Millisecond, 2*base)
		t.Logf("stall %v, queue 4 → 11 ms: rate min %.3f, mean %.3f of the ceiling", stall, l.minR, l.mean())
		switch {
		case stall > 0 && l.minR < 0.99:
			t.Errorf("stalls of %v: a queue of 11 ms cut the rate to %.3f of the ceiling, want it held", stall, l.minR)
		case stall == 0 && l.minR > 0.95:
			t.Errorf("no stalls: a queue of 11 ms left the rate at %.3f of the ceiling, want the old clamp's cut (54/61)", l.minR)
		}
	}
}

// TestStallAllowance: a connection whose driver reports late sends
// (cc.SendLateObserver, metaroce's pacer) does not price the queue that
// covers its stalls. At a 15 ms queue, 12 ms stalls leave 3 ms of price,
// below the 10 ms share at the ceiling: the rate stays there, where
// without the reports the equilibrium holds α/q = 2/3 of it. The allowance
// is at most twice the queue share, and fades when the stalls stop.
func TestStallAllowance(t *testing.T) {
	const ceil = 25e6
	base := 50 * time.Millisecond
	q := 15 * time.Millisecond

	quiet := newStallLink(t, ceil, base)
	quiet.feed(q, 5*time.Second)
	stalled := newStallLink(t, ceil, base)
	for i := 0; i < 50; i++ {
		stalled.a.OnSendLate(stalled.now, 12*time.Millisecond)
		stalled.feed(q, 100*time.Millisecond)
	}
	t.Logf("15 ms queue: rate %.3f of the ceiling without stalls, %.3f with 12 ms stalls", quiet.mean(), stalled.mean())
	if m := quiet.mean(); m > 0.75 {
		t.Errorf("without stalls the rate is %.3f of the ceiling at a 15 ms queue, want about 2/3 (α/q)", m)
	}
	if m := stalled.mean(); m < 0.99 {
		t.Errorf("with 12 ms stalls the rate is %.3f of the ceiling at a 15 ms queue, want the ceiling", m)
	}

	// A 200 ms stall counts as 2 × QueueShare = 20 ms: at a 40 ms queue
	// the price is 20 ms and the rate α/20 ms, half the ceiling.
	big := newStallLink(t, ceil, base)
	for i := 0; i < 50; i++ {
		big.a.OnSendLate(big.now, 200*time.Millisecond)
		big.feed(40*time.Millisecond, 100*time.Millisecond)
	}
	t.Logf("40 ms queue, 200 ms stalls: rate %.3f of the ceiling", big.mean())
	if m := big.mean(); m < 0.45 || m > 0.55 {
		t.Errorf("with 200 ms stalls at a 40 ms queue the rate is %.3f of the ceiling, want 0.5 (allowance capped at 20 ms)", m)
	}

	// Quiet for 10 s (five times cc's stall memory): the allowance is gone.
	stalled.feed(q, 10*time.Second)
	stalled.feed(q, 2*time.Second)
	t.Logf("after 12 s without stalls: %.3f", stalled.mean())
	if m := stalled.mean(); m > 0.75 {
		t.Errorf("12 s after the last stall the rate is %.3f of the ceiling at a 15 ms queue, want about 2/3", m)
	}
}
