package metaroce

import (
	"errors"
	"slices"
	"testing"
	"time"
)

// pmtuPlane is a deterministic plane for a PMTUSearch: probes up to limit
// bytes are answered one rtt later unless drop says otherwise; larger ones
// vanish (counted in oversize).
type pmtuPlane struct {
	limit    int
	rtt      time.Duration
	drop     func(size, nth int) bool // nth: how many probes of this size were sent before
	sent     map[int]int
	oversize int
	acks     []pmtuPending
	probes   int
}

type pmtuPending struct {
	at   time.Duration
	size int
}

// run drives s over p from now until until (or until settled, if
// stopSettled) and returns the time.
func (p *pmtuPlane) run(t *testing.T, s *PMTUSearch, now, until time.Duration, stopSettled bool) time.Duration {
	t.Helper()
	if p.sent == nil {
		p.sent = map[int]int{}
	}
	for range 100000 {
		for _, size := range s.Next(now, 2*p.rtt, nil) {
			p.probes++
			nth := p.sent[size]
			p.sent[size]++
			switch {
			case size > p.limit:
				p.oversize++
			case p.drop != nil && p.drop(size, nth):
			default:
				p.acks = append(p.acks, pmtuPending{now + p.rtt, size})
			}
		}
		if stopSettled && s.State() == PMTUComplete {
			return now
		}
		next := s.Deadline()
		for _, a := range p.acks {
			if next < 0 || a.at < next {
				next = a.at
			}
		}
		if next < 0 || next > until {
			return until
		}
		if next > now {
			now = next
		}
		keep := p.acks[:0]
		for _, a := range p.acks {
			if a.at <= now {
				s.OnAck(now, a.size)
			} else {
				keep = append(keep, a)
			}
		}
		p.acks = keep
	}
	t.Fatal("pmtu search did not stop")
	return now
}

func testPMTUConfig() PMTUConfig {
	return PMTUConfig{Groups: 1, Base: 1200, Max: 9000, ConfirmInterval: time.Second, RaiseInterval: 10 * time.Second}
}

// TestPMTUSettles: the search finds the largest size within Step of what
// the plane carries, in a few round trips, for limits across the range.
func TestPMTUSettles(t *testing.T) {
	const rtt = 10 * time.Millisecond
	for _, limit := range []int{1200, 1201, 1252, 1472, 4000, 8972, 8999, 9000, 20000} {
		s := NewPMTUSearch(testPMTUConfig(), 0)
		p := &pmtuPlane{limit: limit, rtt: rtt}
		at := p.run(t, s, 0, time.Minute, true)
		want := min(limit, 9000)
		if got := s.Size(); got > want || got < want-16 && got != 9000 {
			t.Errorf("limit %d: settled on %d, want within 16 bytes below %d", limit, got, want)
		}
		// Each round waits 2 RTTs for its lost probes: at most 5 rounds.
		if at > 10*rtt {
			t.Errorf("limit %d: settled after %v (%d RTTs)", limit, at, at/rtt)
		}
		t.Logf("limit %5d: size %5d after %v, %d probes, %d too big", limit, s.Size(), at, p.probes, p.oversize)
		// Settled: nothing more is sent until the confirmation.
		before := p.probes
		p.run(t, s, at, at+900*time.Millisecond, false)
		if p.probes != before {
			t.Errorf("limit %d: %d probes after settling", limit, p.probes-before)
		}
	}
}

// TestPMTURandomLoss: one lost probe of a size that fits is not a limit
// (MaxProbes failures are needed).
func TestPMTURandomLoss(t *testing.T) {
	s := NewPMTUSearch(testPMTUConfig(), 0)
	p := &pmtuPlane{limit: 4000, rtt: 10 * time.Millisecond, drop: func(size, nth int) bool { return nth == 0 }}
	p.run(t, s, 0, time.Minute, true)
	if s.Size() < 4000-16 {
		t.Fatalf("settled on %d with first probes of each size lost, want about 4000", s.Size())
	}
	// A late answer to a size the round gave up raises at once.
	s2 := NewPMTUSearch(testPMTUConfig(), 0)
	sizes := s2.Next(0, time.Millisecond, nil)
	s2.Next(2*time.Millisecond, time.Millisecond, nil) // the round ended, every probe lost
	s2.OnAck(3*time.Millisecond, sizes[0])
	if s2.Size() != sizes[0] {
		t.Fatalf("late ack of %d: size %d", sizes[0], s2.Size())
	}
}

