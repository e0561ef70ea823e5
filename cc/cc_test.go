package cc

import (
	"math"
	"testing"
	"time"
)

const pkt = 4172

func newDC(t *testing.T, paths int) *AIMD {
	t.Helper()
	f, err := Lookup("dc-aimd", Params{LineRate: 100e9, BaseRTT: 10 * time.Microsecond})
	if err != nil {
		t.Fatal(err)
	}
	return f(paths, pkt).(*AIMD)
}

// ack feeds n acks of one packet on path, spaced gap apart, marked or not.
func ack(a Controller, now *time.Duration, path, n int, gap, rtt time.Duration, marked bool) {
	for i := 0; i < n; i++ {
		*now += gap
		s := AckSample{AckedBytes: pkt, RTT: rtt, SRTT: rtt, MinRTT: rtt}
		if marked {
			s.MarkedBytes = pkt
		}
		a.OnAck(*now, path, s)
	}
}

func TestRegistry(t *testing.T) {
	for _, n := range []string{"fixed", "dc-aimd", "reno", "dcqcn"} {
		if _, err := Lookup(n, Params{}); err != nil {
			t.Errorf("%s: %v", n, err)
		}
	}
	if _, err := Lookup("cubic", Params{}); err == nil {
		t.Error("unknown name accepted")
	}
}

func TestHintIsStartAndCeiling(t *testing.T) {
	a := newDC(t, 4)
	a.OnRateHint(0, 1e9)
	if got := float64(a.PacingRate()); math.Abs(got-1e9) > 1 {
		t.Fatalf("start rate %g, want the hint 1e9", got)
	}
	now := time.Duration(0)
	ack(a, &now, 0, 1000, time.Microsecond, 10*time.Microsecond, false)
	if a.PacingRate() > 1e9 {
		t.Fatalf("rate %g above the hint", a.PacingRate())
	}
	a.OnRateHint(now, 2e8)
	if got := a.PacingRate(); got > 2e8+1 {
		t.Fatalf("rate %g above a lowered hint", got)
	}
}

func TestMarksTrimThePathThatSawThem(t *testing.T) {
	a := newDC(t, 2)
	a.OnRateHint(0, 1e9)
	now := time.Duration(0)
	ack(a, &now, 1, 1, time.Microsecond, 100*time.Microsecond, false)
	before0, before1 := a.pathRate(0), a.pathRate(1)
	// Several rounds of fully marked acks on path 0 only.
	for r := 0; r < 20; r++ {
		ack(a, &now, 0, 10, 20*time.Microsecond, 100*time.Microsecond, true)
	}
	if a.pathRate(0) >= before0/2 {
		t.Errorf("marked path: rate %g, was %g: not trimmed", a.pathRate(0), before0)
	}
	if a.pathRate(1) < before1*0.99 {
		t.Errorf("clear path: rate %g, was %g: trimmed by marks it did not see", a.pathRate(1), before1)
	}
	if a.Window(0) >= a.Window(1) {
		t.Errorf("window of marked path %d not below clear path's %d: packets are not steered", a.Window(0), a.Window(1))
	}
	if a.pathAlpha(0) <= 0.5 || a.pathAlpha(1) != 0 {
		t.Errorf("alpha %g/%g", a.pathAlpha(0), a.pathAlpha(1))
	}
}

func TestRandomLossIsNotCongestion(t *testing.T) {
	a := newDC(t, 1)
	a.OnRateHint(0, 1e9)
	now := time.Duration(0)
	rtt := 10 * time.Microsecond
	// 100 rounds with 1% steady loss: the floor learns it, the rate holds.
	for r := 0; r < 100; r++ {
		a.OnLoss(now, 0, pkt)
		ack(a, &now, 0, 99, rtt/99+1, rtt, false)
	}
	if a.PacingRate() < 0.99e9 {
		t.Fatalf("steady 1%% loss cut the rate to %g", a.PacingRate())
	}
	if f := a.pathLossFloor(0); f < 0.005 || f > 0.02 {
		t.Fatalf("loss floor %g, want about 0.01", f)
	}
	// A round at 30% loss, far above the floor, is congestion.
	for i := 0; i < 30; i++ {
		a.OnLoss(now, 0, pkt)
	}
	ack(a, &now, 0, 70, rtt/70+1, rtt, false)
	ack(a, &now, 0, 1, rtt, rtt, false)
	if a.PacingRate() > 0.9e9 {
		t.Fatalf("a loss burst far above the floor did not cut: rate %g", a.PacingRate())
	}
}

