//go:build linux

package peers

import (
	"context"
	"fmt"
	"math"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mrgw/mrgw/internal/report"
	"github.com/mrgw/mrgw/internal/sleep"
	"github.com/mrgw/mrgw/loadtest/tunemu"
	"github.com/mrgw/mrgw/metaroce"
	"github.com/mrgw/mrgw/netem"
	"github.com/mrgw/mrgw/netio/udp"
	"github.com/mrgw/mrgw/tunnel"
	"github.com/mrgw/mrgw/tunnel/tunneltest"

	"github.com/mrgw/mrgw/internal/tcpcc"
	"github.com/mrgw/mrgw/units"
)

// RTT fairness: flows at different distances behind one bottleneck. Each
// flow gets its own one-way delay (netem.Config.PairDelays for mrgw over the
// UDP relay, tunemu's per-flow delays for kernel TCP and QUIC: the same
// model, keyed by address pair), and they share one plane's queue and
// rate. A flow is one TCP connection (one stream), one QUIC connection
// (one stream) or one mrgw connection (its own pair of gateways, its
// controller built for its own round trip).

// FairnessRTTs are the round trips of the rtt-fairness scenario's flows
// (as gwload's fairness and the simulator's rtt-fairness).
var FairnessRTTs = []time.Duration{10 * time.Millisecond, 50 * time.Millisecond, 150 * time.Millisecond}

// FairnessLosses are the rtt-fairness scenario's random-loss points.
var FairnessLosses = []float64{0, 0.01}

// fairnessSystems are the systems the rtt-fairness and plane-failure
// scenarios can run (RoCEv2 and kcp are not among them).
var fairnessSystems = []string{MRGW, TCPBBR, TCPCubic, QUIC}

// Defaults of the rtt-fairness scenario where Options leaves them zero.
const (
	// fairQueueBDP: a modest queue, half the BDP at the middle round
	// trip (25 ms at any capacity with the default 50 ms).
	fairQueueBDP = 0.5
	fairWarmup   = 3 * time.Second
	fairDuration = 10 * time.Second
)

// fairnessOptions fills the scenario's own defaults before withDefaults.
func fairnessOptions(o Options) (Options, []time.Duration) {
	rtts := o.RTTs
	if len(rtts) == 0 {
		rtts = FairnessRTTs
	}
	if len(o.Losses) == 0 {
		o.Losses = FairnessLosses
	}
	if o.QueueBDP <= 0 {
		o.QueueBDP = fairQueueBDP
	}
	if !o.Quick {
		if o.Warmup <= 0 {
			o.Warmup = fairWarmup
		}
		if o.Duration <= 0 {
			o.Duration = fairDuration
		}
	}
	o.RTTs = rtts
	o.MRGWExtraCC = "none"
	if len(o.Systems) == 0 {
		o.Systems = fairnessSystems
	}
	return o.withDefaults(), rtts
}

// selected returns the systems of list that o selects, in list order, and
// an error naming any selected system the scenario cannot run.
func (o *Options) selected(scenario string, list []string) ([]string, error) {
	var out []string
	for _, s := range list {
		if o.has(s) {
			out = append(out, s)
		}
	}
	for _, s := range o.Systems {
		found := false
		for _, l := range list {
			found = found || s == l
		}
		if !found {
			return nil, fmt.Errorf("peers: %s runs %s, not %q", scenario, strings.Join(list, ", "), s)
		}
	}
	return out, nil
}