// TestPMTUBlackHole: the plane shrinks after the search settled; the
// confirmation probes fail, the search goes back to Base and settles below
// the new limit; sizes that fit are never judged by the old limit.
func TestPMTUBlackHole(t *testing.T) {
	s := NewPMTUSearch(testPMTUConfig(), 0)
	p := &pmtuPlane{limit: 9000, rtt: 10 * time.Millisecond}
	at := p.run(t, s, 0, time.Minute, true)
	if s.Size() != 9000 {
		t.Fatalf("size %d, want 9000", s.Size())
	}
	p.limit = 1472
	at = p.run(t, s, at, at+3*time.Second, false)
	if s.Stats.BlackHoles != 1 || s.Size() > 1472 || s.Size() < 1472-16 || s.State() != PMTUComplete {
		t.Fatalf("after the plane shrank: size %d, state %v, black holes %d", s.Size(), s.State(), s.Stats.BlackHoles)
	}
	_ = at
}

// TestPMTURaise: the plane grows; the raise timer finds it.
func TestPMTURaise(t *testing.T) {
	s := NewPMTUSearch(testPMTUConfig(), 0)
	p := &pmtuPlane{limit: 1252, rtt: 10 * time.Millisecond}
	at := p.run(t, s, 0, time.Minute, true)
	p.limit = 8972
	p.run(t, s, at, at+9*time.Second, false)
	if s.Size() > 1252 {
		t.Fatalf("raised to %d before the raise timer", s.Size())
	}
	p.run(t, s, at+9*time.Second, at+11*time.Second, false)
	if s.Size() < 8972-16 || s.Stats.Raises != 1 {
		t.Fatalf("after the raise timer: size %d, raises %d", s.Size(), s.Stats.Raises)
	}
}

// TestPMTUTooBig: EMSGSIZE bounds the search at once; below the validated
// size it is a black hole.
func TestPMTUTooBig(t *testing.T) {
	s := NewPMTUSearch(testPMTUConfig(), 0)
	s.OnTooBig(0, 1500)
	p := &pmtuPlane{limit: 9000, rtt: 10 * time.Millisecond}
	at := p.run(t, s, 0, time.Minute, true)
	if s.Size() >= 1500 || s.Size() < 1500-16 {
		t.Fatalf("size %d, want just under 1500", s.Size())
	}
	s.OnTooBig(at, 1400)
	if s.Size() != 1200 || s.State() != PMTUSearching {
		t.Fatalf("EMSGSIZE below the validated size: size %d, state %v", s.Size(), s.State())
	}
	if lo, hi := s.Bounds(); lo != 1200 || hi != 1400 {
		t.Fatalf("bounds %d, %d", lo, hi)
	}
}

// TestPMTUDataTimeouts: BlackHole probe timeouts in a row of data larger
// than Base is a black hole; an acknowledgement between them is not.
func TestPMTUDataTimeouts(t *testing.T) {
	s := NewPMTUSearch(testPMTUConfig(), 0)
	(&pmtuPlane{limit: 9000, rtt: time.Millisecond}).run(t, s, 0, time.Minute, true)
	s.OnDataTimeout(time.Second, 4000)
	s.OnDataTimeout(time.Second, 4000)
	s.OnDataAcked(time.Second, 4000)
	s.OnDataTimeout(time.Second, 4000)
	s.OnDataTimeout(time.Second, 4000)
	s.OnDataTimeout(time.Second, 1200) // Base-sized data says nothing of size
	if s.Size() != 9000 {
		t.Fatalf("size %d after interrupted timeouts", s.Size())
	}
	s.OnDataTimeout(time.Second, 4000)
	if s.Deadline() != 0 {
		t.Fatalf("3 timeouts in a row: no confirmation due (deadline %v)", s.Deadline())
	}
	// The plane failed outright: the control is lost too, no black hole.
	dead := &pmtuPlane{limit: 0, rtt: time.Millisecond}
	at := dead.run(t, s, time.Second, 1500*time.Millisecond, false)
	if s.Size() != 9000 || s.Stats.BlackHoles != 0 {
		t.Fatalf("dead plane: size %d, black holes %d", s.Size(), s.Stats.BlackHoles)
	}
	// The plane shrank to 3000: confirmations fail, controls cross.
	for range 3 {
		s.OnDataTimeout(at, 4000)
	}
	(&pmtuPlane{limit: 3000, rtt: time.Millisecond}).run(t, s, at, at+200*time.Millisecond, false)
	if s.Size() > 3000 || s.Size() < 3000-16 || s.Stats.BlackHoles != 1 {
		t.Fatalf("size %d, black holes %d after the plane shrank", s.Size(), s.Stats.BlackHoles)
	}
}

