//go:build linux

// Package datapath measures the cost of mrgw's WAN datapath against its
// floor and against wireguard-go, per core: in one run, at each link MTU
// (default 1400 and 9000 bytes), the CPU each system spends per Gbit/s of
// goodput, for
//
//   - raw-udp: raw batched UDP (sendmmsg with GSO, recvmmsg with GRO);
//   - raw-udp+aead: the same with mrgw's AEAD envelope (netio/seal) sealed
//     and opened on every datagram, the floor of any encrypted tunnel;
//   - mrgw: one MetaRoCE connection (wire version 2) between two tunnels
//     (tunnel package: control session, keys, netio with sealing), WRITEs
//     from memory at A placed into memory at B;
//   - wireguard-go: golang.zx2c4.com/wireguard devices with TUN devices in
//     the two namespaces carrying the raw-udp traffic (wireguard.go).
//
// Every system crosses the same link: two network namespaces joined by a
// veth pair whose MTU is the link MTU (netns.go), each datagram the largest
// that fits it. Without root the first three run on loopback and
// wireguard-go is skipped, with the reason.
//
// CPU is the process's own rusage (getrusage RUSAGE_SELF, user + system)
// over the measured interval: every system runs in this process, both of
// its ends and their application, one system at a time, so the figure is
// the CPU time those threads were given, however busy the machine is. It
// counts the kernel's work done in the process's context (system calls,
// and on veth and loopback the receiving side's softirq processing when
// it runs on the sending thread's way out, as it mostly does); softirq
// work that the kernel defers to ksoftirqd is counted for no system. It is
// what `mrgw-lab loadtest datapath` runs (DESIGN.md §6, "datapath").
//
// This package must not import gateway/ or cmd/; cmd/mrgw must not import
// it (it links wireguard-go).
package datapath

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/mrgw/mrgw/cc"
	"github.com/mrgw/mrgw/internal/report"
	"github.com/mrgw/mrgw/internal/sleep"
	"github.com/mrgw/mrgw/metaroce"
	"github.com/mrgw/mrgw/netio"
	"github.com/mrgw/mrgw/netio/seal"
	"github.com/mrgw/mrgw/netio/udp"
	"github.com/mrgw/mrgw/pathmgr"
	"github.com/mrgw/mrgw/tunnel"
	"github.com/mrgw/mrgw/tunnel/tunneltest"
	"github.com/mrgw/mrgw/units"
)

// System names, as in the rows.
const (
	SysRawUDP    = "raw-udp"
	SysFloor     = "raw-udp+aead"
	SysMRGW      = "mrgw"
	SysWireGuard = "wireguard-go"
	SysPlain     = "netio-plain"
)

// AllSystems are the systems Run measures by default, in order.
var AllSystems = []string{SysRawUDP, SysFloor, SysMRGW, SysWireGuard}

// DefaultMTUs are the link MTUs Run measures by default: a WAN's usual
// 1400 and a DCI link's jumbo frames.
var DefaultMTUs = []int{1400, 9000}

// Options configure Run. Zero values pick the defaults.
type Options struct {
	// Duration of each measurement (default 3 s), after a warm-up of a
	// fifth of it.
	Duration time.Duration
	// MTUs are the link's IP MTUs, each measured in turn (default 1400 and
	// 9000). Every system sends the largest datagram that fits.
	MTUs []int
	// Systems selects systems by name (default AllSystems; SysPlain adds
	// mrgw's transfer without encryption).
	Systems []string
	// Loopback runs on loopback instead of two namespaces over a veth
	// (wireguard-go is then skipped).
	Loopback bool
	// WireVersion is mrgw's wire version (default 2, PROTOCOL.md §12).
	WireVersion uint8
	// Paths per connection (default 8).
	Paths int
	// WindowBytes per path (default 256 KiB: 2 MiB in flight with 8
	// paths, within the receiving socket's 8 MiB buffer once the kernel's
	// per-datagram overhead is counted).
	WindowBytes int
	// MessageBytes is the size of each WRITE (default 1 MiB); Outstanding
	// how many are kept queued (default 16).
	MessageBytes, Outstanding int
	// DisableGSO, DisableGRO turn the offloads off on every socket of ours
	// (wireguard-go's are its own).
	DisableGSO, DisableGRO bool
	// Suite is the AEAD of mrgw and the floor (default aes-128-gcm).
	Suite seal.Suite
	// Senders is the number of sealing and sending goroutines per
	// endpoint (0: netio's default).
	Senders int
}

