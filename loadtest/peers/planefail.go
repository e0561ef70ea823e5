//go:build linux

package peers

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mrgw/mrgw/internal/report"
	"github.com/mrgw/mrgw/internal/sleep"
	"github.com/mrgw/mrgw/loadtest/bulk"
	"github.com/mrgw/mrgw/loadtest/tunemu"
	"github.com/mrgw/mrgw/metaroce"
	"github.com/mrgw/mrgw/netem"

	"github.com/mrgw/mrgw/units"
)

// Plane failure among peers: PlaneFailurePlanes planes behind ECMP share
// the capacity; one fails (both directions, what is in flight included)
// while a bulk transfer runs, and stays down. A TCP stream or a QUIC
// connection is one 5-tuple on one plane: if its plane dies it stalls
// (retransmission timeouts, backing off) and nothing moves it; mrgw
// sprays its paths over every plane and its path manager takes the dead
// plane's paths out of use.

// PlaneFailurePlanes is the plane count of the plane-failure scenario.
const PlaneFailurePlanes = 4

// Phases of the plane-failure scenario, as the rows' Variant.
const (
	PhaseBefore    = "before"
	PhaseFirst     = "first-1s"
	PhaseSustained = "sustained"
)

// pfFirst is the first phase after the failure.
const pfFirst = time.Second

// pfDrain bounds the wait for mrgw's last messages after the measurement.
const pfDrain = 30 * time.Second

// PlaneFailure runs each selected system (mrgw, tcp-bbr and tcp-cubic with
// 8 streams, quic with 8 streams on one connection) over 4 planes of
// CapacityBps/4 at the first of Options.RTTs (default 50 ms) and the
// first of Options.Losses (default 0). After Warmup (default 2 s) it
// measures Before (2 s; 0.5 s with Quick), then fails one plane and
// measures the first second and the rest of Duration (default 6 s; at
// least 1.5 s). The failed plane is the one that carries the system's
// first flow from A to B (plane 0 for mrgw, which uses them all): the
// failure always hits the system (for one QUIC connection, the 1-in-4 case
// in which a random plane failure stalls it entirely).
//
// Three rows per system, Variant before, first-1s and sustained: goodput
// at the receiver and its fraction of the full capacity (the surviving
// planes carry at most 3/4 of it), MRGWRatio = mrgw's over the row's in
// the same phase. mrgw's rows carry MessagesLost and MessagesDuplicated:
// every message written must complete once at the receiver (it waits up
// to 30 s after the measurement). TCP and QUIC deliver a stream's bytes
// or stall it; their notes say how many streams stalled. Duration: about
// (Warmup + 2 s + Duration + 1 s) per system: about 45 s with the
// defaults.
func PlaneFailure(ctx context.Context, o Options) ([]report.Row, error) {
	if len(o.RTTs) == 0 {
		o.RTTs = []time.Duration{50 * time.Millisecond}
	}
	if len(o.Losses) == 0 {
		o.Losses = []float64{0}
	}
	if len(o.Systems) == 0 {
		o.Systems = fairnessSystems
	}
	o.MRGWExtraCC = "none"
	o = o.withDefaults()
	systems, err := o.selected("plane-failure-peers", fairnessSystems)
	if err != nil {
		return nil, err
	}
	before := 2 * time.Second
	if o.Quick {
		before = 500 * time.Millisecond
	}
	after := max(o.Duration, pfFirst+500*time.Millisecond)
	l := o.link(PlaneFailurePlanes, o.CapacityBps, o.RTTs[0], o.Losses[0])
	var rows []report.Row
	var sk skipped
	for i, s := range systems {
		o.progress(i+1, len(systems), "plane-failure "+s)
		if needsTUN(s) && sk.err != nil {
			continue
		}
		tl := timeline{warmup: o.Warmup, before: before, after: after}
		var r pfResult
		var err error
		rctx := o.record(ctx, "peers-plane-failure", l.group(), s)
		switch s {
		case MRGW:
			r, err = pfMRGW(rctx, l, o, tl)
		case TCPBBR, TCPCubic:
			r, err = pfTCP(rctx, s[len("tcp-"):], l, tl)
		case QUIC:
			r, err = pfQUIC(rctx, l, tl)
		}
		if sk.add(err) {
			continue
		}
		if err != nil {
			return finish(rows, fmt.Errorf("peers: plane-failure %s: %w", s, err), &sk)
		}
		rows = append(rows, pfRows(s, l, r, tl)...)
	}
	setPhaseRatios(rows)
	return finish(rows, nil, &sk)
}

