package netem

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/mrgw/mrgw/internal/ecn"
)

// Several path sockets at A talk to one listener at B and back, B's path
// sockets talk to A's listener, and the two listeners talk to each other:
// payloads arrive byte for byte, every path keeps a distinct source port,
// and every endpoint sees each peer at one stable address.
func TestRelayBothWaysThroughStandIns(t *testing.T) {
	em := start(t, Config{Planes: 4, Seed: 1})
	aListen, bListen := udpSock(t), udpSock(t)
	frontB := expose(t, em, SiteB, bListen) // what A is told B's address is
	frontA := expose(t, em, SiteA, aListen)

	// A's path sockets -> B's listener, and B's acks back.
	aPaths := []*net.UDPConn{udpSock(t), udpSock(t), udpSock(t)}
	sizes := []int{1, 700, 1472}
	seen := map[netip.AddrPort]int{} // stand-in source at B -> path index
	for i, c := range aPaths {
		msg := bytes.Repeat([]byte{byte('a' + i)}, sizes[i])
		send(t, c, frontB, msg)
		d := recv(t, bListen, patience)
		if !bytes.Equal(d.data, msg) {
			t.Fatalf("path %d: B got %d bytes %q..., want %d bytes of %q", i, len(d.data), d.data[:1], len(msg), msg[:1])
		}
		if d.from == addrOf(c) {
			t.Fatalf("path %d: B sees A's real address %v, not a stand-in", i, d.from)
		}
		if want, ok := em.StandIn(SiteA, addrOf(c)); !ok || want != d.from {
			t.Fatalf("path %d: B sees %v, StandIn says %v %v", i, d.from, want, ok)
		}
		if j, dup := seen[d.from]; dup {
			t.Fatalf("paths %d and %d share the source %v at B", j, i, d.from)
		}
		seen[d.from] = i
		// B acks to whatever source it saw; the ack must reach path i, from
		// the address path i sent to.
		ack := append([]byte("ack:"), d.data...)
		send(t, bListen, d.from, ack)
		back := recv(t, c, patience)
		if !bytes.Equal(back.data, ack) || back.from != frontB {
			t.Fatalf("path %d: ack %d bytes from %v, want %d bytes from %v", i, len(back.data), back.from, len(ack), frontB)
		}
	}
	// The planes counted the datagrams' wire bytes, their IPv4 and UDP
	// headers included, as tunemu counts an IP packet.
	var wire uint64
	for _, n := range sizes {
		wire += uint64(n + IPHeaderLen)
	}
	if got := em.Stats().Total(AtoB).BytesDelivered; got != wire {
		t.Errorf("A→B delivered %d bytes, want the %d wire bytes of the three datagrams", got, wire)
	}

	// B-initiated paths to A's listener, and A's replies.
	for j, c := range []*net.UDPConn{udpSock(t), udpSock(t)} {
		msg := []byte(fmt.Sprintf("B path %d", j))
		send(t, c, frontA, msg)
		d := recv(t, aListen, patience)
		if !bytes.Equal(d.data, msg) {
			t.Fatalf("B path %d: A got %q", j, d.data)
		}
		if want, _ := em.StandIn(SiteB, addrOf(c)); d.from != want || d.from == addrOf(c) {
			t.Fatalf("B path %d: A sees %v, want stand-in %v", j, d.from, want)
		}
		send(t, aListen, d.from, []byte("reply"))
		if back := recv(t, c, patience); string(back.data) != "reply" || back.from != frontA {
			t.Fatalf("B path %d: reply %q from %v, want from %v", j, back.data, back.from, frontA)
		}
	}

	// Listener to listener: each sees the other at the exposed address it
	// was given, in both directions (a symmetric protocol needs this).
	send(t, aListen, frontB, []byte("hello B"))
	if d := recv(t, bListen, patience); string(d.data) != "hello B" || d.from != frontA {
		t.Fatalf("A listener -> B: %q from %v, want from %v", d.data, d.from, frontA)
	}
	send(t, bListen, frontA, []byte("hello A"))
	if d := recv(t, aListen, patience); string(d.data) != "hello A" || d.from != frontB {
		t.Fatalf("B listener -> A: %q from %v, want from %v", d.data, d.from, frontB)
	}

	st := em.Stats()
	if st.Exposed != 2 || st.Mappings != 5 {
		t.Errorf("exposed %d, mappings %d; want 2 and 5", st.Exposed, st.Mappings)
	}
	if a, b := st.Total(AtoB), st.Total(BtoA); a.Delivered != 6 || b.Delivered != 6 {
		t.Errorf("delivered A->B %d, B->A %d; want 6 each", a.Delivered, b.Delivered)
	}
	// Exposing again returns the same stand-in.
	if again := expose(t, em, SiteB, bListen); again != frontB {
		t.Errorf("second Expose = %v, want %v", again, frontB)
	}
	if _, err := em.Expose(SiteA, frontB); !errors.Is(err, ErrInvalid) {
		t.Errorf("exposing a stand-in: %v, want ErrInvalid", err)
	}
	if _, err := em.Expose(SiteA, netip.MustParseAddrPort("10.0.0.1:9")); !errors.Is(err, ErrInvalid) {
		t.Errorf("exposing a non-loopback address: %v, want ErrInvalid", err)
	}
}

