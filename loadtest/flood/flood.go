//go:build linux

// Package flood is `mrgw-lab loadtest flood` (the flood figures):
// junk and INIT floods against every listening socket of a gateway (LAN,
// WAN plane, QUIC control, gossip UDP and TCP, admin HTTP) while a transfer
// is in flight through it, in one process on loopback (loadtest/lab: two
// regions of two gateways with the link emulator between them).
//
// For each target it measures what the flood targets ask: the
// transfer keeps going (goodput before, during and after the flood, the
// worst stall) and arrives byte-exact; a new host can still register with
// the flooded gateway (no lockout); no gateway is declared dead by its
// peers (gossip) and no WAN connection drops; the process's RSS and
// goroutines stay bounded; and the gateway's counters account for the
// junk, by reason. Every flood is bounded in count and in time; every
// address is in 127.0.0.0/8.
package flood

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/netip"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/mrgw/mrgw/config"
	"github.com/mrgw/mrgw/gateway"
	"github.com/mrgw/mrgw/internal/sleep"
	"github.com/mrgw/mrgw/metaroce"
	"github.com/mrgw/mrgw/units"

	"github.com/mrgw/mrgw/host"
	"github.com/mrgw/mrgw/loadtest/lab"
)

// Targets, in the order they run.
const (
	TargetLANJunk   = "lan-junk"     // random datagrams at the LAN socket
	TargetLANInit   = "lan-init"     // INITs, each from its own source (IP, port), every other one with a forged cookie: the admission flood
	TargetWANJunk   = "wan-junk"     // random datagrams at the WAN plane socket from unknown addresses
	TargetWANSpoof  = "wan-spoof"    // random datagrams at the WAN plane socket from the peers' IP (the emulator's)
	TargetControl   = "control-junk" // QUIC v1 Initial-looking packets (random DCID, undecryptable) at the control socket
	TargetGossipUDP = "gossip-udp"   // random datagrams at the gossip UDP socket
	TargetGossipTCP = "gossip-tcp"   // TCP connections to the gossip port, opened and held idle
	TargetAdmin     = "admin-conns"  // TCP connections to the admin HTTP port, opened and held idle
)

// counterSlack is how much a drop or refusal counter may grow beyond the
// flood's datagrams in counterFaults: the transfer alongside has drops of
// its own (duplicates, emulated loss repaired), a few hundred in a run.
const counterSlack = 10_000

// AllTargets lists every target, in run order.
var AllTargets = []string{TargetLANJunk, TargetLANInit, TargetWANJunk, TargetWANSpoof, TargetControl,
	TargetGossipUDP, TargetGossipTCP, TargetAdmin}

// Options configure a run. Zero values take the defaults in brackets.
type Options struct {
	Targets  []string      // [AllTargets]
	Count    int           // datagrams per datagram target [1,000,000]
	Duration time.Duration // of each flood [10 s]
	// Conns is how many connections a connection flood holds open at once
	// [1000]; ConnTotal how many it opens in all at most [10,000].
	Conns, ConnTotal int
	// Workers are the sending goroutines of a datagram flood [4].
	Workers int
	// Before and After are the windows around the flood the transfer's
	// goodput is measured in [3 s, 5 s].
	Before, After time.Duration
	// MessageSize is the transfer's message size [32 KiB]; RateMbit the
	// emulated WAN's rate per plane (4 planes) [10 Mbit/s]: a steady
	// transfer whose goodput a flood could only lower.
	MessageSize int
	RateMbit    float64
	// RegisterTimeout bounds each newcomer's registration with the flooded
	// gateway (host.Config.OpenTimeout); one that fails is a lockout [5 s].
	// TestFloodShort, which asserts no time, gives it the transfer hosts'
	// 20 s: under -race at load 17 a newcomer's registration ran past 5 s
	// while the gateways were starved, not locked out ("0 connections
	// established, 0 handshakes unanswered": its attempt was still going).
	RegisterTimeout time.Duration
	// MaxRSSMB and MaxGoroutines stop a flood early (reported as aborted)
	// rather than let it take the machine down [4096 MiB, 200,000].
	MaxRSSMB      float64
	MaxGoroutines int
	// Raw sends the LAN INIT flood from raw sockets, every INIT from its
	// own source (IP, port) [true when root; false falls back to 512
	// source ports].
	Raw *bool
	// NewcomerIP is the address of the hosts that register during the
	// flood [127.0.0.2]. The transfer's hosts are on 127.0.0.1: a host on
	// their IP that registers and closes stalls their transfer through
	// the same gateway for about 2.5 s (a bug: see docs/results/flood.md),
	// which would be charged to the flood.
	NewcomerIP netip.Addr
	// Progress receives a line per phase (stderr in the command).
	Progress io.Writer
	// Logger for the gateways and hosts [discard].
	Logger *slog.Logger
}

