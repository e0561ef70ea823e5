//go:build linux

// Package datapath measures the WAN tunnel's datapath on loopback, with no
// link emulator: the goodput of a MetaRoCE connection through two tunnels
// (AEAD on every datagram), as a ratio of raw batched UDP between sockets
// of the same kind (netio/udp, same datagram size, same offloads) measured
// in the same run, with the CPU each spends per Gbit/s, the heap
// allocations per datagram and the AEAD's cost per datagram. It is what
// `mrgw loadtest datapath` runs (DESIGN.md §6, "datapath").
//
// Both ends run in this process, so CPU is the process's (getrusage): sender
// and receiver together, for the raw baseline and the tunnel alike.
//
// This package must not import gateway/ or cmd/.
package datapath

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/mrgw/mrgw/cc"
	"github.com/mrgw/mrgw/internal/report"
	"github.com/mrgw/mrgw/metaroce"
	"github.com/mrgw/mrgw/netio"
	"github.com/mrgw/mrgw/netio/seal"
	"github.com/mrgw/mrgw/netio/udp"
	"github.com/mrgw/mrgw/pathmgr"
	"github.com/mrgw/mrgw/tunnel"
	"github.com/mrgw/mrgw/tunnel/tunneltest"

	"github.com/mrgw/mrgw/units"
)

// Options configure Run. Zero values pick the defaults.
type Options struct {
	// Duration of each measurement (default 3 s), after a warm-up of a
	// fifth of it.
	Duration time.Duration
	// MTU is the MetaRoCE payload per datagram (default 1400, the WAN's).
	MTU int
	// Paths per connection (default 8).
	Paths int
	// WindowBytes per path (default 256 KiB: 2 MiB in flight with 8
	// paths, within the receiving socket's 8 MiB buffer once the kernel's
	// per-datagram overhead is counted).
	WindowBytes int
	// MessageBytes is the size of each WRITE (default 1 MiB); Outstanding
	// how many are kept queued (default 16).
	MessageBytes, Outstanding int
	// DisableGSO, DisableGRO turn the offloads off on every socket.
	DisableGSO, DisableGRO bool
	// Suite is the AEAD (default aes-128-gcm).
	Suite seal.Suite
	// Senders is the number of sealing and sending goroutines per
	// endpoint (0: netio's default).
	Senders int
	// Plain adds a row for the same transfer without encryption (netio
	// without a sealer).
	Plain bool
}

func (o *Options) defaults() {
	if o.Duration <= 0 {
		o.Duration = 3 * time.Second
	}
	if o.MTU == 0 {
		o.MTU = 1400
	}
	if o.Paths == 0 {
		o.Paths = 8
	}
	if o.WindowBytes == 0 {
		o.WindowBytes = 256 << 10
	}
	if o.MessageBytes == 0 {
		o.MessageBytes = 1 << 20
	}
	if o.Outstanding == 0 {
		o.Outstanding = 16
	}
	if o.Suite == 0 {
		o.Suite = seal.AES128GCM
	}
}

var loop4 = netip.MustParseAddrPort("127.0.0.1:0")