// measureDelay sends n timestamped datagrams one by one through a link and
// returns each one's one-way delay, sorted.
func measureDelay(t testing.TB, cfg LinkConfig, n int, gap time.Duration) ([]time.Duration, *Emulator) {
	em := start(t, Config{Link: cfg})
	a, b := udpSock(t), udpSock(t)
	front := expose(t, em, SiteB, b)
	k := collect(b)
	sent := make([]time.Time, n)
	for i := range n {
		sent[i] = time.Now()
		send(t, a, front, seqPayload(uint32(i), 64))
		time.Sleep(gap)
	}
	waitFor(t, "all datagrams", func() bool { return k.count() == n })
	var delays []time.Duration
	for _, d := range k.close() {
		seq := int(d.data[0])<<24 | int(d.data[1])<<16 | int(d.data[2])<<8 | int(d.data[3])
		delays = append(delays, d.at.Sub(sent[seq]))
	}
	slices.Sort(delays)
	return delays, em
}

func summary(ds []time.Duration) (mean, p50, p99, worst time.Duration) {
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return sum / time.Duration(len(ds)), ds[len(ds)/2], ds[len(ds)*99/100], ds[len(ds)-1]
}

// The configured one-way delay is applied: never less, and not much more.
func TestDelayApplied(t *testing.T) {
	const delay = 20 * time.Millisecond
	ds, em := measureDelay(t, LinkConfig{Delay: delay}, 200, 500*time.Microsecond)
	mean, p50, p99, worst := summary(ds)
	late := em.Stats().Late[AtoB]
	t.Logf("configured %v: measured min %v mean %v p50 %v p99 %v max %v; dispatcher late mean %v max %v",
		delay, ds[0], mean, p50, p99, worst, late.Mean, late.Max)
	if ds[0] < delay {
		t.Errorf("a datagram arrived after %v, before the configured %v", ds[0], delay)
	}
	// Generous: the machine is shared; this catches a delay applied twice
	// or a scheduler that waits for the next Go timer tick.
	if p50 > delay+20*time.Millisecond {
		t.Errorf("median delay %v, want below %v", p50, delay+20*time.Millisecond)
	}
}

