//go:build linux

// Package peers measures mrgw against the usual alternatives in the same
// run, over the same emulated WAN link (DESIGN.md §6): the RoCEv2
// go-back-N baseline mode, kernel TCP with cubic and with bbr (one stream
// and 8 parallel streams), QUIC (quic-go, one connection, several streams)
// and kcp-go (the engine of kcptun).
//
// # Two emulators, one model
//
// UDP peers run through netem (by default; see below), the UDP relay on loopback: mrgw's WAN
// tunnel (tunnel package: sealed datagrams over per-path sockets, WRITE bulk
// transfer), the RoCEv2 baseline over the same tunnel, and kcp-go. Kernel
// TCP and QUIC cannot speak through a UDP relay, so they run through
// loadtest/tunemu: two network namespaces joined by TUN devices, whose
// forwarder applies the very same per-plane model (netem.Link) with the same
// parameters. Every row names the emulator it used ("emu" or "tunemu").
// Both charge a packet its whole IP length, headers included, as a real
// link does: a UDP datagram costs the same in both, and every system pays
// for its own headers (Ceiling).
//
// tunemu needs root. When it cannot run, the TUN rows are skipped and the
// scenario returns the rows it could measure together with an error that
// matches tunemu.ErrUnavailable and says why: callers print it. Nothing is
// ever estimated in place of a measurement.
//
// In-process sockets: TCP and QUIC sockets are created inside the
// namespaces by tunemu.Emulator.Do (a locked OS thread that joined the
// namespace and is destroyed afterwards); the sockets then serve any
// goroutine. mrgw's endpoint opens path sockets on demand on its own
// goroutines, so its tunnels get tunemu's in-namespace opener as
// udp.Options.ListenUDP (tunNet): every path socket is then opened inside
// the site's namespace and mrgw's sealed datagrams cross the TUN devices
// and the same queue as kernel TCP. The tunnel pair and the bulk transfer
// are written once against either emulator (tunnelNet). The coexistence
// scenario (coexist.go) runs mrgw and a TCP flow on one tunemu bottleneck;
// Options.MRGWEmulator (`--emulator tunemu`) runs the other scenarios' mrgw
// and rocev2 bulk rows through tunemu too.
//
// # What each system does
//
//   - mrgw: two tunnel endpoints (control session with mutual TLS, AEAD on
//     every datagram), one MetaRoCE connection with Options.Paths paths, the
//     long-RTT controller from the cc registry (Options.MRGWCC, default
//     longrtt-htcp, built with the link's capacity and RTT) and the
//     receiver's rate hints at the link's capacity; WRITEs of 1 MiB kept
//     queued; goodput is the bytes of messages completed at the receiver.
//   - rocev2: the same tunnel with metaroce.ModeRoCEv2 (one path, go-back-N)
//     and a fixed window of 1.5 BDP paced at capacity (the baseline's
//     controller, cc.NewFixed).
//   - tcp-cubic, tcp-bbr: N parallel kernel TCP connections from site A to
//     site B, congestion control set per socket (TCP_CONGESTION, read back
//     and reported), ECN negotiated (net.ipv4.tcp_ecn=1 in both
//     namespaces; bbr ignores it), buffers up to 32 MiB.
//   - quic: one quic-go connection with N streams (its own cubic-like
//     controller; flow-control windows raised so they never limit).
//   - kcp: one kcp-go session in kcptun's "fast3" style (nodelay 1,
//     interval 10 ms, fast resend 2, no congestion window), stream mode,
//     windows of 1.25 BDP in packets, MTU 1400, no FEC, over netem.
//
// Goodput is always measured at the receiver, over Options.Duration after
// Options.Warmup, and in the bulk runs (Bulk) it counts only bytes sent
// and delivered inside that window (measureSent): for kernel TCP what
// the receiving kernels took in order (tcpi_bytes_received) beyond what
// the sender had first sent when the window opened (tcpi_bytes_sent less
// tcpi_bytes_retrans), so that neither a reader held off the CPU nor a
// window of data in flight at the start moves bytes into the window; for
// mrgw and rocev2 the bytes of messages completed beyond those the
// receiver had placed or the sender had in flight when it opened; for QUIC
// (per stream) and kcp the bytes read beyond what the application had
// written when it opened (writtenWindow). Capacity
// is the link's rate in wire bytes (IP packets, headers included: netem's
// LinkConfig), the same for every system. Kernel TCP rows
// carry tunemu's self-check of their window (emulator_ok,
// emulator_check: release lateness, busy loops, drops before the model).
//
// # Scenarios
//
// LossSweep and Planes (scenarios.go): bulk goodput against random loss
// and against the number of ECMP planes. CompletionTime (msgs.go): message
// completion times under loss. RTTFairness (fairness.go): three flows at
// 10, 50 and 150 ms round trips on one bottleneck (per-pair delays in both
// emulators), shares and Jain's index. PlaneFailure (planefail.go): one of
// four planes fails under a transfer; goodput before, in the first second
// and sustained, messages lost by mrgw, streams stalled for TCP and QUIC.
//
// # Plots
//
// With Options.Record set, every run's receivers are sampled at a fixed,
// bounded interval (series.go) and Plot (plot.go) draws the rows and the
// runs: the sweeps against loss or planes, completion times against
// message size, goodput over time with the faults marked, flows' shares,
// and mrgw's per-path RTT and window. The drawing is internal/plot's.
package peers

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"github.com/mrgw/mrgw/internal/report"
	"github.com/mrgw/mrgw/internal/sleep"
	"github.com/mrgw/mrgw/loadtest/tunemu"
	"github.com/mrgw/mrgw/metaroce"
	"github.com/mrgw/mrgw/netem"
	"github.com/mrgw/mrgw/units"
)