func (o *Options) fill() error {
	if len(o.Targets) == 0 {
		o.Targets = AllTargets
	}
	for _, t := range o.Targets {
		if !slices.Contains(AllTargets, t) {
			return fmt.Errorf("flood: unknown target %q (targets: %s)", t, strings.Join(AllTargets, ", "))
		}
	}
	if o.Count == 0 {
		o.Count = 1_000_000
	}
	if o.Duration == 0 {
		o.Duration = 10 * time.Second
	}
	if o.RegisterTimeout == 0 {
		o.RegisterTimeout = 5 * time.Second
	}
	if o.Conns == 0 {
		o.Conns = 1000
	}
	if o.ConnTotal == 0 {
		o.ConnTotal = 10 * o.Conns
	}
	if o.Workers == 0 {
		o.Workers = 4
	}
	if o.Before == 0 {
		o.Before = 3 * time.Second
	}
	if o.After == 0 {
		o.After = 5 * time.Second
	}
	if o.MessageSize == 0 {
		o.MessageSize = 32 << 10
	}
	if o.RateMbit == 0 {
		o.RateMbit = 10
	}
	if o.MaxRSSMB == 0 {
		o.MaxRSSMB = 4096
	}
	if o.MaxGoroutines == 0 {
		o.MaxGoroutines = 200_000
	}
	if o.Raw == nil {
		root := os.Geteuid() == 0
		o.Raw = &root
	}
	if !o.NewcomerIP.IsValid() {
		o.NewcomerIP = netip.MustParseAddr("127.0.0.2")
	}
	if !o.NewcomerIP.Is4() || !netip.MustParsePrefix("127.0.0.0/8").Contains(o.NewcomerIP) {
		return errors.New("flood: --newcomer-ip must be in 127.0.0.0/8")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	switch {
	case o.Count < 1 || o.Count > 100_000_000:
		return errors.New("flood: --count must be 1..100,000,000")
	case o.Duration < 100*time.Millisecond || o.Duration > 10*time.Minute:
		return errors.New("flood: --duration must be 100ms..10m")
	case o.Conns < 1 || o.Conns > 8000:
		return errors.New("flood: --conns must be 1..8000 (two descriptors each, in this process)")
	case o.MessageSize < 64 || o.MessageSize > 1<<20:
		return errors.New("flood: --message-size must be 64 B..1 MiB")
	}
	return nil
}

// Row is one target's figures.
type Row struct {
	Target  string `json:"target"`
	Gateway string `json:"gateway"` // the gateway flooded: the one carrying the transfer
	Socket  string `json:"socket"`  // the address flooded
	Unit    string `json:"unit"`    // datagrams, or connections for the TCP floods
	// DatagramsSent is what the flood put on the wire (connections opened
	// for the TCP floods); RatePPS that over the time it took.
	DatagramsSent uint64  `json:"datagrams_sent"`
	RatePPS       float64 `json:"rate_pps"`
	FloodSeconds  float64 `json:"flood_seconds"`
	Aborted       string  `json:"aborted,omitempty"` // why the flood was stopped early
	// DroppedCounted are the flooded gateway's drop, refusal and reclaim
	// counters that grew during the flood (and its After window), by
	// metric and reason. Counted sums the families that count one per
	// datagram (or connection) turned away (*_datagrams_dropped_total and
	// the like); Uncounted is DatagramsSent minus Counted minus
	// KernelDrops (never below zero): what reached the gateway's socket
	// and went nowhere it says.
	DroppedCounted map[string]uint64 `json:"dropped_counted"`
	Counted        uint64            `json:"counted"`
	// KernelDrops are the kernel's drops at the flooded UDP socket (its
	// receive buffer full: /proc/net/udp), read by this test; they are in
	// Counted too where the gateway exports them (the LAN socket's
	// reason="buffer"). For TCP floods: the machine's listen-queue
	// overflows.
	KernelDrops         uint64 `json:"kernel_drops"`
	KernelDropsExported bool   `json:"kernel_drops_exported"`
	// Uncounted is DatagramsSent minus Counted (never below zero): the
	// datagrams no counter of the gateway's /metrics shows. This test
	// finds where they went, in counters the gateway keeps but does not
	// export: the kernel's (KernelDrops, when not exported) and the
	// MetaRoCE state machine's (ProtocolDrops: metaroce.EndpointStats,
	// for datagrams netio attributed to a peer); Unaccounted is the rest.
	Uncounted uint64 `json:"uncounted"`
	// Admitted are LAN peers the flood's INITs got admitted as (not
	// drops: each holds a slot until it is reclaimed unregistered).
	Admitted      uint64            `json:"admitted"`
	ProtocolDrops map[string]uint64 `json:"protocol_drops_unexported,omitempty"`
	// ProtocolDropsExported: the gateway exports the state machine's
	// drops (mrgw_protocol_datagrams_dropped_total), so ProtocolDrops are
	// in Counted too.
	ProtocolDropsExported bool `json:"protocol_drops_exported"`
	// GossipDrops are the gossip cluster's own drop and refusal counters
	// (region.Stats) that grew; unexported unless a mrgw_gossip_* family
	// shows them in DroppedCounted too.
	GossipDrops map[string]uint64 `json:"gossip_drops_unexported,omitempty"`
	Unaccounted uint64            `json:"unaccounted"`
	// CounterFaults are the gateway's counter series that went back, or
	// (drop, refusal and reclaim counters) grew by more than
	// DatagramsSent plus counterSlack, during the flood: none is right.
	CounterFaults []string `json:"counter_faults,omitempty"`
	// Connection floods: connections the server closed, dials that failed,
	// most held open at once.
	ServerClosed int `json:"server_closed,omitempty"`
	DialFailures int `json:"dial_failures,omitempty"`
	MaxHeld      int `json:"max_held,omitempty"`
	// The transfer in flight.
	TransferByteExact bool           `json:"transfer_byte_exact"`
	Transfer          transferResult `json:"transfer"`
	GoodputBefore     float64        `json:"goodput_before_mbps"`
	GoodputDuring     float64        `json:"goodput_during_mbps"`
	GoodputAfter      float64        `json:"goodput_after_mbps"`
	// GoodputSeries is the goodput per second (Mbit/s) from the start of
	// Before to the end of After; the flood starts at index FloodStart.
	GoodputSeries []float64 `json:"goodput_series_mbps"`
	FloodStart    int       `json:"flood_start_index"`
	StallMs       float64   `json:"stall_ms"`        // the longest gap between deliveries during the flood
	StallBeforeMs float64   `json:"stall_before_ms"` // the same in the window before, for scale
	// Lockout: a new host could not register with the flooded gateway
	// during the flood (Registrations attempts, RegisterMs the slowest).
	Lockout       bool     `json:"lockout"`
	Registrations int      `json:"registrations"`
	RegisterFails []string `json:"register_failures,omitempty"`
	RegisterMs    float64  `json:"register_ms"`
	// AdminOK: GET /readyz of the flooded gateway answered within 5 s
	// every time it was tried during the flood (AdminMs the slowest).
	AdminOK bool    `json:"admin_ok"`
	AdminMs float64 `json:"admin_ms"`
	// FalseDeaths are gossip changes to dead or left (any gateway, seen by
	// any gateway) from the flood's start to the end of After; Suspects to
	// suspect; WANLosses WAN connections that left "up".
	FalseDeaths int      `json:"false_deaths"`
	Suspects    int      `json:"suspects"`
	WANLosses   int      `json:"wan_losses"`
	Deaths      []string `json:"deaths,omitempty"`
	// The process (gateways, hosts, emulator and flooder all in one):
	// baseline before the flood and peak from its start to the end of After.
	RSSBaseMB      float64 `json:"rss_base_mb"`
	RSSPeakMB      float64 `json:"rss_peak_mb"`
	GoroutinesBase int     `json:"goroutines_base"`
	GoroutinesPeak int     `json:"goroutines_peak"`
	// BoundMB is the most the flooded gateway may hold: its
	// limits.memory_bytes plus gateway.MemoryOverhead plus
	// gateway.MemoryPerHost per host it has registered (the Go memory
	// limit `mrgw run` sets counts lan.max_hosts instead: more). The
	// gateways run in this process, so RSSPeakMB, the whole process's,
	// bounds the flooded gateway's from above: WithinBound says
	// RSSPeakMB ≤ BoundMB.
	BoundMB     float64 `json:"bound_mb"`
	WithinBound bool    `json:"within_bound"`
	// RSSEndMB and GoroutinesEnd are at the end of After (released?).
	RSSEndMB      float64 `json:"rss_end_mb"`
	GoroutinesEnd int     `json:"goroutines_end"`
	Note          string  `json:"note,omitempty"`
	Error         string  `json:"error,omitempty"`
}

// OK says whether the row meets the targets: no lockout, no false death, no
// WAN connection lost, the transfer byte-exact, the flood not aborted, and
// every datagram that reached the gateway counted.
func (r *Row) OK() bool {
	return r.Error == "" && r.Aborted == "" && !r.Lockout && r.FalseDeaths == 0 && r.WANLosses == 0 &&
		r.TransferByteExact && r.Uncounted == 0
}

func (o *Options) say(format string, args ...any) {
	if o.Progress != nil {
		fmt.Fprintf(o.Progress, format+"\n", args...)
	}
}

// Run floods each target in turn, each on a fresh lab, and returns a row
// per target. A target whose lab cannot be built gets a row with Error.
func Run(ctx context.Context, o Options) ([]Row, error) {
	if err := o.fill(); err != nil {
		return nil, err
	}
	var rows []Row
	for i, t := range o.Targets {
		o.say("[%d/%d] %s", i+1, len(o.Targets), t)
		r := runTarget(ctx, &o, t)
		rows = append(rows, r)
		if ctx.Err() != nil {
			return rows, ctx.Err()
		}
		// The next target starts from a process that gave back what it
		// could.
		runtime.GC()
		debug.FreeOSMemory()
	}
	return rows, nil
}

// targetRun is one target's flood: the lab with a transfer in flight,
// the flooded gateway, the flooder, and the counters taken before it.
type targetRun struct {
	o      *Options
	target string
	row    *Row

	l      *lab.Lab
	tr     *transfer
	g      *gateway.Gateway
	cfg    *config.Config
	gwAddr netip.AddrPort

	dst netip.AddrPort
	uf  *udpFlood
	cf  *connFlood
	mon *monitor

	// Before the flood (baseline).
	before   counters
	every    counters // every counter series, for counterFaults
	gBefore  map[string]uint64
	pBefore  metaroce.EndpointStats
	kBefore  uint64
	ovBefore uint64
	kErr     error
	aBefore  gateway.AdmissionStatus
	t0       time.Time
}

// runTarget floods one target with the transfer in flight and returns its
// row: setup, aim, baseline, the flood with its probes, accounting and
// the transfer's goodput around it.
func runTarget(ctx context.Context, o *Options, target string) Row {
	row := Row{Target: target, Unit: "datagrams", DroppedCounted: map[string]uint64{}}
	r := &targetRun{o: o, target: target, row: &row}
	defer r.close()
	if err := r.setup(ctx); err != nil {
		row.Error = err.Error()
		o.say("  %s: %v", target, err)
		return row
	}
	r.aim()
	fctx, fcancel := context.WithCancel(ctx)
	defer fcancel()
	mon := newMonitor(r.l.Gateways, 100*time.Millisecond, func(rss float64, gor int) string {
		switch {
		case rss > o.MaxRSSMB:
			return fmt.Sprintf("RSS %.0f MiB above %.0f", rss, o.MaxRSSMB)
		case gor > o.MaxGoroutines:
			return fmt.Sprintf("%d goroutines above %d", gor, o.MaxGoroutines)
		}
		return ""
	}, func(why string) {
		o.say("  aborting the flood: %s", why)
		fcancel()
	})
	defer mon.stop()
	r.mon = mon

	r.baseline(ctx)
	probes := r.startProbes(fctx)
	took := r.flood(fctx)
	t1 := time.Now()
	t0 := r.t0
	if sec := took.Seconds(); sec > 0 {
		row.FloodSeconds = sec
		row.RatePPS = float64(row.DatagramsSent) / sec
	}
	o.say("  sent %d %s in %.1f s (%.0f/s); %v after", row.DatagramsSent, row.Unit, took.Seconds(), row.RatePPS, o.After)
	// The probes finish (each bounded by its timeout) before the window
	// after the flood is measured.
	probes.Wait()
	sleep.Ctx(ctx, o.After)
	t2 := time.Now()
	mon.record(false)
	r.account()
	r.finish(t0, t1, t2)
	return row
}

func (r *targetRun) close() {
	if r.tr != nil {
		r.tr.close()
	}
	if r.l != nil {
		r.l.Close()
	}
}

// setup starts the lab and a transfer, and finds the gateway it enters at
// (the one flooded).
func (r *targetRun) setup(ctx context.Context) error {
	o, row := r.o, r.row
	l, err := lab.New(ctx, lab.Config{Admin: true, RateBps: uint64(o.RateMbit * 1e6), Logger: o.Logger})
	if err != nil {
		return err
	}
	r.l = l
	l.Start()
	rctx, rcancel := context.WithTimeout(ctx, 60*time.Second)
	err = l.WaitReady(rctx)
	rcancel()
	if err != nil {
		return err
	}
	tr, err := startTransfer(ctx, l, o.MessageSize, o.Logger)
	if err != nil {
		return err
	}
	r.tr = tr
	// The flooded gateway is the one carrying the transfer at its source.
	gwAddr := tr.flow.Gateway()
	for n, c := range l.Configs {
		if c.LAN.Listen == gwAddr.String() {
			row.Gateway = n
		}
	}
	if row.Gateway == "" {
		return (fmt.Errorf("flood: no gateway listens on %v", gwAddr))
	}
	r.g, r.cfg, r.gwAddr = l.Gateways[row.Gateway], l.Configs[row.Gateway], gwAddr

	return nil
}

// aim points the flooder at the target's socket.
func (r *targetRun) aim() {
	o, row, target, cfg, g := r.o, r.row, r.target, r.cfg, r.g
	var dst netip.AddrPort
	uf := &udpFlood{count: uint64(o.Count), duration: o.Duration, workers: o.Workers, srcIPs: floodIPs()}
	var cf *connFlood
	switch target {
	case TargetLANJunk:
		dst, uf.what = netip.MustParseAddrPort(cfg.LAN.Listen), payloadJunk
	case TargetLANInit:
		dst, uf.what, uf.raw = netip.MustParseAddrPort(cfg.LAN.Listen), payloadInit, *o.Raw
		if !uf.raw {
			row.Note = "INITs from 512 source ports (not root: no raw sockets)"
		}
	case TargetWANJunk:
		dst, uf.what = netip.MustParseAddrPort(cfg.WAN.Planes[0].Local), payloadJunk
	case TargetWANSpoof:
		dst, uf.what, uf.spoofIP = netip.MustParseAddrPort(cfg.WAN.Planes[0].Local), payloadJunk, netip.MustParseAddr("127.0.0.200") // loadtest/lab's emulator address
		row.Note = "from the peers' IP (the emulator's), other ports: every datagram is tried against the peers' keys"
	case TargetControl:
		dst, uf.what = netip.MustParseAddrPort(cfg.Control.Listen), payloadQUIC
	case TargetGossipUDP:
		dst, uf.what = netip.MustParseAddrPort(cfg.Gossip.Bind), payloadJunk
	case TargetGossipTCP:
		dst = netip.MustParseAddrPort(cfg.Gossip.Bind)
		cf = &connFlood{held: o.Conns, total: o.ConnTotal, duration: o.Duration, srcIPs: floodIPs()}
	case TargetAdmin:
		dst = netip.MustParseAddrPort(g.AdminAddr())
		cf = &connFlood{held: o.Conns, total: o.ConnTotal, duration: o.Duration, srcIPs: floodIPs()}
	}
	row.Socket = dst.String()
	if cf != nil {
		row.Unit = "connections"
		cf.dst = dst
	} else {
		uf.dst = dst
	}

	r.dst, r.uf, r.cf = dst, uf, cf
}

// baseline waits o.Before with the transfer alone and takes the counters.
func (r *targetRun) baseline(ctx context.Context) {
	o, row, g, dst, mon := r.o, r.row, r.g, r.dst, r.mon
	o.say("  transfer up through %s; %v before the flood", row.Gateway, o.Before)
	sleep.Ctx(ctx, o.Before)
	runtime.GC()
	row.RSSBaseMB, row.GoroutinesBase = rssMB(), runtime.NumGoroutine()
	r.before = snapshot(g)
	r.every = scrape(g, everyCounter)
	r.kBefore, r.kErr = udpKernelDrops(dst)
	r.ovBefore, _ = tcpListenOverflows()
	r.pBefore = protoStats(g)
	r.aBefore = g.Status().Admission
	r.gBefore = regionStats(g)
	mon.record(true)
	r.t0 = time.Now()
	o.say("  flooding %s (%s) for at most %v", dst, row.Unit, o.Duration)

}

// startProbes checks, at 1/3 and 2/3 of the flood, that a new host can
// register with the flooded gateway alone and that the admin endpoint
// answers.
func (r *targetRun) startProbes(fctx context.Context) *sync.WaitGroup {
	o, row, l, g, gwAddr, t0 := r.o, r.row, r.l, r.g, r.gwAddr, r.t0
	probes := &sync.WaitGroup{}
	// Probes during the flood: a new host registers with the flooded
	// gateway alone, and the admin endpoint answers, at 1/3 and 2/3 of it.
	var pmu sync.Mutex
	row.AdminOK = true
	probes.Add(1)
	go func() {
		defer probes.Done()
		for k := 1; k <= 2; k++ {
			if !sleepUntil(fctx, t0.Add(o.Duration*time.Duration(k)/3)) {
				return
			}
			var wg sync.WaitGroup
			wg.Add(2)
			go func() {
				defer wg.Done()
				ms, err := register(l, gwAddr, o.NewcomerIP, fmt.Sprintf("newcomer-%d", k), o.RegisterTimeout, o.Logger)
				pmu.Lock()
				row.Registrations++
				row.RegisterMs = max(row.RegisterMs, ms)
				if err != nil {
					row.RegisterFails = append(row.RegisterFails, err.Error())
				}
				pmu.Unlock()
			}()
			go func() {
				defer wg.Done()
				ms, ok := adminProbe(g.AdminAddr())
				pmu.Lock()
				row.AdminMs = max(row.AdminMs, ms)
				row.AdminOK = row.AdminOK && ok
				pmu.Unlock()
			}()
			wg.Wait()
		}
	}()

	return probes
}

// flood runs the flooder until its count or duration.
func (r *targetRun) flood(fctx context.Context) time.Duration {
	row, cf, uf := r.row, r.cf, r.uf
	var err error
	var took time.Duration
	if cf != nil {
		took = cf.run(fctx)
		row.DatagramsSent = uint64(cf.opened)
		row.ServerClosed, row.DialFailures, row.MaxHeld = cf.serverClosed, cf.dialFailures, cf.maxHeld
		if cf.lastErr != nil && cf.opened == 0 {
			row.Error = "dial: " + cf.lastErr.Error()
		}
	} else {
		took, err = uf.run(fctx)
		row.DatagramsSent = uf.sent.Load()
		if err != nil {
			row.Error = err.Error()
		}
		if e := uf.lastErr(); e != nil && row.Error == "" && uf.sent.Load() == 0 {
			row.Error = "send: " + e.Error()
		}
	}
	return took
}

// account takes the counters after the flood and accounts for every
// datagram sent: counted by the gateway, dropped by a kernel, admitted, or
// left unaccounted.
func (r *targetRun) account() {
	row, g, cf, target, dst := r.row, r.g, r.cf, r.target, r.dst
	before, kBefore, kErr, ovBefore, pBefore, aBefore, gBefore := r.before, r.kBefore, r.kErr, r.ovBefore, r.pBefore, r.aBefore, r.gBefore
	after := snapshot(g)
	row.CounterFaults = counterFaults(r.every, scrape(g, everyCounter), row.DatagramsSent, counterSlack)
	row.DroppedCounted = delta(before, after)
	row.Counted = primarySum(row.DroppedCounted)
	if cf == nil {
		kAfter, _ := udpKernelDrops(dst)
		if kErr == nil {
			row.KernelDrops = kAfter - kBefore
		}
		// reason="buffer" of the LAN, WAN and control families;
		// reason="socket_overflow" of the gossip one.
		row.KernelDropsExported = target == TargetLANJunk || target == TargetLANInit ||
			target == TargetWANJunk || target == TargetWANSpoof || target == TargetControl ||
			(target == TargetGossipUDP && gossipExported(row.DroppedCounted))
		row.ProtocolDrops = protoDelta(pBefore, protoStats(g))
		row.ProtocolDropsExported = hasFamily(after, "mrgw_protocol_datagrams_dropped_total")
		row.GossipDrops = mapDelta(gBefore, regionStats(g))
		if row.DatagramsSent > row.Counted {
			row.Uncounted = row.DatagramsSent - row.Counted
		}
		aAfter := g.Status().Admission
		adm := int64(aAfter.Peers - aBefore.Peers)
		for k, v := range aAfter.Reclaimed {
			adm += int64(v - aBefore.Reclaimed[k])
		}
		row.Admitted = uint64(max(adm, 0))
		rest := row.Uncounted
		rest -= min(rest, row.Admitted)
		if !row.KernelDropsExported {
			rest -= min(rest, row.KernelDrops)
		}
		if !row.ProtocolDropsExported {
			for _, v := range row.ProtocolDrops {
				rest -= min(rest, v)
			}
		}
		if !gossipExported(row.DroppedCounted) {
			for k, v := range row.GossipDrops {
				if strings.HasPrefix(k, "DatagramsDropped") || k == "BadMessages" {
					rest -= min(rest, v)
				}
			}
		}
		row.Unaccounted = rest
	} else {
		ovAfter, _ := tcpListenOverflows()
		row.KernelDrops = ovAfter - ovBefore
		row.GossipDrops = mapDelta(gBefore, regionStats(g))
	}
}

// finish records resources, deaths and lockouts, the goodput before,
// during and after the flood, and drains the transfer.
func (r *targetRun) finish(t0, t1, t2 time.Time) {
	o, row, tr, mon, target := r.o, r.row, r.tr, r.mon, r.target
	row.RSSEndMB, row.GoroutinesEnd = rssMB(), runtime.NumGoroutine()
	mon.mu.Lock()
	row.RSSPeakMB, row.GoroutinesPeak = mon.rssPeak, mon.gorPeak
	row.Aborted = mon.aborted
	row.FalseDeaths, row.Suspects = len(mon.deaths), len(mon.suspects)
	row.Deaths = append(append(append(row.Deaths, mon.deaths...), mon.suspects...), mon.peerLoss...)
	row.WANLosses = len(mon.peerLoss)
	mon.mu.Unlock()
	row.BoundMB = float64(r.cfg.Limits.MemoryBytes+gateway.MemoryOverhead+gateway.MemoryPerHost*int64(r.g.Status().Hosts)) / (1 << 20)
	row.WithinBound = row.RSSPeakMB <= row.BoundMB
	row.Lockout = len(row.RegisterFails) > 0 || row.Registrations == 0

	b0, s0 := tr.deliveredIn(t0.Add(-o.Before), t0)
	b1, s1 := tr.deliveredIn(t0, t1)
	b2, _ := tr.deliveredIn(t1, t2)
	row.GoodputBefore = mbps(b0, o.Before)
	row.GoodputDuring = mbps(b1, t1.Sub(t0))
	row.GoodputAfter = mbps(b2, t2.Sub(t1))
	row.StallMs, row.StallBeforeMs = units.Ms(s1), units.Ms(s0)
	row.FloodStart = int(o.Before / time.Second)
	for t := t0.Add(-o.Before); !t.Add(time.Second).After(t2); t = t.Add(time.Second) {
		b, _ := tr.deliveredIn(t, t.Add(time.Second))
		row.GoodputSeries = append(row.GoodputSeries, math.Round(mbps(b, time.Second)*10)/10)
	}
	o.say("  goodput per second (Mbit/s; flood from #%d): %v", row.FloodStart, row.GoodputSeries)
	o.say("  draining the transfer")
	row.Transfer = tr.finish(10 * time.Second)
	row.TransferByteExact = row.Transfer.ByteExact
	o.say("  %s: counted %d of %d, uncounted %d, byte-exact %v, stall %.0f ms, lockout %v, false deaths %d, RSS peak %.0f MiB, goroutines peak %d",
		target, row.Counted, row.DatagramsSent, row.Uncounted, row.TransferByteExact, row.StallMs, row.Lockout, row.FalseDeaths, row.RSSPeakMB, row.GoroutinesPeak)
}

// hasFamily reports whether a snapshot holds a series of the family.
func hasFamily(c counters, family string) bool {
	for k := range c {
		if k == family || strings.HasPrefix(k, family+"{") {
			return true
		}
	}
	return false
}

// gossipExported: a mrgw_gossip_* family counted drops (then the region's
// own counters are already in Counted).
func gossipExported(d map[string]uint64) bool {
	for k := range d {
		if strings.HasPrefix(k, "mrgw_gossip_") {
			return true
		}
	}
	return false
}

// floodIPs are the flooders' source addresses: 16 loopback IPs no gateway,
// host or emulator of the lab uses.
func floodIPs() []netip.Addr {
	var ips []netip.Addr
	for i := range 16 {
		ips = append(ips, netip.AddrFrom4([4]byte{127, 0, 1, byte(i + 1)}))
	}
	return ips
}

// register starts a host that registers with the flooded gateway alone and
// returns how long that took.
func register(l *lab.Lab, gw netip.AddrPort, listen netip.Addr, name string, timeout time.Duration, logger *slog.Logger) (float64, error) {
	t := time.Now()
	h, err := host.New(host.Config{Name: name, Region: lab.RegionA, Gateways: []netip.AddrPort{gw}, Key: l.HostKey, Listen: netip.AddrPortFrom(listen, 0),
		DeadAfter: time.Second, OpenTimeout: timeout, Logger: logger, Protocol: lab.HostProtocol()})
	d := units.Ms(time.Since(t))
	if err != nil {
		return d, err
	}
	h.Close()
	return d, nil
}

func adminProbe(addr string) (float64, bool) {
	c := http.Client{Timeout: 5 * time.Second}
	t := time.Now()
	resp, err := c.Get("http://" + addr + "/readyz")
	d := units.Ms(time.Since(t))
	if err != nil {
		return d, false
	}
	resp.Body.Close()
	return d, resp.StatusCode == http.StatusOK
}

func sleepUntil(ctx context.Context, t time.Time) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(time.Until(t)):
		return true
	}
}

func mbps(bytes uint64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(units.Throughput(float64(bytes), d.Seconds()) / units.Mbps)
}

// sortedKeys returns m's keys in order.
func sortedKeys(m map[string]uint64) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