// timeline is the plane-failure run's schedule.
type timeline struct{ warmup, before, after time.Duration }

// pfResult is one system's measurement.
type pfResult struct {
	bps         [3]float64 // before, first second, sustained
	cc          string
	emulator    string
	streams     int
	paths       int
	plane       int // the failed plane
	onPlane     int // flows with a direction on the failed plane
	flows       int
	stalled     int    // flows that moved nothing in the sustained phase (-1: not known)
	stuck       uint64 // bytes the stalled flows' senders accepted and never delivered
	lost, dup   *int64
	failed      int
	retransmits uint64
	downDrops   uint64
}

func pfRows(system string, l Link, r pfResult, tl timeline) []report.Row {
	var rows []report.Row
	for k, phase := range []string{PhaseBefore, PhaseFirst, PhaseSustained} {
		rw := report.Row{
			Scenario: "peers-plane-failure", System: system, CC: r.cc, Planes: l.Planes,
			RTTms: float64(l.RTT) / 1e6, Loss: l.Loss, Streams: r.streams,
			CapacityBps: l.Capacity(), GoodputBps: r.bps[k], Fraction: r.bps[k] / l.Capacity(),
			Retransmits: r.retransmits, Emulator: r.emulator, Variant: phase,
			Fault:        fmt.Sprintf("plane %d fails after %v", r.plane, tl.warmup+tl.before),
			MessagesLost: r.lost, MessagesDuplicated: r.dup, MessagesFailed: r.failed,
		}
		if system == MRGW {
			rw.Paths = r.paths
			rw.Note = fmt.Sprintf("sprays over all %d planes", l.Planes)
		} else {
			rw.Note = fmt.Sprintf("%d of %d flows cross plane %d", r.onPlane, r.flows, r.plane)
			if r.stalled >= 0 && phase == PhaseSustained {
				rw.Note += fmt.Sprintf("; %d stalled (nothing delivered)", r.stalled)
				if r.stuck > 0 {
					rw.Note += fmt.Sprintf(", holding at least %.1f MiB accepted from the sender and not delivered at the end", float64(r.stuck)/(1<<20))
				}
			}
		}
		rows = append(rows, rw)
	}
	return rows
}

// setPhaseRatios sets MRGWRatio on every peer row to mrgw's goodput in the
// same phase over the row's.
func setPhaseRatios(rows []report.Row) {
	m := map[string]float64{}
	for _, r := range rows {
		if r.System == MRGW {
			m[r.Variant] = r.GoodputBps
		}
	}
	for i := range rows {
		r := &rows[i]
		g, ok := m[r.Variant]
		if r.System == MRGW || !ok {
			continue
		}
		if r.GoodputBps > 0 {
			r.MRGWRatio = g / r.GoodputBps
		} else {
			r.Note = report.JoinNote(r.Note, "moved nothing: no ratio")
		}
	}
}

// run waits out the warm-up, then samples the flows' counters before the
// failure, at it, a second after and at the end; fail fails the plane.
// It returns each phase's total goodput, the flows that moved nothing in
// the sustained phase and, if written counts what each flow's sender
// accepted, the bytes those stalled flows accepted but had not delivered
// at the end.
func (tl timeline) run(ctx context.Context, counts, written []*atomic.Uint64, fail func() error) ([3]float64, int, uint64, error) {
	var bps [3]float64
	snap := func() (time.Time, []uint64) {
		v := make([]uint64, len(counts))
		for i, c := range counts {
			v[i] = c.Load()
		}
		return time.Now(), v
	}
	sum := func(a, b []uint64) (s uint64) {
		for i := range a {
			s += b[i] - a[i]
		}
		return s
	}
	stop := sample(ctx, loads(counts), tl.warmup, tl.warmup+tl.before+tl.after)
	defer stop()
	if err := sleep.Ctx(ctx, tl.warmup); err != nil {
		return bps, 0, 0, err
	}
	t0, c0 := snap()
	if err := sleep.Ctx(ctx, tl.before); err != nil {
		return bps, 0, 0, err
	}
	t1, c1 := snap()
	mark(ctx, "plane fails")
	if err := fail(); err != nil {
		return bps, 0, 0, err
	}
	if err := sleep.Ctx(ctx, pfFirst); err != nil {
		return bps, 0, 0, err
	}
	t2, c2 := snap()
	if err := sleep.Ctx(ctx, tl.after-pfFirst); err != nil {
		return bps, 0, 0, err
	}
	t3, c3 := snap()
	bps[0] = float64(units.Throughput(float64(sum(c0, c1)), t1.Sub(t0).Seconds()))
	bps[1] = float64(units.Throughput(float64(sum(c1, c2)), t2.Sub(t1).Seconds()))
	bps[2] = float64(units.Throughput(float64(sum(c2, c3)), t3.Sub(t2).Seconds()))
	stalled := 0
	var stuck uint64
	for i := range counts {
		if c3[i] == c2[i] {
			stalled++
			// A write still blocked in the call is not counted yet, and
			// the reader may see its bytes first: a lower bound, never
			// below 0.
			if written != nil {
				if w := written[i].Load(); w > c3[i] {
					stuck += w - c3[i]
				}
			}
		}
	}
	return bps, stalled, stuck, nil
}