// TestPMTUNothingToSearch: Max = Base settles at once and never probes.
func TestPMTUNothingToSearch(t *testing.T) {
	s := NewPMTUSearch(PMTUConfig{Groups: 1}, 0)
	if s.State() != PMTUComplete || s.Size() != DefaultPMTUBase || s.Deadline() != -1 {
		t.Fatalf("state %v size %d deadline %v", s.State(), s.Size(), s.Deadline())
	}
	if got := s.Next(time.Hour, time.Second, nil); len(got) != 0 {
		t.Fatalf("probes %v", got)
	}
}

// TestPMTURoundSizes: a round probes distinct sizes inside the interval
// in doubt, aligned to Step, and at most ProbesPerRound of them.
func TestPMTURoundSizes(t *testing.T) {
	s := NewPMTUSearch(testPMTUConfig(), 0)
	got := s.Next(0, time.Second, nil)
	if len(got) != 9 || got[0] != 1200 || !slices.Contains(got, 9000) {
		t.Fatalf("first round %v: want the control (1200), 9000 and 7 more", got)
	}
	seen := map[int]bool{}
	for _, v := range got[1:] {
		if v <= 1200 || v > 9000 || seen[v] || v != 9000 && v%16 != 0 {
			t.Fatalf("first round %v", got)
		}
		seen[v] = true
	}
	if again := s.Next(500*time.Millisecond, time.Second, nil); len(again) != 0 {
		t.Fatalf("a second round while the first is in flight: %v", again)
	}
}

func TestPMTUConfigValidate(t *testing.T) {
	for _, c := range []PMTUConfig{{Groups: -1}, {Base: 10}, {Max: 70000}, {Overhead: -1}, {ProbesPerRound: 65}} {
		if c.Validate() == nil {
			t.Errorf("%+v accepted", c)
		}
	}
	if err := testPMTUConfig().Validate(); err != nil {
		t.Fatal(err)
	}
}

// TestPMTUWire: the probe is padded to the size probed; the ack carries
// the length that arrived; a version-1 PROBE decoder refuses a padded
// PROBE, which is why the probe is a type of its own.
func TestPMTUWire(t *testing.T) {
	buf := make([]byte, 0, 2000)
	p, err := AppendPMTUProbe(buf, 7, 3, PMTUFlagMeasure, 99, 1500)
	if err != nil || len(p) != 1500 {
		t.Fatalf("probe: %d bytes, %v", len(p), err)
	}
	conn, path, flags, ts, err := DecodePMTUProbe(p)
	if err != nil || conn != 7 || path != 3 || ts != 99 || flags != PMTUFlagMeasure {
		t.Fatalf("decode probe: %d %d %d %d %v", conn, path, flags, ts, err)
	}
	if _, err := AppendPMTUProbe(buf[:0:100], 7, 3, 0, 99, 1500); !errors.Is(err, ErrShortBuffer) {
		t.Fatalf("short buffer: %v", err)
	}
	a := AppendPMTUAck(nil, 7, 3, PMTUFlagCE, 99, len(p))
	conn, path, flags, ts, n, err := DecodePMTUAck(a)
	if err != nil || conn != 7 || path != 3 || ts != 99 || n != 1500 || flags != PMTUFlagCE || len(a) != PMTUAckLen {
		t.Fatalf("decode ack: %d %d %d %d %d %v", conn, path, flags, ts, n, err)
	}
	pr, _ := AppendProbe(make([]byte, 0, ProbeLen), TypeProbe, 7, 3, 99)
	padded := append(pr, make([]byte, 100)...)
	if _, _, _, err := DecodeProbe(padded, TypeProbe); err == nil {
		t.Fatal("a version-1 decoder accepted a padded PROBE")
	}
}

// A small packet acknowledged (a control message, a PING) ends no run of
// timeouts of full-size data and confirms no size: the path is alive, but
// the size is not proven. Counted as proof, the WAN PINGs hid a black hole
// after a plane's MTU shrank (gateway TestPMTUThroughEmulator).
func TestPMTUSmallAcksProveNoSize(t *testing.T) {
	s := NewPMTUSearch(testPMTUConfig(), 0)
	(&pmtuPlane{limit: 9000, rtt: time.Millisecond}).run(t, s, 0, time.Minute, true)
	for range 2 {
		s.OnDataTimeout(time.Second, 4000)
		s.OnDataAcked(time.Second, 100) // a PING, acked
	}
	s.OnDataTimeout(time.Second, 4000)
	if s.Deadline() != 0 {
		t.Fatalf("3 full-size timeouts between small acks: no confirmation due (deadline %v)", s.Deadline())
	}
}

