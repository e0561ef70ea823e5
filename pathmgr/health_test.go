package pathmgr

import (
	"fmt"
	"testing"
	"time"
)

func byIndex4(path int, _ uint16) int { return path % 4 }

func TestPlaneSummaryOneBadPathIsNotADeadPlane(t *testing.T) {
	s := newTestSet(8) // planes 0..3, paths {p, p+4} on plane p
	s.Paths[1].OnRTTSample(10 * time.Millisecond)
	s.Paths[5].OnRTTSample(30 * time.Millisecond)
	s.Paths[1].SentPackets, s.Paths[5].SentPackets = 100, 50
	s.Paths[1].LostPackets, s.Paths[5].MarkedPackets = 3, 7
	ps := s.PlaneSummary(1, byIndex4)
	if ps.Paths != 2 || ps.Usable != 2 || ps.State() != Up {
		t.Fatalf("healthy plane: %+v state %v", ps, ps.State())
	}
	if ps.SRTT != 20*time.Millisecond || ps.Sent != 150 || ps.Lost != 3 || ps.Marked != 7 {
		t.Fatalf("aggregates: %+v", ps)
	}
	s.MarkDown(0, 5, "test")
	ps = s.PlaneSummary(1, byIndex4)
	if st := ps.State(); st == Down {
		t.Fatalf("one path of two down made the plane %v", st)
	}
	if ps.SRTT != 10*time.Millisecond {
		t.Fatalf("SRTT of the usable paths only: %v", ps.SRTT)
	}
	s.MarkDown(0, 1, "test")
	if st := s.PlaneSummary(1, byIndex4).State(); st != Down {
		t.Fatalf("every path down: plane %v, want down", st)
	}
	// One path answers a probe: the plane is coming back.
	s.ProbeDue(0, 1)
	s.OnProbeAck(1, 1, time.Millisecond)
	if st := s.PlaneSummary(1, byIndex4).State(); st != Probing {
		t.Fatalf("a path probing: plane %v, want probing", st)
	}
	if st := s.PlaneSummary(7, byIndex4).State(); st != Up {
		t.Fatalf("a plane without paths: %v, want up", st)
	}
	s.OnTimeout(0, 2)
	if st := s.PlaneSummary(2, byIndex4).State(); st != Suspect {
		t.Fatalf("a timed-out path: plane %v, want suspect", st)
	}
}

func TestReportsActOncePerDownEpisode(t *testing.T) {
	rs := NewReports(ReportsConfig{TTL: 10 * time.Second, Max: 16})
	down := PeerReport{From: "a1", Peer: "c1", Plane: 2, State: Down}
	if !rs.Add(0, down) {
		t.Fatal("a first down report must act")
	}
	if !rs.Down(time.Second, "c1", 2) || rs.Down(time.Second, "c1", 1) || rs.Down(time.Second, "c2", 2) {
		t.Fatal("Down must match peer and plane")
	}
	// Repeats (the reporter refreshes its report) only keep it alive: if
	// our own probes brought the paths back, they stay up.
	for i := 1; i <= 5; i++ {
		if rs.Add(time.Duration(i)*time.Second, down) {
			t.Fatalf("repeat %d acted again", i)
		}
	}
	// Another reporter's independent verdict acts on its own.
	if !rs.Add(6*time.Second, PeerReport{From: "a2", Peer: "c1", Plane: 2, State: Down}) {
		t.Fatal("a second reporter's down report must act")
	}
	// Suspect is no verdict to act on, and it ends a1's episode.
	if rs.Add(7*time.Second, PeerReport{From: "a1", Peer: "c1", Plane: 2, State: Suspect}) {
		t.Fatal("a suspect report acted")
	}
	if !rs.Add(8*time.Second, down) {
		t.Fatal("down after suspect is a new episode and must act")
	}
}

func TestReportsExpire(t *testing.T) {
	rs := NewReports(ReportsConfig{TTL: 10 * time.Second, Max: 16})
	down := PeerReport{From: "a1", Peer: "c1", Plane: 0, State: Down}
	rs.Add(0, down)
	if !rs.Down(10*time.Second-1, "c1", 0) {
		t.Fatal("report expired early")
	}
	if rs.Down(10*time.Second, "c1", 0) {
		t.Fatal("report outlived its TTL")
	}
	// An expired down report no longer holds the episode: a new one acts.
	if !rs.Add(10*time.Second, down) {
		t.Fatal("down after expiry must act")
	}
	rs.Add(11*time.Second, PeerReport{From: "a2", Peer: "c1", Plane: 0, State: Up})
	if n := rs.Expire(20 * time.Second); n != 1 || rs.Len() != 1 {
		t.Fatalf("expired %d, left %d; want 1 and 1", n, rs.Len())
	}
	if n := rs.Expire(21 * time.Second); n != 1 || rs.Len() != 0 {
		t.Fatalf("expired %d, left %d; want 1 and 0", n, rs.Len())
	}
}

