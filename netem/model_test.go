package netem

import (
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/mrgw/mrgw/internal/ecn"
)

func testRNG() *rand.Rand { return rand.New(rand.NewPCG(1, 2)) }

// A burst larger than the queue: exactly the datagrams that fit are
// accepted, and they leave the serialiser one serialisation time apart.
func TestModelShapingAndDropTail(t *testing.T) {
	l := link{cfg: LinkConfig{Rate: 8_000_000, QueueBytes: 5000, Delay: 20 * time.Millisecond}}
	rng := testRNG()
	var accepted []TraceEvent
	for i := 0; i < 20; i++ {
		var ev TraceEvent
		if v := l.admit(0, 1000-IPHeaderLen, ecn.NotECT, false, rng, &ev); v == Forwarded {
			accepted = append(accepted, ev)
		} else if v != DroppedQueue {
			t.Fatalf("datagram %d: verdict %v, want forwarded or dropped-queue", i, v)
		}
	}
	// 1000 wire bytes (972 of payload and the IPv4 and UDP headers) at 8
	// Mbit/s take exactly 1 ms; the queue holds 5000 bytes including the
	// datagram being serialised.
	if len(accepted) != 5 {
		t.Fatalf("accepted %d of a 20-datagram burst, want 5", len(accepted))
	}
	for i, ev := range accepted {
		wantDepart := time.Duration(i+1) * time.Millisecond
		if ev.Depart != wantDepart || ev.Deliver != wantDepart+20*time.Millisecond {
			t.Errorf("datagram %d: depart %v deliver %v, want %v and %v", i, ev.Depart, ev.Deliver, wantDepart, wantDepart+20*time.Millisecond)
		}
		if ev.Backlog != i*1000 {
			t.Errorf("datagram %d: backlog %d, want %d", i, ev.Backlog, i*1000)
		}
	}
	if got := l.c.queueDrops.Load(); got != 15 {
		t.Errorf("queue drops %d, want 15", got)
	}
	if got := l.c.maxQueue.Load(); got != 5000 {
		t.Errorf("max queue %d, want 5000", got)
	}
	// 2.5 ms later 2.5 datagrams have left: 2500 bytes remain, so one more
	// 1000-byte datagram fits and a third would not.
	if q := l.backlog(2500 * time.Microsecond); q != 2500 {
		t.Fatalf("backlog after 2.5 ms = %d, want 2500", q)
	}
	var ev TraceEvent
	if v := l.admit(2500*time.Microsecond, 1000-IPHeaderLen, ecn.NotECT, false, rng, &ev); v != Forwarded || ev.Depart != 6*time.Millisecond {
		t.Fatalf("late arrival: %v depart %v, want forwarded at 6ms", v, ev.Depart)
	}
}

func TestModelUnlimitedRateHasNoQueue(t *testing.T) {
	l := link{cfg: LinkConfig{QueueBytes: 1, Delay: time.Millisecond}}
	for i := 0; i < 100; i++ {
		var ev TraceEvent
		if v := l.admit(0, 1400, ecn.NotECT, false, testRNG(), &ev); v != Forwarded || ev.Deliver != time.Millisecond {
			t.Fatalf("datagram %d: %v deliver %v", i, v, ev.Deliver)
		}
	}
}

func TestModelECNMarksAboveThreshold(t *testing.T) {
	l := link{cfg: LinkConfig{Rate: 8_000_000, QueueBytes: 100_000, ECNThreshold: 2500}}
	rng := testRNG()
	for i := 0; i < 10; i++ {
		cp := ecn.ECT0
		if i%2 == 1 {
			cp = ecn.NotECT
		}
		var ev TraceEvent
		if v := l.admit(0, 1000-IPHeaderLen, cp, false, rng, &ev); v != Forwarded {
			t.Fatal(v)
		}
		// Backlog ahead is i*1000; "above the threshold" is strict.
		wantCE := cp == ecn.ECT0 && i*1000 > 2500
		if (ev.ECNOut == ecn.CE) != wantCE {
			t.Errorf("datagram %d (%v, backlog %d): out %v, want CE=%v", i, cp, ev.Backlog, ev.ECNOut, wantCE)
		}
		if !wantCE && ev.ECNOut != cp {
			t.Errorf("datagram %d: codepoint changed %v -> %v", i, cp, ev.ECNOut)
		}
	}
	if got := l.c.ceMarks.Load(); got != 3 { // i = 4, 6, 8
		t.Errorf("CE marks %d, want 3", got)
	}
}