// congestedConfirmation settles s at 9000, then runs BlackHole data
// timeouts and the confirmation they start through a plane whose queue has
// room for the 1200-byte control and not for the 9000-byte confirmation
// (drop-tail: what a black hole loses, a full queue loses too), for half a
// second. It returns the time and the plane.
func congestedConfirmation(t *testing.T, s *PMTUSearch) (time.Duration, *pmtuPlane) {
	t.Helper()
	p := &pmtuPlane{limit: 9000, rtt: 10 * time.Millisecond}
	at := p.run(t, s, 0, time.Minute, true)
	if s.Size() != 9000 {
		t.Fatalf("size %d, want 9000", s.Size())
	}
	for range s.Config().BlackHole {
		s.OnDataTimeout(at, 9000)
	}
	p.drop = func(size, _ int) bool { return size > 1200 }
	at = p.run(t, s, at, at+500*time.Millisecond, false)
	p.drop = nil
	if s.Stats.BlackHoles != 1 || s.Size() >= 9000 {
		t.Fatalf("no black-hole verdict from the congested confirmation: size %d, black holes %d", s.Size(), s.Stats.BlackHoles)
	}
	return at, p
}

// TestPMTUCongestedConfirmation: a black-hole verdict made while a full
// queue dropped the large probes is undone soon after the queue drains: the
// search settled below Max retries Max after RetryInterval (1 s), not at
// the raise interval (10 s here, 10 min by default). The old search took
// the lost size as confirmed too big and waited for the raise: a
// connection's group that carries DATA only at that size sent nothing
// meanwhile (the chaos run's wedge, TestWedgeAfterAllPathsTimeOut).
func TestPMTUCongestedConfirmation(t *testing.T) {
	s := NewPMTUSearch(testPMTUConfig(), 0)
	at, p := congestedConfirmation(t, s)
	low := s.Size()
	end := p.run(t, s, at, at+1500*time.Millisecond, false)
	if s.Size() != 9000 || s.State() != PMTUComplete || s.Stats.Raises != 0 {
		t.Fatalf("%v after the queue drained: size %d (%d after the verdict), state %v, retries %d, raises %d; want 9000 back by a retry",
			end-at, s.Size(), low, s.State(), s.Stats.Retries, s.Stats.Raises)
	}
}

// TestPMTUDataAckedRaises: acknowledged data proves its size as an answered
// probe does: after a (false) black-hole verdict, full-size DATA that was
// in flight and is acknowledged restores the size at once.
func TestPMTUDataAckedRaises(t *testing.T) {
	s := NewPMTUSearch(testPMTUConfig(), 0)
	at, _ := congestedConfirmation(t, s)
	s.OnDataAcked(at, 4000)
	if s.Size() != 4000 {
		t.Fatalf("4000-byte data acknowledged: size %d", s.Size())
	}
	s.OnDataAcked(at, 9000)
	if s.Size() != 9000 || s.State() != PMTUComplete {
		t.Fatalf("9000-byte data acknowledged: size %d, state %v", s.Size(), s.State())
	}
	s.OnDataAcked(at, 20000) // above Max: not a size this search knows
	if lo, hi := s.Bounds(); lo != 9000 || hi != 9001 {
		t.Fatalf("bounds %d, %d", lo, hi)
	}
}

// TestPMTURetryBacksOff: on a plane that really is smaller than Max, the
// retries of Max come RetryInterval after settling, then after twice the
// previous wait (1, 3, 7 s), one probe of Max each (and a control), and
// never raise the size; a
// plane that grew to Max is found by the next retry.
func TestPMTURetryBacksOff(t *testing.T) {
	s := NewPMTUSearch(testPMTUConfig(), 0)
	p := &pmtuPlane{limit: 1472, rtt: 10 * time.Millisecond}
	settled := p.run(t, s, 0, time.Minute, true)
	p.oversize = 0
	p.run(t, s, settled, settled+5*time.Second, false)
	if s.Stats.Retries != 2 || s.Size() > 1472 || s.Stats.Raises != 0 || p.oversize != 2 {
		t.Fatalf("5 s after settling: %d retries, %d probes too big, size %d, raises %d; want 2 retries (1 s, 3 s), 2 probes of Max too big, size <= 1472",
			s.Stats.Retries, p.oversize, s.Size(), s.Stats.Raises)
	}
	p.limit = 9000
	p.run(t, s, settled+5*time.Second, settled+7500*time.Millisecond, false)
	if s.Size() != 9000 || s.Stats.Retries != 3 || s.Stats.Raises != 0 {
		t.Fatalf("after the plane grew: size %d, retries %d, raises %d; want 9000 by the third retry (7 s)", s.Size(), s.Stats.Retries, s.Stats.Raises)
	}
}