func TestLossWithMarksIsCongestion(t *testing.T) {
	a := newDC(t, 1)
	a.OnRateHint(0, 1e9)
	now := time.Duration(0)
	rtt := 10 * time.Microsecond
	ack(a, &now, 0, 100, rtt/50+1, rtt, false) // the first full round sets the floor at 0
	if a.paths[0].floorSet != true || a.pathLossFloor(0) != 0 {
		t.Fatalf("loss floor %g (set %v) after loss-free rounds", a.pathLossFloor(0), a.paths[0].floorSet)
	}
	a.OnLoss(now, 0, pkt)
	ack(a, &now, 0, 1, rtt/2, rtt, true)
	ack(a, &now, 0, 40, rtt/40+1, rtt, false)
	if a.PacingRate() > 0.8e9 {
		t.Fatalf("loss with marks: rate %g, want a cut of at least 30%%", a.PacingRate())
	}
}

// TestLossAtTheFloorWithAMarkIsNotAFullQueue: on a path that loses 1% of
// its packets anyway, a round that loses its 1% and also carries a mark (a
// burst after a late wake-up draws one) is not a full queue: no 30% cut.
func TestLossAtTheFloorWithAMarkIsNotAFullQueue(t *testing.T) {
	a := newDC(t, 1)
	a.OnRateHint(0, 1e9)
	now := time.Duration(0)
	rtt := 10 * time.Microsecond
	for r := 0; r < 100; r++ { // the floor learns 1%
		a.OnLoss(now, 0, pkt)
		ack(a, &now, 0, 99, rtt/99+1, rtt, false)
	}
	if f := a.pathLossFloor(0); f < 0.005 {
		t.Fatalf("loss floor %g, want about 0.01", f)
	}
	for r := 0; r < 20; r++ {
		a.OnLoss(now, 0, pkt)
		ack(a, &now, 0, 1, rtt/99+1, rtt, true)
		ack(a, &now, 0, 98, rtt/99+1, rtt, false)
	}
	// dc-aimd still trims by alpha/2 for the marks (about 1% a round).
	if a.PacingRate() < 0.85e9 {
		t.Fatalf("random loss with a mark per round: rate %g, cut as a full queue", a.PacingRate())
	}
}

func TestDelayIsASignal(t *testing.T) {
	a := newDC(t, 1)
	a.OnRateHint(0, 1e9)
	now := time.Duration(0)
	base := 10 * time.Microsecond
	for r := 0; r < 5; r++ {
		for i := 0; i < 20; i++ {
			now += 20 * time.Microsecond
			a.OnAck(now, 0, AckSample{AckedBytes: pkt, RTT: 400 * time.Microsecond, SRTT: 400 * time.Microsecond, MinRTT: base})
		}
	}
	if a.PacingRate() > 0.8e9 {
		t.Fatalf("queueing delay far above target: rate %g not cut", a.PacingRate())
	}
}

func TestCoupledGrowth(t *testing.T) {
	// Eight paths grow, in total, as fast as one path does.
	one, eight := newDC(t, 1), newDC(t, 8)
	one.OnRateHint(0, 1e9)
	eight.OnRateHint(0, 1e9)
	one.hint, eight.hint = 0, 0 // no ceiling
	one.cfg.Params.LineRate, eight.cfg.Params.LineRate = 0, 0
	now1, now8 := time.Duration(0), time.Duration(0)
	rtt := 10 * time.Microsecond
	for i := 0; i < 800; i++ {
		ack(one, &now1, 0, 1, time.Microsecond, rtt, false)
	}
	for i := 0; i < 800; i++ {
		ack(eight, &now8, i%8, 1, time.Microsecond, rtt, false)
	}
	g1, g8 := one.Rate()-1e9, eight.Rate()-1e9
	if g1 <= 0 || math.Abs(g8-g1)/g1 > 0.2 {
		t.Fatalf("growth: 1 path %g, 8 paths %g: not coupled", g1, g8)
	}
}

func TestPathDownKeepsRate(t *testing.T) {
	a := newDC(t, 4)
	a.OnRateHint(0, 1e9)
	a.OnPathState(0, 2, false)
	if a.Window(2) != 0 || math.Abs(a.Rate()-1e9) > 1 {
		t.Fatalf("down path window %d, rate %g", a.Window(2), a.Rate())
	}
	a.OnPathState(0, 2, true)
	if a.Window(2) == 0 || math.Abs(a.Rate()-1e9) > 1 {
		t.Fatalf("back: window %d, rate %g", a.Window(2), a.Rate())
	}
}