// RTTFairness runs, for each selected system (mrgw, tcp-bbr, tcp-cubic,
// quic) and each loss point (default 0 and 1%), three flows whose round
// trips are Options.RTTs (default 10, 50 and 150 ms) through one
// bottleneck of CapacityBps with a drop-tail queue of QueueBDP (default
// 0.5) times the BDP at the middle round trip. The flows start together;
// after Warmup (default 3 s) each flow's goodput is measured at its
// receiver over Duration (default 10 s). A row per system and loss point
// gives the flows' shares of the total (in RTT order), Jain's index over
// their goodputs, the link's utilisation (Fraction: total goodput over
// capacity) and, on peers' rows, MRGWRatio = mrgw's Jain index over the
// row's. Duration: about (Warmup + Duration + 1 s) per system per loss
// point: about 2 minutes with the defaults.
func RTTFairness(ctx context.Context, o Options) ([]report.Row, error) {
	o, rtts := fairnessOptions(o)
	if len(rtts) < 2 || len(rtts) > 8 {
		return nil, fmt.Errorf("peers: rtt-fairness needs 2 to 8 round trips, got %d", len(rtts))
	}
	systems, err := o.selected("rtt-fairness", fairnessSystems)
	if err != nil {
		return nil, err
	}
	n := len(systems) * len(o.Losses)
	i := 0
	var rows []report.Row
	var sk skipped
	for _, loss := range o.Losses {
		l := o.link(1, o.CapacityBps, rtts[len(rtts)/2], loss)
		var group []report.Row
		for _, s := range systems {
			i++
			o.progress(i, n, fmt.Sprintf("rtt-fairness %s loss=%g", s, loss))
			if needsTUN(s) && sk.err != nil {
				continue
			}
			names := make([]string, len(rtts))
			for k, rt := range rtts {
				names[k] = fmt.Sprintf("%v RTT", rt)
			}
			rctx := o.record(ctx, "peers-rtt-fairness", fmt.Sprintf("%s, loss %s", s, report.FormatPercent(loss)), s, names...)
			r, err := fairRun(rctx, s, l, rtts, o)
			if sk.add(err) {
				continue
			}
			if err != nil {
				return finish(append(rows, group...), fmt.Errorf("peers: rtt-fairness %s loss=%g: %w", s, loss, err), &sk)
			}
			group = append(group, fairRow(s, l, rtts, r, o))
		}
		setJainRatios(group)
		rows = append(rows, group...)
	}
	return finish(rows, nil, &sk)
}

// fairResult is one system's per-flow goodputs.
type fairResult struct {
	flowBps     []float64
	cc          string
	emulator    string
	retransmits uint64
}

func fairRow(system string, l Link, rtts []time.Duration, r fairResult, o Options) report.Row {
	var tot float64
	for _, b := range r.flowBps {
		tot += b
	}
	rw := report.Row{
		Scenario: "peers-rtt-fairness", System: system, CC: r.cc, Planes: 1,
		RTTms: float64(l.RTT) / 1e6, Loss: l.Loss, Flows: len(rtts),
		CapacityBps: l.Capacity(), GoodputBps: tot, Fraction: tot / l.Capacity(),
		Jain: report.Jain(r.flowBps), Retransmits: r.retransmits, Emulator: r.emulator,
		MaxQueueBytes: l.QueueBytes,
	}
	switch system {
	case MRGW:
		rw.Paths = o.Paths
	case TCPBBR, TCPCubic, QUIC:
		rw.Streams = 1
	}
	parts := make([]string, len(rtts))
	for k, b := range r.flowBps {
		share := 0.0
		if tot > 0 {
			share = b / tot
		}
		rw.Shares = append(rw.Shares, math.Round(share*1000)/1000)
		parts[k] = fmt.Sprintf("%v: %.1f", rtts[k], b/1e6)
	}
	rw.Note = "Mbit/s per flow " + strings.Join(parts, ", ") + "; rtt_ms is the middle flow's (queue sized on it)"
	return rw
}

// setJainRatios sets MRGWRatio on every peer row of group to mrgw's Jain
// index over the row's.
func setJainRatios(group []report.Row) {
	var m float64
	for _, r := range group {
		if r.System == MRGW {
			m = r.Jain
		}
	}
	if m == 0 {
		return
	}
	for i := range group {
		if group[i].System != MRGW && group[i].Jain > 0 {
			group[i].MRGWRatio = m / group[i].Jain
		}
	}
}

// fairRun runs the flows of one system and returns their goodputs in RTT
// order.
func fairRun(ctx context.Context, system string, l Link, rtts []time.Duration, o Options) (fairResult, error) {
	switch system {
	case MRGW:
		return fairMRGW(ctx, l, rtts, o)
	case TCPBBR, TCPCubic:
		return fairTCP(ctx, system[len("tcp-"):], l, rtts, o)
	case QUIC:
		return fairQUIC(ctx, l, rtts, o)
	}
	return fairResult{}, fmt.Errorf("peers: rtt-fairness cannot run %q", system)
}