func TestLossRate(t *testing.T) {
	const n, loss = 3000, 0.2
	em := start(t, Config{Link: LinkConfig{Loss: loss}, Seed: 3})
	a, b := udpSock(t), udpSock(t)
	front := expose(t, em, SiteB, b)
	k := collect(b)
	for i := range n {
		send(t, a, front, seqPayload(uint32(i), 100))
		if i%100 == 99 {
			time.Sleep(time.Millisecond) // let the receiver keep up
		}
	}
	waitFor(t, "every datagram accounted for", func() bool {
		s := em.Stats().Total(AtoB)
		return s.In == n && s.Delivered+s.LossDrops == n && uint64(k.count()) == s.Delivered
	})
	got := k.close()
	s := em.Stats().Total(AtoB)
	f := float64(s.LossDrops) / n
	t.Logf("loss %.3f configured, %.4f measured (%d of %d), received %d", loss, f, s.LossDrops, n, len(got))
	// Binomial sd is 0.0073; 0.04 is more than 5 sd.
	if f < loss-0.04 || f > loss+0.04 {
		t.Errorf("loss fraction %.4f, want %.2f ± 0.04", f, loss)
	}
}

// traceLog records the model's decisions.
type traceLog struct {
	mu sync.Mutex
	ev []TraceEvent
}

func (l *traceLog) add(ev TraceEvent) { l.mu.Lock(); l.ev = append(l.ev, ev); l.mu.Unlock() }
func (l *traceLog) snapshot() []TraceEvent {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.ev)
}

// A burst larger than the queue is partly dropped, and the emulator
// schedules what it keeps one serialisation time apart: the rate is an
// upper bound that shaping enforces.
func TestShapingBurst(t *testing.T) {
	const rate, size, queue, n = 10_000_000, 1000, 8000, 100
	tx := txTime(size, rate) // 800 µs
	var log traceLog
	em := start(t, Config{Link: LinkConfig{Rate: rate, QueueBytes: queue}, Trace: log.add})
	a, b := udpSock(t), udpSock(t)
	front := expose(t, em, SiteB, b)
	k := collect(b)
	for i := range n {
		send(t, a, front, seqPayload(uint32(i), size))
	}
	waitFor(t, "the burst to drain", func() bool {
		s := em.Stats().Total(AtoB)
		return s.In == n && s.Delivered+s.QueueDrops == n && uint64(k.count()) == s.Delivered
	})
	got := k.close()
	s := em.Stats().Total(AtoB)
	var fwd []TraceEvent
	for _, ev := range log.snapshot() {
		if ev.Verdict == Forwarded {
			fwd = append(fwd, ev)
		}
	}
	t.Logf("burst of %d x %d B into a %d B queue at %d bit/s: %d forwarded, %d dropped, max queue %d B",
		n, size, queue, rate, len(fwd), s.QueueDrops, s.MaxQueueBytes)
	if s.QueueDrops == 0 || len(fwd) == 0 || len(fwd) != len(got) {
		t.Fatalf("forwarded %d, dropped %d, received %d: want some of each, all forwarded received", len(fwd), s.QueueDrops, len(got))
	}
	if s.MaxQueueBytes > queue {
		t.Errorf("queue reached %d bytes, limit %d", s.MaxQueueBytes, queue)
	}
	for i, ev := range fwd {
		if ev.Depart < ev.Arrival+tx {
			t.Fatalf("datagram %d leaves at %v, less than one serialisation time after arriving at %v", i, ev.Depart, ev.Arrival)
		}
		if i > 0 && ev.Depart-fwd[i-1].Depart < tx {
			t.Fatalf("datagrams %d and %d leave %v apart, less than the serialisation time %v", i-1, i, ev.Depart-fwd[i-1].Depart, tx)
		}
	}
	// Receivers get the plane's datagrams in order.
	for i := 1; i < len(got); i++ {
		if bytes.Compare(got[i-1].data[:4], got[i].data[:4]) >= 0 {
			t.Fatalf("reordered within a plane at %d", i)
		}
	}
}

