//go:build linux

package host

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"net/netip"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/mrgw/mrgw/flowctl"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Every process of a test gets its own loopback IP.
const (
	srcIP = "127.0.0.2"
	dstIP = "127.0.0.3"
)

var gwIPs = []string{"127.0.0.10", "127.0.0.11"}

type world struct {
	gws      []*fakeGW
	src, dst *Host
}

func hostConfig(name, region string, listen netip.AddrPort, gws []*fakeGW, credit uint64) Config {
	cfg := Config{
		Name: name, Region: region, Listen: listen,
		Protocol:      testProto(),
		DeadAfter:     300 * time.Millisecond,
		OpenTimeout:   3 * time.Second,
		FailAfter:     10 * time.Second,
		ReconnectMin:  20 * time.Millisecond,
		ReconnectMax:  200 * time.Millisecond,
		PingEvery:     50 * time.Millisecond,
		ReceiveCredit: credit,
	}
	for _, g := range gws {
		cfg.Gateways = append(cfg.Gateways, g.addr())
	}
	return cfg
}

// newWorld starts nGW fake gateways, a source host eu/src and a
// destination host us/dst that grants credit.
// gatewayOf is the fake gateway carrying flow f.
func (w *world) gatewayOf(t *testing.T, f *Flow) *fakeGW {
	t.Helper()
	for _, g := range w.gws {
		if g.addr() == f.Gateway() {
			return g
		}
	}
	t.Fatalf("flow goes through %v, no such gateway", f.Gateway())
	return nil
}

func newWorld(t *testing.T, nGW int, credit uint64) *world {
	t.Helper()
	w := &world{}
	for i := range nGW {
		w.gws = append(w.gws, newFakeGW(t, gwIPs[i], 1<<30))
	}
	sa, da := freeAddr(t, srcIP), freeAddr(t, dstIP)
	for _, g := range w.gws {
		g.knowHost(sa)
		g.knowHost(da)
	}
	var err error
	if w.src, err = New(hostConfig("src", "eu", sa, w.gws, credit)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.src.Close() })
	if w.dst, err = New(hostConfig("dst", "us", da, w.gws, credit)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.dst.Close() })
	for _, h := range []*Host{w.src, w.dst} {
		if st := h.Stats(); st.ConnectFailures != 0 || st.Connects != uint64(nGW) {
			t.Fatalf("%s: %d connections, %d failed attempts, want %d and 0", h.Name(), st.Connects, st.ConnectFailures, nGW)
		}
		for _, s := range h.Gateways() {
			if !s.Ready {
				t.Fatalf("%s: gateway %v not registered", h.Name(), s.Addr)
			}
		}
	}
	return w
}

// collector reads the destination's deliveries and checks that no (flow,
// sequence) is reported twice.
type collector struct {
	mu    sync.Mutex
	seen  map[[2]uint64]Delivery
	dups  int
	bytes uint64
	ch    chan struct{}
}

func collect(t *testing.T, h *Host) *collector {
	c := &collector{seen: map[[2]uint64]Delivery{}, ch: make(chan struct{}, 1)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for d := range h.Received() {
			c.mu.Lock()
			k := [2]uint64{d.Flow, d.Seq}
			if _, ok := c.seen[k]; ok {
				c.dups++
			}
			c.seen[k] = d
			c.bytes += d.Len
			c.mu.Unlock()
			select {
			case c.ch <- struct{}{}:
			default:
			}
		}
	}()
	t.Cleanup(func() { h.Close(); <-done })
	return c
}

func (c *collector) count() (n, dups int, bytes uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.seen), c.dups, c.bytes
}

// waitFor waits until at least n distinct messages were delivered.
func (c *collector) waitFor(t *testing.T, ctx context.Context, n int) {
	t.Helper()
	for {
		if got, _, _ := c.count(); got >= n {
			return
		}
		select {
		case <-c.ch:
		case <-ctx.Done():
			got, _, _ := c.count()
			t.Fatalf("delivered %d of %d messages", got, n)
		}
	}
}

// message is one Write of a test: where it goes and its bytes.
type message struct {
	addr uint64
	data []byte
}

// layout cuts [base, base+size) into random messages of 1..maxLen bytes
// filled with random bytes.
func layout(rng *rand.Rand, base, size uint64, maxLen int) []message {
	var out []message
	for off := uint64(0); off < size; {
		n := min(uint64(1+rng.IntN(maxLen)), size-off)
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		out = append(out, message{addr: base + off, data: b})
		off += n
	}
	return out
}