// measureFlows samples each flow's byte counter after warmup and after
// duration and returns bits per second per flow.
func measureFlows(ctx context.Context, counts []*atomic.Uint64, warmup, duration time.Duration) ([]float64, error) {
	stop := sample(ctx, loads(counts), warmup, warmup+duration)
	defer stop()
	if err := sleep.Ctx(ctx, warmup); err != nil {
		return nil, err
	}
	b0 := make([]uint64, len(counts))
	t0 := time.Now()
	for i, c := range counts {
		b0[i] = c.Load()
	}
	if err := sleep.Ctx(ctx, duration); err != nil {
		return nil, err
	}
	dt := time.Since(t0).Seconds()
	out := make([]float64, len(counts))
	for i, c := range counts {
		out[i] = float64(units.Throughput(float64(c.Load()-b0[i]), dt))
	}
	return out, nil
}

// tunFair is the tunemu configuration of the fairness link: site A has
// one address per flow, flow k's with one-way delay rtts[k]/2.
func tunFair(l Link, rtts []time.Duration) tunemu.Config {
	cfg := l.tunConfig()
	cfg.ExtraAddrsA = len(rtts)
	for k, r := range rtts {
		cfg.PairDelays = append(cfg.PairDelays, netem.PairDelay{A: tunemu.ExtraAddrA(k), B: tunemu.AddrB, Delay: r / 2})
	}
	return cfg
}

// fairTCP runs one TCP connection per flow, flow k from site A's extra
// address k.
func fairTCP(ctx context.Context, algo string, l Link, rtts []time.Duration, o Options) (fairResult, error) {
	te, err := tunemu.New(ctx, tunFair(l, rtts))
	if err != nil {
		return fairResult{}, err
	}
	defer te.Close()
	ln, err := te.Listen(tunemu.SiteB, "tcp4", net.JoinHostPort(tunemu.AddrB.String(), "0"))
	if err != nil {
		return fairResult{}, err
	}
	counts := make([]*atomic.Uint64, len(rtts))
	flowOf := map[netip.Addr]int{}
	for k := range rtts {
		counts[k] = new(atomic.Uint64)
		flowOf[tunemu.ExtraAddrA(k)] = k
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var accepted []net.Conn
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			ra, _ := netip.ParseAddrPort(c.RemoteAddr().String())
			k, ok := flowOf[ra.Addr()]
			if !ok {
				c.Close()
				continue
			}
			mu.Lock()
			accepted = append(accepted, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				countReads(c, counts[k])
			}()
		}
	}()
	stop := make(chan struct{})
	var conns []net.Conn
	cleanup := func() {
		close(stop)
		for _, c := range conns {
			c.Close()
		}
		ln.Close()
		mu.Lock()
		for _, c := range accepted {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	}
	for k := range rtts {
		d := tcpcc.Dialer(algo)
		d.LocalAddr = &net.TCPAddr{IP: tunemu.ExtraAddrA(k).AsSlice()}
		c, err := te.Dial(ctx, tunemu.SiteA, d, "tcp4", ln.Addr().String())
		if err != nil {
			cleanup()
			return fairResult{}, err
		}
		conns = append(conns, c)
	}
	for _, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tcpWriteLoop(c, stop, nil)
		}()
	}
	bps, err := measureFlows(ctx, counts, o.Warmup, o.Duration)
	r := fairResult{flowBps: bps, emulator: EmuTUN}
	r.cc, r.retransmits = tcpCCs(conns)
	cleanup()
	if err != nil {
		return r, err
	}
	if r.cc != algo {
		return r, fmt.Errorf("peers: asked for TCP congestion control %s, sockets use %q", algo, r.cc)
	}
	return r, nil
}

// tcpWriteLoop writes to c until stop is closed or the connection fails;
// the write deadline only keeps it responsive to stop. written, if not
// nil, counts the bytes the socket accepted.
func tcpWriteLoop(c net.Conn, stop <-chan struct{}, written *atomic.Uint64) {
	buf := make([]byte, 256<<10)
	for {
		select {
		case <-stop:
			return
		default:
		}
		c.SetWriteDeadline(time.Now().Add(200 * time.Millisecond))
		n, err := c.Write(buf)
		if written != nil {
			written.Add(uint64(n))
		}
		if err != nil && !isTimeout(err) {
			return
		}
	}
}