// Every path down at once (a host's only link flapping) must not cost the
// connection its rate: the first path back carries the rate it had.
func TestAllPathsDownKeepsRate(t *testing.T) {
	a := newDC(t, 2)
	a.OnRateHint(0, 1e9)
	a.OnPathState(0, 0, false)
	a.OnPathState(0, 1, false)
	if a.Window(0) != 0 || a.Window(1) != 0 {
		t.Fatalf("windows with every path down: %d, %d", a.Window(0), a.Window(1))
	}
	a.OnPathState(time.Millisecond, 1, true)
	if math.Abs(a.Rate()-1e9) > 1 || math.Abs(a.pathRate(1)-1e9) > 1 {
		t.Fatalf("after one path came back: rate %g, path 1 %g; want 1e9 on path 1", a.Rate(), a.pathRate(1))
	}
	a.OnPathState(time.Millisecond, 0, true)
	if math.Abs(a.Rate()-1e9) > 1 || a.pathRate(0) <= 0 {
		t.Fatalf("both back: rate %g, path 0 %g; want 1e9 over both paths", a.Rate(), a.pathRate(0))
	}
}

func TestRenoHalvesOnLossIgnoresMarks(t *testing.T) {
	f, _ := Lookup("reno", Params{BaseRTT: time.Millisecond})
	r := f(1, pkt).(*renoController)
	now := time.Duration(0)
	ack(r, &now, 0, 100, 10*time.Microsecond, time.Millisecond, true)
	w := r.cwnd
	if w < 100*pkt {
		t.Fatalf("slow start: cwnd %g", w)
	}
	r.OnLoss(now, 0, pkt)
	r.OnLoss(now, 0, pkt) // same round: one halving
	if r.cwnd != w/2 {
		t.Fatalf("cwnd %g after loss, want %g", r.cwnd, w/2)
	}
}

func TestDCQCNCutsOnMarksAndRecovers(t *testing.T) {
	f, _ := Lookup("dcqcn", Params{LineRate: 100e9})
	d := f(1, pkt).(*dcqcnController)
	now := time.Duration(0)
	d.OnAck(now+time.Microsecond, 0, AckSample{AckedBytes: pkt, MarkedBytes: pkt})
	if d.Rate() > 100e9/8*0.51 {
		t.Fatalf("first CNP: rate %g, want half the line rate (alpha starts at 1)", d.Rate())
	}
	cut := d.Rate()
	d.OnSent(2*time.Millisecond, 0, pkt) // timers run: fast recovery towards the target
	if d.Rate() <= cut {
		t.Fatalf("no recovery: %g", d.Rate())
	}
}

func TestFairShareMaxMin(t *testing.T) {
	f := NewFairShare(8e9, time.Second) // 1 GB/s
	f.Window = time.Millisecond
	now := time.Duration(0)
	// Three senders; sender 3 only ever sends 100 MB/s.
	for step := 0; step < 100; step++ {
		now += 100 * time.Microsecond
		share := float64(f.Share(now))
		for s := uint64(1); s <= 3; s++ {
			rate := share
			if s == 3 {
				rate = 100e6
			}
			f.Account(now, s, int(rate*100e-6), false)
		}
	}
	got := float64(f.Share(now))
	if math.Abs(got-450e6)/450e6 > 0.05 {
		t.Fatalf("max-min level %g, want 450e6 (what sender 3 leaves is shared)", got)
	}
	// Marked arrivals at the capacity (a standing queue keeps the link
	// busy) hold back capacity to drain the queue.
	f.MarkWindow = 100 * time.Microsecond
	now += 200 * time.Microsecond
	f.Account(now, 1, 200_000, true)
	now += 200 * time.Microsecond
	f.Account(now, 1, 200_000, true)
	if d, want := float64(f.Share(now)), got*(1-defaultDrainGain); math.Abs(d-want)/want > 0.01 {
		t.Fatalf("share %g with every arrival marked, want (1 - %g) × %g", d, defaultDrainGain, got)
	}
	// Marks while arrivals fall well short of the capacity come from a
	// burst that is already gone: no hold-back.
	now += 200 * time.Microsecond
	f.Account(now, 1, 20_000, true)
	now += 200 * time.Microsecond
	f.Account(now, 1, 20_000, true)
	if d := float64(f.Share(now)); d < got*0.95 {
		t.Fatalf("share %g after marks on a half-idle link, want %g", d, got)
	}
}

