//go:build linux

package tunnel

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/mrgw/mrgw/cc"
	"github.com/mrgw/mrgw/metaroce"
	"github.com/mrgw/mrgw/netem"
	"github.com/mrgw/mrgw/netio/netiotest"
	"github.com/mrgw/mrgw/pathmgr"
	"github.com/mrgw/mrgw/tunnel/control"
	"github.com/mrgw/mrgw/tunnel/tunneltest"
	"github.com/mrgw/mrgw/units"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// patience bounds every wait; a failure deadline, never a performance
// threshold.
const patience = 45 * time.Second

var loop4 = netip.MustParseAddrPort("127.0.0.1:0")

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	t.Cleanup(cancel)
	return ctx
}

// sessions establishes an authenticated control session between gateways
// "gw-a" (dialer) and "gw-b" (listener), both issued by one CA, and returns
// them with the routers their key events go to.
func sessions(t testing.TB, ctx context.Context) (a, b *control.Session, ra, rb *Router) {
	t.Helper()
	ra, rb = NewRouter(), NewRouter()
	p, err := tunneltest.LoopbackSessions(ctx, "gw-a", "gw-b", ra.OnEvent, rb.OnEvent)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p.A, p.B, ra, rb
}

// linkSpec is the emulated WAN of the tests.
type linkSpec struct {
	planes  int
	oneWay  time.Duration
	loss    float64
	rateBps uint64 // per plane
	queue   int
	paths   int
	window  int // per path
	rekey   uint64
	pacing  units.ByteRate
	// downAfter: consecutive timeouts that take a path down (0: 3).
	downAfter int
}

func wanSpec() linkSpec {
	return linkSpec{planes: 4, oneWay: 20 * time.Millisecond, loss: 0.01, rateBps: 25e6, queue: 512 << 10,
		paths: 32, window: 64 << 10, pacing: units.BitRate(4 * 25e6).Bytes()}
}

func wanProtocol(s linkSpec, listen bool) metaroce.Config {
	downAfter := s.downAfter
	if downAfter == 0 {
		downAfter = 3
	}
	return metaroce.Config{
		MTU: 1400, Paths: s.paths, Listen: listen, Seed: 11,
		CC:          cc.NewFixed(s.window, s.pacing),
		MaxAckDelay: 2 * time.Millisecond,
		Path: pathmgr.Config{
			InitialRTT: 2 * s.oneWay, MinPTO: 10 * time.Millisecond, MaxAckDelay: 2 * time.Millisecond,
			DownAfter: downAfter, ProbeInterval: 20 * time.Millisecond, MaxProbeInterval: time.Second, UpAfter: 2,
		},
	}
}

// rig is two tunnels through the emulator.
type rig struct {
	em     *netem.Emulator
	a, b   *Tunnel
	ra, rb *recorder
	spec   linkSpec
	key    uint32
}

func newRig(t testing.TB, spec linkSpec) *rig {
	t.Helper()
	ctx := testCtx(t)
	em, err := netem.New(context.Background(), netem.Config{
		Planes: spec.planes, Seed: 3, MaxDatagram: 4096,
		Link: netem.LinkConfig{Delay: spec.oneWay, Loss: spec.loss, Rate: spec.rateBps, QueueBytes: spec.queue},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { em.Close() })
	sa, sb, routA, routB := sessions(t, ctx)
	r := &rig{em: em, ra: newRecorder(), rb: newRecorder(), spec: spec}
	var realB netip.AddrPort
	r.a, err = New(sa, Config{
		Protocol: wanProtocol(spec, false), Listen: loop4, Router: routA, OnEvent: r.ra.On, RekeyAfter: spec.rekey,
		PlaneOf: func(_ int, local netip.AddrPort) int { return em.PlaneOf(netem.AtoB, local, realB) },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.a.Close() })
	r.b, err = New(sb, Config{Protocol: wanProtocol(spec, true), Listen: loop4, Router: routB, OnEvent: r.rb.On, RekeyAfter: spec.rekey})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.b.Close() })
	realB = r.b.LocalAddr()
	standA, err := em.Expose(netem.SiteA, r.a.LocalAddr())
	if err != nil {
		t.Fatal(err)
	}
	standB, err := em.Expose(netem.SiteB, realB)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.a.SetPeerAddr(standB); err != nil {
		t.Fatal(err)
	}
	if err := r.b.SetPeerAddr(standA); err != nil {
		t.Fatal(err)
	}
	return r
}