// ECT datagrams that find more than the threshold queued leave as CE, the
// receiver reads CE back, and everything else keeps its codepoint.
func TestECNMarking(t *testing.T) {
	const rate, size, n, threshold = 10_000_000, 1000, 40, 5000
	var log traceLog
	em := start(t, Config{Link: LinkConfig{Rate: rate, QueueBytes: 1 << 20, ECNThreshold: threshold}, Trace: log.add})
	a, b := udpSock(t), udpSock(t)
	front := expose(t, em, SiteB, b)
	k := collect(b)
	sentCP := make([]ecn.Codepoint, n)
	for i := range n {
		sentCP[i] = ecn.ECT0
		if i%4 == 3 {
			sentCP[i] = ecn.NotECT
		}
		sendECN(t, a, front, seqPayload(uint32(i), size), sentCP[i])
	}
	waitFor(t, "all datagrams", func() bool { return k.count() == n })
	got := k.close()
	evs := log.snapshot()
	var ce int
	for i, d := range got {
		seq := int(d.data[3])
		ev := evs[i] // one source, one plane: trace order is arrival order is delivery order
		if seq != i {
			t.Fatalf("datagram %d has seq %d", i, seq)
		}
		wantCE := sentCP[i] == ecn.ECT0 && ev.Backlog > threshold
		switch {
		case wantCE && d.ecn != ecn.CE:
			t.Errorf("datagram %d (backlog %d B) arrived %v, want CE", i, ev.Backlog, d.ecn)
		case !wantCE && d.ecn != sentCP[i]:
			t.Errorf("datagram %d (%v, backlog %d B) arrived %v, want it unchanged", i, sentCP[i], ev.Backlog, d.ecn)
		}
		if d.ecn == ecn.CE {
			ce++
		}
	}
	marks := em.Stats().Total(AtoB).CEMarks
	t.Logf("%d of %d datagrams marked CE (threshold %d B)", ce, n, threshold)
	if ce == 0 || uint64(ce) != marks {
		t.Errorf("receiver saw %d CE, emulator counted %d marks; want equal and non-zero", ce, marks)
	}
}

// Failing a plane black-holes exactly the paths hashed to it; restoring
// it resumes them.
func TestFailAndRestorePlane(t *testing.T) {
	const planes, per = 4, 10
	em := start(t, Config{Planes: planes, Seed: 9})
	b := udpSock(t)
	front := expose(t, em, SiteB, b)
	var paths []*net.UDPConn
	for range 16 {
		paths = append(paths, udpSock(t))
	}
	failed := em.PlaneOf(AtoB, addrOf(paths[0]), addrOf(b))
	onFailed := map[netip.AddrPort]bool{}
	for _, c := range paths {
		onFailed[addrOf(c)] = em.PlaneOf(AtoB, addrOf(c), addrOf(b)) == failed
	}
	nFailed := 0
	for _, f := range onFailed {
		if f {
			nFailed++
		}
	}
	if nFailed == len(paths) {
		t.Fatal("every path hashed to one plane")
	}
	round := func(wantFrom func(c *net.UDPConn) bool) {
		t.Helper()
		k := collect(b)
		before := em.Stats().Total(AtoB)
		want := 0
		for _, c := range paths {
			for i := range per {
				send(t, c, front, seqPayload(uint32(i), 32))
			}
			if wantFrom(c) {
				want += per
			}
		}
		sent := uint64(len(paths) * per)
		waitFor(t, "every datagram accounted for", func() bool {
			s := em.Stats().Total(AtoB)
			return s.In-before.In == sent && s.Delivered-before.Delivered+s.DownDrops-before.DownDrops == sent &&
				k.count() == int(s.Delivered-before.Delivered)
		})
		got := k.close()
		if len(got) != want {
			t.Fatalf("received %d datagrams, want %d", len(got), want)
		}
		for _, d := range got {
			for _, c := range paths {
				if sa, _ := em.StandIn(SiteA, addrOf(c)); sa == d.from && !wantFrom(c) {
					t.Fatalf("received from %v, whose plane %d is failed", addrOf(c), failed)
				}
			}
		}
	}
	round(func(*net.UDPConn) bool { return true })
	if err := em.Fail(failed); err != nil {
		t.Fatal(err)
	}
	if !em.Down(failed) {
		t.Fatal("Down reports the failed plane up")
	}
	round(func(c *net.UDPConn) bool { return !onFailed[addrOf(c)] })
	if got := em.Stats().Links[AtoB][failed].DownDrops; got != uint64(nFailed*per) {
		t.Errorf("down drops %d, want %d", got, nFailed*per)
	}
	if err := em.Restore(failed); err != nil {
		t.Fatal(err)
	}
	round(func(*net.UDPConn) bool { return true })
}