func TestMaxMinLevel(t *testing.T) {
	if l := maxMinLevel(100, []float64{10, 20}, 2); math.Abs(l-35) > 1e-9 {
		t.Fatalf("level %g, want 35", l)
	}
	if l := maxMinLevel(100, []float64{10, 60}, 1); math.Abs(l-45) > 1e-9 {
		t.Fatalf("level %g, want 45 (60 is not constrained below the level)", l)
	}
}

// TestSetLineRateLive: a live reload of the ceiling applies to a running
// controller, down at once and up by growing into it.
func TestSetLineRateLive(t *testing.T) {
	a := newDC(t, 4)
	a.OnRateHint(0, 1e9) // the hint starts the rate at 1 GB/s
	a.SetLineRate(1e8)
	if got := a.PacingRate(); got > 1e8+1 {
		t.Fatalf("rate %g above the lowered line rate 1e8", got)
	}
	now := time.Duration(0)
	ack(a, &now, 0, 2000, time.Microsecond, 10*time.Microsecond, false)
	if got := a.PacingRate(); got > 1e8+1 {
		t.Fatalf("rate %g grew above the lowered line rate", got)
	}
	a.SetLineRate(5e8)
	for i := 0; i < 4; i++ {
		for p := range 4 {
			ack(a, &now, p, 2000, time.Microsecond, 10*time.Microsecond, false)
		}
	}
	if got := a.PacingRate(); got <= 1e8+1 || got > 5e8+1 {
		t.Fatalf("rate %g after raising the line rate to 5e8, want above the old 1e8 and at most 5e8", got)
	}
	f := NewFixed(1<<20, 1e6)(4, pkt)
	f.(*fixedController).SetLineRate(3e6)
	if got := f.PacingRate(); got != 3e6 {
		t.Fatalf("fixed: rate %g after SetLineRate(3e6)", got)
	}
}

// A new capacity (a gateway's next part of its region's rate) is shared
// over the demands already measured: a lone busy sender beside one that
// only keeps its connection alive keeps the whole capacity, and is not cut
// to the equal split until the next window.
func TestFairShareNewCapacityKeepsMeasuredDemands(t *testing.T) {
	f := NewFairShare(8e9, time.Second) // 1 GB/s
	f.Window = time.Millisecond
	now := time.Duration(0)
	for step := 0; step < 100; step++ {
		now += 100 * time.Microsecond
		f.Account(now, 1, int(float64(f.Share(now))*100e-6), false)
		if step%20 == 0 {
			f.Account(now, 2, 64, false) // a keepalive
		}
	}
	if got := float64(f.Share(now)); got < 0.99e9 {
		t.Fatalf("share %g before the change, want the whole 1e9", got)
	}
	f.SetCapacity(7.6e9) // 0.95 GB/s
	if got := float64(f.current()); math.Abs(got-0.95e9)/0.95e9 > 0.01 {
		t.Fatalf("share %g after the capacity fell 5%%, want 0.95e9 (the keepalive sender was measured idle), not the equal split", got)
	}
	f.SetCapacity(9.6e9)
	if got := float64(f.current()); math.Abs(got-1.2e9)/1.2e9 > 0.01 {
		t.Fatalf("share %g after the capacity rose to 1.2e9, want all of it", got)
	}
	// Before any measurement the new capacity is split equally.
	g := NewFairShare(8e9, time.Second)
	g.Observe(0, 1)
	g.Observe(0, 2)
	g.SetCapacity(9.6e9)
	if got := float64(g.current()); math.Abs(got-0.6e9)/0.6e9 > 0.01 {
		t.Fatalf("share %g of two unmeasured senders, want the equal split 0.6e9", got)
	}
}

// The egress level of a gateway's busy connection survives a new WAN
// rate: the connection to an idle peer was measured idle.
func TestEgressNewCapacityKeepsMeasuredDemands(t *testing.T) {
	e := NewEgress(8e9, time.Millisecond)
	busy, idle := e.join(), e.join()
	now := time.Duration(0)
	lvl := 0.0
	for step := 0; step < 100; step++ {
		now += 100 * time.Microsecond
		if lvl <= 0 {
			lvl = 0.5e9
		}
		lvl = e.sent(now, busy, int(lvl*100e-6))
		if step%20 == 0 {
			e.sent(now, idle, 64)
		}
	}
	if lvl < 0.97e9 {
		t.Fatalf("level %g before the change, want about 0.98e9", lvl)
	}
	e.SetCapacity(7.6e9)
	if got, want := float64(e.Level(now)), EgressUtilisation*0.95e9; math.Abs(got-want)/want > 0.01 {
		t.Fatalf("level %g after the rate fell 5%%, want %g, not the equal split", got, want)
	}
}
