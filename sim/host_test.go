package sim

import (
	"bytes"
	"runtime"
	"slices"
	"testing"
	"time"
)

// pinger sends a ping to peer, and the next one gap after each pong, through its timer.
type pinger struct {
	peer     HostID
	gap      time.Duration
	rounds   int
	due      time.Duration // next ping time, or -1 while one is outstanding
	sentAt   time.Duration
	rtts     []time.Duration
	timeouts []time.Duration
	depths   []int // stack depth at each Receive
}

func (p *pinger) Receive(now time.Duration, d *Datagram) {
	p.depths = append(p.depths, runtime.Callers(0, make([]uintptr, 512)))
	p.rtts = append(p.rtts, now-p.sentAt)
	if len(p.rtts) < p.rounds {
		p.due = now + p.gap
	}
}

func (p *pinger) Poll(now time.Duration, d *Datagram) bool {
	if p.due < 0 || now < p.due {
		return false
	}
	p.due, p.sentAt = -1, now
	fill(d, p.peer, 10, 20, 1000, false, uint64(len(p.rtts)), now)
	return true
}

func (p *pinger) NextTimeout() time.Duration      { return p.due }
func (p *pinger) HandleTimeout(now time.Duration) { p.timeouts = append(p.timeouts, now) }

// echo answers every datagram with one of the same size, from its Receive through Poll.
type echo struct{ pending []HostID }

func (e *echo) Receive(now time.Duration, d *Datagram) { e.pending = append(e.pending, d.Src) }

func (e *echo) Poll(now time.Duration, d *Datagram) bool {
	if len(e.pending) == 0 {
		return false
	}
	fill(d, e.pending[0], 20, 10, 1000, false, 0, now)
	e.pending = e.pending[1:]
	return true
}

func (e *echo) NextTimeout() time.Duration  { return -1 }
func (e *echo) HandleTimeout(time.Duration) {}

func TestPingPongDriverContract(t *testing.T) {
	// RTT = 2 × (5ms + 8µs); each next ping leaves exactly 1ms after a pong, by timer.
	s := New(Config{})
	link := LinkConfig{Rate: 1e9, Delay: 5 * ms}
	n := NewNetwork(s, NetworkConfig{Planes: 2, AtoB: link, BtoA: link})
	p := &pinger{peer: 2, gap: 1 * ms, rounds: 5}
	n.AddHost(SiteA, p, HostConfig{})
	n.AddHost(SiteB, &echo{}, HostConfig{})
	s.Run(time.Second)

	rtt := 10*ms + 16*us
	if len(p.rtts) != 5 {
		t.Fatalf("%d pongs, want 5", len(p.rtts))
	}
	for i, r := range p.rtts {
		if r != rtt {
			t.Errorf("round %d: RTT %v, want %v", i, r, rtt)
		}
	}
	// The first ping goes out at the start drain; the others when the timer fires.
	var want []time.Duration
	for i := 1; i < 5; i++ {
		want = append(want, time.Duration(i)*(rtt+1*ms))
	}
	if !slices.Equal(p.timeouts, want) {
		t.Errorf("HandleTimeout at %v, want %v", p.timeouts, want)
	}
	if st := n.Host(1).Stats(); st.Sent != 5 || st.Received != 5 || st.Timeouts != 4 || st.ClampedTimeouts != 0 {
		t.Errorf("pinger host stats %+v", st)
	}
}

func TestIdealFabricDoesNotRecurse(t *testing.T) {
	// With every link ideal, a ping and its pong cross at the same instant, so the pong
	// reaches the pinger while its host is still draining Poll. It must wait in the host's
	// inbox: handled at once, the stack would grow by a few frames every round.
	s := New(Config{})
	n := NewNetwork(s, NetworkConfig{Planes: 1})
	p := &pinger{peer: 2, rounds: 50}
	n.AddHost(SiteA, p, HostConfig{})
	n.AddHost(SiteB, &echo{}, HostConfig{})
	s.Run(time.Second)
	if len(p.rtts) != 50 {
		t.Fatalf("%d rounds, want 50", len(p.rtts))
	}
	for i, r := range p.rtts {
		if r != 0 || p.depths[i] != p.depths[0] {
			t.Fatalf("round %d: RTT %v, stack depth %d (first round %d)", i, r, p.depths[i], p.depths[0])
		}
	}
	// Every round ran inside the two start polls: no timer was needed.
	if s.Stats().Events != 2 || len(p.timeouts) != 0 {
		t.Errorf("Events = %d, timeouts %v; want 2 and none", s.Stats().Events, p.timeouts)
	}
}

// stuck is an endpoint whose timer is always due and never cleared.
type stuck struct{ handled int }

func (s *stuck) Receive(time.Duration, *Datagram)   {}
func (s *stuck) Poll(time.Duration, *Datagram) bool { return false }
func (s *stuck) NextTimeout() time.Duration         { return 0 }
func (s *stuck) HandleTimeout(time.Duration)        { s.handled++ }