// Datagrams in flight on a plane when it fails are lost even if the
// plane comes back before they were due.
func TestFailDropsInFlight(t *testing.T) {
	em := start(t, Config{Link: LinkConfig{Delay: time.Second}})
	a, b := udpSock(t), udpSock(t)
	front := expose(t, em, SiteB, b)
	for i := range 5 {
		send(t, a, front, seqPayload(uint32(i), 32))
	}
	waitFor(t, "arrival", func() bool { return em.Stats().Total(AtoB).In == 5 })
	em.Fail(0)
	em.Restore(0)
	waitFor(t, "in-flight drops", func() bool { return em.Stats().Total(AtoB).DownDrops == 5 })
	if _, err := tryRecv(b, 50*time.Millisecond); err == nil {
		t.Fatal("a datagram in flight on a failed plane was delivered")
	}
	send(t, a, front, []byte("after"))
	if d := recv(t, b, patience); string(d.data) != "after" {
		t.Fatalf("after restore got %q", d.data)
	}
}

// Different source ports spread over planes, each datagram is counted on
// the plane PlaneOf names, and both directions are counted separately.
func TestSourcePortsSpreadOverPlanes(t *testing.T) {
	const planes, paths, per = 4, 24, 5
	em := start(t, Config{Planes: planes, Seed: 5})
	b := udpSock(t)
	front := expose(t, em, SiteB, b)
	want := make([]uint64, planes)
	for range paths {
		c := udpSock(t)
		want[em.PlaneOf(AtoB, addrOf(c), addrOf(b))] += per
		for i := range per {
			send(t, c, front, seqPayload(uint32(i), 16))
		}
	}
	waitFor(t, "all datagrams counted", func() bool { return em.Stats().Total(AtoB).In == paths*per })
	st := em.Stats()
	used := 0
	for p := range planes {
		if got := st.Links[AtoB][p].In; got != want[p] {
			t.Errorf("plane %d counted %d datagrams, PlaneOf predicts %d", p, got, want[p])
		}
		if want[p] > 0 {
			used++
		}
		if st.Links[BtoA][p].In != 0 {
			t.Errorf("plane %d counted B->A traffic that was never sent", p)
		}
	}
	t.Logf("%d paths over %d planes: %v datagrams per plane", paths, planes, want)
	if used < 2 {
		t.Errorf("%d source ports all landed on one plane", paths)
	}
}

func TestMappingLimitAndExpiry(t *testing.T) {
	em := start(t, Config{MaxMappings: 2, IdleTimeout: 100 * time.Millisecond})
	b := udpSock(t)
	front := expose(t, em, SiteB, b)
	p1, p2, p3 := udpSock(t), udpSock(t), udpSock(t)
	send(t, p1, front, []byte("1"))
	send(t, p2, front, []byte("2"))
	recv(t, b, patience)
	recv(t, b, patience)
	send(t, p3, front, []byte("3"))
	waitFor(t, "a mapping drop", func() bool { return em.Stats().MappingDrops == 1 })
	if st := em.Stats(); st.Mappings != 2 {
		t.Fatalf("%d mappings with a limit of 2", st.Mappings)
	}
	waitFor(t, "idle mappings to expire", func() bool { return em.Stats().Mappings == 0 })
	if _, ok := em.StandIn(SiteA, addrOf(p1)); ok {
		t.Fatal("expired stand-in still listed")
	}
	if _, ok := em.StandIn(SiteB, addrOf(b)); !ok {
		t.Fatal("exposed stand-in expired")
	}
	send(t, p3, front, []byte("3 again"))
	if d := recv(t, b, patience); string(d.data) != "3 again" {
		t.Fatalf("after expiry got %q", d.data)
	}
}

