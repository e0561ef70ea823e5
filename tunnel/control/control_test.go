package control

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"go.uber.org/goleak"

	"github.com/mrgw/mrgw/netio/netiotest"
	"github.com/mrgw/mrgw/tunnel/control/wire"
	"github.com/mrgw/mrgw/tunnel/pki"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testTimeout bounds every wait in these tests; nothing asserts on time.
const testTimeout = 20 * time.Second

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// certs minted once per test: crypto/tls checks validity against the real
// clock, so they are valid around now.
type certs struct {
	ca, other *pki.CA
}

func newCerts(t *testing.T) *certs {
	t.Helper()
	now := time.Now().Add(-time.Hour)
	ca, err := pki.NewCA("mrgw test CA", now, 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	other, err := pki.NewCA("some other CA", now, 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return &certs{ca: ca, other: other}
}

// creds returns credentials for name issued by signer, trusting c.ca.
func (c *certs) creds(t *testing.T, signer *pki.CA, name string) *pki.Credentials {
	t.Helper()
	id, err := signer.Issue(name, time.Now().Add(-time.Hour), 12*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return c.ca.Credentials(id)
}

// recorder collects the events of the goroutine under test.
type recorder = netiotest.Recorder[Event]

func newRecorder() *recorder { return netiotest.NewRecorder[Event]() }

// countKind returns how many of r's events are of kind.
func countKind(r *recorder, kind EventKind) int {
	return r.Count(func(e Event) bool { return e.Kind == kind })
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

type side struct {
	cfg  Config
	rec  *recorder
	logs *syncBuffer
}

func newSide(cr *pki.Credentials, region string, expected ...string) *side {
	s := &side{rec: newRecorder(), logs: &syncBuffer{}}
	s.cfg = Config{
		Credentials: cr,
		Local: LocalInfo{
			Name: cr.Identity.Name, Region: region, Capabilities: []string{"ecn", "gso"},
			Planes: []netip.AddrPort{
				netip.MustParseAddrPort("127.0.0.1:47001"),
				netip.MustParseAddrPort("127.0.0.1:47002"),
			},
			NumPaths: 16,
		},
		ExpectedPeers:     expected,
		KeepaliveInterval: 20 * time.Millisecond,
		KeepaliveMisses:   3,
		KeyLifetime:       -1,
		HandshakeTimeout:  5 * time.Second,
		Logger:            slog.New(slog.NewTextHandler(s.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		OnEvent:           s.rec.Add,
	}
	return s
}

// pair establishes a session from dialer to listener over loopback.
func pair(t *testing.T, ctx context.Context, lst, dlr *side) (ls, ds *Session, l *Listener) {
	t.Helper()
	l, err := Listen(ctx, "127.0.0.1:0", lst.cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	ds, err = Dial(ctx, l.Addr().String(), lst.cfg.Local.Name, dlr.cfg)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() { ds.Close() })
	ls, err = l.Accept(ctx)
	if err != nil {
		t.Fatalf("Accept: %v", err)
	}
	t.Cleanup(func() { ls.Close() })
	return ls, ds, l
}

func TestHandshakeBothWaysAndKeys(t *testing.T) {
	c := newCerts(t)
	a := newSide(c.creds(t, c.ca, "gw-a"), "eu-west", "gw-b")
	b := newSide(c.creds(t, c.ca, "gw-b"), "us-east", "gw-a")
	for _, tc := range []struct {
		name     string
		lst, dlr *side
	}{{"b dials a", a, b}, {"a dials b", b, a}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testCtx(t)
			ls, ds, _ := pair(t, ctx, tc.lst, tc.dlr)

			// Each side sees the other's Hello, name checked against its cert.
			for _, x := range []struct {
				s    *Session
				want *side
			}{{ls, tc.dlr}, {ds, tc.lst}} {
				p := x.s.Peer()
				w := x.want.cfg.Local
				if p.Name != w.Name || p.Region != w.Region || p.NumPaths != w.NumPaths ||
					strings.Join(p.Capabilities, ",") != "ecn,gso" || len(p.Planes) != 2 || p.Planes[1] != w.Planes[1] ||
					p.Version != wire.ProtocolVersion || p.Addr == nil {
					t.Fatalf("peer info %+v, want %+v", p, w)
				}
			}

			seen := map[[32]byte]string{}
			for epoch := uint32(0); epoch < 3; epoch++ {
				ls1, lr := ls.Keys(epoch)
				ds1, dr := ds.Keys(epoch)
				if ls1 != dr || ds1 != lr {
					t.Fatalf("epoch %d: the two sides disagree on the keys", epoch)
				}
				if ls1 == lr {
					t.Fatalf("epoch %d: send == recv", epoch)
				}
				for _, k := range [][32]byte{ls1, lr} {
					if prev, dup := seen[k]; dup {
						t.Fatalf("epoch %d reuses a key of %s", epoch, prev)
					}
					seen[k] = "an earlier epoch or direction"
				}
				if ls1 == ([32]byte{}) {
					t.Fatal("zero key")
				}
			}
		})
	}
}

// TestKeysAreBoundToTheConnection: two sessions between the same gateways
// get unrelated keys (the exporter is per TLS session).
func TestKeysAreBoundToTheConnection(t *testing.T) {
	c := newCerts(t)
	ctx := testCtx(t)
	a := newSide(c.creds(t, c.ca, "gw-a"), "eu", "gw-b")
	b := newSide(c.creds(t, c.ca, "gw-b"), "us", "gw-a")
	ls1, _, _ := pair(t, ctx, a, b)
	ls2, _, _ := pair(t, ctx, a, b)
	k1, _ := ls1.Keys(0)
	k2, _ := ls2.Keys(0)
	if k1 == k2 {
		t.Fatal("two connections derived the same key")
	}
}

// refusals records a side's OnRefused calls.
type refusals struct {
	mu     sync.Mutex
	errs   []error
	notify chan struct{}
}

func newRefusals() *refusals { return &refusals{notify: make(chan struct{}, 16)} }

func (r *refusals) on(_ net.Addr, err error) {
	r.mu.Lock()
	r.errs = append(r.errs, err)
	r.mu.Unlock()
	r.notify <- struct{}{}
}

func (r *refusals) get() []error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.errs)
}

// TestRefusals: a handshake with a foreign CA, an expired
// certificate or none is refused by the side that checks it, and that side
// reports it (OnRefused, with its reason) and logs it at warn, also when
// the refusal happens inside TLS. Before, crypto/tls refused those unseen:
// nothing was logged and mrgw_control_sessions_total{result="refused"} did
// not move.
func TestRefusals(t *testing.T) {
	c := newCerts(t)
	good := c.creds(t, c.ca, "gw-a")
	expired := func(name string) *pki.Credentials {
		id, err := c.ca.Issue(name, time.Now().Add(-48*time.Hour), 24*time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return c.ca.Credentials(id)
	}
	const byListener, byDialer = "listener", "dialer"
	cases := []struct {
		name        string
		listener    *pki.Credentials
		dialer      *pki.Credentials
		dialName    string
		dialerNoCrt bool
		want        error
		refuser     string // the side that refuses, reports and logs
		reason      string
	}{
		{name: "client cert from another CA", listener: good, dialer: c.creds(t, c.other, "gw-b"),
			dialName: "gw-a", want: ErrBadCertificate, refuser: byListener, reason: ReasonUnknownCA},
		{name: "server cert from another CA", listener: c.creds(t, c.other, "gw-a"), dialer: c.creds(t, c.ca, "gw-b"),
			dialName: "gw-a", want: ErrBadCertificate, refuser: byDialer, reason: ReasonUnknownCA},
		{name: "client without certificate", listener: good, dialer: c.creds(t, c.ca, "gw-b"), dialerNoCrt: true,
			dialName: "gw-a", want: ErrBadCertificate, refuser: byListener, reason: ReasonNoCertificate},
		{name: "client certificate expired", listener: good, dialer: expired("gw-b"),
			dialName: "gw-a", want: ErrBadCertificate, refuser: byListener, reason: ReasonExpired},
		{name: "server certificate expired", listener: expired("gw-a"), dialer: c.creds(t, c.ca, "gw-b"),
			dialName: "gw-a", want: ErrBadCertificate, refuser: byDialer, reason: ReasonExpired},
		{name: "client name not expected", listener: good, dialer: c.creds(t, c.ca, "gw-x"),
			dialName: "gw-a", want: ErrUnknownPeer, refuser: byListener, reason: ReasonUnknownPeer},
		{name: "server name not the one dialed", listener: c.creds(t, c.ca, "gw-x"), dialer: c.creds(t, c.ca, "gw-b"),
			dialName: "gw-a", want: ErrBadCertificate, refuser: byDialer, reason: ReasonUnknownPeer},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testCtx(t)
			lst := newSide(tc.listener, "eu", "gw-b")
			lref := newRefusals()
			lst.cfg.OnRefused = lref.on
			l, err := Listen(ctx, "127.0.0.1:0", lst.cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			dlr := newSide(tc.dialer, "us", "gw-a")
			dref := newRefusals()
			dlr.cfg.OnRefused = dref.on
			var s *Session
			if tc.dialerNoCrt {
				cfg, err := dlr.cfg.withDefaults()
				if err != nil {
					t.Fatal(err)
				}
				noCert := &pki.Credentials{CAs: tc.dialer.CAs, Pool: tc.dialer.Pool}
				s, err = dial(ctx, l.Addr().String(), tc.dialName, cfg, noCert.ClientTLS(tc.dialName), cfg.Logger)
				if !errors.Is(err, tc.want) {
					t.Fatalf("dial without certificate: %v, want %v", err, tc.want)
				}
			} else {
				s, err = Dial(ctx, l.Addr().String(), tc.dialName, dlr.cfg)
				if !errors.Is(err, tc.want) {
					t.Fatalf("Dial: %v, want %v", err, tc.want)
				}
			}
			if s != nil {
				s.Close()
				t.Fatal("a refused Dial returned a session")
			}
			if got := errors.Is(err, ErrRefusedLocally); got != (tc.refuser == byDialer) {
				t.Errorf("Dial error %v: ErrRefusedLocally %v, want %v", err, got, tc.refuser == byDialer)
			}
			refuser, other := lst, dlr
			rref, oref := lref, dref
			if tc.refuser == byDialer {
				refuser, other, rref, oref = dlr, lst, dref, lref
			}
			// The refusing side reports it (the listener possibly after
			// Dial returned: wait for it).
			select {
			case <-rref.notify:
			case <-ctx.Done():
				t.Fatalf("the %s never reported its refusal; its log: %s", tc.refuser, refuser.logs.String())
			}
			errs := rref.get()
			if len(errs) != 1 || RefusalReason(errs[0]) != tc.reason {
				t.Fatalf("%s OnRefused got %v, want one refusal for %s", tc.refuser, errs, tc.reason)
			}
			logs := refuser.logs.String()
			if !strings.Contains(logs, "level=WARN msg=\"control: refused peer\"") || !strings.Contains(logs, "reason="+tc.reason) {
				t.Fatalf("%s log lacks a warn line with reason=%s: %s", tc.refuser, tc.reason, logs)
			}
			// Nothing may come out of Accept, and the other side refused
			// nothing.
			actx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
			defer cancel()
			if s, err := l.Accept(actx); err == nil {
				s.Close()
				t.Fatal("listener accepted a refused peer")
			}
			if errs := oref.get(); len(errs) != 0 {
				t.Fatalf("the side that was refused reported refusals of its own: %v (its log: %s)", errs, other.logs.String())
			}
		})
	}
}

func TestDialRefusesUnexpectedNameBeforeConnecting(t *testing.T) {
	c := newCerts(t)
	d := newSide(c.creds(t, c.ca, "gw-b"), "us", "gw-a")
	// Port 9 on loopback: nothing listens, and nothing must be sent anyway.
	_, err := Dial(testCtx(t), "127.0.0.1:9", "gw-z", d.cfg)
	if !errors.Is(err, ErrUnknownPeer) {
		t.Fatalf("err = %v, want ErrUnknownPeer", err)
	}
}

func TestConfigValidation(t *testing.T) {
	c := newCerts(t)
	cr := c.creds(t, c.ca, "gw-a")
	base := newSide(cr, "eu", "gw-b").cfg
	bad := []func(*Config){
		func(c *Config) { c.Credentials = nil },
		func(c *Config) { c.Local.Name = "gw-other" },
		func(c *Config) { c.ExpectedPeers = nil },
		func(c *Config) { c.Local.Region = strings.Repeat("r", 300) },
		func(c *Config) { c.KeepaliveInterval = -time.Second },
	}
	for i, mut := range bad {
		cfg := base
		mut(&cfg)
		if _, err := Listen(testCtx(t), "127.0.0.1:0", cfg); !errors.Is(err, ErrConfig) {
			t.Errorf("case %d: %v, want ErrConfig", i, err)
		}
	}
}

func TestKeyRotation(t *testing.T) {
	c := newCerts(t)
	ctx := testCtx(t)
	a := newSide(c.creds(t, c.ca, "gw-a"), "eu", "gw-b")
	b := newSide(c.creds(t, c.ca, "gw-b"), "us", "gw-a")
	ls, ds, _ := pair(t, ctx, a, b)

	for want := uint32(1); want <= 2; want++ {
		got, err := ds.RotateKeys(ctx)
		if err != nil || got != want {
			t.Fatalf("RotateKeys = %d, %v; want %d", got, err, want)
		}
		// The listener installed the matching receive key before acking.
		ev := a.rec.WaitFor(t, ctx, "EventRecvKey", func(e Event) bool { return e.Kind == EventRecvKey && e.Epoch == want })
		sendKey, _ := ds.Keys(want)
		_, recvKey := ls.Keys(want)
		if ev.RecvKey != sendKey || ev.RecvKey != recvKey || ev.Session != ls {
			t.Fatalf("epoch %d: receive key in event does not match the dialer's send key", want)
		}
		sev := b.rec.WaitFor(t, ctx, "EventSendKey", func(e Event) bool { return e.Kind == EventSendKey && e.Epoch == want })
		if sev.SendKey != sendKey {
			t.Fatal("send key in event is not Keys(epoch).send")
		}
		if s, r := ds.Epochs(); s != want || r != 0 {
			t.Fatalf("dialer epochs %d/%d, want %d/0", s, r, want)
		}
		if s, r := ls.Epochs(); s != 0 || r != want {
			t.Fatalf("listener epochs %d/%d, want 0/%d", s, r, want)
		}
	}
	// The other direction rotates independently.
	if got, err := ls.RotateKeys(ctx); err != nil || got != 1 {
		t.Fatalf("listener RotateKeys = %d, %v", got, err)
	}
	if s, r := ds.Epochs(); s != 2 || r != 1 {
		t.Fatalf("dialer epochs %d/%d, want 2/1", s, r)
	}
	// Concurrent requests share one rotation instead of racing epochs.
	var wg sync.WaitGroup
	got := make([]uint32, 4)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], _ = ds.RotateKeys(ctx)
		}()
	}
	wg.Wait()
	s, _ := ds.Epochs()
	for _, g := range got {
		if g < 3 || g > s {
			t.Fatalf("concurrent rotations returned %v, final epoch %d", got, s)
		}
	}
	if _, r := ls.Epochs(); r != s {
		t.Fatalf("peers disagree after concurrent rotations: %d vs %d", r, s)
	}
}