func TestTimeoutInThePastIsClamped(t *testing.T) {
	s := New(Config{})
	n := NewNetwork(s, NetworkConfig{Planes: 1})
	ep := &stuck{}
	h := n.AddHost(SiteA, ep, HostConfig{})
	s.Run(10 * us)
	// Handled at 0, 1, ..., 10000 ns: each time left due, each time pushed 1ns ahead.
	if ep.handled != 10001 || h.Stats().ClampedTimeouts != 10001 || s.Stats().ClampedTimeouts != 10001 {
		t.Errorf("handled %d, clamped %d (sim %d), want 10001", ep.handled, h.Stats().ClampedTimeouts, s.Stats().ClampedTimeouts)
	}
}

// flood always has a datagram to send.
type flood struct {
	dst  HostID
	sent int
}

func (f *flood) Receive(time.Duration, *Datagram) {}
func (f *flood) Poll(now time.Duration, d *Datagram) bool {
	f.sent++
	fill(d, f.dst, 1, 2, 100, false, 0, now)
	return true
}
func (f *flood) NextTimeout() time.Duration  { return -1 }
func (f *flood) HandleTimeout(time.Duration) {}

func TestPollBurstIsBounded(t *testing.T) {
	s := New(Config{MaxPollBurst: 100})
	n := NewNetwork(s, NetworkConfig{Planes: 1})
	f := &flood{dst: 0} // unroutable: dropped at the host
	n.AddHost(SiteA, f, HostConfig{})
	s.Run(5) // drains at 0, 1, ..., 5 ns
	st := s.Stats()
	if f.sent != 600 || st.PollBurstLimited != 6 || st.Unroutable != 600 || st.DatagramsAlive != 0 {
		t.Errorf("sent %d, stats %+v", f.sent, st)
	}
}

func TestDatagramPoolIsBounded(t *testing.T) {
	s := New(Config{MaxDatagrams: 5})
	n := NewNetwork(s, NetworkConfig{Planes: 1, AtoB: LinkConfig{Rate: 1e9}})
	n.AddHost(SiteA, &burst{dst: 2, size: 100, count: 10}, HostConfig{})
	snk := &sink{}
	n.AddHost(SiteB, snk, HostConfig{})
	s.Run(time.Second)
	st := s.Stats()
	if !slices.Equal(snk.seqs(), []uint64{0, 1, 2, 3, 4}) || st.DroppedNoBuffer != 5 ||
		st.DatagramsAllocated != 5 || st.DatagramsAlive != 0 || st.DatagramsSent != 10 {
		t.Errorf("delivered %v, stats %+v", snk.seqs(), st)
	}
	if h := n.Host(1).Stats(); h.DroppedNoBuffer != 5 {
		t.Errorf("host DroppedNoBuffer = %d", h.DroppedNoBuffer)
	}
}

// queued sends one datagram per unit of work its application queues.
type queued struct {
	work int
	dst  HostID
}

func (q *queued) Receive(time.Duration, *Datagram) {}
func (q *queued) Poll(now time.Duration, d *Datagram) bool {
	if q.work == 0 {
		return false
	}
	q.work--
	fill(d, q.dst, 1, 2, 1000, false, 0, now)
	return true
}
func (q *queued) NextTimeout() time.Duration  { return -1 }
func (q *queued) HandleTimeout(time.Duration) {}

func TestKickPollsAgain(t *testing.T) {
	q := &queued{dst: 2}
	s, n, snk := pair(1, oneLink(LinkConfig{Rate: 1e9, Delay: 1 * ms}), q)
	h := n.Host(1)
	if n.NextHostID() != 3 || h.Endpoint() != q || h.Site() != SiteA {
		t.Fatalf("host 1 is %+v, next ID %d", h, n.NextHostID())
	}
	s.At(3*ms, func() { q.work += 2; h.Kick(); h.Kick() })
	s.Run(time.Second)
	var at []time.Duration
	for _, r := range snk.got {
		at = append(at, r.at)
	}
	if want := []time.Duration{4*ms + 8*us, 4*ms + 16*us}; !slices.Equal(at, want) {
		t.Errorf("arrivals %v, want %v", at, want)
	}
}

func TestAccessLinksCompose(t *testing.T) {
	// Store and forward over three hops: 1 Gbit/s + 1µs up, 10 Gbit/s + 5ms across,
	// 1 Gbit/s + 2µs down: 8+1 + 0.8+5000 + 8+2 µs.
	s := New(Config{})
	n := NewNetwork(s, NetworkConfig{Planes: 1, AtoB: LinkConfig{Rate: 10e9, Delay: 5 * ms}})
	n.AddHost(SiteA, &burst{dst: 2, size: 1000, count: 1}, HostConfig{Uplink: LinkConfig{Rate: 1e9, Delay: 1 * us}})
	snk := &sink{}
	h := n.AddHost(SiteB, snk, HostConfig{Downlink: LinkConfig{Rate: 1e9, Delay: 2 * us}})
	s.Run(time.Second)
	if len(snk.got) != 1 || snk.got[0].at != 5*ms+19*us+800 {
		t.Fatalf("got %+v, want arrival at 5.0198ms", snk.got)
	}
	if h.Downlink().Stats().Delivered != 1 || n.Host(1).Uplink().Stats().Delivered != 1 {
		t.Error("access links did not count the datagram")
	}
}