// writeAll writes msgs on f, pausing between messages if pace is set, and
// returns their Pendings.
func writeAll(ctx context.Context, f *Flow, key uint32, msgs []message, pace time.Duration) ([]*Pending, error) {
	var ps []*Pending
	for _, m := range msgs {
		p, err := f.Write(ctx, key, m.addr, m.data)
		if p != nil {
			ps = append(ps, p)
		}
		if err != nil {
			return ps, err
		}
		if pace > 0 {
			time.Sleep(pace)
		}
	}
	return ps, nil
}

func segments(ps []*Pending) int {
	n := 0
	for _, p := range ps {
		_, k := p.Seqs()
		n += k
	}
	return n
}

// checkMemory compares the destination's region key with what was written.
func checkMemory(t *testing.T, ctx context.Context, h *Host, key uint32, msgs []message) {
	t.Helper()
	for i, m := range msgs {
		got := make([]byte, len(m.data))
		if err := h.ReadMemory(ctx, key, m.addr, got); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, m.data) {
			t.Fatalf("message %d at %d (%d bytes): destination memory differs", i, m.addr, len(m.data))
		}
	}
}

// TestTransferByteExact moves random messages over two flows through one
// gateway: every byte lands, each (flow, sequence) is delivered once,
// messages larger than half the credit are segmented, and no flow ever
// has more than its credit in flight.
func TestTransferByteExact(t *testing.T) {
	ctx := testCtx(t)
	const credit = 256 << 10
	w := newWorld(t, 1, credit)
	const region = 4 << 20
	if err := w.dst.RegisterMemory(1, make([]byte, 2*region)); err != nil {
		t.Fatal(err)
	}
	col := collect(t, w.dst)
	rng := rand.New(rand.NewPCG(1, 2))
	var flows []*Flow
	var msgs [][]message
	for i := range 2 {
		f, err := w.src.OpenFlow(ctx, "us", "dst", FlowOptions{Class: "bulk"})
		if err != nil {
			t.Fatal(err)
		}
		if got := f.Credit(); got != credit {
			t.Fatalf("credit %d, want %d", got, credit)
		}
		flows = append(flows, f)
		msgs = append(msgs, layout(rng, uint64(i)*region, region, 200<<10))
	}
	pend := make([][]*Pending, len(flows))
	errs := make([]error, len(flows))
	var wg sync.WaitGroup
	for i, f := range flows {
		wg.Go(func() { pend[i], errs[i] = writeAll(ctx, f, 1, msgs[i], 0) })
	}
	wg.Wait()
	want := 0
	for i := range flows {
		if errs[i] != nil {
			t.Fatalf("flow %d: %v", i, errs[i])
		}
		for _, p := range pend[i] {
			if err := p.Wait(ctx); err != nil {
				t.Fatalf("flow %d: %v", i, err)
			}
		}
		segs := segments(pend[i])
		if segs <= len(msgs[i]) {
			t.Errorf("flow %d: %d segments for %d messages: nothing was segmented", i, segs, len(msgs[i]))
		}
		want += segs
	}
	col.waitFor(t, ctx, want)
	checkMemory(t, ctx, w.dst, 1, append(msgs[0], msgs[1]...))
	n, dups, b := col.count()
	if n != want || dups != 0 || b != 2*region {
		t.Fatalf("delivered %d (want %d), %d twice, %d bytes (want %d)", n, want, dups, b, 2*region)
	}
	// Each flow's sequences are 0..segments-1.
	for i, f := range flows {
		for s := range uint64(segments(pend[i])) {
			if _, ok := col.seen[[2]uint64{f.ID(), s}]; !ok {
				t.Fatalf("flow %d: sequence %d never delivered", i, s)
			}
		}
	}
	maxOut, maxOver, _ := w.gws[0].measures(t)
	if maxOver != 0 {
		t.Fatalf("a flow had %d bytes beyond its credit in flight (max %d)", maxOver, maxOut)
	}
	if maxOut < credit/2 {
		t.Fatalf("at most %d bytes in flight: the credit was never used", maxOut)
	}
	for _, f := range flows {
		var hostMax uint64
		_ = w.src.call(ctx, func(time.Duration) { hostMax = f.maxOutstand })
		if hostMax > credit {
			t.Fatalf("source had %d bytes outstanding, credit %d", hostMax, credit)
		}
	}

	// SEND: lands in the posted buffer; one larger than a segment is refused.
	buf := make([]byte, 5000)
	if err := w.dst.PostRecv(ctx, 77, buf); err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("mrgw"), 1250)
	p, err := flows[0].Send(ctx, 77, data)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	col.waitFor(t, ctx, want+1)
	if !bytes.Equal(buf, data) {
		t.Fatal("SEND: posted buffer differs")
	}
	if _, err := flows[0].Send(ctx, 78, make([]byte, credit)); !errors.Is(err, ErrSendTooLarge) {
		t.Fatalf("large SEND: %v, want ErrSendTooLarge", err)
	}
	for _, f := range flows {
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := flows[0].Write(ctx, 1, 0, []byte{1}); !errors.Is(err, ErrFlowClosed) {
		t.Fatalf("Write after Close: %v", err)
	}
	w.gws[0].checkErrs(t)
}