func TestKeyRotationOnTimeLimit(t *testing.T) {
	c := newCerts(t)
	ctx := testCtx(t)
	a := newSide(c.creds(t, c.ca, "gw-a"), "eu", "gw-b")
	b := newSide(c.creds(t, c.ca, "gw-b"), "us", "gw-a")
	b.cfg.KeyLifetime = 30 * time.Millisecond // checked on each keepalive tick
	pair(t, ctx, a, b)
	b.rec.WaitFor(t, ctx, "a timed rotation", func(e Event) bool { return e.Kind == EventSendKey && e.Epoch == 2 })
	a.rec.WaitFor(t, ctx, "the peer installing it", func(e Event) bool { return e.Kind == EventRecvKey && e.Epoch == 2 })
	if n := countKind(a.rec, EventSendKey); n != 0 {
		t.Fatalf("the side without a key lifetime rotated %d times", n)
	}
}

func TestPathSetup(t *testing.T) {
	c := newCerts(t)
	ctx := testCtx(t)
	a := newSide(c.creds(t, c.ca, "gw-a"), "eu", "gw-b")
	b := newSide(c.creds(t, c.ca, "gw-b"), "us", "gw-a")
	ls, ds, _ := pair(t, ctx, a, b)
	paths := []wire.Path{{ID: 1, SourcePort: 50001}, {ID: 7, SourcePort: 50007}}
	ids, err := ds.SetupPaths(ctx, paths)
	if err != nil || len(ids) != 2 || ids[0] != 1 || ids[1] != 7 {
		t.Fatalf("SetupPaths = %v, %v", ids, err)
	}
	ev := a.rec.WaitFor(t, ctx, "EventPathSetup", func(e Event) bool { return e.Kind == EventPathSetup })
	if len(ev.Paths) != 2 || ev.Paths[1] != paths[1] {
		t.Fatalf("event paths %v", ev.Paths)
	}
	if pp := ls.PeerPaths(); len(pp) != 2 || pp[0] != paths[0] {
		t.Fatalf("PeerPaths %v", pp)
	}
}