// System names, as in report rows.
const (
	MRGW     = "mrgw"
	RoCEv2   = "rocev2"
	TCPCubic = "tcp-cubic"
	TCPBBR   = "tcp-bbr"
	QUIC     = "quic"
	KCP      = "kcp"
)

// AllSystems is every system in report order.
var AllSystems = []string{MRGW, RoCEv2, TCPBBR, TCPCubic, QUIC, KCP}

// Emulator names, as in the rows' emulator field.
const (
	EmuUDP = "emu"
	EmuTUN = "tunemu"
)

// Defaults of Options.
const (
	DefaultCapacityBps = 200e6
	DefaultDuration    = 6 * time.Second
	DefaultWarmup      = 2 * time.Second
	DefaultMRGWCC      = "longrtt-htcp"
	DefaultPaths       = 16
	DefaultQuicStreams = 8
	// DefaultMTU is the IP MTU of every system by default (Options.MTU).
	DefaultMTU = 1500
)

// Defaults of the loss-sweep grid.
var (
	DefaultRTTs       = []time.Duration{10 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond}
	DefaultLosses     = []float64{0, 0.001, 0.01, 0.05, 0.10}
	DefaultTCPStreams = []int{1, 8}
)

// Options configure the scenarios. The zero value runs them with the
// defaults given on each field.
type Options struct {
	// CapacityBps is the bottleneck's capacity (default 200 Mbit/s); in
	// Planes it is the total, split evenly over the planes.
	CapacityBps float64
	// Duration is each run's measured time (default 6 s), after Warmup
	// (default 2 s).
	Duration, Warmup time.Duration
	// RTTs, Losses select the loss sweep's grid (default 10/50/100 ms ×
	// 0/0.1/1/5/10%).
	RTTs   []time.Duration
	Losses []float64
	// Systems selects systems by name (default AllSystems).
	Systems []string
	// TCPStreams are the TCP stream counts (default 1 and 8).
	TCPStreams []int
	// QueueBDP is each plane's drop-tail queue in bandwidth-delay products
	// of that plane (default 1, at least 64 KiB).
	QueueBDP float64
	// ECNBDP is the ECN marking threshold in BDPs (default 0.1, at least
	// 16 KiB); negative disables marking.
	ECNBDP float64
	// MRGWCC names mrgw's controller in the cc registry (default
	// longrtt-htcp); Paths is its paths per connection (default 16).
	MRGWCC string
	Paths  int
	// MRGWEmulator is the emulator mrgw and rocev2 run through: EmuUDP
	// (default, "emu") or EmuTUN ("tunemu", the very emulator of TCP and
	// QUIC; needs root like them).
	MRGWEmulator string
	// Pairs are the coexistence scenario's pairs as "flow+against"
	// (default DefaultPairs).
	Pairs []string
	// MRGWExtraCC, if set to another controller, adds a second mrgw row
	// per point with it, marked Variant "extra-cc" and given no ratio
	// (default CCFixed: shows the transport without the pacer; "none":
	// no extra row).
	MRGWExtraCC string
	// ClassicFallback turns on mrgw's classic fallback (cc.Params;
	// docs/CC.md §4) for the controller under test.
	ClassicFallback bool
	// Seed seeds the emulators (ECMP hash, loss). One seed is one draw of
	// the loss pattern, the same packets lost in every run: a flow whose
	// start depends on its first rounds' losses (bbr's STARTUP under
	// several percent of loss) gives the same lucky or unlucky figure run
	// after run, so such a baseline takes several seeds.
	Seed uint64
	// MTU is the IP MTU of every system (default 1500; 9000 for a DCI
	// link's jumbo frames): tunemu's TUN devices and netem's largest
	// datagram and MTU clamp are set to it, mrgw and rocev2 fill it, TCP's
	// MSS follows it. kcp-go and quic-go cannot use more than 1472 and
	// 1452 bytes of UDP payload, and their rows say so.
	MTU int
	// Wire is mrgw's wire version (default 2, what gateways of this
	// release speak to each other; 1 for the original 76-byte DATA header):
	// mrgw's payload per datagram is what fills the IP MTU behind that
	// version's header. rocev2 always speaks version 1.
	Wire int
	// Quick shortens everything for tests (1 s runs, 0.5 s warm-up, small
	// messages).
	Quick bool
	// Progress, if set, is called before each run.
	Progress func(i, n int, what string)
	// Trace, if set, receives a line per 500 ms of every mrgw/rocev2 run:
	// the sender's counters (sent, retransmitted, lost, timeouts), bytes in
	// flight against the window, the messages queued, and the emulator's
	// drops and marks, all as deltas over the interval. It is how a
	// goodput figure is taken apart (repair, window, CPU).
	Trace io.Writer
	// Record, if set, receives every run's goodput over time (and mrgw's
	// per-path RTT and window) for Plot; see series.go for the bounds.
	Record *Recorder
	// Nice, if not 0, runs every bulk run (every system alike) with this
	// process's session at that autogroup nice (tunemu.Prioritize; -20 is
	// the most CPU): on a machine shared by several sessions the kernel
	// splits the CPUs by session first, and the emulators, endpoints and
	// kernel stacks of a run starve together.
	Nice int
}