// Close stops every goroutine and discards queued datagrams; so does
// cancelling New's context.
func TestCloseAndCancelStopEverything(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, viaCtx := range []bool{false, true} {
		em, err := New(ctx, Config{Planes: 2, Link: LinkConfig{Delay: time.Hour / 1000, Rate: 1e6}})
		if err != nil {
			t.Fatal(err)
		}
		a, b := udpSock(t), udpSock(t)
		front := expose(t, em, SiteB, b)
		for i := range 50 {
			send(t, a, front, seqPayload(uint32(i), 500))
		}
		waitFor(t, "queued datagrams", func() bool { return em.Stats().Buffered > 0 })
		if viaCtx {
			cancel()
			select {
			case <-em.Done():
			case <-time.After(patience):
				t.Fatal("emulator still running after its context was cancelled")
			}
		}
		if err := em.Close(); err != nil {
			t.Fatal(err)
		}
		if err := em.Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
		if st := em.Stats(); st.Buffered != 0 {
			t.Errorf("%d datagrams still buffered after Close", st.Buffered)
		}
		if _, err := em.Expose(SiteA, addrOf(a)); !errors.Is(err, ErrClosed) {
			t.Errorf("Expose after Close: %v, want ErrClosed", err)
		}
		goleak.VerifyNone(t)
	}
}

// Re-tuning, failing and reading stats from several goroutines while
// traffic flows is safe (run with -race), and afterwards every datagram is
// accounted for exactly once.
func TestConcurrentControl(t *testing.T) {
	const planes = 3
	em := start(t, Config{Planes: planes, Seed: 11, Link: LinkConfig{Rate: 50e6, QueueBytes: 20000, Delay: time.Millisecond}})
	b := udpSock(t)
	front := expose(t, em, SiteB, b)
	k := collect(b)
	var wg sync.WaitGroup
	var sent int
	var mu sync.Mutex
	for w := range 4 {
		c := udpSock(t)
		wg.Go(func() {
			for i := range 500 {
				if _, err := c.WriteToUDPAddrPort(seqPayload(uint32(i), 200+w), front); err == nil {
					mu.Lock()
					sent++
					mu.Unlock()
				}
				if i%50 == 0 {
					time.Sleep(time.Millisecond)
				}
			}
		})
	}
	wg.Go(func() {
		for i := range 200 {
			p := i % planes
			_ = em.SetLink(Dir(i%2), p, LinkConfig{Rate: uint64(10e6 * (1 + i%5)), QueueBytes: 10000, Delay: time.Duration(i%3) * time.Millisecond, Loss: 0.01, Jitter: time.Millisecond, ECNThreshold: 3000})
			if i%7 == 0 {
				_ = em.Fail(p)
			} else {
				_ = em.Restore(p)
			}
			_ = em.Stats()
			time.Sleep(100 * time.Microsecond)
		}
	})
	wg.Wait()
	for p := range planes {
		em.Restore(p)
	}
	waitFor(t, "queues to drain", func() bool {
		s := em.Stats()
		return s.Buffered == 0 && s.Total(AtoB).In == uint64(sent)
	})
	k.close()
	s := em.Stats()
	tot := s.Total(AtoB)
	if acc := tot.Delivered + tot.QueueDrops + tot.LossDrops + tot.DownDrops + s.OverflowDrops + s.SendErrors; acc != tot.In {
		t.Errorf("in %d, accounted %d (%+v, overflow %d, send errors %d)", tot.In, acc, tot, s.OverflowDrops, s.SendErrors)
	}
}

