package control

import (
	"bytes"
	"context"
	"encoding/binary"
	"log/slog"
	"math/rand/v2"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/mrgw/mrgw/internal/ratelog"
)

// junkInitial is a QUIC v1 Initial-looking packet of 1,200 bytes: a long
// header, random 8-byte DCID and SCID, no token, a payload no key opens
// (loadtest/flood sends the same).
func junkInitial(rng *rand.Rand) []byte {
	const size = 1200
	p := make([]byte, size)
	p[0] = 0xC0 | byte(rng.IntN(4))
	binary.BigEndian.PutUint32(p[1:], 1)
	p[5] = 8
	binary.BigEndian.PutUint64(p[6:], rng.Uint64())
	p[14] = 8
	binary.BigEndian.PutUint64(p[15:], rng.Uint64())
	p[23] = 0
	binary.BigEndian.PutUint16(p[24:], 0x4000|uint16(size-26))
	for i := 26; i+8 <= size; i += 8 {
		binary.BigEndian.PutUint64(p[i:], rng.Uint64())
	}
	return p
}

// TestListenerJunkInitialsKeepNoState: junk Initials at control.listen
// are answered with a Retry (smaller than what they answer) and counted,
// and start no connection: goroutines stay bounded (before the guard each
// started a quic-go connection, about four goroutines, for 10 s), no
// handshake is in progress, and a real peer still gets a session.
func TestListenerJunkInitialsKeepNoState(t *testing.T) {
	c := newCerts(t)
	a := newSide(c.creds(t, c.ca, "gw-a"), "eu-west", "gw-b")
	b := newSide(c.creds(t, c.ca, "gw-b"), "us-east", "gw-a")
	ctx := testCtx(t)
	l, err := Listen(ctx, "127.0.0.1:0", a.cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	junk, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer junk.Close()

	const n = 2000
	base := runtime.NumGoroutine()
	peak := base
	rng := rand.New(rand.NewPCG(1, 2))
	dst := l.Addr().(*net.UDPAddr)
	for i := range n {
		if _, err := junk.WriteToUDP(junkInitial(rng), dst); err != nil {
			t.Fatal(err)
		}
		if i%100 == 99 {
			peak = max(peak, runtime.NumGoroutine())
		}
	}
	// A Retry comes back, smaller than the Initial.
	_ = junk.SetReadDeadline(time.Now().Add(testTimeout))
	buf := make([]byte, 2048)
	m, _, err := junk.ReadFromUDP(buf)
	if err != nil {
		t.Fatalf("no answer to junk Initials: %v", err)
	}
	if buf[0]&0xF0 != 0xF0 || m >= 1200 {
		t.Errorf("answer of %d bytes, first byte %#x: want a Retry (0xF_) smaller than the 1,200-byte Initial", m, buf[0])
	}
	// Every junk Initial that reached quic-go is counted (the kernel may
	// drop some at the socket): wait until the count stops short of n
	// only by what never arrived, bounded by the test's context.
	var st ListenerStats
	for prev := uint64(0); ; prev = st.Dropped[DropRetry] + st.Dropped[DropQueue] {
		time.Sleep(50 * time.Millisecond)
		st = l.Stats()
		peak = max(peak, runtime.NumGoroutine())
		got := st.Dropped[DropRetry] + st.Dropped[DropQueue]
		if got >= n || (got == prev && got > 0) || ctx.Err() != nil {
			break
		}
	}
	t.Logf("%d junk Initials: dropped %v; goroutines %d → peak %d", n, st.Dropped, base, peak)
	if st.Dropped[DropRetry] == 0 {
		t.Errorf("no junk Initial counted as answered with a Retry: %v", st.Dropped)
	}
	if got := st.Dropped[DropRetry] + st.Dropped[DropQueue]; got > n {
		t.Errorf("%d counted for %d sent", got, n)
	}
	if st.HandshakesInProgress != 0 {
		t.Errorf("%d handshakes in progress after junk alone", st.HandshakesInProgress)
	}
	// Without the guard: about 4 goroutines per junk Initial.
	if peak-base > 100 {
		t.Errorf("goroutines %d → %d for %d junk Initials: state kept for unvalidated sources", base, peak, n)
	}

	// A real peer gets in (through a Retry of its own).
	retries := st.Dropped[DropRetry]
	ds, err := Dial(ctx, l.Addr().String(), "gw-a", b.cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer ds.Close()
	ls, err := l.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer ls.Close()
	if st := l.Stats(); st.Dropped[DropRetry] <= retries || st.HandshakesInProgress != 0 {
		t.Errorf("after a real session: retries %d (before %d), handshakes in progress %d", st.Dropped[DropRetry], retries, st.HandshakesInProgress)
	}
}

// TestGuardBoundsHandshakes: at most max handshakes in progress; one
// beyond is refused and counted as busy; a slot comes back when its
// connection is accepted or ends, and a timed-out handshake is counted.
func TestGuardBoundsHandshakes(t *testing.T) {
	g := newGuard(ratelog.New(nil, time.Second), 2)
	ci := &quic.ClientInfo{RemoteAddr: &net.UDPAddr{IP: net.IPv4(127, 0, 0, 9), Port: 4433}, AddrVerified: true}
	p1, cancel1 := context.WithCancelCause(context.Background())
	p2, cancel2 := context.WithCancelCause(context.Background())
	p3, cancel3 := context.WithCancelCause(context.Background())
	defer cancel3(nil)
	if _, err := g.connContext(p1, ci); err != nil {
		t.Fatal(err)
	}
	if _, err := g.connContext(p2, ci); err != nil {
		t.Fatal(err)
	}
	if _, err := g.connContext(p3, ci); err == nil {
		t.Fatal("a third handshake admitted with a bound of 2")
	}
	if st := g.stats(); st.Dropped[DropBusy] != 1 || st.HandshakesInProgress != 2 {
		t.Fatalf("after the refusal: %+v", st)
	}
	// quic-go cancels the connection's context with its close error.
	cancel1(&quic.HandshakeTimeoutError{})
	cancel2(&quic.ApplicationError{ErrorCode: 1})
	ctx := testCtx(t)
	for g.stats().HandshakesInProgress != 0 && ctx.Err() == nil {
		time.Sleep(time.Millisecond)
	}
	st := g.stats()
	if st.HandshakesInProgress != 0 || st.HandshakeTimeouts != 1 {
		t.Fatalf("after one timeout and one failure: %+v", st)
	}
	if _, err := g.connContext(p3, ci); err != nil {
		t.Fatalf("a slot freed but still refused: %v", err)
	}
}

func TestTriggerReasons(t *testing.T) {
	for _, r := range []string{DropQueue, DropMalformed, DropUnknownConn, DropVersion, DropUnexpected, DropOther} {
		if reasonIndex(r) == len(DropReasons)-1 && r != DropOther {
			t.Errorf("%s not in DropReasons", r)
		}
	}
	if len(DropReasons) != numGuardReasons {
		t.Errorf("numGuardReasons %d, DropReasons has %d", numGuardReasons, len(DropReasons))
	}
}

// TestDrainingQuietsStrayPackets: a gateway that is shutting down still
// receives packets of the connections it closed and of the dials it
// cancelled; they are counted, but only a live listener warns about them.
func TestDrainingQuietsStrayPackets(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn}))
	// A zero interval: every line is written, so a missing one is the level.
	g := newGuard(ratelog.New(log, 0), MaxHandshakes)
	g.drop(DropUnexpected, nil)
	if !strings.Contains(buf.String(), "level=WARN") {
		t.Fatalf("a live listener did not warn about an unexpected packet: %q", buf.String())
	}
	buf.Reset()
	g.draining.Store(true)
	g.drop(DropUnexpected, nil)
	g.drop(DropUnknownConn, nil)
	if buf.Len() != 0 {
		t.Errorf("a draining listener warned about stray packets: %q", buf.String())
	}
	g.drop(DropMalformed, nil)
	if !strings.Contains(buf.String(), "level=WARN") {
		t.Errorf("a draining listener stopped warning about malformed packets: %q", buf.String())
	}
	if st := g.stats(); st.Dropped[DropUnexpected] != 2 || st.Dropped[DropUnknownConn] != 1 {
		t.Errorf("stray packets not counted while draining: %v", st.Dropped)
	}
}