// Run measures raw UDP, the tunnel (and the plain endpoint if asked) and
// the AEAD, and returns one row each.
func Run(ctx context.Context, o Options) ([]report.Row, error) {
	o.defaults()
	udpOpts := udp.Options{DisableGSO: o.DisableGSO, DisableGRO: o.DisableGRO, ReadBuffer: 4 << 20, WriteBuffer: 4 << 20}
	// The raw baseline sends datagrams of the tunnel's size on the wire.
	wire := o.MTU + metaroce.DataHeaderLen + seal.Overhead
	load0 := loadAvg()
	raw, err := RawUDP(ctx, udpOpts, wire, o.Duration)
	if err != nil {
		return nil, fmt.Errorf("datapath: raw udp: %w", err)
	}
	rows := []report.Row{raw.row("raw-udp", 0)}
	rows[0].Note = fmt.Sprintf("%d-byte datagrams, gso=%v gro=%v", wire, raw.gso, raw.gro)

	tun, err := Tunnel(ctx, o, udpOpts, true)
	if err != nil {
		return nil, fmt.Errorf("datapath: tunnel: %w", err)
	}
	r := tun.row("tunnel-"+o.Suite.String(), raw.bps)
	r.Paths = o.Paths
	r.Note = fmt.Sprintf("mtu %d, %d paths of %d KiB, gso=%v gro=%v, %d retransmits, %d timeouts",
		o.MTU, o.Paths, o.WindowBytes>>10, tun.gso, tun.gro, tun.retx, tun.timeouts)
	rows = append(rows, r)
	if o.Plain {
		pl, err := Tunnel(ctx, o, udpOpts, false)
		if err != nil {
			return nil, fmt.Errorf("datapath: plain: %w", err)
		}
		r := pl.row("netio-plain", raw.bps)
		r.Paths = o.Paths
		r.Note = fmt.Sprintf("no encryption; mtu %d, %d paths, %d retransmits, %d timeouts", o.MTU, o.Paths, pl.retx, pl.timeouts)
		rows = append(rows, r)
	}
	sealNs, openNs, err := AEADCost(o.Suite, o.MTU+metaroce.DataHeaderLen, 200000)
	if err != nil {
		return nil, err
	}
	// The machine may be shared: the load average says how much of it the
	// measurement had.
	rows[0].Note += fmt.Sprintf("; load average %s at start, %s at end", load0, loadAvg())
	rows = append(rows,
		report.Row{Scenario: "datapath", System: o.Suite.String() + "-seal", NsPerPacket: sealNs,
			Note: fmt.Sprintf("%d-byte packets, one core", o.MTU+metaroce.DataHeaderLen)},
		report.Row{Scenario: "datapath", System: o.Suite.String() + "-open", NsPerPacket: openNs,
			Note: fmt.Sprintf("%d-byte packets, one core", o.MTU+metaroce.DataHeaderLen)})
	return rows, nil
}

// Result is one throughput measurement.
type Result struct {
	bps       float64 // goodput, bits/s
	cpu       float64 // CPU seconds per second
	allocs    float64 // per datagram
	gso, gro  bool
	retx      uint64 // retransmissions during the measurement
	timeouts  uint64 // probe timeouts during the measurement
	datagrams uint64
}

// Bps returns the goodput in bits per second.
func (r Result) Bps() float64 { return r.bps }

// CPUPerGbps returns cores per Gbit/s.
func (r Result) CPUPerGbps() float64 {
	if r.bps == 0 {
		return 0
	}
	return r.cpu / (r.bps / 1e9)
}

// AllocsPerPacket returns heap allocations per datagram.
func (r Result) AllocsPerPacket() float64 { return r.allocs }

func (r Result) row(system string, raw float64) report.Row {
	row := report.Row{Scenario: "datapath", System: system, GoodputBps: r.bps, CPUPerGbps: r.CPUPerGbps(),
		AllocsPerPacket: r.allocs}
	if raw > 0 {
		row.RawUDPBps = raw
		row.RatioToRawUDP = r.bps / raw
	}
	return row
}

// meter samples wall time, process CPU and heap allocations.
type meter struct {
	wall    time.Time
	cpu     time.Duration
	mallocs uint64
}

func sample() meter {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return meter{
		wall:    time.Now(),
		cpu:     time.Duration(ru.Utime.Nano() + ru.Stime.Nano()),
		mallocs: ms.Mallocs,
	}
}

// RawUDP sends size-byte datagrams in batches of 64 (GSO where allowed)
// from one netio/udp socket to another for d and returns the payload rate
// the receiver got.
func RawUDP(ctx context.Context, opts udp.Options, size int, d time.Duration) (Result, error) {
	tx, err := udp.Listen(loop4, opts)
	if err != nil {
		return Result{}, err
	}
	defer tx.Close()
	rx, err := udp.Listen(loop4, opts)
	if err != nil {
		return Result{}, err
	}
	var got atomic.Uint64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		msgs := make([]udp.Message, 64)
		for i := range msgs {
			msgs[i].Buf = make([]byte, size+64)
		}
		for {
			n, err := rx.ReadBatch(msgs)
			if err != nil {
				return // closed
			}
			var b uint64
			for _, m := range msgs[:n] {
				b += uint64(m.N)
			}
			got.Add(b)
		}
	}()
	msgs := make([]udp.Message, 64)
	for i := range msgs {
		msgs[i] = udp.Message{Buf: make([]byte, size), N: size, Addr: rx.LocalAddr()}
	}
	warm := time.Now().Add(d / 5)
	var m0 meter
	var b0 uint64
	started := false
	end := warm.Add(d)
	for {
		now := time.Now()
		if !started && now.After(warm) {
			m0, b0, started = sample(), got.Load(), true
		}
		if now.After(end) || ctx.Err() != nil {
			break
		}
		if _, err := tx.WriteBatch(msgs); err != nil && !errors.Is(err, syscall.ENOBUFS) {
			rx.Close()
			wg.Wait()
			return Result{}, err
		}
	}
	m1, b1 := sample(), got.Load()
	rx.Close()
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}
	secs := m1.wall.Sub(m0.wall).Seconds()
	st := tx.Stats()
	return Result{
		bps: float64(units.Throughput(float64(b1-b0), secs)), cpu: (m1.cpu - m0.cpu).Seconds() / secs,
		gso: st.GSO, gro: rx.Stats().GRO,
	}, nil
}

