package cc

import (
	"testing"
	"time"
)

// newSplitter returns an AIMD with the long-RTT controllers' split (a
// queue share) and no growth, over paths at 1 Gbit/s and a 10 ms base
// round trip, held at its 1 Gbit/s hint so that only balance moves rates.
func newSplitter(t *testing.T, paths int) *AIMD {
	t.Helper()
	f := NewAIMD(AIMDConfig{Name: "split", Growth: func(GrowthState) float64 { return 0 }, RefRTT: 50 * time.Millisecond,
		RTTFair: true, DelayTarget: 25 * time.Millisecond, QueueShare: 10 * time.Millisecond,
		Params: Params{LineRate: 1e9, BaseRTT: 10 * time.Millisecond}})
	a := f(paths, pkt).(*AIMD)
	if !a.Splits() {
		t.Fatal("an AIMD with a queue share over several paths does not split")
	}
	a.OnRateHint(0, 1e9/8)
	return a
}

// ackQ acks one packet on path at now whose round trip is the 10 ms base
// plus q of queue.
func ackQ(a *AIMD, now time.Duration, path int, q time.Duration) {
	r := 10*time.Millisecond + q
	a.OnAck(now, path, AckSample{AckedBytes: pkt, RTT: r, SRTT: r, MinRTT: 10 * time.Millisecond})
}

// TestBalanceStepsAPathOnItsOwnSamples: balance moves a path's share only
// on its own acks, by at most one round trip's step per ack. Path 0 read
// an empty queue once and then gets no ack for 20 round trips while paths
// 1-3 read 2 ms. Before, every path stepped on every ack of the
// connection, so path 0's one stale reading grew it for as long as it
// had no news (here to 0.41 of the connection; at 10 µs over 10 Gbit/s
// planes, where a sparse path gets a sample every few tens of round
// trips, the split fell onto a handful of paths and the rate decayed:
// docs/CC.md §7). Now it moves only as the others' steps rescale it
// (0.28), and its next sample moves it by one round trip's step at most.
func TestBalanceStepsAPathOnItsOwnSamples(t *testing.T) {
	a := newSplitter(t, 4)
	now := time.Millisecond
	ackQ(a, now, 0, 0)
	for p := 1; p < 4; p++ {
		ackQ(a, now, p, 2*time.Millisecond)
	}
	share := func(p int) float64 { return a.pathRate(p) / a.Rate() }
	start := share(0)
	if start < 0.24 || start > 0.26 {
		t.Fatalf("path 0 starts with %.3f of the rate, want a quarter", start)
	}
	// 20 round trips of about 11.5 ms, each path 1-3 acked 10 times per
	// round trip.
	for k := 0; k < 20*30; k++ {
		now += 383 * time.Microsecond
		ackQ(a, now, 1+k%3, 2*time.Millisecond)
	}
	if s := share(0); s > 0.30 {
		t.Errorf("path 0 holds %.3f of the rate after 20 round trips without a sample (started at %.3f): its stale reading was integrated", s, start)
	}
	t.Logf("path 0: %.3f of the rate after 20 round trips without a sample", share(0))
	before := a.pathRate(0)
	now += 383 * time.Microsecond
	ackQ(a, now, 0, 0)
	if g := a.pathRate(0) / before; g > 1.07 {
		t.Errorf("path 0's next sample moved its rate by %.3f, want at most one round trip's step (e^%g, and the rescaling)", g, balanceGain)
	}
}