// Jitter varies the delay but never reorders a plane.
func TestModelJitterKeepsFIFO(t *testing.T) {
	const delay, jitter = 20 * time.Millisecond, 5 * time.Millisecond
	l := link{cfg: LinkConfig{Delay: delay, Jitter: jitter}}
	rng := testRNG()
	var prev time.Duration
	distinct := map[time.Duration]bool{}
	for i := 0; i < 2000; i++ {
		now := time.Duration(i) * 10 * time.Microsecond
		var ev TraceEvent
		if v := l.admit(now, 100, ecn.NotECT, false, rng, &ev); v != Forwarded {
			t.Fatal(v)
		}
		if ev.Deliver < prev {
			t.Fatalf("datagram %d delivered at %v before its predecessor at %v", i, ev.Deliver, prev)
		}
		if ev.Deliver < now+delay || ev.Deliver > now+delay+jitter {
			t.Fatalf("datagram %d: delay %v outside [%v, %v]", i, ev.Deliver-now, delay, delay+jitter)
		}
		prev = ev.Deliver
		distinct[ev.Deliver-now] = true
	}
	if len(distinct) < 100 {
		t.Errorf("only %d distinct delays: jitter not applied", len(distinct))
	}
}

func TestModelLossAfterQueue(t *testing.T) {
	l := link{cfg: LinkConfig{Rate: 1_000_000_000, QueueBytes: 1 << 30, Loss: 0.05}}
	rng := testRNG()
	const n = 20000
	var lost int
	var lastDepart time.Duration
	for i := 0; i < n; i++ {
		var ev TraceEvent
		v := l.admit(0, 125-IPHeaderLen, ecn.NotECT, false, rng, &ev)
		if v == DroppedLoss {
			lost++
		}
		// Lost or not, each datagram used 1 µs of link time.
		if ev.Depart != lastDepart+time.Microsecond {
			t.Fatalf("datagram %d departs %v after %v", i, ev.Depart, lastDepart)
		}
		lastDepart = ev.Depart
	}
	if f := float64(lost) / n; f < 0.04 || f > 0.06 {
		t.Errorf("loss fraction %.4f, want 0.05 ± 0.01", f)
	}
}

func TestModelFailAndRetune(t *testing.T) {
	l := link{cfg: LinkConfig{Rate: 8_000_000}}
	rng := testRNG()
	var ev TraceEvent
	for i := 0; i < 4; i++ {
		l.admit(0, 1000-IPHeaderLen, ecn.NotECT, false, rng, &ev)
	}
	// 4000 bytes queued at 8 Mbit/s = 4 ms; at 4 Mbit/s the same bytes take 8 ms.
	l.setConfig(0, LinkConfig{Rate: 4_000_000})
	if l.busyUntil != 8*time.Millisecond || l.backlog(0) != 4000 {
		t.Fatalf("after retune: busy until %v, backlog %d", l.busyUntil, l.backlog(0))
	}
	epoch := l.epoch
	l.fail(time.Millisecond)
	if v := l.admit(time.Millisecond, 1000, ecn.NotECT, false, rng, &ev); v != DroppedDown {
		t.Fatalf("failed plane: %v", v)
	}
	if l.epoch == epoch || l.backlog(time.Millisecond) != 0 {
		t.Fatalf("fail kept epoch %d or backlog %d", l.epoch, l.backlog(time.Millisecond))
	}
	if v := l.admit(time.Millisecond, 1000, ecn.NotECT, true, rng, &ev); v != DroppedDown {
		t.Fatalf("down is checked before the global cap, got %v", v)
	}
	l.down = false
	if v := l.admit(time.Millisecond, 1000, ecn.NotECT, true, rng, &ev); v != DroppedOverflow {
		t.Fatalf("full emulator: %v", v)
	}
	if v := l.admit(time.Millisecond, 1000-IPHeaderLen, ecn.NotECT, false, rng, &ev); v != Forwarded || ev.Depart != 3*time.Millisecond {
		t.Fatalf("restored: %v depart %v, want forwarded at 3ms", v, ev.Depart)
	}
}

