package longrtt

import (
	"math"
	"testing"
	"time"

	"github.com/mrgw/mrgw/cc"
)

const pkt = 1476

func build(t *testing.T, name string, rtt time.Duration) *cc.AIMD {
	t.Helper()
	f, err := cc.Lookup(name, cc.Params{LineRate: 10e9, BaseRTT: rtt})
	if err != nil {
		t.Fatal(err)
	}
	a := f(1, pkt).(*cc.AIMD)
	a.OnRateHint(0, 100e6) // start at 100 MB/s...
	a.OnRateHint(0, 10e9)  // ...under a roomy ceiling (a rise while calm would jump: not now)
	return a
}

// run feeds acks for d of virtual time at the controller's pacing rate (as a
// path would ack them), marking the given fraction of bytes.
func run(a *cc.AIMD, now *time.Duration, d, rtt time.Duration, markFrac float64) {
	end := *now + d
	for *now < end {
		*now += time.Duration(10 * pkt / float64(a.PacingRate()) * 1e9)
		s := cc.AckSample{AckedBytes: 10 * pkt, RTT: rtt, SRTT: rtt, MinRTT: rtt}
		s.MarkedBytes = int(markFrac * float64(s.AckedBytes))
		a.OnAck(*now, 0, s)
	}
}

func TestGrowthIsPerUnitOfTime(t *testing.T) {
	for _, name := range []string{"longrtt-htcp", "longrtt-scalable"} {
		short, long := build(t, name, 10*time.Millisecond), build(t, name, 150*time.Millisecond)
		t0, t1 := time.Duration(0), time.Duration(0)
		run(short, &t0, time.Second, 10*time.Millisecond, 0)
		run(long, &t1, time.Second, 150*time.Millisecond, 0)
		gs, gl := short.Rate()-100e6, long.Rate()-100e6
		if gs <= 0 || math.Abs(gs-gl)/gs > 0.15 {
			t.Errorf("%s: growth in 1 s: 10 ms flow %g, 150 ms flow %g: not RTT-independent", name, gs, gl)
		}
	}
}

func TestBackoffIsPerUnitOfTime(t *testing.T) {
	// The same marked fraction for the same time costs both flows the same.
	for _, name := range []string{"longrtt-htcp", "longrtt-scalable"} {
		short, long := build(t, name, 10*time.Millisecond), build(t, name, 150*time.Millisecond)
		t0, t1 := time.Duration(0), time.Duration(0)
		run(short, &t0, 3*time.Second, 10*time.Millisecond, 0.5)
		run(long, &t1, 3*time.Second, 150*time.Millisecond, 0.5)
		if r := short.Rate() / long.Rate(); r < 0.85 || r > 1.15 {
			t.Errorf("%s: after 3 s at 50%% marks: 10 ms flow %g, 150 ms flow %g", name, short.Rate(), long.Rate())
		}
		if long.Rate() >= 100e6 {
			t.Errorf("%s: marks did not slow the flow down: %g", name, long.Rate())
		}
	}
}

func TestOnePercentLossKeepsTheRate(t *testing.T) {
	for _, name := range []string{"longrtt-htcp", "longrtt-scalable"} {
		a := build(t, name, 50*time.Millisecond)
		a.OnRateHint(0, 50e6) // cap: the receiver's share
		now := time.Duration(0)
		rtt := 50 * time.Millisecond
		for r := 0; r < 200; r++ {
			a.OnLoss(now, 0, 20*pkt)
			run(a, &now, rtt, rtt, 0) // 50e6*50ms = 1700 packets acked, 20 lost: about 1%
		}
		if a.PacingRate() < 0.99*50e6 {
			t.Errorf("%s: steady random loss cut the rate to %g", name, a.PacingRate())
		}
	}
}

func TestHTCPAcceleratesAfterQuiet(t *testing.T) {
	g := cc.GrowthState{Rate: 1e8, LineRate: 1e9, RefRTT: DefaultRefRTT, SRTT: DefaultRefRTT}
	early := HTCPGrowth(g)
	g.SinceCongestion = 20 * DefaultRefRTT
	late := HTCPGrowth(g)
	if late <= 2*early {
		t.Fatalf("growth after 20 quiet RefRTTs %g, right after congestion %g", late, early)
	}
}

// TestDelayEquilibriumIsRTTFair runs a 10 ms and a 150 ms flow through one
// fluid queue (no hints, no marks): once the queue steers, both keep
// QueueShare × line rate bytes in it, so their rates end equal, the link
// full and the queue at about two QueueShares.
func TestDelayEquilibriumIsRTTFair(t *testing.T) {
	const capacity = 125e6 // bytes/s: 1 Gbit/s, the line rate of both
	for _, name := range []string{"longrtt-htcp", "longrtt-scalable"} {
		bases := []time.Duration{10 * time.Millisecond, 150 * time.Millisecond}
		flows := make([]*cc.AIMD, len(bases))
		for i, b := range bases {
			f, err := cc.Lookup(name, cc.Params{LineRate: 8 * capacity, BaseRTT: b})
			if err != nil {
				t.Fatal(err)
			}
			flows[i] = f(1, pkt).(*cc.AIMD)
		}
		queue := 0.0 // bytes
		step := time.Millisecond
		for now := step; now <= 30*time.Second; now += step {
			in := 0.0
			for i, a := range flows {
				r := float64(a.PacingRate())
				in += r
				rtt := bases[i] + time.Duration(queue/capacity*1e9)
				a.OnAck(now, 0, cc.AckSample{AckedBytes: int(r * step.Seconds()), RTT: rtt, SRTT: rtt, MinRTT: bases[i]})
			}
			queue = math.Max(0, queue+(in-capacity)*step.Seconds())
		}
		r0, r1 := float64(flows[0].PacingRate()), float64(flows[1].PacingRate())
		if d := math.Abs(r0-r1) / (r0 + r1); d > 0.05 {
			t.Errorf("%s: 10 ms flow %.3g B/s, 150 ms flow %.3g B/s: not equal", name, r0, r1)
		}
		if sum := r0 + r1; sum < 0.98*capacity || sum > 1.02*capacity {
			t.Errorf("%s: rates sum to %.3g B/s, capacity %.3g", name, sum, capacity)
		}
		if q := time.Duration(queue / capacity * 1e9); q < DefaultQueueShare || q > 3*DefaultQueueShare {
			t.Errorf("%s: queue %v, want about 2 × %v", name, q, DefaultQueueShare)
		}
	}
}