func (o Options) withDefaults() Options {
	if o.CapacityBps <= 0 {
		o.CapacityBps = DefaultCapacityBps
	}
	if o.Quick {
		if o.Duration <= 0 {
			o.Duration = time.Second
		}
		if o.Warmup <= 0 {
			o.Warmup = 500 * time.Millisecond
		}
	}
	if o.Duration <= 0 {
		o.Duration = DefaultDuration
	}
	if o.Warmup <= 0 {
		o.Warmup = DefaultWarmup
	}
	if len(o.RTTs) == 0 {
		o.RTTs = DefaultRTTs
	}
	if len(o.Losses) == 0 {
		o.Losses = DefaultLosses
	}
	if len(o.Systems) == 0 {
		o.Systems = AllSystems
	}
	if len(o.TCPStreams) == 0 {
		o.TCPStreams = DefaultTCPStreams
	}
	if o.QueueBDP <= 0 {
		o.QueueBDP = 1
	}
	if o.ECNBDP == 0 {
		o.ECNBDP = 0.1
	}
	if o.MRGWCC == "" {
		o.MRGWCC = DefaultMRGWCC
	}
	switch o.MRGWExtraCC {
	case "":
		o.MRGWExtraCC = CCFixed
	case "none":
		o.MRGWExtraCC = ""
	}
	if o.Paths <= 0 {
		o.Paths = DefaultPaths
	}
	if o.MTU == 0 {
		o.MTU = DefaultMTU
	}
	if o.Wire == 0 {
		o.Wire = metaroce.Version2
	}
	return o
}

