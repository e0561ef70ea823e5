package cc

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// TestMarkOnsetReadsTheThreshold: the marking onset is learnt from the
// queueing delay of marked acks, a low quantile of them: a threshold
// marker marks only packets that met a queue above its threshold, and
// the receiver's ack delay and the sender's lateness only add to a sample.
// A queue sweeping 0-8 ms, marked above 5 ms, and up to 1 ms of ack delay
// on every sample (the simulator's MaxAckDelay at 50 ms): the onset must
// come out at the threshold plus less than the ack delay (5.61 ms), not
// at the marked samples' mean (7 ms; a tracker that stepped in proportion
// to the distance, an expectile, gave 6.4 ms).
func TestMarkOnsetReadsTheThreshold(t *testing.T) {
	a := newPriced()
	if a.MarkOnset() != 0 {
		t.Fatalf("onset %v before any mark, want 0", a.MarkOnset())
	}
	now := time.Duration(0)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 20000; i++ {
		now += 100 * time.Microsecond
		q := time.Duration(i%80) * 100 * time.Microsecond
		extra := time.Duration(rng.Int64N(int64(time.Millisecond)))
		s := AckSample{AckedBytes: pkt, RTT: 50*time.Millisecond + q + extra, SRTT: 50*time.Millisecond + q, MinRTT: 50 * time.Millisecond}
		if q >= 5*time.Millisecond {
			s.MarkedBytes = pkt
		}
		a.OnAck(now, 0, s)
	}
	if k := a.MarkOnset(); k < 5*time.Millisecond || k > 5800*time.Microsecond {
		t.Errorf("onset %v for a 5 ms threshold (marked samples 5-9 ms), want 5-5.8 ms", k)
	}
}

// TestEqWindowBoundsTheFlight: while the delay equilibrium steers, the
// paths' windows sum to its window (eqW, plus rate × stall allowance),
// not to twice rate × RTT: the bytes in flight, not a pacing rate that
// answers a round-trip-old queue, set the queue (docs/CC.md §4). On the
// old code the windows summed to 2 × rate × RTT and the queue of the
// coexistence scenario cycled between empty and its 5 ms marking
// threshold every 6-7 round trips.
func TestEqWindowBoundsTheFlight(t *testing.T) {
	f := NewAIMD(AIMDConfig{Name: "eq", Growth: func(GrowthState) float64 { return 0 }, RefRTT: 50 * time.Millisecond,
		RTTFair: true, DelayTarget: 25 * time.Millisecond, QueueShare: 10 * time.Millisecond,
		Params: Params{LineRate: 1e9, BaseRTT: 50 * time.Millisecond}})
	a := f(4, pkt).(*AIMD)
	now := time.Duration(0)
	q := 12 * time.Millisecond // above QueueShare: the search ends and the equilibrium steers
	for i := 0; i < 40000; i++ {
		now += 50 * time.Microsecond
		a.OnAck(now, i%4, AckSample{AckedBytes: pkt, RTT: 50*time.Millisecond + q, SRTT: 50*time.Millisecond + q, MinRTT: 50 * time.Millisecond})
	}
	if !a.Steering() {
		t.Fatalf("not steering at %v of queue (rate %g): the test needs the equilibrium", q, a.Rate())
	}
	sum := 0
	for p := 0; p < 4; p++ {
		sum += a.Window(p)
	}
	want := a.Rate() * (50*time.Millisecond + q).Seconds()
	if math.Abs(float64(sum)-want) > 0.02*want {
		t.Errorf("windows sum to %d bytes while steering, want the equilibrium's window, rate × rtt = %.0f", sum, want)
	}
}