func countKind(kind metaroce.EventKind, n int) func([]metaroce.Event) bool {
	return func(evs []metaroce.Event) bool {
		k := 0
		for _, ev := range evs {
			if ev.Kind == kind {
				k++
			}
		}
		return k >= n
	}
}

// transfer is one run of random messages WRITten from a to b.
type transfer struct {
	src, dst []byte
	lens     []int
	conn     *metaroce.Conn
}

// start registers a destination at b and queues msgs random messages of
// 1..maxLen bytes on a new connection from a.
func (r *rig) start(t testing.TB, ctx context.Context, msgs, maxLen int, seed uint64) *transfer {
	t.Helper()
	return r.startOn(t, ctx, nil, 0, msgs, maxLen, seed)
}

// startOn is start on an existing connection (nil: a new one) and stream.
func (r *rig) startOn(t testing.TB, ctx context.Context, c *metaroce.Conn, stream uint32, msgs, maxLen int, seed uint64) *transfer {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 99))
	x := &transfer{lens: make([]int, msgs)}
	total := 0
	for i := range x.lens {
		x.lens[i] = 1 + rng.IntN(maxLen)
		total += x.lens[i]
	}
	x.src = make([]byte, total)
	crand.Read(x.src)
	x.dst = make([]byte, total)
	r.key++
	key := r.key
	if err := r.b.Endpoint().Call(ctx, func(_ time.Duration, ep *metaroce.Endpoint) {
		if err := ep.Memory().Register(key, x.dst); err != nil {
			t.Error(err)
		}
	}); err != nil {
		t.Fatal(err)
	}
	if c == nil {
		var err error
		if c, err = r.a.Connect(ctx); err != nil {
			t.Fatal(err)
		}
	}
	x.conn = c
	off := 0
	for _, n := range x.lens {
		if _, err := r.a.Endpoint().Write(ctx, c, stream, key, uint64(off), x.src[off:off+n]); err != nil {
			t.Fatal(err)
		}
		off += n
	}
	return x
}

// finish waits for every message to complete on both sides and checks that
// each completed once, in order, without error, and that the bytes are
// exact.
func (r *rig) finish(t testing.TB, ctx context.Context, x *transfer) {
	t.Helper()
	n := len(x.lens)
	r.ra.Wait(t, ctx, "send completions", countKind(metaroce.EventSendComplete, n))
	r.rb.Wait(t, ctx, "receive completions", countKind(metaroce.EventRecvComplete, n))
	for _, rec := range []*recorder{r.ra, r.rb} {
		var next uint64
		for _, ev := range rec.Events() {
			if ev.Kind != metaroce.EventSendComplete && ev.Kind != metaroce.EventRecvComplete {
				continue
			}
			if ev.Err != nil {
				t.Errorf("message %d failed: %v", ev.Seq, ev.Err)
			}
			if ev.Seq != next {
				t.Errorf("completion of message %d, want %d: lost, duplicated or out of order", ev.Seq, next)
			}
			next = ev.Seq + 1
		}
		if next != uint64(n) {
			t.Errorf("%d completions, want %d", next, n)
		}
	}
	if err := r.b.Endpoint().Call(ctx, func(time.Duration, *metaroce.Endpoint) {
		if !bytes.Equal(x.src, x.dst) {
			t.Error("received bytes differ from the sent ones")
		}
	}); err != nil {
		t.Fatal(err)
	}
}

// recorder collects the events of the goroutine under test.
type recorder = netiotest.Recorder[metaroce.Event]

func newRecorder() *recorder { return netiotest.NewRecorder[metaroce.Event]() }