// A link is charged every datagram's wire bytes, its IPv4 and UDP headers
// included: 100-byte payloads at 1 Mbit/s leave one 128-byte packet every
// 1.024 ms, and the counters and the queue are in the same bytes. A link
// charged payloads only would carry 28% more small datagrams than its
// rate.
func TestModelChargesWireBytes(t *testing.T) {
	l := link{cfg: LinkConfig{Rate: 1_000_000, QueueBytes: 10 * 128}}
	rng := testRNG()
	var accepted int
	var last TraceEvent
	for i := 0; i < 20; i++ {
		var ev TraceEvent
		switch l.admit(0, 100, ecn.NotECT, false, rng, &ev) {
		case Forwarded:
			accepted++
			last = ev
		case DroppedQueue:
		default:
			t.Fatalf("datagram %d: %v", i, ev.Verdict)
		}
	}
	if accepted != 10 {
		t.Errorf("a queue of 10 packets of 128 wire bytes took %d", accepted)
	}
	if want := 10 * 1024 * time.Microsecond; last.Depart != want {
		t.Errorf("the 10th packet departs at %v, want %v (128 bytes at 1 Mbit/s each)", last.Depart, want)
	}
	if got, want := l.c.bytesIn.Load(), uint64(20*128); got != want {
		t.Errorf("bytes in %d, want %d (wire bytes)", got, want)
	}
	if got := l.c.maxQueue.Load(); got != 10*128 {
		t.Errorf("max queue %d, want %d", got, 10*128)
	}
	var ev TraceEvent
	l2 := link{cfg: LinkConfig{MTU: 1500}}
	if v := l2.admit(0, 1472, ecn.NotECT, false, rng, &ev); v != Forwarded {
		t.Errorf("a 1500-byte packet on a 1500 MTU: %v", v)
	}
	if v := l2.admit(0, 1473, ecn.NotECT, false, rng, &ev); v != DroppedSize {
		t.Errorf("a 1501-byte packet on a 1500 MTU: %v", v)
	}
}

// The marking threshold concerns ECN-capable datagrams only: one that is
// not ECN-capable (kernel TCP without ECN, a retransmission, a pure ACK)
// is queued up to the full drop-tail limit like any other, never dropped
// early where an ECT datagram would have been marked. An early drop there
// would be a RED queue a tenth of the configured size for such traffic.
func TestModelNotECTQueuesToTheFullQueue(t *testing.T) {
	const wire, queue = 1000, 100_000
	l := link{cfg: LinkConfig{Rate: 8_000_000, QueueBytes: queue, ECNThreshold: queue / 10}}
	rng := testRNG()
	var forwarded, dropped int
	for i := 0; i < 2*queue/wire; i++ {
		var ev TraceEvent
		switch v := l.admit(0, wire-IPHeaderLen, ecn.NotECT, false, rng, &ev); v {
		case Forwarded:
			forwarded++
			if ev.ECNOut != ecn.NotECT {
				t.Fatalf("datagram %d: a Not-ECT datagram left as %v", i, ev.ECNOut)
			}
		case DroppedQueue:
			dropped++
			if ev.Backlog+wire <= queue {
				t.Fatalf("datagram %d dropped with %d bytes queued, room for %d", i, ev.Backlog, queue-ev.Backlog)
			}
		default:
			t.Fatalf("datagram %d: %v", i, v)
		}
	}
	if forwarded != queue/wire || dropped != queue/wire {
		t.Errorf("forwarded %d, dropped %d of a burst of twice the queue; want %d each", forwarded, dropped, queue/wire)
	}
	if got := l.c.maxQueue.Load(); got != queue {
		t.Errorf("the queue reached %d bytes, want the full %d", got, queue)
	}
	if got := l.c.ceMarks.Load(); got != 0 {
		t.Errorf("%d CE marks on Not-ECT datagrams", got)
	}
}

func TestRing(t *testing.T) {
	var r ring[packet]
	next := 0
	for round := 0; round < 50; round++ {
		for i := 0; i < round; i++ {
			r.push(Item[packet]{V: packet{n: next + r.len()}})
		}
		for i := 0; i < round/2+1 && r.len() > 0; i++ {
			if p := r.pop(); p.V.n != next {
				t.Fatalf("popped %d, want %d", p.V.n, next)
			}
			next++
		}
	}
}

func TestECMPHash(t *testing.T) {
	dst := netip.MustParseAddrPort("127.0.0.1:4791")
	planesUsed := func(seed uint64, d Dir) []int {
		out := make([]int, 64)
		for i := range out {
			src := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(40000+i))
			out[i] = planeOf(ecmpHash(seed, d, src, dst), 4)
		}
		return out
	}
	a := planesUsed(7, AtoB)
	counts := make([]int, 4)
	for _, p := range a {
		counts[p]++
	}
	for p, c := range counts {
		// 64 flows over 4 planes: expect 16 each; a fair hash is never this far off.
		if c < 6 {
			t.Errorf("plane %d got %d of 64 flows: %v", p, c, counts)
		}
	}
	same := func(x, y []int) bool {
		for i := range x {
			if x[i] != y[i] {
				return false
			}
		}
		return true
	}
	if !same(a, planesUsed(7, AtoB)) {
		t.Error("hash is not deterministic")
	}
	if same(a, planesUsed(8, AtoB)) {
		t.Error("seed does not change the placement")
	}
	if same(a, planesUsed(7, BtoA)) {
		t.Error("both directions place flows identically")
	}
}