func (o *Options) progress(i, n int, what string) {
	if o.Progress != nil {
		o.Progress(i, n, what)
	}
}

func (o *Options) has(system string) bool {
	for _, s := range o.Systems {
		if s == system {
			return true
		}
	}
	return false
}

// Link is one emulated WAN: Planes planes of RateBps each, a round trip of
// RTT (half each way), random loss after the queue.
type Link struct {
	Planes       int
	RateBps      float64 // per plane
	RTT          time.Duration
	Loss         float64
	QueueBytes   int
	ECNThreshold int
	Seed         uint64
	// MTU is the IP MTU of every system's packets (0: DefaultMTU): the TUN
	// devices' MTU and the largest datagram the UDP emulator takes.
	MTU int
	// Wire is mrgw's wire version (0: version 2; Options.Wire).
	Wire int
}

// IPMTU is the link's IP MTU.
func (l Link) IPMTU() int {
	if l.MTU == 0 {
		return DefaultMTU
	}
	return l.MTU
}

// link builds the Link of a scenario point from the options.
func (o *Options) link(planes int, capacity float64, rtt time.Duration, loss float64) Link {
	per := capacity / float64(planes)
	bdp := units.BitRate(per).Bytes().BytesIn(rtt)
	l := Link{Planes: planes, RateBps: per, RTT: rtt, Loss: loss, Seed: o.Seed + 1,
		QueueBytes: max(64<<10, int(o.QueueBDP*bdp)), MTU: o.MTU, Wire: o.Wire}
	if o.ECNBDP > 0 {
		l.ECNThreshold = max(16<<10, int(o.ECNBDP*bdp))
	}
	return l
}

// Capacity is the link's total capacity in bits/s.
func (l Link) Capacity() float64 { return float64(l.Planes) * l.RateBps }

// BDP is the whole link's bandwidth-delay product in bytes.
func (l Link) BDP() float64 { return units.BitRate(l.Capacity()).Bytes().BytesIn(l.RTT) }

func (l Link) emuLink() netem.LinkConfig {
	return netem.LinkConfig{Rate: uint64(l.RateBps), QueueBytes: l.QueueBytes, Delay: l.RTT / 2, Loss: l.Loss,
		ECNThreshold: l.ECNThreshold}
}

func (l Link) emuConfig() netem.Config {
	// A datagram that would not fit the IP MTU the TCP and QUIC peers get
	// is truncated and counted by emu, and the run fails (tunnelBulk);
	// the planes clamp at the same MTU.
	lc := l.emuLink()
	lc.MTU = l.IPMTU()
	return netem.Config{Planes: l.Planes, Seed: l.Seed, Link: lc, MaxDatagram: l.IPMTU() - 28}
}

func (l Link) tunConfig() tunemu.Config {
	return tunemu.Config{Planes: l.Planes, Seed: l.Seed, Link: l.emuLink(), MTU: l.IPMTU(),
		Sysctls: map[string]string{"net.ipv4.tcp_ecn": "1"}}
}

// Peer is one system with its stream count (0 where it does not apply).
type Peer struct {
	System  string
	Streams int
}

func (p Peer) String() string {
	if p.Streams < 0 {
		return p.System + " (extra cc)"
	}
	if p.Streams > 0 && (p.System == TCPCubic || p.System == TCPBBR) {
		return fmt.Sprintf("%s x%d", p.System, p.Streams)
	}
	return p.System
}

