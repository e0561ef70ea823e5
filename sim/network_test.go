package sim

import (
	"slices"
	"testing"
	"time"
)

func TestECMPSpreadsAndEntropyMovesFlows(t *testing.T) {
	s := New(Config{Seed: 3})
	n := NewNetwork(s, NetworkConfig{Planes: 8})
	const ports = 10_000
	var perPlane [8]int
	moved := 0
	for p := 0; p < ports; p++ {
		pl := n.PlaneOf(1, 2, uint16(p), 4791)
		if pl != n.PlaneOf(1, 2, uint16(p), 4791) {
			t.Fatalf("port %d: ECMP is not a function of the tuple", p)
		}
		perPlane[pl]++
		// Re-rolling the entropy: another source port for the same flow.
		if n.PlaneOf(1, 2, uint16(p+ports), 4791) != pl {
			moved++
		}
	}
	// 1250 expected per plane; ±150 is over 4 standard deviations.
	for i, c := range perPlane {
		if c < 1100 || c > 1400 {
			t.Errorf("plane %d got %d of %d flows: %v", i, c, ports, perPlane)
		}
	}
	// A new source port moves the flow with probability 7/8 (±0.02 is 6 sigma).
	if f := float64(moved) / ports; f < 0.855 || f > 0.895 {
		t.Errorf("a new source port moved %.3f of flows, want 0.875", f)
	}
}

func TestECMPDependsOnSeedAndTuple(t *testing.T) {
	a := NewNetwork(New(Config{Seed: 1}), NetworkConfig{Planes: 8})
	b := NewNetwork(New(Config{Seed: 1}), NetworkConfig{Planes: 8})
	c := NewNetwork(New(Config{Seed: 2}), NetworkConfig{Planes: 8})
	same, differ, byDst := 0, 0, 0
	for p := 0; p < 1000; p++ {
		if a.PlaneOf(1, 2, uint16(p), 9) == b.PlaneOf(1, 2, uint16(p), 9) {
			same++
		}
		if a.PlaneOf(1, 2, uint16(p), 9) != c.PlaneOf(1, 2, uint16(p), 9) {
			differ++
		}
		if a.PlaneOf(1, 2, uint16(p), 9) != a.PlaneOf(1, 3, uint16(p), 9) {
			byDst++
		}
	}
	if same != 1000 {
		t.Errorf("same seed agreed on %d of 1000 flows", same)
	}
	if differ < 800 || byDst < 800 {
		t.Errorf("another seed moved %d, another destination moved %d of 1000 flows; want ~875", differ, byDst)
	}
}

// portSwitcher sends one datagram every 10µs on port a, then on port b from the 50th.
type portSwitcher struct {
	pacer
	a, b uint16
}

func (p *portSwitcher) Poll(now time.Duration, d *Datagram) bool {
	p.srcPort = p.a
	if p.sent >= 50 {
		p.srcPort = p.b
	}
	return p.pacer.Poll(now, d)
}

func TestTrafficFollowsECMP(t *testing.T) {
	s := New(Config{Seed: 5})
	n := NewNetwork(s, NetworkConfig{Planes: 4, AtoB: LinkConfig{Rate: 1e9, Delay: 10 * us}})
	// Find two source ports that hash to different planes (hosts 1 and 2, destination port 7).
	a := uint16(100)
	b := a + 1
	for n.PlaneOf(1, 2, b, 7) == n.PlaneOf(1, 2, a, 7) {
		b++
	}
	ps := &portSwitcher{pacer: pacer{dst: 2, dstPort: 7, size: 100, interval: 10 * us, count: 100}, a: a, b: b}
	n.AddHost(SiteA, ps, HostConfig{})
	snk := &sink{}
	n.AddHost(SiteB, snk, HostConfig{})
	s.Run(time.Second)
	for i := 0; i < n.Planes(); i++ {
		want := uint64(0)
		switch i {
		case n.PlaneOf(1, 2, a, 7), n.PlaneOf(1, 2, b, 7):
			want = 50
		}
		if got := n.Plane(i).AtoB().Stats().Delivered; got != want {
			t.Errorf("plane %d carried %d, want %d", i, got, want)
		}
	}
	if len(snk.got) != 100 {
		t.Errorf("sink got %d of 100", len(snk.got))
	}
}

func TestPlaneOutageDropsAndRecovers(t *testing.T) {
	// One datagram every 10µs, 8µs of serialization + 100µs of delay: sent at t, it arrives
	// at t+108µs. The plane is black from 1005µs to 2005µs.
	p := &pacer{dst: 2, srcPort: 1, dstPort: 2, size: 1000, interval: 10 * us, count: 300}
	s, n, snk := pair(1, NetworkConfig{Planes: 1, AtoB: LinkConfig{Rate: 1e9, Delay: 100 * us}}, p)
	pl := n.Plane(0)
	pl.ScheduleOutage(1005*us, 2005*us)
	s.At(1500*us, func() {
		if !pl.AtoB().Down() || !pl.BtoA().Down() {
			t.Error("plane not down during the outage")
		}
	})
	s.Run(3000 * us)

	var want []uint64
	for seq := uint64(0); seq < 300; seq++ {
		sent := time.Duration(seq) * 10 * us
		// Delivered before the outage, or sent after it and arrived by the end of the run.
		if sent+108*us < 1005*us || (sent >= 2005*us && sent+108*us <= 3000*us) {
			want = append(want, seq)
		}
	}
	if got := snk.seqs(); !slices.Equal(got, want) {
		t.Errorf("delivered %v\nwant      %v", got, want)
	}
	st := pl.AtoB().Stats()
	// Flushed when the plane went black: sent at 900..1000µs (11); offered while black:
	// sent at 1010..2000µs (100).
	if st.DroppedDown != 111 {
		t.Errorf("DroppedDown = %d, want 111", st.DroppedDown)
	}
	if pl.AtoB().InFlight() != 10 { // sent at 2900..2990µs, still on the wire at 3000µs
		t.Errorf("InFlight = %d at the end, want 10", pl.AtoB().InFlight())
	}
	if a := s.Stats().DatagramsAlive; a != 10 {
		t.Errorf("%d datagrams alive, want the 10 in flight", a)
	}
}
