package cc

import (
	"math"
	"testing"
	"time"
)

// A connection's weight scales the queue share the delay equilibrium
// keeps, and is bounded: weight 3 keeps three times the bytes of weight
// 1, values beyond the bounds are clamped, and a value that is no
// positive number restores 1.
func TestWeightScalesQueueShare(t *testing.T) {
	f := NewAIMD(AIMDConfig{Name: "weight", Growth: func(GrowthState) float64 { return 0 }, RefRTT: 50 * time.Millisecond,
		RTTFair: true, DelayTarget: 25 * time.Millisecond, QueueShare: 10 * time.Millisecond,
		Params: Params{LineRate: 1e9, BaseRTT: 10 * time.Millisecond}})
	a := f(4, pkt).(*AIMD)
	one := a.alpha()
	if one <= 0 || a.connWeight() != 1 {
		t.Fatalf("default: weight %g, queue share %g bytes", a.connWeight(), one)
	}
	a.SetWeight(3)
	if got := a.alpha(); math.Abs(got-3*one) > 1e-9*one {
		t.Errorf("weight 3: queue share %g bytes, want %g", got, 3*one)
	}
	for _, tc := range []struct{ in, want float64 }{
		{1e6, maxWeight}, {1e-6, 1.0 / maxWeight}, {0, 1}, {-2, 1}, {math.NaN(), 1}, {math.Inf(1), 1}, {0.5, 0.5},
	} {
		a.SetWeight(tc.in)
		if a.connWeight() != tc.want {
			t.Errorf("SetWeight(%g): weight %g, want %g", tc.in, a.connWeight(), tc.want)
		}
	}
}