// TestOpenRefused: an OPEN the gateway refuses returns a typed error at
// once, and a host whose gateways never answer fails New within its
// OpenTimeout.
func TestOpenRefused(t *testing.T) {
	ctx := testCtx(t)
	w := newWorld(t, 1, 1<<20)
	for _, tc := range []struct {
		region, endpoint string
		code             flowctl.Code
	}{
		{"us", "nobody", flowctl.CodeUnknownEndpoint},
		{"mars", "dst", flowctl.CodeUnknownRegion},
	} {
		// The gateway's typed refusal, not the OpenTimeout (3 s here,
		// ErrOpenTimeout): the code can only come from the gateway's
		// answer, so no clock is read (a loaded machine may deschedule
		// the test for longer than any bound a timer would check).
		_, err := w.src.OpenFlow(ctx, tc.region, tc.endpoint, FlowOptions{})
		var fe *flowctl.Error
		if !errors.As(err, &fe) || fe.Code != tc.code {
			t.Fatalf("open %s/%s: %v, want code %v", tc.region, tc.endpoint, err, tc.code)
		}
	}

	cfg := hostConfig("lonely", "eu", netip.MustParseAddrPort(srcIP+":0"), nil, 0)
	cfg.Gateways = []netip.AddrPort{freeAddr(t, "127.0.0.12")} // nobody listens
	cfg.OpenTimeout = 300 * time.Millisecond
	// New gives up after OpenTimeout (a New that waited for ever would
	// not return within the test's timeout) with the error that says why.
	if h, err := New(cfg); !errors.Is(err, ErrNoGateway) {
		if h != nil {
			h.Close()
		}
		t.Fatalf("New without a gateway: %v, want ErrNoGateway", err)
	}
	w.gws[0].checkErrs(t)
}

// TestGatewayFailover kills the gateway carrying a flow in the middle of
// a transfer: the flow resumes through the other gateway, every message
// lands byte-exact and completes, and none is delivered twice.
func TestGatewayFailover(t *testing.T) {
	ctx := testCtx(t)
	w := newWorld(t, 2, 1<<20)
	const flows, region = 4, 2 << 20
	if err := w.dst.RegisterMemory(1, make([]byte, flows*region)); err != nil {
		t.Fatal(err)
	}
	col := collect(t, w.dst)
	rng := rand.New(rand.NewPCG(3, 4))
	fs := make([]*Flow, flows)
	msgs := make([][]message, flows)
	total := 0
	for i := range fs {
		var err error
		if fs[i], err = w.src.OpenFlow(ctx, "us", "dst", FlowOptions{}); err != nil {
			t.Fatal(err)
		}
		msgs[i] = layout(rng, uint64(i)*region, region, 64<<10)
		total += len(msgs[i]) // below half the credit: one segment each
	}
	victimAddr := fs[0].Gateway()
	var victim *fakeGW
	for _, g := range w.gws {
		if g.addr() == victimAddr {
			victim = g
		}
	}
	if victim == nil {
		t.Fatalf("flow goes through %v, no such gateway", victimAddr)
	}
	pend := make([][]*Pending, flows)
	errs := make([]error, flows)
	var wg sync.WaitGroup
	for i, f := range fs {
		wg.Go(func() { pend[i], errs[i] = writeAll(ctx, f, 1, msgs[i], time.Millisecond) })
	}
	col.waitFor(t, ctx, total/4)
	victim.kill()
	t.Logf("killed gateway %v after %d of %d messages", victimAddr, func() int { n, _, _ := col.count(); return n }(), total)
	wg.Wait()
	for i := range fs {
		if errs[i] != nil {
			t.Fatalf("flow %d: %v", i, errs[i])
		}
		for _, p := range pend[i] {
			if err := p.Wait(ctx); err != nil {
				t.Fatalf("flow %d: %v", i, err)
			}
		}
	}
	col.waitFor(t, ctx, total)
	time.Sleep(200 * time.Millisecond) // room for any late duplicate
	n, dups, b := col.count()
	if n != total || dups != 0 || b != flows*region {
		t.Fatalf("delivered %d of %d, %d twice, %d bytes of %d", n, total, dups, b, flows*region)
	}
	var all []message
	for _, m := range msgs {
		all = append(all, m...)
	}
	checkMemory(t, ctx, w.dst, 1, all)
	if got := fs[0].Gateway(); got == victimAddr || !got.IsValid() {
		t.Fatalf("flow 0 still on %v", got)
	}
	st := w.src.Stats()
	if st.Reopens == 0 {
		t.Fatal("no flow was re-opened")
	}
	t.Logf("source: %+v", st)
	t.Logf("destination: %+v", w.dst.Stats())
	for _, g := range w.gws {
		g.checkErrs(t)
	}
}