// udpRelay forwards one client's datagrams to a server and back, and can
// silently drop everything: a peer that vanishes without a CONNECTION_CLOSE.
type udpRelay struct {
	front, back *net.UDPConn
	client      atomic.Pointer[net.UDPAddr]
	drop        atomic.Bool
	wg          sync.WaitGroup
}

func newRelay(t *testing.T, server net.Addr) *udpRelay {
	front, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	back, err := net.DialUDP("udp", nil, server.(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	r := &udpRelay{front: front, back: back}
	r.wg.Add(2)
	go func() { // client -> server
		defer r.wg.Done()
		buf := make([]byte, 65536)
		for {
			n, from, err := front.ReadFromUDP(buf)
			if err != nil {
				return
			}
			r.client.Store(from)
			if !r.drop.Load() {
				back.Write(buf[:n])
			}
		}
	}()
	go func() { // server -> client
		defer r.wg.Done()
		buf := make([]byte, 65536)
		for {
			n, err := back.Read(buf)
			if err != nil {
				return
			}
			if c := r.client.Load(); c != nil && !r.drop.Load() {
				front.WriteToUDP(buf[:n], c)
			}
		}
	}()
	t.Cleanup(r.close)
	return r
}

func (r *udpRelay) close() {
	r.front.Close()
	r.back.Close()
	r.wg.Wait()
}

func TestKeepaliveRTTAndDeadPeer(t *testing.T) {
	c := newCerts(t)
	ctx := testCtx(t)
	a := newSide(c.creds(t, c.ca, "gw-a"), "eu", "gw-b")
	b := newSide(c.creds(t, c.ca, "gw-b"), "us", "gw-a")
	l, err := Listen(ctx, "127.0.0.1:0", a.cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	relay := newRelay(t, l.Addr())
	ds, err := Dial(ctx, relay.front.LocalAddr().String(), "gw-a", b.cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer ds.Close()
	ls, err := l.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer ls.Close()

	for _, x := range []struct {
		s   *Session
		rec *recorder
	}{{ds, b.rec}, {ls, a.rec}} {
		ev := x.rec.WaitFor(t, ctx, "an RTT sample", func(e Event) bool { return e.Kind == EventRTT })
		if ev.RTT <= 0 || x.s.RTT() <= 0 {
			t.Fatalf("RTT sample %v, smoothed %v", ev.RTT, x.s.RTT())
		}
	}
	if ds.Err() != nil || ls.Err() != nil {
		t.Fatal("sessions ended while the peer was answering")
	}

	relay.drop.Store(true) // the peer vanishes: no CONNECTION_CLOSE reaches anyone
	for _, x := range []struct {
		s   *Session
		rec *recorder
	}{{ds, b.rec}, {ls, a.rec}} {
		ev := x.rec.WaitFor(t, ctx, "EventClosed", func(e Event) bool { return e.Kind == EventClosed })
		if !errors.Is(ev.Err, ErrPeerDead) || !errors.Is(x.s.Err(), ErrPeerDead) {
			t.Fatalf("closed with %v / %v, want ErrPeerDead", ev.Err, x.s.Err())
		}
		if !strings.Contains(ev.Err.Error(), "keepalives unanswered") {
			t.Fatalf("dead peer found by %v, want our keepalive (not QUIC's idle timeout)", ev.Err)
		}
	}
	if _, err := ds.RotateKeys(ctx); !errors.Is(err, ErrPeerDead) {
		t.Fatalf("RotateKeys on a dead session: %v", err)
	}
}

func TestDrain(t *testing.T) {
	c := newCerts(t)
	ctx := testCtx(t)
	a := newSide(c.creds(t, c.ca, "gw-a"), "eu", "gw-b")
	b := newSide(c.creds(t, c.ca, "gw-b"), "us", "gw-a")
	var sawDraining atomic.Bool
	a.cfg.OnEvent = func(e Event) {
		if e.Kind == EventDrainRequested {
			// The gateway stops new flows here, before the ack leaves.
			sawDraining.Store(e.Session.Draining())
		}
		a.rec.Add(e)
	}
	ls, ds, _ := pair(t, ctx, a, b)
	if err := ds.Drain(ctx); err != nil {
		t.Fatalf("Drain: %v", err)
	}
	if !sawDraining.Load() {
		t.Fatal("peer was not marked draining when told")
	}
	ev := a.rec.WaitFor(t, ctx, "EventClosed", func(e Event) bool { return e.Kind == EventClosed })
	if !errors.Is(ev.Err, ErrDrained) || !errors.Is(ls.Err(), ErrDrained) {
		t.Fatalf("listener ended with %v, want ErrDrained", ev.Err)
	}
	if !errors.Is(ds.Err(), ErrDrained) {
		t.Fatalf("dialer ended with %v, want ErrDrained", ds.Err())
	}
	if countKind(a.rec, EventDrainRequested) != 1 {
		t.Fatal("no EventDrainRequested on the peer")
	}
}

func TestCloseIsSeenByPeer(t *testing.T) {
	c := newCerts(t)
	ctx := testCtx(t)
	a := newSide(c.creds(t, c.ca, "gw-a"), "eu", "gw-b")
	b := newSide(c.creds(t, c.ca, "gw-b"), "us", "gw-a")
	ls, ds, _ := pair(t, ctx, a, b)
	ds.Close()
	if !errors.Is(ds.Err(), ErrClosed) {
		t.Fatalf("closer: %v", ds.Err())
	}
	ev := a.rec.WaitFor(t, ctx, "EventClosed", func(e Event) bool { return e.Kind == EventClosed })
	if !errors.Is(ev.Err, ErrClosed) || !errors.Is(ls.Err(), ErrClosed) {
		t.Fatalf("peer saw %v", ev.Err)
	}
}

// rawDial opens a QUIC connection with valid credentials but speaks raw
// bytes on the control stream, to feed the listener malformed messages.
func rawDial(t *testing.T, ctx context.Context, addr string, cr *pki.Credentials) (*quic.Conn, *quic.Stream) {
	t.Helper()
	conn, err := quic.DialAddr(ctx, addr, cr.ClientTLS("gw-a"), &quic.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.CloseWithError(0, "") })
	str, err := conn.OpenStreamSync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return conn, str
}

func TestListenerRefusesBadHello(t *testing.T) {
	c := newCerts(t)
	oversize := []byte{wire.FrameVersion, byte(wire.TypeHello), 0xff, 0, 0, 0}
	truncated, _ := wire.Append(nil, wire.Hello{Version: 1, Name: "gw-b"})
	truncated = truncated[:len(truncated)-1]
	wrongName, _ := wire.Append(nil, wire.Hello{Version: 1, Name: "gw-a"})
	wrongVersion, _ := wire.Append(nil, wire.Hello{Version: 9, Name: "gw-b"})
	notHello, _ := wire.Append(nil, wire.Ping{Seq: 1})
	for _, tc := range []struct {
		name string
		send []byte
		want error
	}{
		{"oversize", oversize, ErrProtocol},
		{"truncated", truncated, ErrProtocol},
		{"name differs from certificate", wrongName, ErrUnknownPeer},
		{"version", wrongVersion, ErrVersionMismatch},
		{"not a Hello", notHello, ErrProtocol},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testCtx(t)
			lst := newSide(c.creds(t, c.ca, "gw-a"), "eu", "gw-b")
			refused := make(chan error, 1)
			lst.cfg.OnRefused = func(_ net.Addr, err error) { refused <- err }
			l, err := Listen(ctx, "127.0.0.1:0", lst.cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			conn, str := rawDial(t, ctx, l.Addr().String(), c.creds(t, c.ca, "gw-b"))
			if _, err := str.Write(tc.send); err != nil {
				t.Fatal(err)
			}
			str.Close() // end of stream: a truncated frame stays truncated
			select {
			case err := <-refused:
				if !errors.Is(err, tc.want) {
					t.Fatalf("refused with %v, want %v", err, tc.want)
				}
			case <-ctx.Done():
				t.Fatal("listener never refused")
			}
			// The refusal reaches the dialer as a close code.
			select {
			case <-conn.Context().Done():
				if !errors.Is(classify(context.Cause(conn.Context())), tc.want) {
					t.Fatalf("dialer sees %v", context.Cause(conn.Context()))
				}
			case <-ctx.Done():
				t.Fatal("connection not closed")
			}
		})
	}
}

func TestListenerCloseAndContext(t *testing.T) {
	c := newCerts(t)
	ctx, cancel := context.WithCancel(testCtx(t))
	a := newSide(c.creds(t, c.ca, "gw-a"), "eu", "gw-b")
	l, err := Listen(ctx, "127.0.0.1:0", a.cfg)
	if err != nil {
		t.Fatal(err)
	}
	cancel() // the listener follows its context
	if _, err := l.Accept(testCtx(t)); !errors.Is(err, ErrClosed) {
		t.Fatalf("Accept after cancel: %v", err)
	}
	l.Close() // idempotent
}
