package cc

import (
	"math"
	"testing"
	"time"
)

// newSplitter returns an AIMD with the long-RTT controllers' split (a
// queue share) and no growth, over paths at 1 Gbit/s and a 10 ms base
// round trip, held at its 1 Gbit/s hint so that only balance moves rates.
func newSplitter(t testing.TB, paths int) *AIMD {
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

// splitWeightFresh is SplitWeight computed from the controller's state
// alone, with nothing kept from earlier calls.
func splitWeightFresh(a *AIMD, path int) float64 {
	p := &a.paths[path]
	if !p.usable || a.total <= 0 {
		return 0
	}
	n := a.balN
	if n <= 0 {
		n = len(a.paths)
	}
	w := p.rate / a.total * float64(n)
	if a.balRef > 0 {
		d := float64(a.balQ-splitQueue(p)) / float64(a.balRef)
		w *= math.Exp(splitDamp * math.Max(-1, math.Min(1, d)))
	}
	return w
}

// TestSplitWeightFollowsState: the queue factor SplitWeight keeps per path
// is the one the controller's state gives, call after call, as acks move
// the paths' queues, balance's mean and its reference, and as a path goes
// down and comes back.
func TestSplitWeightFollowsState(t *testing.T) {
	a := newSplitter(t, 4)
	now := time.Millisecond
	check := func(step int) {
		t.Helper()
		for p := range 4 {
			// Twice: the second call is served from what the first kept.
			for range 2 {
				if got, want := a.SplitWeight(p), splitWeightFresh(a, p); got != want {
					t.Fatalf("step %d: path %d weight %v, want %v", step, p, got, want)
				}
			}
		}
	}
	moved := 0
	for k := range 2000 {
		now += 383 * time.Microsecond
		p := k % 4
		before := a.SplitWeight(p)
		ackQ(a, now, p, time.Duration(p)*time.Millisecond+time.Duration(k%7)*100*time.Microsecond)
		switch k {
		case 700:
			a.OnPathState(now, 2, false)
		case 900:
			a.OnPathState(now, 2, true)
		}
		check(k)
		if a.SplitWeight(p) != before {
			moved++
		}
	}
	if a.balRef <= 0 || moved < 100 {
		t.Fatalf("balance reference %v, weights moved %d times: the queue factor was not exercised", a.balRef, moved)
	}
}

// BenchmarkSplitWeight is the sender's weight lookup as PickWeighted makes
// it, one path's turn per datagram over 8 paths, with an RTT sample (an
// ACK) every 64 datagrams: go test -run - -bench SplitWeight ./cc
func BenchmarkSplitWeight(b *testing.B) {
	a := newSplitter(b, 8)
	now := time.Millisecond
	for p := range 8 {
		ackQ(a, now, p, time.Duration(p)*200*time.Microsecond)
	}
	var sum float64
	i := 0
	for b.Loop() {
		if i%64 == 63 {
			now += 100 * time.Microsecond
			p := (i / 64) % 8
			ackQ(a, now, p, time.Duration(p)*200*time.Microsecond+time.Duration(i%5)*10*time.Microsecond)
		}
		sum += a.SplitWeight(i % 8)
		i++
	}
	if sum <= 0 {
		b.Fatal("no weight")
	}
}
