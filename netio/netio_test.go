//go:build linux

package netio

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/mrgw/mrgw/cc"
	"github.com/mrgw/mrgw/internal/ecn"
	"github.com/mrgw/mrgw/metaroce"
	"github.com/mrgw/mrgw/netio/netiotest"
	"github.com/mrgw/mrgw/netio/seal"
	"github.com/mrgw/mrgw/pathmgr"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// patience bounds every wait; it is a failure deadline, never a
// performance threshold.
const patience = 20 * time.Second

var loop4 = netip.MustParseAddrPort("127.0.0.1:0")

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	t.Cleanup(cancel)
	return ctx
}

// recorder collects the events of the goroutine under test.
type recorder = netiotest.Recorder[metaroce.Event]

func newRecorder() *recorder { return netiotest.NewRecorder[metaroce.Event]() }

// protoConfig has real-socket path timings (as the tunnel and the gateway
// use): with the data-center defaults (a 50 µs minimum probe timeout) a
// scheduling hiccup of this shared machine, under the race detector and
// other jobs, times every path out until the connection fails.
func protoConfig(listen bool) metaroce.Config {
	pc := pathmgr.DefaultConfig()
	pc.MinPTO, pc.MaxAckDelay = 50*time.Millisecond, 2*time.Millisecond
	return metaroce.Config{MTU: 1400, Paths: 4, Listen: listen, Seed: 7, CC: cc.NewFixed(128<<10, 0), Path: pc}
}

// onNetwork makes an endpoint's sockets those of n, the in-memory network:
// for tests of the driver's logic rather than of the kernel's sockets.
func onNetwork(n *netiotest.Network) func(*Config) {
	return func(c *Config) { c.Bind = BindOf(n.Listen) }
}

type pair struct {
	a, b   *Endpoint
	key    uint32 // the last memory key registered at b
	ra, rb *recorder
}

// newPair starts endpoint a (initiator, peer id 2 for b) and b (listener,
// peer id 1 for a) on loopback; sa and sb seal a's and b's side if set.
func newPair(t testing.TB, sa, sb Sealer, tweak func(*Config)) *pair {
	t.Helper()
	p := &pair{ra: newRecorder(), rb: newRecorder()}
	ca := Config{Protocol: protoConfig(false), Listen: loop4, OnEvent: p.ra.On}
	cb := Config{Protocol: protoConfig(true), Listen: loop4, OnEvent: p.rb.On}
	if tweak != nil {
		tweak(&ca)
		tweak(&cb)
	}
	var err error
	if p.a, err = New(ca); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.a.Close() })
	if p.b, err = New(cb); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.b.Close() })
	if err := p.a.AddPeer(Peer{ID: 2, Addr: p.b.LocalAddr(), Sealer: sa}); err != nil {
		t.Fatal(err)
	}
	if err := p.b.AddPeer(Peer{ID: 1, Addr: p.a.LocalAddr(), Sealer: sb}); err != nil {
		t.Fatal(err)
	}
	return p
}