// Tunnel measures one MetaRoCE connection between two tunnels on loopback
// (or two plain netio endpoints when sealed is false): WRITEs of
// MessageBytes kept queued from the event callback, goodput counted from
// send completions (the bytes are in the receiver's memory).
func Tunnel(ctx context.Context, o Options, udpOpts udp.Options, sealed bool) (Result, error) {
	o.defaults()
	proto := func(listen bool) metaroce.Config {
		// Loopback's round trip is scheduling: on a shared machine a
		// goroutine may wait tens of milliseconds for a core, and a probe
		// timeout shorter than that declares whole flights lost that were
		// only late (each costing a path's window in retransmissions).
		pc := pathmgr.DefaultConfig()
		pc.MinPTO, pc.MaxAckDelay = 50*time.Millisecond, 2*time.Millisecond
		return metaroce.Config{MTU: o.MTU, Paths: o.Paths, Listen: listen, Seed: 1, CC: cc.NewFixed(o.WindowBytes, 0), Path: pc}
	}
	var done atomic.Uint64
	src := make([]byte, o.MessageBytes)
	dst := make([]byte, o.MessageBytes)
	var sender *metaroce.Conn
	// onA keeps Outstanding messages queued: it runs on a's goroutine, so
	// it may call the connection directly.
	onA := func(now time.Duration, ev metaroce.Event) {
		switch ev.Kind {
		case metaroce.EventConnected:
			sender = ev.Conn
			for range o.Outstanding {
				_, _ = sender.Write(now, 0, 1, 0, src)
			}
		case metaroce.EventSendComplete:
			if ev.Err == nil {
				done.Add(ev.Len)
			}
			// Keep the queue full; a refused Write (closing) just ends it.
			_, _ = sender.Write(now, 0, 1, 0, src)
		}
	}
	var a, b *netio.Endpoint
	var cleanup []func()
	defer func() {
		for i := len(cleanup) - 1; i >= 0; i-- {
			cleanup[i]()
		}
	}()
	if sealed {
		ta, tb, stop, err := tunnels(ctx, proto, udpOpts, o.Suite, o.Senders, onA)
		if err != nil {
			return Result{}, err
		}
		cleanup = append(cleanup, stop)
		a, b = ta.Endpoint(), tb.Endpoint()
	} else {
		var err error
		if b, err = netio.New(netio.Config{Protocol: proto(true), Listen: loop4, UDP: udpOpts, TxSenders: o.Senders}); err != nil {
			return Result{}, err
		}
		cleanup = append(cleanup, func() { b.Close() })
		if a, err = netio.New(netio.Config{Protocol: proto(false), Listen: loop4, UDP: udpOpts, OnEvent: onA, TxSenders: o.Senders,
			Peers: []netio.Peer{{ID: tunnel.PeerID, Addr: b.LocalAddr()}}}); err != nil {
			return Result{}, err
		}
		cleanup = append(cleanup, func() { a.Close() })
		if err := b.AddPeer(netio.Peer{ID: tunnel.PeerID, Addr: a.LocalAddr()}); err != nil {
			return Result{}, err
		}
	}
	var regErr error
	if err := b.Call(ctx, func(_ time.Duration, ep *metaroce.Endpoint) { regErr = ep.Memory().Register(1, dst) }); err != nil {
		return Result{}, err
	}
	if regErr != nil {
		return Result{}, regErr
	}
	if _, err := a.Connect(ctx, tunnel.PeerID); err != nil {
		return Result{}, err
	}
	if err := sleep(ctx, o.Duration/5); err != nil {
		return Result{}, err
	}
	conn := func() (retx, timeouts uint64) {
		a.Call(ctx, func(time.Duration, *metaroce.Endpoint) {
			if sender != nil {
				retx, timeouts = sender.Stats.Retransmits, sender.Stats.Timeouts
			}
		})
		return retx, timeouts
	}
	retx0, to0 := conn()
	m0, d0 := sample(), done.Load()
	pkts0 := a.Stats().TxDatagrams + b.Stats().TxDatagrams
	if err := sleep(ctx, o.Duration); err != nil {
		return Result{}, err
	}
	m1, d1 := sample(), done.Load()
	sa, sb := a.Stats(), b.Stats()
	pkts := sa.TxDatagrams + sb.TxDatagrams - pkts0
	retx1, to1 := conn()
	secs := m1.wall.Sub(m0.wall).Seconds()
	r := Result{
		bps: float64(units.Throughput(float64(d1-d0), secs)), cpu: (m1.cpu - m0.cpu).Seconds() / secs,
		gso: sa.GSO, gro: sb.GRO, retx: retx1 - retx0, timeouts: to1 - to0, datagrams: pkts,
	}
	if pkts > 0 {
		r.allocs = float64(m1.mallocs-m0.mallocs) / float64(pkts)
	}
	if d1 == d0 {
		return r, errors.New("no message completed during the measurement")
	}
	return r, nil
}