// TestLossWithMarksWhileSteering: a single connection at its receiver's
// share, with a standing queue below QueueShare (the delay equilibrium
// steers and holds the rate) that is above the marking threshold, loses a
// packet every few round trips on an otherwise loss-free path. The
// equilibrium answers the queue (a full one would read as a long delay);
// a loss that comes with the marks is no separate 30% cut. (On real
// sockets, late wake-ups make such a queue and its marks while the link
// has random loss.) The rate is compared with the same run without the
// losses: a steady marked queue of its own makes the equilibrium yield
// part of its queue share (cc.AIMD's markedShare), with or
// without loss.
func TestLossWithMarksWhileSteering(t *testing.T) {
	run := func(name string, loss bool) float64 {
		base := 50 * time.Millisecond
		a := build(t, name, base)
		a.OnRateHint(0, 50e6) // the receiver's share
		now := time.Duration(0)
		rtt := base + DefaultQueueShare*3/4
		sum, n := 0.0, 0
		for r := 0; r < 100; r++ {
			if loss && r%5 == 4 {
				a.OnLoss(now, 0, pkt) // one of the round's 1700 packets
			}
			end := now + rtt
			for now < end {
				now += time.Duration(10 * pkt / float64(a.PacingRate()) * 1e9)
				a.OnAck(now, 0, cc.AckSample{AckedBytes: 10 * pkt, MarkedBytes: 5 * pkt, RTT: rtt, SRTT: rtt, MinRTT: base})
				if r >= 20 {
					sum += float64(a.PacingRate())
					n++
				}
			}
		}
		return sum / float64(n)
	}
	for _, name := range []string{"longrtt-htcp", "longrtt-scalable"} {
		with, without := run(name, true), run(name, false)
		if with < 0.97*without {
			t.Errorf("%s: mean rate %.4g with losses, %.4g without, the queue below QueueShare: loss with marks cut it", name, with, without)
		}
	}
}

// TestMarksAtMovingStandingQueue: a single connection at its receiver's
// share steers at a queue above the marking threshold that never drains
// but moves by more than a quarter of its queue share within each round
// trip (from 10.4 to 12.95 ms above the minimum), as the fullest of 8
// unevenly hashed planes does in TestCCPlanes (by up to a quarter of its
// depth). That is a standing queue, marked in every round: the connection
// must remember the marks (markMem) and yield part of its queue share, as
// it does at a flat queue. With the spread compared with QueueShare/4
// alone (2.5 ms) no such round counted, markMem stayed 0, and the
// equilibrium kept its whole share: 16.13 ms of standing queue on the
// 8-plane row (bound 10).
func TestMarksAtMovingStandingQueue(t *testing.T) {
	base := 50 * time.Millisecond
	run := func(name string, marked bool) (*cc.AIMD, float64) {
		a := build(t, name, base)
		a.OnRateHint(0, 50e6)
		now := time.Duration(0)
		srtt := base + 10600*time.Microsecond
		sum, n := 0.0, 0
		for r := 0; r < 60; r++ {
			start := now
			for now < start+srtt {
				now += time.Duration(10 * pkt / float64(a.PacingRate()) * 1e9)
				// The queue swings 10.4-12.95 ms over the round.
				frac := float64(now-start) / float64(srtt)
				rtt := base + 10400*time.Microsecond + time.Duration(frac*float64(2550*time.Microsecond))
				m := 0
				if marked {
					m = 5 * pkt
				}
				a.OnAck(now, 0, cc.AckSample{AckedBytes: 10 * pkt, MarkedBytes: m, RTT: rtt, SRTT: srtt, MinRTT: base})
				if r >= 30 {
					sum += float64(a.PacingRate())
					n++
				}
			}
		}
		return a, sum / float64(n)
	}
	for _, name := range []string{"longrtt-htcp", "longrtt-scalable"} {
		a, with := run(name, true)
		_, without := run(name, false)
		if a.MarkMem() < 0.2 {
			t.Errorf("%s: memory of marks %.3f after 60 marked rounds at a standing queue of 10.4-12.95 ms, want >= 0.2", name, a.MarkMem())
		}
		if with > 0.9*without {
			t.Errorf("%s: mean rate %.4g with marks, %.4g without: the connection did not yield its queue share", name, with, without)
		}
	}
}