// Empty datagrams are relayed; datagrams above MaxDatagram are dropped and
// counted, never forwarded cut short.
func TestDatagramSizeEdges(t *testing.T) {
	em := start(t, Config{MaxDatagram: 100})
	a, b := udpSock(t), udpSock(t)
	front := expose(t, em, SiteB, b)
	send(t, a, front, nil)
	send(t, a, front, bytes.Repeat([]byte{1}, 101))
	send(t, a, front, bytes.Repeat([]byte{2}, 100))
	if d := recv(t, b, patience); len(d.data) != 0 {
		t.Fatalf("got %d bytes, want the empty datagram", len(d.data))
	}
	if d := recv(t, b, patience); !bytes.Equal(d.data, bytes.Repeat([]byte{2}, 100)) {
		t.Fatalf("got %d bytes %v..., want 100 bytes of 2", len(d.data), d.data[:1])
	}
	if st := em.Stats(); st.Truncated != 1 {
		t.Fatalf("truncated %d, want 1", st.Truncated)
	}
}

// TestMTUClamp: a plane clamped to an MTU drops larger datagrams (counted
// as size drops) and forwards the rest; the clamp changes while traffic
// flows, per plane, and 0 lifts it.
func TestMTUClamp(t *testing.T) {
	em := start(t, Config{Planes: 1, MaxDatagram: 9000})
	a, b := udpSock(t), udpSock(t)
	front := expose(t, em, SiteB, b)
	if err := em.SetMTU(0, 1280); err != nil {
		t.Fatal(err)
	}
	send(t, a, front, make([]byte, 1280-IPHeaderLen+1)) // 1281-byte packet: dropped
	send(t, a, front, make([]byte, 1280-IPHeaderLen))   // exactly 1280: forwarded
	if d := recv(t, b, patience); len(d.data) != 1280-IPHeaderLen {
		t.Fatalf("got %d bytes, want %d", len(d.data), 1280-IPHeaderLen)
	}
	if st := em.Stats().Links[AtoB][0]; st.SizeDrops != 1 || st.Delivered != 1 {
		t.Fatalf("size drops %d, delivered %d; want 1 and 1", st.SizeDrops, st.Delivered)
	}
	if l, _ := em.Link(BtoA, 0); l.MTU != 1280 {
		t.Fatalf("B->A clamp %d, want 1280 (SetMTU clamps both directions)", l.MTU)
	}
	if err := em.SetMTU(0, 9000); err != nil {
		t.Fatal(err)
	}
	send(t, a, front, make([]byte, 4000))
	if d := recv(t, b, patience); len(d.data) != 4000 {
		t.Fatalf("after raising the clamp: got %d bytes", len(d.data))
	}
	if err := em.SetMTU(0, 10); !errors.Is(err, ErrInvalid) {
		t.Fatalf("SetMTU(10): %v", err)
	}
	if err := em.SetMTU(1, 1500); !errors.Is(err, ErrInvalid) {
		t.Fatalf("SetMTU on plane 1 of 1: %v", err)
	}
}

func TestModelMTUClamp(t *testing.T) {
	l := link{cfg: LinkConfig{MTU: 1500}}
	var ev TraceEvent
	if v := l.admit(0, 1473, ecn.NotECT, false, testRNG(), &ev); v != DroppedSize {
		t.Fatalf("1501-byte packet: %v", v)
	}
	if v := l.admit(0, 1472, ecn.NotECT, false, testRNG(), &ev); v != Forwarded {
		t.Fatalf("1500-byte packet: %v", v)
	}
	if v := DroppedSize.String(); v != "dropped-size" {
		t.Fatal(v)
	}
}
