package sim

import (
	"strings"
	"testing"
	"time"
)

// line builds sites A — B — C joined by one plane: links ab (A→B) and bc (B→C), and routes
// A→B [ab], B→C [bc], A→C [ab bc]. Routes back are ideal links, so the tests can check them too.
func line(seed uint64, ab, bc LinkConfig) (*Sim, *Network, *Link, *Link) {
	s := New(Config{Seed: seed})
	n := NewTopology(s, TopologyConfig{Sites: 3, Planes: 1})
	lab := n.AddLink(0, "ab", ab)
	lbc := n.AddLink(0, "bc", bc)
	n.SetRoute(SiteA, SiteB, 0, lab)
	n.SetRoute(SiteB, 2, 0, lbc)
	n.SetRoute(SiteA, 2, 0, lab, lbc)
	return s, n, lab, lbc
}

func TestRouteCrossesEveryHop(t *testing.T) {
	// 1000 bytes: 8 µs at 1 Gbit/s, 4 µs at 2 Gbit/s; then 3 ms and 5 ms of propagation.
	s, n, lab, lbc := line(1, LinkConfig{Rate: 1e9, Delay: 3 * ms}, LinkConfig{Rate: 2e9, Delay: 5 * ms})
	n.AddHost(SiteA, &burst{dst: 2, size: 1000, count: 2}, HostConfig{}) // host 1
	snk := &sink{}
	n.AddHost(2, snk, HostConfig{}) // host 2, at C
	s.Run(time.Second)
	// Store and forward: the second datagram leaves ab 8 µs after the first and is serialized
	// at bc after it, so it arrives 8 µs later.
	want := []time.Duration{8*us + 3*ms + 4*us + 5*ms, 16*us + 3*ms + 4*us + 5*ms}
	if len(snk.got) != 2 || snk.got[0].at != want[0] || snk.got[1].at != want[1] {
		t.Fatalf("arrivals %+v, want at %v", snk.got, want)
	}
	if lab.Stats().Delivered != 2 || lbc.Stats().Delivered != 2 {
		t.Errorf("delivered ab %d, bc %d, want 2 and 2", lab.Stats().Delivered, lbc.Stats().Delivered)
	}
}

func TestSharedHopQueuesBothPairs(t *testing.T) {
	// A→C and B→C both cross bc, a 1 Gbit/s link with a 3000-byte queue: a burst of 5 from
	// each, arriving together, fills it; ab (10 Gbit/s) is not a bottleneck.
	s, n, lab, lbc := line(1, LinkConfig{Rate: 10e9, Delay: ms}, LinkConfig{Rate: 1e9, Delay: ms, QueueLimit: 3000, ECNThreshold: 1000})
	ect := func(int) bool { return true }
	n.AddHost(SiteA, &burst{dst: 3, size: 1000, count: 5, ect: ect}, HostConfig{Uplink: LinkConfig{Delay: ms}}) // host 1
	n.AddHost(SiteB, &burst{dst: 3, size: 1000, count: 5, ect: ect}, HostConfig{Uplink: LinkConfig{Delay: 2*ms + 800*time.Nanosecond}})
	snk := &sink{}
	n.AddHost(2, snk, HostConfig{}) // host 3
	s.Run(time.Second)
	st := lbc.Stats()
	if st.Enqueued+st.DroppedQueue != 10 || st.DroppedQueue == 0 || st.MaxQueueBytes != 3000 || st.MarkedCE == 0 {
		t.Errorf("shared hop stats %+v: want 10 offered, drops, a full 3000-byte queue and marks", st)
	}
	if lab.Stats().DroppedQueue != 0 || lab.Stats().Delivered != 5 {
		t.Errorf("ab stats %+v: want 5 delivered, no drops", lab.Stats())
	}
	from := map[HostID]int{}
	for _, r := range snk.got {
		from[r.src]++
	}
	if from[1] == 0 || from[2] == 0 || from[1]+from[2] != int(st.Delivered) {
		t.Errorf("received %v from hosts 1 and 2, bc delivered %d", from, st.Delivered)
	}
}