// peers expands the selected systems into peers (TCP once per stream count).
func (o *Options) peers() []Peer {
	var ps []Peer
	for _, s := range AllSystems {
		if !o.has(s) {
			continue
		}
		switch s {
		case TCPCubic, TCPBBR:
			for _, n := range o.TCPStreams {
				ps = append(ps, Peer{s, n})
			}
		case QUIC:
			ps = append(ps, Peer{s, DefaultQuicStreams})
		default:
			ps = append(ps, Peer{System: s})
		}
	}
	return ps
}

// needsTUN says whether a system runs through tunemu.
func needsTUN(system string) bool {
	return system == TCPCubic || system == TCPBBR || system == QUIC
}

// Result is one bulk run's measurement.
type Result struct {
	GoodputBps  float64
	Retransmits uint64
	CC          string
	Emulator    string
	Note        string
	// PlanesUsed is how many distinct planes the flows landed on (A→B),
	// when known.
	PlanesUsed int
	// Check is tunemu's self-check of the measured window (nil where none
	// ran): the row's emulator_ok and emulator_check.
	Check *tunemu.Verdict
}

// Bulk runs one peer's bulk transfer over link for warm-up + duration and
// returns the goodput measured at the receiver.
func Bulk(ctx context.Context, p Peer, l Link, warmup, duration time.Duration, o Options) (Result, error) {
	o = o.withDefaults()
	if o.Nice != 0 {
		restore, err := tunemu.Prioritize(o.Nice)
		if err != nil {
			return Result{}, err
		}
		defer restore()
	}
	switch p.System {
	case MRGW, RoCEv2:
		return tunnelBulk(ctx, p.System == RoCEv2, l, warmup, duration, o)
	case KCP:
		return kcpBulk(ctx, l, warmup, duration)
	case TCPCubic, TCPBBR:
		return tcpBulk(ctx, p.System[len("tcp-"):], max(p.Streams, 1), l, warmup, duration)
	case QUIC:
		return quicBulk(ctx, max(p.Streams, 1), l, warmup, duration)
	}
	return Result{}, fmt.Errorf("peers: unknown system %q", p.System)
}

// A windowStart opens a measured window: called once the window's start
// time has been taken, it reads what the flow had sent by then and returns
// the counter to read at the window's end, before its end time is taken.
// That counter is the bytes the receiver got inside the window that the
// sender first sent inside it: bytes already sent when the window opened
// (in flight, queued, or received out of order behind a hole) are not
// counted, even if they complete inside it. So every counted byte crossed
// the link inside the window, and a goodput cannot exceed the share of
// the link's wire bytes its payload takes, whatever the edges of the
// window cut (docs/results/peers.md, "Capacity").
type windowStart func() (end func() uint64)

// writtenWindow is a windowStart for flows whose sender counts only what
// its application wrote (QUIC's streams, kcp): per flow (by key), the bytes
// its receiver read at the end beyond what its application had written at
// the start, plus pending, the most a write in progress at the start may
// have handed over already (its buffer). Written is at least sent, so no
// byte sent before the window is counted; a byte read late is at worst
// left out.
func writtenWindow(received, written func() map[uint64]uint64, pending uint64) windowStart {
	return func() func() uint64 {
		base := written()
		got := received()
		for k, v := range base {
			base[k] = max(v+pending, got[k])
		}
		return func() uint64 {
			var n uint64
			for k, v := range received() {
				if b, ok := base[k]; ok && v > b {
					n += v - b
				}
			}
			return n
		}
	}
}

// measureSent is measure for a flow whose window is opened by start:
// goodput counts bytes sent and delivered inside the window. Reading the
// sender after the start time and the receiver before the end time can
// only leave bytes out. The count is divided by the window less oneWay,
// the link's one-way propagation delay: a byte sent inside the window
// cannot arrive before oneWay has passed, so the link carries the counted
// bytes in that shorter time, and the figure keeps no bias of a delay
// that no system can shorten (what each system had in its queues and
// holes when the window opened still counts against it).
func measureSent(ctx context.Context, progress func() uint64, start windowStart, oneWay, warmup, duration time.Duration, atStart, atEnd func()) (float64, error) {
	if err := firstProgress(ctx, progress); err != nil {
		return 0, err
	}
	stop := sample(ctx, []func() uint64{progress}, warmup, warmup+duration)
	defer stop()
	if err := sleep.Ctx(ctx, warmup); err != nil {
		return 0, err
	}
	atStart()
	t0 := time.Now()
	end := start()
	if err := sleep.Ctx(ctx, duration); err != nil {
		return 0, err
	}
	b := end()
	t1 := time.Now()
	atEnd()
	return float64(units.Throughput(float64(b), (t1.Sub(t0) - oneWay).Seconds())), nil
}

