package pathmgr

import (
	"math/rand/v2"
	"testing"
	"time"
)

func newTestSet(n int) *Set {
	cfg := DefaultConfig()
	cfg.InitialRTT = time.Millisecond
	cfg.MinPTO = time.Millisecond
	cfg.ProbeInterval = 10 * time.Millisecond
	cfg.MaxProbeInterval = 40 * time.Millisecond
	return NewSet(n, cfg, rand.New(rand.NewPCG(1, 2)))
}

func TestDistinctEntropy(t *testing.T) {
	s := newTestSet(64)
	seen := map[uint16]bool{}
	for _, p := range s.Paths {
		if seen[p.Entropy] {
			t.Fatalf("entropy %d used twice", p.Entropy)
		}
		seen[p.Entropy] = true
		if p.Entropy < 49152 {
			t.Fatalf("entropy %d outside the ephemeral range", p.Entropy)
		}
	}
}

func TestTimeoutsSuspectThenDownThenProbedBack(t *testing.T) {
	s := newTestSet(4)
	old := s.Paths[2].Entropy
	if s.OnTimeout(0, 2) || s.Paths[2].State != Suspect {
		t.Fatalf("first timeout: state %v", s.Paths[2].State)
	}
	s.OnProgress(1, 2)
	if s.Paths[2].State != Up {
		t.Fatalf("an ack after a timeout should bring the path back up, got %v", s.Paths[2].State)
	}
	for i := 0; i < 2; i++ {
		s.OnTimeout(time.Duration(2+i), 2)
	}
	if !s.OnTimeout(4, 2) || s.Paths[2].State != Down {
		t.Fatalf("three consecutive timeouts should mark the path down, got %v", s.Paths[2].State)
	}
	if s.Paths[2].Entropy == old {
		t.Fatal("a down path must get new entropy")
	}
	if s.Paths[2].State.Usable() || s.UsableCount() != 3 {
		t.Fatal("a down path must carry no data")
	}
	// A probe is due at once; its answer moves the path to probing, and a
	// second consecutive answer (UpAfter = 2) brings it up.
	if !s.ProbeDue(4, 2) {
		t.Fatal("probe not due on a down path")
	}
	if s.ProbeDue(5, 2) {
		t.Fatal("a second probe before the interval")
	}
	s.OnProbeAck(6, 2, time.Millisecond)
	if s.Paths[2].State != Probing {
		t.Fatalf("after one answer: %v, want probing", s.Paths[2].State)
	}
	if !s.ProbeDue(6, 2) {
		t.Fatal("probing path should probe again at once")
	}
	s.OnProbeAck(7, 2, time.Millisecond)
	if s.Paths[2].State != Up {
		t.Fatalf("after two answers: %v, want up", s.Paths[2].State)
	}
	tr := s.DrainTransitions(nil)
	want := []State{Suspect, Up, Suspect, Down, Probing, Up}
	if len(tr) != len(want) {
		t.Fatalf("transitions %+v", tr)
	}
	for i, w := range want {
		if tr[i].To != w || tr[i].Path != 2 || tr[i].Reason == "" {
			t.Fatalf("transition %d = %+v, want to %v with a reason", i, tr[i], w)
		}
	}
}

func TestUnansweredProbeRerollsAndBacksOff(t *testing.T) {
	s := newTestSet(2)
	s.MarkDown(0, 0, "peer report")
	e1 := s.Paths[0].Entropy
	if !s.ProbeDue(0, 0) {
		t.Fatal("probe not due")
	}
	next := s.Paths[0].NextProbe
	if next != 10*time.Millisecond {
		t.Fatalf("next probe at %v, want the probe interval", next)
	}
	if !s.ProbeDue(next, 0) {
		t.Fatal("probe not due after the interval")
	}
	if s.Paths[0].Entropy == e1 {
		t.Fatal("an unanswered probe must re-roll the entropy")
	}
	if got := s.Paths[0].NextProbe - next; got != 20*time.Millisecond {
		t.Fatalf("back-off %v, want doubled interval 20ms", got)
	}
	// Capped at MaxProbeInterval.
	for i := 0; i < 5; i++ {
		s.ProbeDue(s.Paths[0].NextProbe, 0)
	}
	if got := s.Paths[0].probeInterval; got != 40*time.Millisecond {
		t.Fatalf("interval %v, want capped at 40ms", got)
	}
}

