package longrtt

import (
	"testing"
	"time"

	"github.com/mrgw/mrgw/cc"
)

// TestHintRiseStandsBackWhileSteering: a connection whose receiver hints
// twice its share of a fabric bottleneck (the regions scenario's A→B and
// A→C, told the whole of B's and C's capacity) is held at its share by the
// delay equilibrium. The receiver's hint comes with every ack; its
// half-gap rise must not lift the rate while the equilibrium steers (its
// answers to the queue set no lastCongestion, so the old test saw a calm
// connection far below its hint and closed half the gap every round trip,
// which overflowed A–B: 43,153 drops in the steady window). Measured on
// the old code (both controllers): a mean rate of 1.77 times the
// equilibrium's (4.42e7 against 2.5e7 bytes/s, peaks 4.62e7); now equal.
func TestHintRiseStandsBackWhileSteering(t *testing.T) {
	for _, name := range []string{"longrtt-htcp", "longrtt-scalable"} {
		base := 50 * time.Millisecond
		a := build(t, name, base)
		const hint = 50e6
		a.OnRateHint(0, hint)
		// A queue of twice the queue share: the equilibrium's rate is
		// QueueShare·hint/q, half the hint.
		q := 2 * DefaultQueueShare
		want := hint * DefaultQueueShare.Seconds() / q.Seconds()
		now := time.Duration(0)
		rtt := base + q
		sum, n, peak := 0.0, 0, 0.0
		for r := 0; r < 200; r++ {
			end := now + rtt
			for now < end {
				now += time.Duration(10 * pkt / float64(a.PacingRate()) * 1e9)
				a.OnAck(now, 0, cc.AckSample{AckedBytes: 10 * pkt, RTT: rtt, SRTT: rtt, MinRTT: base})
				a.OnRateHint(now, hint)
				if r >= 100 {
					p := float64(a.PacingRate())
					sum += p
					n++
					peak = max(peak, p)
				}
			}
		}
		mean := sum / float64(n)
		t.Logf("%s: mean %.4g, peak %.4g, equilibrium %.4g, hint %.4g", name, mean, peak, want, float64(hint))
		if mean > 1.05*want || peak > 1.1*want {
			t.Errorf("%s: mean rate %.4g, peak %.4g, with the equilibrium at %.4g under a hint of %.4g: the hint's rise lifts the rate while the equilibrium steers",
				name, mean, peak, want, float64(hint))
		}
	}
}