// loadAvg returns the 1-minute load average, or "?".
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	if f := strings.Fields(string(b)); len(f) > 0 {
		return f[0]
	}
	return "?"
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// tunnels builds two gateways' tunnels over an in-process CA and control
// session on loopback.
func tunnels(ctx context.Context, proto func(bool) metaroce.Config, udpOpts udp.Options, suite seal.Suite, senders int,
	onA func(time.Duration, metaroce.Event)) (a, b *tunnel.Tunnel, stop func(), err error) {
	var stops []func()
	stop = func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	defer func() {
		if err != nil {
			stop()
		}
	}()
	ra, rb := tunnel.NewRouter(), tunnel.NewRouter()
	sp, err := tunneltest.LoopbackSessions(ctx, "dp-a", "dp-b", ra.OnEvent, rb.OnEvent)
	if err != nil {
		return nil, nil, nil, err
	}
	stops = append(stops, sp.Close)
	b, err = tunnel.New(sp.B, tunnel.Config{Protocol: proto(true), Listen: loop4, Suite: suite, UDP: udpOpts, Router: rb,
		TxSenders: senders})
	if err != nil {
		return nil, nil, nil, err
	}
	stops = append(stops, func() { b.Close() })
	a, err = tunnel.New(sp.A, tunnel.Config{Protocol: proto(false), Listen: loop4, Suite: suite, UDP: udpOpts,
		Router: ra, PeerAddr: b.LocalAddr(), OnEvent: onA, TxSenders: senders})
	if err != nil {
		return nil, nil, nil, err
	}
	stops = append(stops, func() { a.Close() })
	if err := b.SetPeerAddr(a.LocalAddr()); err != nil {
		return nil, nil, nil, err
	}
	return a, b, stop, nil
}

// AEADCost returns the nanoseconds one core spends sealing and opening a
// packet of size bytes, over n packets each.
func AEADCost(suite seal.Suite, size, n int) (sealNs, openNs float64, err error) {
	key := seal.Key{Suite: suite, Secret: make([]byte, suite.KeyLen())}
	s, err := seal.NewSealer(key, 0)
	if err != nil {
		return 0, 0, err
	}
	op, err := seal.NewOpener(key)
	if err != nil {
		return 0, 0, err
	}
	pt := make([]byte, size)
	buf := make([]byte, 0, size+seal.Overhead)
	t0 := time.Now()
	for range n {
		if buf, err = s.Seal(buf[:0], pt); err != nil {
			return 0, 0, err
		}
	}
	sealNs = float64(time.Since(t0).Nanoseconds()) / float64(n)
	// Open needs fresh counters: seal a window's worth and open each once,
	// in rounds (the replay window accepts each counter once).
	const round = 1024
	dgs := make([][]byte, round)
	for i := range dgs {
		dgs[i] = make([]byte, 0, size+seal.Overhead)
	}
	out := make([]byte, 0, size)
	var openDur time.Duration
	for done := 0; done < n; done += round {
		for i := range dgs {
			if dgs[i], err = s.Seal(dgs[i][:0], pt); err != nil {
				return 0, 0, err
			}
		}
		t := time.Now()
		for i := range dgs {
			if _, err := op.Open(out[:0], dgs[i]); err != nil {
				return 0, 0, err
			}
		}
		openDur += time.Since(t)
	}
	openNs = float64(openDur.Nanoseconds()) / float64((n+round-1)/round*round)
	return sealNs, openNs, nil
}
