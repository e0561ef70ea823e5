package cc

import (
	"math"
	"testing"
	"time"
)

// egressSender is a connection of a gateway in a fluid test: it sends at
// its controller's pacing rate, or at most at limit (bytes/s; 0: no limit,
// as a connection held back by a bottleneck elsewhere), and every packet is
// acked one round trip later without marks.
type egressSender struct {
	a     *AIMD
	limit float64
	owed  float64
}

// TestEgressSharesTheGatewayCapacity: connections of one gateway that
// share a cc.Egress pace at no more than their max-min share of the
// gateway's capacity (less EgressUtilisation's headroom) whatever their
// receivers hint, and what a connection held back elsewhere leaves goes to
// the others. Without the Egress each paced at the receiver's hint, three
// times the gateway's capacity in total.
func TestEgressSharesTheGatewayCapacity(t *testing.T) {
	const capBytes = 125e6 // 1 Gbit/s
	rtt := 20 * time.Millisecond
	e := NewEgress(8*capBytes, rtt)
	var senders []*egressSender
	for i := 0; i < 3; i++ {
		f, err := Lookup("dc-aimd", Params{LineRate: 8 * capBytes, BaseRTT: rtt, Egress: e})
		if err != nil {
			t.Fatal(err)
		}
		s := &egressSender{a: f(1, pkt).(*AIMD)}
		s.a.OnRateHint(0, capBytes) // each receiver hints the whole capacity
		senders = append(senders, s)
	}
	now := time.Duration(0)
	step := 100 * time.Microsecond
	runFor := func(d time.Duration) {
		for end := now + d; now < end; {
			now += step
			for _, s := range senders {
				r := float64(s.a.PacingRate())
				if s.limit > 0 {
					r = math.Min(r, s.limit)
				}
				s.owed += r * step.Seconds()
				for s.owed >= pkt {
					s.owed -= pkt
					s.a.OnSent(now, 0, pkt)
					s.a.OnAck(now, 0, AckSample{AckedBytes: pkt, RTT: rtt, SRTT: rtt, MinRTT: rtt})
				}
			}
		}
	}
	level := EgressUtilisation * capBytes
	runFor(2 * time.Second)
	for i, s := range senders {
		if got := float64(s.a.PacingRate()); got > level/3*1.01 || got < level/3*0.9 {
			t.Errorf("sender %d paces at %.4g bytes/s, want its third of %.4g", i, got, level)
		}
	}
	senders[0].limit = 0.1 * capBytes
	runFor(2 * time.Second)
	want := (level - senders[0].limit) / 2
	for i, s := range senders[1:] {
		if got := float64(s.a.PacingRate()); math.Abs(got-want) > 0.05*want {
			t.Errorf("with sender 0 held at %.4g, sender %d paces at %.4g, want %.4g", senders[0].limit, i+1, got, want)
		}
	}
	if lvl := float64(e.Level(now)); lvl < want*0.95 {
		t.Errorf("egress level %.4g, want about %.4g", lvl, want)
	}
}

// TestMaxMinLevelAllConstrained: when every sender used clearly less than
// the last level, the largest may take what the others leave. The equal
// split returned before sat below what the largest already used, so it was
// unconstrained in the next window and the level flipped back up: a
// receiver's hints swung every 20-40 ms (docs/results/regions.md).
func TestMaxMinLevelAllConstrained(t *testing.T) {
	if l := maxMinLevel(100, []float64{10, 20, 30}, 0); math.Abs(l-70) > 1e-9 {
		t.Errorf("level %g, want 70 (100 less the two smaller demands)", l)
	}
	if l := maxMinLevel(100, []float64{1, 1}, 0); math.Abs(l-99) > 1e-9 {
		t.Errorf("level %g, want 99", l)
	}
}