// foreign points Data at its own buffer and tries to spoof its source.
type foreign struct {
	buf  []byte
	done bool
}

func (f *foreign) Receive(time.Duration, *Datagram) {}
func (f *foreign) Poll(now time.Duration, d *Datagram) bool {
	if f.done {
		return false
	}
	f.done = true
	d.Src, d.Dst = 99, 2
	d.Data = f.buf
	return true
}
func (f *foreign) NextTimeout() time.Duration  { return -1 }
func (f *foreign) HandleTimeout(time.Duration) {}

func TestDatagramOwnership(t *testing.T) {
	f := &foreign{buf: bytes.Repeat([]byte{7}, 64)}
	var got []byte
	var src HostID
	s := New(Config{})
	n := NewNetwork(s, NetworkConfig{Planes: 1, AtoB: LinkConfig{Delay: 1 * ms}})
	n.AddHost(SiteA, f, HostConfig{})
	n.AddHost(SiteB, recvFunc(func(d *Datagram) { got, src = bytes.Clone(d.Data), d.Src }), HostConfig{})
	s.At(500*us, func() { f.buf[0] = 0 }) // the endpoint reuses its buffer while in flight
	s.Run(time.Second)
	if !bytes.Equal(got, bytes.Repeat([]byte{7}, 64)) || src != 1 {
		t.Errorf("received %v from %d", got, src)
	}

	// Longer than MaxDatagramSize: dropped and counted.
	s = New(Config{MaxDatagramSize: 32})
	n = NewNetwork(s, NetworkConfig{Planes: 1})
	n.AddHost(SiteA, &foreign{buf: make([]byte, 33)}, HostConfig{})
	n.AddHost(SiteB, &sink{}, HostConfig{})
	s.Run(time.Second)
	if st := s.Stats(); st.DroppedOversize != 1 || st.DatagramsAlive != 0 {
		t.Errorf("stats %+v", st)
	}
}

// recvFunc is a receive-only endpoint.
type recvFunc func(d *Datagram)

func (f recvFunc) Receive(_ time.Duration, d *Datagram) { f(d) }
func (recvFunc) Poll(time.Duration, *Datagram) bool     { return false }
func (recvFunc) NextTimeout() time.Duration             { return -1 }
func (recvFunc) HandleTimeout(time.Duration)            {}

func TestUnroutable(t *testing.T) {
	s := New(Config{})
	n := NewNetwork(s, NetworkConfig{Planes: 1})
	n.AddHost(SiteA, &burst{dst: 2, size: 16, count: 1}, HostConfig{}) // host 2 is also at A
	n.AddHost(SiteA, &burst{dst: 9, size: 16, count: 1}, HostConfig{}) // no host 9
	s.Run(time.Second)
	if u := s.Stats().Unroutable; u != 2 {
		t.Errorf("Unroutable = %d, want 2", u)
	}
}

// TestStallDefersReceiveAndTimers: a stalled host's endpoint is not called;
// what arrived is handed over, and a timer that fell due runs, when the
// stall ends (a descheduled user-space driver).
func TestStallDefersReceiveAndTimers(t *testing.T) {
	s := New(Config{})
	link := LinkConfig{Rate: 1e9, Delay: 5 * ms}
	n := NewNetwork(s, NetworkConfig{Planes: 1, AtoB: link, BtoA: link})
	p := &pinger{peer: 2, gap: 1 * ms, rounds: 3}
	a := n.AddHost(SiteA, p, HostConfig{})
	n.AddHost(SiteB, &echo{}, HostConfig{})
	rtt := 10*ms + 16*us
	// The first pong arrives at rtt, inside a stall from 10 ms to 13 ms.
	s.At(10*ms, func() { a.Stall(3 * ms) })
	stalledAt := []bool{}
	s.At(12*ms, func() { stalledAt = append(stalledAt, a.Stalled()) })
	// The next ping is due 1 ms after that pong was handed over (14 ms), inside
	// a stall from 13.5 ms to 15.5 ms; one that starts inside it extends it.
	s.At(13*ms+500*us, func() { a.Stall(time.Millisecond) })
	s.At(14*ms, func() { a.Stall(1500 * us); a.Stall(100 * us) })
	s.Run(time.Second)

	if len(stalledAt) != 1 || !stalledAt[0] || a.Stalled() {
		t.Errorf("Stalled during the stall %v, after %v", stalledAt, a.Stalled())
	}
	if want := []time.Duration{13 * ms, rtt, rtt}; !slices.Equal(p.rtts, want) {
		t.Errorf("RTTs %v, want %v (the first held by the stall)", p.rtts, want)
	}
	if len(p.timeouts) < 1 || p.timeouts[0] != 15*ms+500*us {
		t.Errorf("timeouts %v, want the one due at 14 ms run at 15.5 ms", p.timeouts)
	}
}