// fairQUIC runs one QUIC connection with one stream per flow, flow k from
// site A's extra address k.
func fairQUIC(ctx context.Context, l Link, rtts []time.Duration, o Options) (fairResult, error) {
	te, err := tunemu.New(ctx, tunFair(l, rtts))
	if err != nil {
		return fairResult{}, err
	}
	defer te.Close()
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var qs []*quicConn
	var wg sync.WaitGroup
	cleanup := func() {
		cancel()
		for _, q := range qs {
			q.close()
		}
		wg.Wait()
	}
	counts := make([]*atomic.Uint64, len(rtts))
	for k := range rtts {
		counts[k] = new(atomic.Uint64)
		q, err := dialQUICFrom(ctx, te, tunemu.ExtraAddrA(k))
		if err != nil {
			cleanup()
			return fairResult{}, err
		}
		qs = append(qs, q)
		s, err := q.cli.OpenStreamSync(ctx)
		if err != nil {
			cleanup()
			return fairResult{}, err
		}
		wg.Add(2)
		go func() {
			defer wg.Done()
			rs, err := q.srv.AcceptStream(runCtx)
			if err != nil {
				return
			}
			countReads(rs, counts[k])
		}()
		go func() {
			defer wg.Done()
			buf := make([]byte, 64<<10)
			for runCtx.Err() == nil {
				if _, err := s.Write(buf); err != nil {
					return
				}
			}
		}()
	}
	bps, err := measureFlows(ctx, counts, o.Warmup, o.Duration)
	cleanup()
	if err != nil {
		return fairResult{}, err
	}
	return fairResult{flowBps: bps, cc: "quic-go", emulator: EmuTUN}, nil
}