func TestDownHopDropsOnlyItsRoutes(t *testing.T) {
	s, n, lab, lbc := line(1, LinkConfig{Rate: 1e9}, LinkConfig{Rate: 1e9})
	n.AddHost(SiteA, &burst{dst: 3, size: 1000, count: 4}, HostConfig{}) // A→C crosses bc
	n.AddHost(SiteA, &burst{dst: 4, size: 1000, count: 4}, HostConfig{}) // A→B does not
	atC, atB := &sink{}, &sink{}
	n.AddHost(2, atC, HostConfig{})
	n.AddHost(SiteB, atB, HostConfig{})
	lbc.SetDown(true)
	s.Run(time.Second)
	if len(atC.got) != 0 || lbc.Stats().DroppedDown != 4 {
		t.Errorf("A→C: %d delivered, %d dropped at the down hop; want 0 and 4", len(atC.got), lbc.Stats().DroppedDown)
	}
	if len(atB.got) != 4 || lab.Stats().Delivered != 8 {
		t.Errorf("A→B: %d delivered (want 4); ab delivered %d (want 8)", len(atB.got), lab.Stats().Delivered)
	}
}

func TestMissingRouteIsUnroutable(t *testing.T) {
	s, n, _, _ := line(1, LinkConfig{}, LinkConfig{})
	n.AddHost(2, &burst{dst: 2, size: 100, count: 3}, HostConfig{}) // C→A: no route set
	snk := &sink{}
	n.AddHost(SiteA, snk, HostConfig{})
	s.Run(time.Second)
	if len(snk.got) != 0 || s.Stats().Unroutable != 3 || s.Stats().DatagramsAlive != 0 {
		t.Errorf("got %d, stats %+v; want 3 unroutable and every buffer back", len(snk.got), s.Stats())
	}
}

func TestPlaneSetDownCoversItsLinks(t *testing.T) {
	_, n, lab, lbc := line(1, LinkConfig{}, LinkConfig{})
	n.Plane(0).SetDown(true)
	if !lab.Down() || !lbc.Down() || len(n.Plane(0).Links()) != 2 || n.Plane(0).AtoB() != nil {
		t.Error("plane 0 of the topology: SetDown must cover both links; AtoB is for NewNetwork only")
	}
}

func TestTopologyMisuse(t *testing.T) {
	s := New(Config{})
	n := NewTopology(s, TopologyConfig{Sites: 3, Planes: 2})
	other := NewTopology(New(Config{}), TopologyConfig{Sites: 2, Planes: 1}).AddLink(0, "x", LinkConfig{})
	l := n.AddLink(0, "l", LinkConfig{})
	for name, f := range map[string]func(){
		"one site":          func() { NewTopology(s, TopologyConfig{Sites: 1, Planes: 1}) },
		"no plane":          func() { NewTopology(s, TopologyConfig{Sites: 2}) },
		"to itself":         func() { n.SetRoute(SiteA, SiteA, 0, l) },
		"unknown site":      func() { n.SetRoute(SiteA, 3, 0, l) },
		"unknown plane":     func() { n.SetRoute(SiteA, SiteB, 2, l) },
		"empty route":       func() { n.SetRoute(SiteA, SiteB, 0) },
		"foreign link":      func() { n.SetRoute(SiteA, SiteB, 0, other) },
		"host at no site":   func() { n.AddHost(3, &sink{}, HostConfig{}) },
		"invalid link conf": func() { n.AddLink(1, "bad", LinkConfig{Rate: -1}) },
	} {
		func() {
			defer func() {
				if r := recover(); r == nil || !strings.HasPrefix(r.(string), "sim: ") {
					t.Errorf("%s: recovered %v, want a sim: panic", name, r)
				}
			}()
			f()
		}()
	}
	if got := Site(2).String(); got != "C" {
		t.Errorf("Site(2) = %q, want C", got)
	}
}