// TestResetResendsAndDedups: a gateway withholds DONE, so the source
// cannot know its messages arrived, then resets the flow. The source
// re-sends everything through the other gateway; the destination drops
// every duplicate, reports nothing twice, and its DONE completes the
// source's messages.
func TestResetResendsAndDedups(t *testing.T) {
	ctx := testCtx(t)
	w := newWorld(t, 2, 4<<20)
	if err := w.dst.RegisterMemory(1, make([]byte, 1<<20)); err != nil {
		t.Fatal(err)
	}
	col := collect(t, w.dst)
	f, err := w.src.OpenFlow(ctx, "us", "dst", FlowOptions{})
	if err != nil {
		t.Fatal(err)
	}
	g := w.gatewayOf(t, f)
	g.dropDone.Store(true)
	msgs := layout(rand.New(rand.NewPCG(5, 6)), 0, 1<<20, 64<<10)
	ps, err := writeAll(ctx, f, 1, msgs, 0)
	if err != nil {
		t.Fatal(err)
	}
	col.waitFor(t, ctx, len(msgs))
	for i, p := range ps {
		select {
		case <-p.Done():
			t.Fatalf("message %d completed without DONE", i)
		default:
		}
	}
	g.resetFlow(t, f.ID())
	for _, p := range ps {
		if err := p.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(100 * time.Millisecond)
	n, dups, _ := col.count()
	if n != len(msgs) || dups != 0 {
		t.Fatalf("delivered %d of %d, %d twice", n, len(msgs), dups)
	}
	checkMemory(t, ctx, w.dst, 1, msgs)
	if got := f.Gateway(); got == g.addr() {
		t.Fatalf("flow still on the gateway that reset it")
	}
	if d := w.dst.Stats().Duplicates; d == 0 {
		t.Fatal("the destination saw no duplicate: nothing was re-sent")
	}
	if r := w.src.Stats().Reopens; r != 1 {
		t.Fatalf("%d re-opens, want 1", r)
	}
	for _, g := range w.gws {
		g.checkErrs(t)
	}
}

func TestDedup(t *testing.T) {
	var d dedup
	for _, s := range []uint64{0, 1, 2} {
		if d.has(s) || !d.room(s) {
			t.Fatalf("fresh %d", s)
		}
		d.add(s)
	}
	if d.below != 3 || !d.has(2) || d.has(3) {
		t.Fatalf("in order: below %d", d.below)
	}
	// Out of order (two streams of one flow interleaving after failover).
	d.add(5)
	d.add(4)
	if d.below != 3 || !d.has(5) || !d.has(4) || d.has(3) || d.has(6) {
		t.Fatalf("above the watermark: below %d, above %v", d.below, d.above)
	}
	d.add(3)
	if d.below != 6 || len(d.above) != 0 {
		t.Fatalf("hole filled: below %d, above %v", d.below, d.above)
	}
	d.add(1) // a duplicate below changes nothing
	if d.below != 6 {
		t.Fatal("duplicate moved the watermark")
	}
	// Resumed flow: starts at its resume point.
	r := dedup{below: 100}
	if !r.has(99) || r.has(100) {
		t.Fatal("resume point")
	}
	// The set above the watermark is bounded.
	var b dedup
	for i := range uint64(maxAbove) {
		b.add(i + 1)
	}
	if b.room(maxAbove+1) || !b.room(0) {
		t.Fatal("bound not enforced")
	}
	b.add(0)
	if b.below != maxAbove+1 || len(b.above) != 0 {
		t.Fatalf("after filling the hole: below %d, %d above", b.below, len(b.above))
	}
}

// TestDeliveryBackpressure: when the application does not read Received,
// completions wait in the host and their DONE is withheld; reading
// releases them, in order, once each.
func TestDeliveryBackpressure(t *testing.T) {
	ctx := testCtx(t)
	gw := newFakeGW(t, gwIPs[0], 1<<30)
	sa, da := freeAddr(t, srcIP), freeAddr(t, dstIP)
	gw.knowHost(sa)
	gw.knowHost(da)
	src, err := New(hostConfig("src", "eu", sa, []*fakeGW{gw}, 1<<20))
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dcfg := hostConfig("dst", "us", da, []*fakeGW{gw}, 1<<20)
	dcfg.DeliveryQueue = 2
	dst, err := New(dcfg)
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	if err := dst.RegisterMemory(1, make([]byte, 64<<10)); err != nil {
		t.Fatal(err)
	}
	f, err := src.OpenFlow(ctx, "us", "dst", FlowOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var ps []*Pending
	for i := range 6 {
		p, err := f.Write(ctx, 1, uint64(i)*1024, bytes.Repeat([]byte{byte(i)}, 1024))
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	if err := ps[1].Wait(ctx); err != nil {
		t.Fatal(err)
	}
	// Two fit in Received; the rest wait, so their DONE must not come.
	wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if err := ps[2].Wait(wctx); err == nil {
		t.Fatal("message 2 completed while the application had no room for it")
	}
	for i := range uint64(6) {
		select {
		case d := <-dst.Received():
			if d.Seq != i || d.Flow != f.ID() {
				t.Fatalf("delivery %d: %+v", i, d)
			}
		case <-ctx.Done():
			t.Fatalf("delivery %d never came", i)
		}
	}
	for _, p := range ps {
		if err := p.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case d, ok := <-dst.Received():
		if ok {
			t.Fatalf("extra delivery %+v", d)
		}
	case <-time.After(100 * time.Millisecond):
	}
	gw.checkErrs(t)
}

// TestRefusedMessageFailsFlow: a WRITE the destination refuses (unknown
// key) cannot succeed through any gateway, so the destination resets the
// flow with "bad request" and the source fails it instead of re-routing.
func TestRefusedMessageFailsFlow(t *testing.T) {
	ctx := testCtx(t)
	w := newWorld(t, 2, 1<<20)
	if err := w.dst.RegisterMemory(1, make([]byte, 4096)); err != nil {
		t.Fatal(err)
	}
	f, err := w.src.OpenFlow(ctx, "us", "dst", FlowOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := f.Write(ctx, 9, 0, make([]byte, 100))
	if err != nil {
		t.Fatal(err)
	}
	var fe *flowctl.Error
	if err := p.Wait(ctx); !errors.As(err, &fe) || fe.Code != flowctl.CodeBadRequest {
		t.Fatalf("WRITE to an unknown key: %v, want a bad-request flow error", err)
	}
	if _, err := f.Write(ctx, 1, 0, []byte{1}); !errors.As(err, &fe) {
		t.Fatalf("Write on a failed flow: %v", err)
	}
	if r := w.src.Stats().Reopens; r != 0 {
		t.Fatalf("%d re-opens: a refused message must not be re-routed", r)
	}
}

// TestResumeNeverPlacesAReportedMessageAgain: once a message was reported,
// the application may reuse its memory. A source that re-sends it from an
// older resume point (its DONE was lost with a gateway) must not
// overwrite that memory: the re-opened stream starts after the last
// reported message.
func TestResumeNeverPlacesAReportedMessageAgain(t *testing.T) {
	ctx := testCtx(t)
	w := newWorld(t, 2, 4<<20)
	region := make([]byte, 1<<20)
	if err := w.dst.RegisterMemory(1, region); err != nil {
		t.Fatal(err)
	}
	col := collect(t, w.dst)
	f, err := w.src.OpenFlow(ctx, "us", "dst", FlowOptions{})
	if err != nil {
		t.Fatal(err)
	}
	g := w.gatewayOf(t, f)
	g.dropDone.Store(true)
	msgs := layout(rand.New(rand.NewPCG(7, 8)), 0, 1<<20, 64<<10)
	ps, err := writeAll(ctx, f, 1, msgs, 0)
	if err != nil {
		t.Fatal(err)
	}
	col.waitFor(t, ctx, len(msgs))
	// The application takes its memory back after the deliveries.
	reused := bytes.Repeat([]byte{0xA5}, len(region))
	_ = w.dst.call(ctx, func(time.Duration) { copy(region, reused) })
	g.resetFlow(t, f.ID())
	for _, p := range ps {
		if err := p.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	got := make([]byte, len(region))
	if err := w.dst.ReadMemory(ctx, 1, 0, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, reused) {
		t.Fatal("a re-sent message was placed again over memory the application had reused")
	}
	if d := w.dst.Stats().Duplicates; d == 0 {
		t.Fatal("nothing was re-sent")
	}
}