// fairMRGW runs one mrgw connection per flow from its own source gateway
// (A_k on 127.0.0.(2+k)) to one receiving gateway (B on 127.0.0.1), as
// regions at different distances send into one site: one emu relay whose
// PairDelays give pair k its round trip. Each sender's controller is built
// for its own round trip and the link's capacity; the receiving gateway's
// one endpoint knows its WAN capacity and divides it among its senders as
// rate hints (metaroce.Config.ReceiveCapacity), as a gateway does. The
// first source is the receiving tunnel's own peer; the others are attached
// to its endpoint (tunnel.Attach), each with its own control session.
func fairMRGW(ctx context.Context, l Link, rtts []time.Duration, o Options) (fairResult, error) {
	cfg := l.emuConfig()
	loop := netip.MustParseAddr("127.0.0.1")
	addrs := make([]netip.Addr, len(rtts))
	for k, r := range rtts {
		addrs[k] = netip.AddrFrom4([4]byte{127, 0, 0, byte(2 + k)})
		cfg.PairDelays = append(cfg.PairDelays, netem.PairDelay{A: addrs[k], B: loop, Delay: r / 2})
	}
	em, err := netem.New(ctx, cfg)
	if err != nil {
		return fairResult{}, err
	}
	defer em.Close()
	var stops []func()
	defer func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}()
	counts := make([]*atomic.Uint64, len(rtts))
	flowOf := map[metaroce.PeerID]int{}
	var mu sync.Mutex
	senders := make([]*metaroce.Conn, len(rtts))
	udpOpts := udp.Options{ReadBuffer: 8 << 20, WriteBuffer: 8 << 20}
	protoB, ccName, err := protocol(false, l, o, true)
	if err != nil {
		return fairResult{}, err
	}
	onB := func(_ time.Duration, ev metaroce.Event) {
		if ev.Kind == metaroce.EventRecvComplete && ev.Err == nil {
			if k, ok := flowOf[ev.Conn.Peer()]; ok {
				counts[k].Add(ev.Len)
			}
		}
	}
	var b *tunnel.Tunnel
	var standB netip.AddrPort
	var as []*tunnel.Tunnel
	for k, r := range rtts {
		counts[k] = new(atomic.Uint64)
		flowOf[metaroce.PeerID(k+1)] = k // tunnel.PeerID is 1: the first source
		routerA, routerB := tunnel.NewRouter(), tunnel.NewRouter()
		sp, err := tunneltest.LoopbackSessions(ctx, fmt.Sprintf("fair-src-%d", k), "fair-dst", routerA.OnEvent, routerB.OnEvent)
		if err != nil {
			return fairResult{}, err
		}
		stops = append(stops, sp.Close)
		if b == nil {
			b, err = tunnel.New(sp.B, tunnel.Config{Protocol: protoB, Listen: netip.AddrPortFrom(loop, 0), UDP: udpOpts,
				Router: routerB, OnEvent: onB})
			if err != nil {
				return fairResult{}, err
			}
			stops = append(stops, func() { b.Close() })
			if standB, err = em.Expose(netem.SiteB, b.LocalAddr()); err != nil {
				return fairResult{}, err
			}
		}
		lk := l
		lk.RTT = r
		protoA, _, err := protocol(false, lk, o, false)
		if err != nil {
			return fairResult{}, err
		}
		// Connection ids come from the endpoint's seed: the receiving
		// endpoint refuses a second connection with the same id.
		protoA.Seed += uint64(k)
		outstanding := bulkOutstanding(lk)
		src := make([]byte, bulkMsg)
		onA := func(now time.Duration, ev metaroce.Event) {
			switch ev.Kind {
			case metaroce.EventConnected:
				mu.Lock()
				senders[k] = ev.Conn
				mu.Unlock()
				for range outstanding {
					_, _ = ev.Conn.Write(now, 0, 1, 0, src)
				}
			case metaroce.EventSendComplete:
				_, _ = ev.Conn.Write(now, 0, 1, 0, src)
			}
		}
		realB := b.LocalAddr()
		a, err := tunnel.New(sp.A, tunnel.Config{Protocol: protoA, Listen: netip.AddrPortFrom(addrs[k], 0), UDP: udpOpts,
			Router: routerA, OnEvent: onA,
			PlaneOf: func(_ int, local netip.AddrPort) int { return em.PlaneOf(netem.AtoB, local, realB) }})
		if err != nil {
			return fairResult{}, err
		}
		stops = append(stops, func() { a.Close() })
		as = append(as, a)
		standA, err := em.Expose(netem.SiteA, a.LocalAddr())
		if err != nil {
			return fairResult{}, err
		}
		if err := a.SetPeerAddr(standB); err != nil {
			return fairResult{}, err
		}
		if k == 0 {
			err = b.SetPeerAddr(standA)
		} else {
			var peer *tunnel.Peer
			peer, err = tunnel.Attach(sp.B, b.Endpoint(), tunnel.AttachConfig{ID: metaroce.PeerID(k + 1),
				Dests: []netip.AddrPort{standA}, Router: routerB})
			if err == nil {
				stops = append(stops, func() { peer.Close() })
			}
		}
		if err != nil {
			return fairResult{}, err
		}
	}
	dst := make([]byte, bulkMsg)
	var regErr error
	if err := b.Endpoint().Call(ctx, func(_ time.Duration, ep *metaroce.Endpoint) { regErr = ep.Memory().Register(1, dst) }); err != nil {
		return fairResult{}, err
	}
	if regErr != nil {
		return fairResult{}, regErr
	}
	for _, a := range as {
		if _, err := a.Connect(ctx); err != nil {
			return fairResult{}, err
		}
	}
	bps, err := measureFlows(ctx, counts, o.Warmup, o.Duration)
	if err != nil {
		return fairResult{}, err
	}
	r := fairResult{flowBps: bps, cc: ccName, emulator: EmuUDP}
	for k, a := range as {
		_ = a.Endpoint().Call(ctx, func(_ time.Duration, _ *metaroce.Endpoint) {
			mu.Lock()
			c := senders[k]
			mu.Unlock()
			if c != nil {
				r.retransmits += c.Stats.Retransmits
			}
		})
	}
	if n := em.Stats().Truncated; n > 0 {
		return r, fmt.Errorf("peers: %d datagrams larger than the %d-byte IP MTU", n, l.IPMTU())
	}
	return r, nil
}