func TestPickRoundRobinRespectsWindowsAndState(t *testing.T) {
	s := newTestSet(4)
	win := func(int) int { return 1000 }
	var got []int
	for i := 0; i < 8; i++ {
		p := s.Pick(100, win)
		got = append(got, p)
	}
	for i, p := range got {
		if p != i%4 {
			t.Fatalf("picks %v, want round robin", got)
		}
	}
	s.Paths[1].InflightBytes = 950 // no room for 100 more
	s.MarkDown(0, 3, "test")
	for i := 0; i < 6; i++ {
		if p := s.Pick(100, win); p == 1 || p == 3 {
			t.Fatalf("picked path %d (full or down)", p)
		}
	}
	s.OnTimeout(0, 0) // suspect: used only when no up path has room
	s.Paths[2].InflightBytes = 1000
	if p := s.Pick(100, win); p != 0 {
		t.Fatalf("picked %d, want the suspect path 0 as last resort", p)
	}
	s.Paths[0].InflightBytes = 1000
	if p := s.Pick(100, win); p != -1 {
		t.Fatalf("picked %d with no room anywhere", p)
	}
}

func TestRTTEstimator(t *testing.T) {
	var p Path
	cfg := DefaultConfig()
	if got := p.PTO(&cfg); got != cfg.InitialRTT+2*cfg.InitialRTT+cfg.MaxAckDelay {
		t.Fatalf("PTO before samples = %v", got)
	}
	p.OnRTTSample(10 * time.Millisecond)
	if p.SRTT != 10*time.Millisecond || p.RTTVar != 5*time.Millisecond || p.MinRTT != 10*time.Millisecond {
		t.Fatalf("first sample: %+v", p)
	}
	p.OnRTTSample(2 * time.Millisecond)
	if p.MinRTT != 2*time.Millisecond || p.SRTT != 9*time.Millisecond {
		t.Fatalf("second sample: srtt %v min %v", p.SRTT, p.MinRTT)
	}
	if got := p.PTO(&cfg); got != p.SRTT+4*p.RTTVar+cfg.MaxAckDelay {
		t.Fatalf("PTO = %v", got)
	}
}