// pfTCP runs 8 TCP streams from A to B through tunemu and fails the plane
// of the first one.
func pfTCP(ctx context.Context, algo string, l Link, tl timeline) (pfResult, error) {
	const streams = 8
	te, err := tunemu.New(ctx, l.tunConfig())
	if err != nil {
		return pfResult{}, err
	}
	defer te.Close()
	// Each accepted stream counts into the counter of its client port.
	var mu sync.Mutex
	byPort := map[uint16]*atomic.Uint64{}
	counter := func(port uint16) *atomic.Uint64 {
		mu.Lock()
		defer mu.Unlock()
		c, ok := byPort[port]
		if !ok {
			c = new(atomic.Uint64)
			byPort[port] = c
		}
		return c
	}
	p, err := dialTCP(ctx, te, algo, streams, func(c net.Conn) {
		ra, _ := netip.ParseAddrPort(c.RemoteAddr().String())
		n := counter(ra.Port())
		countReads(c, n)
	})
	if err != nil {
		return pfResult{}, err
	}
	defer p.close()
	r := pfResult{streams: streams, flows: streams, emulator: EmuTUN}
	counts := make([]*atomic.Uint64, len(p.conns))
	for i, c := range p.conns {
		la, _ := netip.ParseAddrPort(c.LocalAddr().String())
		ra, _ := netip.ParseAddrPort(c.RemoteAddr().String())
		counts[i] = counter(la.Port())
		if i == 0 {
			r.plane = te.PlaneOf(netem.AtoB, netem.ProtoTCP, la, ra)
		}
	}
	for _, c := range p.conns {
		la, _ := netip.ParseAddrPort(c.LocalAddr().String())
		ra, _ := netip.ParseAddrPort(c.RemoteAddr().String())
		if te.PlaneOf(netem.AtoB, netem.ProtoTCP, la, ra) == r.plane || te.PlaneOf(netem.BtoA, netem.ProtoTCP, ra, la) == r.plane {
			r.onPlane++
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	written := make([]*atomic.Uint64, len(p.conns))
	for i, c := range p.conns {
		written[i] = new(atomic.Uint64)
		wg.Add(1)
		go func() {
			defer wg.Done()
			tcpWriteLoop(c, stop, written[i])
		}()
	}
	r.bps, r.stalled, r.stuck, err = tl.run(ctx, counts, written, func() error { return te.Fail(r.plane) })
	cc, retx := tcpCCs(p.conns)
	r.retransmits += retx
	close(stop)
	p.close()
	wg.Wait()
	if err != nil {
		return r, err
	}
	st := te.Stats()
	r.downDrops = st.Links[netem.AtoB][r.plane].DownDrops + st.Links[netem.BtoA][r.plane].DownDrops
	r.cc = cc
	if cc != algo {
		return r, fmt.Errorf("peers: asked for TCP congestion control %s, sockets use %s", algo, cc)
	}
	if r.downDrops == 0 {
		return r, errors.New("the failed plane dropped nothing: the failure was not exercised")
	}
	return r, nil
}

// pfQUIC runs one QUIC connection with 8 streams and fails its plane.
func pfQUIC(ctx context.Context, l Link, tl timeline) (pfResult, error) {
	const streams = DefaultQuicStreams
	te, err := tunemu.New(ctx, l.tunConfig())
	if err != nil {
		return pfResult{}, err
	}
	defer te.Close()
	q, err := dialQUIC(ctx, te)
	if err != nil {
		return pfResult{}, err
	}
	runCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	cleanup := func() {
		cancel()
		q.close()
		wg.Wait()
	}
	var got, sent atomic.Uint64
	q.countStreams(runCtx, &wg, &got)
	for range streams {
		s, err := q.cli.OpenStreamSync(ctx)
		if err != nil {
			cleanup()
			return pfResult{}, err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 64<<10)
			for runCtx.Err() == nil {
				n, err := s.Write(buf)
				sent.Add(uint64(n))
				if err != nil {
					return
				}
			}
		}()
	}
	la := q.cc.LocalAddr().(*net.UDPAddr).AddrPort()
	ra := q.sc.LocalAddr().(*net.UDPAddr).AddrPort()
	r := pfResult{streams: streams, flows: 1, onPlane: 1, cc: "quic-go", emulator: EmuTUN}
	r.plane = te.PlaneOf(netem.AtoB, netem.ProtoUDP, la, ra)
	r.bps, r.stalled, r.stuck, err = tl.run(ctx, []*atomic.Uint64{&got}, []*atomic.Uint64{&sent}, func() error { return te.Fail(r.plane) })
	cleanup()
	if err != nil {
		return r, err
	}
	st := te.Stats()
	r.downDrops = st.Links[netem.AtoB][r.plane].DownDrops + st.Links[netem.BtoA][r.plane].DownDrops
	if r.downDrops == 0 {
		return r, errors.New("the failed plane dropped nothing: the failure was not exercised")
	}
	return r, nil
}

// pfMRGW runs mrgw's bulk transfer through emu, fails plane 0, and then
// checks that every message written completes once at both ends.
func pfMRGW(ctx context.Context, l Link, o Options, tl timeline) (pfResult, error) {
	const plane = 0
	em, err := netem.New(ctx, l.emuConfig())
	if err != nil {
		return pfResult{}, err
	}
	defer em.Close()
	protoA, ccName, err := protocol(false, l, o, false)
	if err != nil {
		return pfResult{}, err
	}
	protoB, _, err := protocol(false, l, o, true)
	if err != nil {
		return pfResult{}, err
	}
	src := make([]byte, bulkMsg)
	dst := make([]byte, bulkMsg)
	var got atomic.Uint64
	tr := bulk.New(src, bulk.Options{Outstanding: bulkOutstanding(l), FailedOutOfOrder: true,
		OnComplete: func(ev metaroce.Event, _ uint64) { got.Add(ev.Len) }})
	p, err := newTunnelPair(ctx, emuNet{em, l.IPMTU()}, protoA, protoB, tr.Sender, tr.Receiver)
	if err != nil {
		return pfResult{}, err
	}
	defer p.close()
	var regErr error
	if err := p.b.Endpoint().Call(ctx, func(_ time.Duration, ep *metaroce.Endpoint) { regErr = ep.Memory().Register(1, dst) }); err != nil {
		return pfResult{}, err
	}
	if regErr != nil {
		return pfResult{}, regErr
	}
	if _, err := p.a.Connect(ctx); err != nil {
		return pfResult{}, err
	}
	r := pfResult{plane: plane, cc: ccName, emulator: EmuUDP, flows: 1, onPlane: 1, stalled: -1, paths: o.Paths}
	setPathProbe(ctx, pathProbe(p.a, tr.SenderConn))
	r.bps, _, _, err = tl.run(ctx, []*atomic.Uint64{&got}, nil, func() error { return em.Fail(plane) })
	if err != nil {
		return r, err
	}
	tr.Stop()
	// Every message written must complete at both ends.
	counts, err := tr.Drain(ctx, pfDrain)
	if err != nil {
		lost := counts.Lost()
		r.lost = &lost
		return r, fmt.Errorf("%d messages still incomplete %v after the measurement", lost, pfDrain)
	}
	lost := counts.Lost()
	dup := int64(counts.Dups)
	r.failed = counts.Failed
	r.lost, r.dup = &lost, &dup
	_ = p.a.Endpoint().Call(ctx, func(_ time.Duration, _ *metaroce.Endpoint) {
		if sender := tr.SenderConn(); sender != nil {
			r.retransmits = sender.Stats.Retransmits
		}
	})
	st := em.Stats()
	r.downDrops = st.Links[netem.AtoB][plane].DownDrops + st.Links[netem.BtoA][plane].DownDrops
	if st.Truncated > 0 {
		return r, fmt.Errorf("peers: %d datagrams larger than the %d-byte IP MTU", st.Truncated, l.IPMTU())
	}
	if r.downDrops == 0 {
		return r, errors.New("the failed plane dropped nothing: the failure was not exercised")
	}
	return r, nil
}