// firstProgress waits until count has moved from zero: the warm-up
// starts when the flow does, not when it was asked to, so a handshake or
// a first message slowed by a busy machine is not measured as a stall
// (CI once saw mrgw's first 1 MiB message complete only after a 0.5 s
// warm-up and 1 s window had passed). It waits on progress, bounded by ctx;
// every system's measurement starts the same way.
func firstProgress(ctx context.Context, count func() uint64) error {
	ctx, cancel := context.WithTimeout(ctx, startLimit)
	defer cancel()
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for count() == 0 {
		select {
		case <-t.C:
		case <-ctx.Done():
			return fmt.Errorf("peers: the flow moved nothing in its first %v: %w", startLimit, ctx.Err())
		}
	}
	return nil
}

// startLimit bounds firstProgress: a flow that has completed nothing this
// long after it started is broken, not slow.
const startLimit = 30 * time.Second

// row builds a report row for one measured point.
func row(scenario string, p Peer, l Link, r Result) report.Row {
	rw := report.Row{
		Scenario: scenario, System: p.System, CC: r.CC, Planes: l.Planes,
		RTTms: float64(l.RTT) / 1e6, Loss: l.Loss, Streams: p.Streams,
		CapacityBps: l.Capacity(), GoodputBps: r.GoodputBps, Fraction: r.GoodputBps / l.Capacity(),
		Retransmits: r.Retransmits, Emulator: r.Emulator, Note: r.Note,
	}
	tunemu.SetRowCheck(&rw, r.Check)
	if l.IPMTU() != DefaultMTU {
		rw.Note = report.JoinNote(fmt.Sprintf("ip mtu %d", l.IPMTU()), rw.Note)
		switch p.System {
		case KCP:
			rw.Note = report.JoinNote(rw.Note, fmt.Sprintf("kcp-go sends at most %d-byte datagrams", kcpMTU(l)))
		case QUIC:
			rw.Note = report.JoinNote(rw.Note, "quic-go sends at most 1452-byte datagrams")
		}
	}
	if p.System == RoCEv2 {
		rw.Paths = 1
	}
	if p.System == MRGW && l.wire() != metaroce.Version2 {
		rw.Note = report.JoinNote(rw.Note, fmt.Sprintf("wire v%d", l.wire()))
	}
	return rw
}

// setRatios fills MRGWRatio on every row of group from the mrgw row in it.
func setRatios(group []report.Row) {
	var m float64
	found := false
	for _, r := range group {
		if r.System == MRGW && r.Variant == "" {
			m, found = r.GoodputBps, true
		}
	}
	if !found {
		return
	}
	for i := range group {
		if group[i].System == MRGW {
			continue
		}
		if group[i].GoodputBps > 0 {
			group[i].MRGWRatio = m / group[i].GoodputBps
		} else {
			group[i].Note = report.JoinNote(group[i].Note, "moved nothing: no ratio")
		}
	}
}

// skipped collects the reasons why TUN rows could not run.
type skipped struct{ err error }

func (s *skipped) add(err error) bool {
	if errors.Is(err, tunemu.ErrUnavailable) {
		if s.err == nil {
			s.err = err
		}
		return true
	}
	return false
}

// countReads reads r until it fails (the peer closed, the run was torn
// down), adding every byte read to n: the receiving side of a bulk flow.
func countReads(r io.Reader, n *atomic.Uint64) {
	buf := make([]byte, 256<<10)
	for {
		k, err := r.Read(buf)
		n.Add(uint64(k))
		if err != nil {
			return
		}
	}
}