// transfer WRITEs msgs random messages from a to b and checks that every
// one lands byte-exact and completes once on each side.
func (p *pair) transfer(t *testing.T, ctx context.Context, msgs, maxLen int) *metaroce.Conn {
	t.Helper()
	rng := rand.New(rand.NewPCG(1, 2))
	lens := make([]int, msgs)
	total := 0
	for i := range lens {
		lens[i] = 1 + rng.IntN(maxLen)
		total += lens[i]
	}
	src := make([]byte, total)
	if _, err := crand.Read(src); err != nil {
		t.Fatal(err)
	}
	dst := make([]byte, total)
	p.key++
	key := p.key
	if err := p.b.Call(ctx, func(_ time.Duration, ep *metaroce.Endpoint) {
		if err := ep.Memory().Register(key, dst); err != nil {
			t.Error(err)
		}
	}); err != nil {
		t.Fatal(err)
	}
	c, err := p.a.Connect(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	off := 0
	for _, n := range lens {
		if _, err := p.a.Write(ctx, c, 0, key, uint64(off), src[off:off+n]); err != nil {
			t.Fatal(err)
		}
		off += n
	}
	done := func(kind metaroce.EventKind) func([]metaroce.Event) bool {
		return func(evs []metaroce.Event) bool {
			n := 0
			for _, ev := range evs {
				if ev.Kind == kind {
					n++
				}
			}
			return n >= msgs
		}
	}
	p.ra.Wait(t, ctx, "send completions", done(metaroce.EventSendComplete))
	p.rb.Wait(t, ctx, "receive completions", done(metaroce.EventRecvComplete))
	// Once each, in order per stream, with no error.
	for _, r := range []*recorder{p.ra, p.rb} {
		var next uint64
		for _, ev := range r.Events() {
			if ev.Kind != metaroce.EventSendComplete && ev.Kind != metaroce.EventRecvComplete {
				continue
			}
			if ev.Err != nil {
				t.Errorf("message %d failed: %v", ev.Seq, ev.Err)
			}
			if ev.Seq != next {
				t.Errorf("completion for message %d, want %d (duplicate or out of order)", ev.Seq, next)
			}
			next = ev.Seq + 1
		}
	}
	// dst belongs to b's owner goroutine while registered: read it there.
	if err := p.b.Call(ctx, func(time.Duration, *metaroce.Endpoint) {
		if !bytes.Equal(src, dst) {
			t.Error("received bytes differ from the sent ones")
		}
	}); err != nil {
		t.Fatal(err)
	}
	return c
}

func TestTransferPlain(t *testing.T) {
	ctx := testCtx(t)
	p := newPair(t, nil, nil, nil)
	c := p.transfer(t, ctx, 300, 20000)
	sa, sb := p.a.Stats(), p.b.Stats()
	if sa.SocketsOpened < 2 {
		t.Errorf("a opened %d path sockets, want one per path (4)", sa.SocketsOpened)
	}
	if sa.Dropped() != 0 || sb.Dropped() != 0 {
		t.Errorf("drops: a %+v b %+v", sa, sb)
	}
	// A graceful close releases the path sockets, which linger, then close.
	if err := p.a.CloseConn(ctx, c); err != nil {
		t.Fatal(err)
	}
	p.ra.Wait(t, ctx, "close", func(evs []metaroce.Event) bool {
		for _, ev := range evs {
			if ev.Kind == metaroce.EventClosed {
				return true
			}
		}
		return false
	})
}

func TestLingeringSocketsClose(t *testing.T) {
	ctx := testCtx(t)
	p := newPair(t, nil, nil, func(c *Config) { c.Linger = 10 * time.Millisecond })
	c := p.transfer(t, ctx, 5, 3000)
	if err := p.a.CloseConn(ctx, c); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(patience)
	for p.a.Stats().PathSockets != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("path sockets still open: %d", p.a.Stats().PathSockets)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// sealPair is a Sealer over netio/seal with one fixed key per direction.
type sealPair struct {
	s *seal.Sealer
	o *seal.Opener
}

func (s *sealPair) Prefix() int                          { return seal.HeaderLen }
func (s *sealPair) Overhead() int                        { return seal.Overhead }
func (s *sealPair) Seal(dst, pt []byte) ([]byte, error)  { return s.s.Seal(dst, pt) }
func (s *sealPair) Open(dst, dgm []byte) ([]byte, error) { return s.o.Open(dst, dgm) }

func newSealers(t *testing.T) (a, b *sealPair) {
	t.Helper()
	k1 := seal.Key{Suite: seal.AES128GCM, Secret: bytes.Repeat([]byte{1}, 16)}
	k2 := seal.Key{Suite: seal.AES128GCM, Secret: bytes.Repeat([]byte{2}, 16)}
	mk := func(send, recv seal.Key) *sealPair {
		s, err := seal.NewSealer(send, 0)
		if err != nil {
			t.Fatal(err)
		}
		o, err := seal.NewOpener(recv)
		if err != nil {
			t.Fatal(err)
		}
		return &sealPair{s, o}
	}
	return mk(k1, k2), mk(k2, k1)
}

// TestSealedDropsBeforeProtocol: datagrams from a sealed peer's IP that do
// not open (replayed, tampered, short, of an unknown epoch) are counted by
// reason and never reach the protocol, and the connection goes on. On the
// in-memory network, so that the stranger can send from a's IP and every
// datagram arrives; with lent datagrams too (as GRO leaves them in the
// socket's buffer, which the kernel decides): they are opened where they
// lie. And once over real sockets.
func TestSealedDropsBeforeProtocol(t *testing.T) {
	t.Run("udp", func(t *testing.T) {
		ctx := testCtx(t)
		sa, sb := newSealers(t)
		p := newPair(t, sa, sb, nil)
		p.transfer(t, ctx, 50, 5000)
		// An attacker on a's address: a socket on 127.0.0.1 is "a" by IP.
		atk, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		defer atk.Close()
		to := net.UDPAddrFromAddrPort(p.b.LocalAddr())
		sealedDrops(t, ctx, p, sa, func(d []byte) {
			if _, err := atk.WriteToUDP(d, to); err != nil {
				t.Fatal(err)
			}
		})
	})
	for _, lend := range []bool{false, true} {
		t.Run(fmt.Sprintf("lend=%v", lend), func(t *testing.T) {
			ctx := testCtx(t)
			n := netiotest.NewNetwork()
			n.Lend = lend
			sa, sb := newSealers(t)
			p := newPair(t, sa, sb, onNetwork(n))
			p.transfer(t, ctx, 50, 5000)
			sealedDrops(t, ctx, p, sa, func(d []byte) {
				// A stranger on a's IP: it is "a" by IP.
				n.Inject(netip.MustParseAddrPort("127.0.0.1:9999"), p.b.LocalAddr(), d, ecn.ECT0)
			})
		})
	}
}

// sealedDrops sends, through send, a genuine datagram sealed with a's key
// three times and three broken ones to b, checks b's counts, and that the
// connection still works.
func sealedDrops(t *testing.T, ctx context.Context, p *pair, sa *sealPair, send func([]byte)) {
	t.Helper()
	// A genuine datagram, sealed by a's key: first delivered, then replayed.
	ping := make([]byte, 64)
	genuine, err := sa.s.Seal(nil, ping)
	if err != nil {
		t.Fatal(err)
	}
	tampered := bytes.Clone(genuine)
	tampered[seal.HeaderLen+3] ^= 1
	short := genuine[:seal.Overhead-1]
	wrongEpoch := bytes.Clone(genuine)
	wrongEpoch[1] = 9
	var before metaroce.EndpointStats
	p.b.Call(ctx, func(_ time.Duration, ep *metaroce.Endpoint) { before = ep.Stats })
	for _, d := range [][]byte{genuine, genuine, genuine, tampered, short, wrongEpoch} {
		send(d)
	}
	want := map[seal.Error]uint64{seal.ErrReplayed: 2, seal.ErrAuth: 1, seal.ErrTooShort: 1, seal.ErrUnknownEpoch: 1}
	deadline := time.Now().Add(patience)
	for {
		st := p.b.Stats()
		ok := true
		for e, n := range want {
			if st.OpenErrors[e] < n {
				ok = false
			}
		}
		if ok {
			for e, n := range want {
				if st.OpenErrors[e] != n {
					t.Errorf("%v: %d, want %d", e, st.OpenErrors[e], n)
				}
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("drops not counted: %+v", st.OpenErrors)
		}
		time.Sleep(5 * time.Millisecond)
	}
	// Exactly one of them reached the protocol: the first genuine one, an
	// all-zero packet that the protocol counts as a bad version (no real
	// traffic does).
	var after metaroce.EndpointStats
	p.b.Call(ctx, func(_ time.Duration, ep *metaroce.Endpoint) { after = ep.Stats })
	if got := after.BadVersion - before.BadVersion; got != 1 {
		t.Errorf("protocol saw %d of the attacker's datagrams, want 1", got)
	}
	// The connection still works.
	p.ra.Reset()
	p.rb.Reset()
	p.transfer(t, ctx, 20, 5000)
}

func TestUnknownSourceDropped(t *testing.T) {
	ctx := testCtx(t)
	n := netiotest.NewNetwork()
	e, err := New(Config{Protocol: protoConfig(true), Listen: loop4, Bind: BindOf(n.Listen)})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	for range 10 {
		n.Inject(netip.MustParseAddrPort("127.0.0.1:9999"), e.LocalAddr(), []byte("hello"), ecn.ECT0)
	}
	deadline := time.Now().Add(patience)
	for e.Stats().UnknownSource < 10 {
		if time.Now().After(deadline) {
			t.Fatalf("unknown-source drops %d, want 10", e.Stats().UnknownSource)
		}
		time.Sleep(5 * time.Millisecond)
	}
	var st metaroce.EndpointStats
	e.Call(ctx, func(_ time.Duration, ep *metaroce.Endpoint) { st = ep.Stats })
	if st.Received != 0 {
		t.Errorf("protocol saw %d datagrams from an unknown source", st.Received)
	}
	if got := e.Stats().UnknownSource; got != 10 {
		t.Errorf("unknown-source drops %d, want exactly 10", got)
	}
}

func TestAcceptPeer(t *testing.T) {
	ctx := testCtx(t)
	rb := newRecorder()
	n := netiotest.NewNetwork()
	b, err := New(Config{Protocol: protoConfig(true), Listen: loop4, OnEvent: rb.On, Bind: BindOf(n.Listen),
		AcceptPeer: func(netip.AddrPort) (PeerID, bool) { return 77, true }})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	a, err := New(Config{Protocol: protoConfig(false), Listen: loop4, Bind: BindOf(n.Listen)})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if err := a.AddPeer(Peer{ID: 5, Addr: b.LocalAddr()}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Connect(ctx, 5); err != nil {
		t.Fatal(err)
	}
	rb.Wait(t, ctx, "accepted connection", func(evs []metaroce.Event) bool {
		for _, ev := range evs {
			if ev.Kind == metaroce.EventConnected && ev.Conn.Peer() == 77 {
				return true
			}
		}
		return false
	})
}

func TestCallAfterClose(t *testing.T) {
	e, err := New(Config{Protocol: protoConfig(true), Listen: loop4})
	if err != nil {
		t.Fatal(err)
	}
	e.Close()
	if err := e.Call(context.Background(), func(time.Duration, *metaroce.Endpoint) {}); err != ErrClosed {
		t.Fatalf("Call after Close: %v, want ErrClosed", err)
	}
	e.Close() // idempotent
}

// TestCallCancelled: a Call whose context ends before the owner starts its
// function withdraws it (it never runs); one whose function has started
// waits for it and reports success. Either way the caller may touch what
// the function touches (run with -race).
func TestCallCancelled(t *testing.T) {
	e, err := New(Config{Protocol: protoConfig(true), Listen: loop4})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ctx := testCtx(t)

	// Hold the owner in a Do, so that the next Call queues behind it.
	started, release := make(chan struct{}), make(chan struct{})
	if err := e.Do(ctx, func(time.Duration, *metaroce.Endpoint) { close(started); <-release }); err != nil {
		t.Fatal(err)
	}
	<-started
	cctx, cancel := context.WithCancel(ctx)
	ran := false
	res := make(chan error, 1)
	go func() { res <- e.Call(cctx, func(time.Duration, *metaroce.Endpoint) { ran = true }) }()
	time.Sleep(10 * time.Millisecond) // let it queue (either way the result below must hold)
	cancel()
	if err := <-res; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Call returned %v, want context.Canceled", err)
	}
	close(release)
	if err := e.Call(ctx, func(time.Duration, *metaroce.Endpoint) {}); err != nil {
		t.Fatal(err)
	}
	if ran {
		t.Error("the function of a withdrawn Call ran")
	}

	// A function that has started is waited for.
	inside, finish := make(chan struct{}), make(chan struct{})
	cctx, cancel = context.WithCancel(ctx)
	done := false
	go func() {
		<-inside
		cancel() // while the function runs
		time.Sleep(10 * time.Millisecond)
		close(finish)
	}()
	err = e.Call(cctx, func(time.Duration, *metaroce.Endpoint) { close(inside); <-finish; done = true })
	if err != nil || !done {
		t.Fatalf("Call cancelled while running returned %v (function finished: %v), want nil after it finished", err, done)
	}
}