// A suspect path that carries nothing (the sprayer prefers up paths) is
// probed after a PTO: answers keep it suspect (alive); 2×DownAfter
// unanswered in a row take it down. Without the probe it stayed suspect for
// ever, so a dead plane's paths were never reported down.
func TestIdleSuspectPathIsProbed(t *testing.T) {
	s := newTestSet(4)
	pto := s.Paths[1].PTO(&s.cfg)
	if s.OnTimeout(0, 1) || s.Paths[1].State != Suspect {
		t.Fatalf("first timeout: state %v", s.Paths[1].State)
	}
	if next := s.NextProbe(); next != pto {
		t.Fatalf("NextProbe = %v, want one PTO (%v) after the timeout", next, pto)
	}
	if s.ProbeDue(pto-1, 1) {
		t.Fatal("probe of a suspect path before its PTO")
	}
	s.Paths[1].InflightBytes = 100
	if s.ProbeDue(pto, 1) {
		t.Fatal("probe of a suspect path that still has data in flight (its own timeout resolves it)")
	}
	s.Paths[1].InflightBytes = 0
	if !s.ProbeDue(pto, 1) {
		t.Fatal("no probe on an idle suspect path")
	}
	s.OnProbeAck(pto+1, 1, time.Millisecond)
	if s.Paths[1].State != Suspect || s.Paths[1].ProbeOutstanding {
		t.Fatalf("answered probe: %v (outstanding %v), want suspect with nothing outstanding: alive, and up again at its next acked data", s.Paths[1].State, s.Paths[1].ProbeOutstanding)
	}
	// Answers keep it from going down however long it stays idle.
	for i := 0; i < 4*s.cfg.DownAfter; i++ {
		now := s.Paths[1].NextProbe
		if !s.ProbeDue(now, 1) {
			t.Fatalf("probe %d of an idle suspect path not due at its deadline", i)
		}
		s.OnProbeAck(now, 1, time.Millisecond)
	}
	if s.Paths[1].State != Suspect {
		t.Fatalf("a suspect path whose probes are answered went %v", s.Paths[1].State)
	}
	s.OnProgress(s.Paths[1].NextProbe, 1)
	if s.Paths[1].State != Up {
		t.Fatalf("acked data on a suspect path: %v, want up", s.Paths[1].State)
	}

	// Unanswered: 2×DownAfter (6) probes unanswered in a row take the path
	// down, with a new entropy.
	old := s.Paths[3].Entropy
	now := time.Duration(0)
	s.OnTimeout(now, 3)
	probes := 0
	for s.Paths[3].State == Suspect && probes < 20 {
		now = s.Paths[3].NextProbe
		if s.ProbeDue(now, 3) {
			probes++
		}
	}
	if s.Paths[3].State != Down || s.Paths[3].Entropy == old {
		t.Fatalf("after %d unanswered probes: %v (entropy %d, was %d), want down with new entropy", probes, s.Paths[3].State, s.Paths[3].Entropy, old)
	}
	if probes != 2*s.cfg.DownAfter {
		t.Errorf("%d probes sent before down, want 2×DownAfter = %d", probes, 2*s.cfg.DownAfter)
	}
}

// An idle suspect path that keeps answering is probed less and less often:
// after suspectBackoffAfter answers at the PTO the wait doubles with every
// answer, up to MaxProbeInterval, and falls back to the PTO after a miss. Probed at the PTO for as long as
// it stayed idle, a thousand idle hosts' paths cost a gateway most of a
// core.
func TestIdleSuspectProbesBackOffWhileAnswered(t *testing.T) {
	cfg := newTestSet(0).cfg
	cfg.ProbeInterval = time.Millisecond // below the PTO, as in the default configuration
	s := NewSet(2, cfg, rand.New(rand.NewPCG(1, 2)))
	p := &s.Paths[0]
	s.OnTimeout(0, 0)
	now := p.NextProbe
	var waits []time.Duration
	for range suspectBackoffAfter + 8 {
		if !s.ProbeDue(now, 0) {
			t.Fatalf("probe not due at %v", now)
		}
		s.OnProbeAck(now, 0, time.Millisecond)
		waits = append(waits, p.NextProbe-now)
		now = p.NextProbe
	}
	pto, ceiling := p.PTO(&s.cfg), s.cfg.MaxProbeInterval
	want := pto
	for i, w := range waits {
		if w != want {
			t.Fatalf("waits %v: wait %d is %v, want %v (the PTO %v for %d answers, then doubling up to %v)", waits, i, w, want, pto, suspectBackoffAfter, ceiling)
		}
		if i+1 >= suspectBackoffAfter {
			want = min(2*want, ceiling)
		}
	}
	if waits[len(waits)-1] != ceiling {
		t.Fatalf("waits %v never reach MaxProbeInterval %v", waits, ceiling)
	}
	if p.State != Suspect {
		t.Fatalf("answered probes left the path %v, want suspect", p.State)
	}

	// A miss: the next probe comes one PTO (or probe interval) later again.
	if !s.ProbeDue(now, 0) {
		t.Fatal("probe not due")
	}
	now = p.NextProbe
	if !s.ProbeDue(now, 0) { // the last one went unanswered
		t.Fatal("probe after a miss not due")
	}
	if w := p.NextProbe - now; w != pto {
		t.Fatalf("wait after a miss %v, want the PTO %v", w, pto)
	}
}