func TestReportsBounded(t *testing.T) {
	rs := NewReports(ReportsConfig{TTL: time.Minute, Max: 8})
	for i := range 100 {
		rs.Add(time.Duration(i)*time.Millisecond, PeerReport{From: "a", Peer: string(rune('a' + i%26)), Plane: i, State: Down})
		if rs.Len() > 8 {
			t.Fatalf("%d reports held, bound is 8", rs.Len())
		}
	}
	// The freshest survive eviction.
	if !rs.Down(time.Second, string(rune('a'+99%26)), 99) {
		t.Fatal("the newest report was evicted")
	}
	if rs.Down(time.Second, "a", 0) {
		t.Fatal("the oldest report survived")
	}
}

func TestReportsHoldDown(t *testing.T) {
	rs := NewReports(ReportsConfig{TTL: time.Minute, Max: 16, HoldDown: 10 * time.Second})
	if !rs.Add(0, PeerReport{From: "a1", Peer: "c1", Plane: 1, State: Down}) {
		t.Fatal("the first report must act")
	}
	// A second reporter of the same failure, within the hold-down: no
	// second action (the paths are already down, or were probed back).
	if rs.Add(time.Second, PeerReport{From: "a2", Peer: "c1", Plane: 1, State: Down}) {
		t.Fatal("a second reporter acted within the hold-down")
	}
	// A flapping plane: up, down again within the hold-down.
	rs.Add(2*time.Second, PeerReport{From: "a1", Peer: "c1", Plane: 1, State: Up})
	if rs.Add(3*time.Second, PeerReport{From: "a1", Peer: "c1", Plane: 1, State: Down}) {
		t.Fatal("a flap acted within the hold-down")
	}
	// The held-back episodes (a1's flap and a2's report) are not lost:
	// once the hold-down has passed, one of them acts, once.
	if due := rs.Due(nil, 9*time.Second); len(due) != 0 {
		t.Fatalf("due within the hold-down: %+v", due)
	}
	if due := rs.Due(nil, 10*time.Second); len(due) != 1 || due[0].Peer != "c1" || due[0].Plane != 1 {
		t.Fatalf("due after the hold-down: %+v, want one action on c1 plane 1", due)
	}
	if due := rs.Due(nil, 10*time.Second); len(due) != 0 {
		t.Fatalf("due again: %+v", due)
	}
	// Other planes and peers are not held.
	if !rs.Add(3*time.Second, PeerReport{From: "a1", Peer: "c1", Plane: 2, State: Down}) {
		t.Fatal("another plane was held")
	}
	// After the hold-down, a new episode acts again.
	rs.Add(11*time.Second, PeerReport{From: "a1", Peer: "c1", Plane: 1, State: Up})
	rs.Add(11*time.Second, PeerReport{From: "a2", Peer: "c1", Plane: 1, State: Up})
	if !rs.Add(20*time.Second, PeerReport{From: "a1", Peer: "c1", Plane: 1, State: Down}) {
		t.Fatal("a new episode after the hold-down did not act")
	}
}

// Reports follows the bound it is given (2·G·P from the gossip view) above
// its Max floor, capped at MaxReportsCap: with 128 gateways × 16 planes
// and a fixed 4,096 the reports of a fleet that grew beyond it were
// evicted while they held (regression: the bound was fixed at Max).
func TestReportsBoundFollowsFormula(t *testing.T) {
	g, p := 128, 16
	bound := func() int { return 2 * g * p * 2 } // 8,192: twice the fixed 4,096
	rs := NewReports(ReportsConfig{TTL: time.Minute, Max: 4096, Bound: bound})
	n := bound()
	for i := range n {
		rs.Add(0, PeerReport{From: fmt.Sprintf("r%d", i%7), Peer: fmt.Sprintf("g%d", i), Plane: i % p, State: Down})
	}
	if rs.Len() != n || rs.Evicted() != 0 {
		t.Fatalf("%d reports held, %d evicted; want %d and 0", rs.Len(), rs.Evicted(), n)
	}
	rs.Add(0, PeerReport{From: "x", Peer: "y", Plane: 0, State: Down})
	if rs.Len() != n || rs.Evicted() != 1 {
		t.Errorf("beyond the bound: %d held, %d evicted; want %d and 1", rs.Len(), rs.Evicted(), n)
	}
	g = 1 << 20 // the hard cap
	if rs.Bound() != MaxReportsCap {
		t.Errorf("bound %d, want the cap %d", rs.Bound(), MaxReportsCap)
	}
	g = 1 // never below the floor
	if rs.Bound() != 4096 {
		t.Errorf("bound %d, want the floor 4096", rs.Bound())
	}
}