func (o *Options) defaults() {
	if o.Duration <= 0 {
		o.Duration = 3 * time.Second
	}
	if len(o.MTUs) == 0 {
		o.MTUs = DefaultMTUs
	}
	if len(o.Systems) == 0 {
		o.Systems = AllSystems
	}
	if o.WireVersion == 0 {
		o.WireVersion = metaroce.Version2
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

func (o *Options) has(sys string) bool {
	for _, s := range o.Systems {
		if s == sys {
			return true
		}
	}
	return false
}

// MinMTU and MaxMTU bound the link MTUs (a veth takes up to 65535; GSO
// super-datagrams must stay within 64 KiB).
const (
	MinMTU = 576
	MaxMTU = 9216
)

// PayloadMTU is mrgw's MetaRoCE payload per datagram on a link of linkMTU:
// what is left after the IPv4 and UDP headers, the seal envelope (when
// sealed) and the DATA header of the wire version.
func PayloadMTU(linkMTU int, sealed bool, version uint8) int {
	n := linkMTU - 28 - metaroce.DataHeaderLen
	if version == metaroce.Version2 {
		n = linkMTU - 28 - metaroce.DataHeaderLenV2
	}
	if sealed {
		n -= seal.Overhead
	}
	return n
}

var loop4 = netip.MustParseAddrPort("127.0.0.1:0")

// Run measures every selected system at every link MTU and returns one row
// per system and MTU (Variant "mtu-N"), then the AEAD's cost per packet at
// each MTU. A system that cannot run here (wireguard-go without root) has
// no row; the error then matches errNoNetns and says why, and the rows
// measured are returned with it.
func Run(ctx context.Context, o Options) ([]report.Row, error) {
	o.defaults()
	for _, m := range o.MTUs {
		if m < MinMTU || m > MaxMTU {
			return nil, fmt.Errorf("datapath: link MTU %d outside [%d, %d]", m, MinMTU, MaxMTU)
		}
	}
	udpOpts := udp.Options{DisableGSO: o.DisableGSO, DisableGRO: o.DisableGRO, ReadBuffer: 4 << 20, WriteBuffer: 4 << 20}
	var rows []report.Row
	var skipped error
	for _, mtu := range o.MTUs {
		l := loopback(mtu)
		where := "loopback"
		if !o.Loopback {
			nl, err := newLink(mtu)
			switch {
			case err == nil:
				l, where = nl, "veth between two namespaces"
			case errors.Is(err, errNoNetns):
				skipped = err
			default:
				return rows, err
			}
		}
		mrows, err := o.runMTU(ctx, l, udpOpts)
		l.Close()
		for i := range mrows {
			mrows[i].Note = report.JoinNote(mrows[i].Note, fmt.Sprintf("link mtu %d (%s)", mtu, where))
		}
		rows = append(rows, mrows...)
		if errors.Is(err, errNoNetns) {
			skipped = err
		} else if err != nil {
			return rows, err
		}
	}
	for _, mtu := range o.MTUs {
		pt := PayloadMTU(mtu, true, o.WireVersion) + metaroce.DataHeaderLenV2
		sealNs, openNs, err := AEADCost(o.Suite, pt, 100000)
		if err != nil {
			return rows, err
		}
		note := fmt.Sprintf("%d-byte packets, one core, wall clock", pt)
		rows = append(rows,
			report.Row{Scenario: "datapath", System: o.Suite.String() + "-seal", Variant: mtuVariant(mtu), NsPerPacket: sealNs, Note: note},
			report.Row{Scenario: "datapath", System: o.Suite.String() + "-open", Variant: mtuVariant(mtu), NsPerPacket: openNs, Note: note})
	}
	return rows, skipped
}

func mtuVariant(mtu int) string { return fmt.Sprintf("mtu-%d", mtu) }

// runMTU measures the selected systems on l, in the order of AllSystems.
func (o *Options) runMTU(ctx context.Context, l *link, udpOpts udp.Options) ([]report.Row, error) {
	var rows []report.Row
	var floor float64
	var skipped error
	add := func(sys string, r Result, note string) {
		row := r.row(sys)
		row.Variant = mtuVariant(l.mtu)
		row.Note = report.JoinNote(note, row.Note)
		if sys == SysFloor {
			floor = row.CPUPerGbps
		} else if floor > 0 && sys != SysRawUDP && row.CPUPerGbps > 0 {
			row.Note = report.JoinNote(fmt.Sprintf("%.2f × the floor's CPU per Gbit/s", row.CPUPerGbps/floor), row.Note)
		}
		rows = append(rows, row)
	}
	for _, sys := range append(append([]string{}, AllSystems...), SysPlain) {
		if !o.has(sys) {
			continue
		}
		load0 := report.LoadAvg()
		var r Result
		var err error
		var note string
		switch sys {
		case SysRawUDP:
			r, err = RawUDP(ctx, l, udpOpts, o.Duration)
			note = report.JoinNote(fmt.Sprintf("%d-byte datagrams, gso=%v gro=%v", l.mtu-28, r.gso, r.gro), r.lossNote())
		case SysFloor:
			r, err = RawUDPAEAD(ctx, l, udpOpts, o.Suite, o.Duration)
			note = report.JoinNote(fmt.Sprintf("%s, %d-byte plaintext in %d-byte datagrams, gso=%v gro=%v", o.Suite, l.mtu-28-seal.Overhead, l.mtu-28, r.gso, r.gro), r.lossNote())
		case SysMRGW, SysPlain:
			sealed := sys == SysMRGW
			r, err = Tunnel(ctx, *o, l, udpOpts, sealed)
			note = fmt.Sprintf("wire v%d, payload %d, %d paths of %d KiB, gso=%v gro=%v, %.1f DATA per sendmmsg, %.1f per recvmmsg, %.3f acks per DATA, %d retransmits, %d timeouts",
				r.wire, PayloadMTU(l.mtu, sealed, o.WireVersion), o.Paths, o.WindowBytes>>10, r.gso, r.gro, r.perWrite, r.perRead, r.ackRatio, r.retx, r.timeouts)
			if r.kdrops >= 0 {
				note += fmt.Sprintf(", %d datagrams dropped by the kernel (receive buffers full)", r.kdrops)
			}
			if sealed {
				note = o.Suite.String() + ", " + note
			} else {
				note = "no encryption, " + note
			}
		case SysWireGuard:
			r, err = WireGuard(ctx, l, udpOpts, o.Duration)
			note = fmt.Sprintf("wg0 mtu %d, %d-byte datagrams through it, app sockets gso=%v gro=%v; CPU: both devices and the app's sockets",
				l.mtu-WireGuardOverhead, l.mtu-WireGuardOverhead-28, r.gso, r.gro)
			note = report.JoinNote(note, r.lossNote())
			if errors.Is(err, errNoNetns) {
				skipped = err
				continue
			}
		}
		if err != nil {
			return rows, fmt.Errorf("datapath: %s at link mtu %d: %w", sys, l.mtu, err)
		}
		add(sys, r, report.JoinNote(note, fmt.Sprintf("load average %.2f → %.2f", load0, report.LoadAvg())))
	}
	return rows, skipped
}

// Result is one throughput measurement.
type Result struct {
	bps       float64 // goodput, bits/s
	cpu       float64 // CPU seconds per second
	sys       float64 // of which in the kernel (system time)
	allocs    float64 // per datagram
	gso, gro  bool
	retx      uint64 // retransmissions during the measurement
	timeouts  uint64 // probe timeouts during the measurement
	datagrams uint64
	wire      int // mrgw's negotiated wire version
	// ackRatio: datagrams B sent (acknowledgements) per datagram A sent
	// (DATA), mrgw only.
	ackRatio float64
	// perWrite, perRead: DATA datagrams per sendmmsg at A and per recvmmsg
	// at B (mrgw only).
	perWrite, perRead float64
	// kdrops: datagrams the kernel dropped for full receive buffers in
	// either namespace during the measurement (-1: not known, loopback).
	kdrops int64
	// Baselines: datagrams sent during the measurement, and those taken
	// as lost (never read within blastResync of the sender waiting).
	sent, lost uint64
}

// lossNote describes a baseline's losses.
func (r Result) lossNote() string {
	if r.sent == 0 {
		return ""
	}
	return fmt.Sprintf("%d datagrams sent, %.2f%% lost or later than %v", r.sent, 100*float64(r.lost)/float64(r.sent), blastResync)
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

func (r Result) row(system string) report.Row {
	row := report.Row{Scenario: "datapath", System: system, GoodputBps: r.bps, CPUPerGbps: r.CPUPerGbps(),
		AllocsPerPacket: r.allocs}
	if r.cpu > 0 {
		row.Note = fmt.Sprintf("%.0f%% of the CPU in the kernel", 100*r.sys/r.cpu)
	}
	return row
}

// meter samples wall time, process CPU and heap allocations.
type meter struct {
	wall    time.Time
	cpu     time.Duration
	sys     time.Duration
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
		sys:     time.Duration(ru.Stime.Nano()),
		mallocs: ms.Mallocs,
	}
}

// Tunnel measures one MetaRoCE connection between two tunnels on l (or two
// plain netio endpoints when sealed is false), A in site A and B in site
// B: WRITEs of MessageBytes kept queued from the event callback, goodput
// counted from send completions (the bytes are in the receiver's memory).
// The payload per datagram is PayloadMTU of the link's MTU; both ends
// speak only Options.WireVersion.
func Tunnel(ctx context.Context, o Options, l *link, udpOpts udp.Options, sealed bool) (Result, error) {
	o.defaults()
	mtu := PayloadMTU(l.mtu, sealed, o.WireVersion)
	proto := func(listen bool) metaroce.Config {
		// Loopback's round trip is scheduling: on a shared machine a
		// goroutine may wait tens of milliseconds for a core, and a probe
		// timeout shorter than that declares whole flights lost that were
		// only late (each costing a path's window in retransmissions).
		pc := pathmgr.DefaultConfig()
		pc.MinPTO, pc.MaxAckDelay = 50*time.Millisecond, 2*time.Millisecond
		return metaroce.Config{MTU: mtu, Paths: o.Paths, Listen: listen, Seed: 1, CC: cc.NewFixed(o.WindowBytes, 0), Path: pc,
			WireVersions: []uint8{o.WireVersion}}
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
		ta, tb, stop, err := tunnels(ctx, proto, l, udpOpts, o.Suite, o.Senders, onA)
		if err != nil {
			return Result{}, err
		}
		cleanup = append(cleanup, stop)
		a, b = ta.Endpoint(), tb.Endpoint()
	} else {
		var err error
		ua, ub := siteUDP(l, udpOpts)
		if b, err = netio.New(netio.Config{Protocol: proto(true), Listen: netip.AddrPortFrom(l.addr[1], 0), UDP: ub, TxSenders: o.Senders}); err != nil {
			return Result{}, err
		}
		cleanup = append(cleanup, func() { b.Close() })
		if a, err = netio.New(netio.Config{Protocol: proto(false), Listen: netip.AddrPortFrom(l.addr[0], 0), UDP: ua, OnEvent: onA, TxSenders: o.Senders,
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
	if err := sleep.Ctx(ctx, o.Duration/5); err != nil {
		return Result{}, err
	}
	wire := 0
	conn := func() (retx, timeouts uint64) {
		a.Call(ctx, func(time.Duration, *metaroce.Endpoint) {
			if sender != nil {
				retx, timeouts = sender.Stats.Retransmits, sender.Stats.Timeouts
				wire = sender.WireVersion()
			}
		})
		return retx, timeouts
	}
	retx0, to0 := conn()
	drops0A, _ := l.rcvbufErrors(0)
	drops0B, dropsOK := l.rcvbufErrors(1)
	m0, d0 := sample(), done.Load()
	sa0, sb0 := a.Stats(), b.Stats()
	pkts0 := sa0.TxDatagrams + sb0.TxDatagrams
	if err := sleep.Ctx(ctx, o.Duration); err != nil {
		return Result{}, err
	}
	m1, d1 := sample(), done.Load()
	sa, sb := a.Stats(), b.Stats()
	pkts := sa.TxDatagrams + sb.TxDatagrams - pkts0
	dataOut, acksOut := sa.TxDatagrams-sa0.TxDatagrams, sb.TxDatagrams-sb0.TxDatagrams
	retx1, to1 := conn()
	drops1A, _ := l.rcvbufErrors(0)
	drops1B, _ := l.rcvbufErrors(1)
	secs := m1.wall.Sub(m0.wall).Seconds()
	r := Result{
		bps: float64(units.Throughput(float64(d1-d0), secs)), cpu: (m1.cpu - m0.cpu).Seconds() / secs, sys: (m1.sys - m0.sys).Seconds() / secs,
		gso: sa.GSO, gro: sb.GRO, retx: retx1 - retx0, timeouts: to1 - to0, datagrams: pkts, wire: wire,
	}
	if dataOut > 0 {
		r.ackRatio = float64(acksOut) / float64(dataOut)
	}
	if dropsOK {
		r.kdrops = int64(drops1A - drops0A + drops1B - drops0B)
	} else {
		r.kdrops = -1
	}
	if w := sa.TxWrites - sa0.TxWrites; w > 0 {
		r.perWrite = float64(dataOut) / float64(w)
	}
	if rd := sb.RxReads - sb0.RxReads; rd > 0 {
		r.perRead = float64(sb.RxDatagrams-sb0.RxDatagrams) / float64(rd)
	}
	if pkts > 0 {
		r.allocs = float64(m1.mallocs-m0.mallocs) / float64(pkts)
	}
	if d1 == d0 {
		return r, errors.New("no message completed during the measurement")
	}
	return r, nil
}

// siteUDP returns the socket options of site A's and site B's endpoint:
// their sockets open in their namespaces.
func siteUDP(l *link, o udp.Options) (a, b udp.Options) {
	a, b = o, o
	a.ListenUDP, b.ListenUDP = l.listenUDP(0), l.listenUDP(1)
	return a, b
}

// tunnels builds two gateways' tunnels over an in-process CA and control
// session on loopback.
func tunnels(ctx context.Context, proto func(bool) metaroce.Config, l *link, udpOpts udp.Options, suite seal.Suite, senders int,
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
	ua, ub := siteUDP(l, udpOpts)
	b, err = tunnel.New(sp.B, tunnel.Config{Protocol: proto(true), Listen: netip.AddrPortFrom(l.addr[1], 0), Suite: suite, UDP: ub, Router: rb,
		TxSenders: senders})
	if err != nil {
		return nil, nil, nil, err
	}
	stops = append(stops, func() { b.Close() })
	a, err = tunnel.New(sp.A, tunnel.Config{Protocol: proto(false), Listen: netip.AddrPortFrom(l.addr[0], 0), Suite: suite, UDP: ua,
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
