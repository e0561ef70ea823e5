//go:build linux

// Package demo is `mrgw-lab demo`: two regions of gateways over the loopback
// link emulator, in one process, with hosts on both sides moving messages
// both ways while one plane fails halfway. It is a load-test scenario like
// the others under loadtest/ (the command only parses flags); it builds on
// loadtest/lab and measures recovery with loadtest/recovery. It never
// touches an address outside 127.0.0.0/8.
package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mrgw/mrgw/host"
	"github.com/mrgw/mrgw/internal/report"
	"github.com/mrgw/mrgw/loadtest/lab"
	"github.com/mrgw/mrgw/loadtest/recovery"
	"github.com/mrgw/mrgw/netem"

	"github.com/mrgw/mrgw/units"
)

// Options are the demo's knobs (the flags of `mrgw-lab demo`).
type Options struct {
	Duration time.Duration
	Planes   int
	RTT      time.Duration
	Loss     float64 // random loss per plane and direction, 0.01 = 1%
	RateMbit float64 // per plane and direction
	Flows    int     // per direction
	MsgSize  int     // bytes per message
	Logger   *slog.Logger
	// Progress, when set, receives one line a second (and the banner).
	Progress io.Writer
	// TTY rewrites the progress line in place instead of adding lines.
	TTY bool
}

// Defaults are the demo's built-in defaults.
func Defaults() Options {
	return Options{Duration: 15 * time.Second, Planes: 4, RTT: 40 * time.Millisecond, Loss: 0.01,
		RateMbit: 50, Flows: 4, MsgSize: 256 << 10}
}

func (o Options) validate() error {
	if o.Duration < 2*time.Second {
		return fmt.Errorf("--duration must be at least 2s")
	}
	if o.Planes < 1 || o.Planes > netem.MaxPlanes {
		return fmt.Errorf("--planes must be 1..%d", netem.MaxPlanes)
	}
	if o.Flows < 1 {
		return fmt.Errorf("--flows must be at least 1")
	}
	if o.MsgSize < 1 || o.MsgSize > 16<<20 {
		return fmt.Errorf("--message-size must be 1..%d bytes", 16<<20)
	}
	if o.RateMbit <= 0 {
		return fmt.Errorf("--rate must be positive")
	}
	return nil
}

// Report is the final result.
type Report struct {
	Duration      float64   `json:"duration_seconds"`
	Planes        int       `json:"planes"`
	RTTms         float64   `json:"configured_rtt_ms"`
	Loss          float64   `json:"loss"`
	PlaneRateMbit float64   `json:"plane_rate_mbit_per_second"`
	FailedPlane   int       `json:"failed_plane"`
	FailedAt      float64   `json:"failed_at_seconds"`
	PlaneStats    []Plane   `json:"plane_stats"`
	MeasuredRTTms float64   `json:"measured_path_rtt_ms"`
	GoodputMbit   float64   `json:"goodput_mbit_per_second"`
	Retransmits   uint64    `json:"retransmits"`
	WireLost      uint64    `json:"datagrams_lost_on_wire"`
	Messages      uint64    `json:"messages_completed"`
	Bytes         uint64    `json:"bytes_completed"`
	Duplicates    uint64    `json:"duplicates_dropped"`
	Reopens       uint64    `json:"flow_reopens"`
	Errors        []string  `json:"errors"`
	Series        []float64 `json:"goodput_mbit_per_second_by_second"`
	// RecoverySeconds and RecoveryRTTs: from the failure until goodput
	// over a window of four round trips is back to (P-1)/P of the goodput
	// in the second before it, the window's length included
	// (loadtest/recovery, as gwload and the tunnel tests measure it); -1
	// if it did not come back within the run.
	RecoverySeconds float64   `json:"recovery_seconds"`
	RecoveryRTTs    float64   `json:"recovery_rtts"`
	Gateways        []Gateway `json:"gateways"`
	// Checks set the figures against the ranges quiet machines gave;
	// Machine says whether this one was too busy for them to mean much.
	Checks  []Check `json:"checks"`
	Machine Machine `json:"machine"`
}

// Plane is one emulated plane's totals over the run, both directions.
type Plane struct {
	Plane       int     `json:"plane"`
	GoodputMbit float64 `json:"goodput_mbit_per_second"`
	Datagrams   uint64  `json:"datagrams"`
	LossDrops   uint64  `json:"loss_drops"`
	QueueDrops  uint64  `json:"queue_drops"`
	DownDrops   uint64  `json:"down_drops"`
	Down        bool    `json:"down_at_end"`
}

// Gateway is one gateway's view at the end.
type Gateway struct {
	Name      string `json:"name"`
	Completed uint64 `json:"messages_completed"`
	Resets    uint64 `json:"flow_resets"`
	Peers     string `json:"peers"`
}

// areaPerFlow is the registered memory each flow writes into, round-robin.
const areaPerFlow = uint64(16 << 20)

// memoryKey is the key of every host's registered area.
const memoryKey = 1

// rig is one run: the lab, its hosts and the counters the writers update.
type rig struct {
	o     Options
	lab   *lab.Lab
	hosts map[string]*host.Host // by region

	delivered atomic.Uint64 // bytes placed at the destinations
	messages  atomic.Uint64 // messages completed end to end
	bytesOK   atomic.Uint64

	errMu sync.Mutex
	errs  []string

	stopWriting chan struct{}
	writers     sync.WaitGroup

	machine *machineWatch
}

func (r *rig) say(format string, args ...any) {
	if r.o.Progress != nil {
		fmt.Fprintf(r.o.Progress, format, args...)
	}
}

func (r *rig) addErr(e string) {
	r.errMu.Lock()
	if len(r.errs) < 20 {
		r.errs = append(r.errs, e)
	}
	r.errMu.Unlock()
}

// Run builds the two regions, runs traffic for o.Duration with a plane
// failing halfway, and reports. The returned report lists the run's
// errors; err is set only when the run could not be built.
func Run(ctx context.Context, o Options) (*Report, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r := &rig{o: o, hosts: map[string]*host.Host{}, stopWriting: make(chan struct{}), machine: watchMachine()}
	r.say("mrgw-lab demo: 2 regions (eu-west, us-east) x 2 gateways, 1 host each side, %d planes, RTT %v, loss %s,\n", o.Planes, o.RTT, report.FormatPercent(o.Loss))
	r.say("           %.0f Mbit/s per plane and direction (chosen so this machine's CPU is not the bottleneck)\n", o.RateMbit)
	if err := r.build(ctx); err != nil {
		return nil, err
	}
	defer r.close()
	if err := r.startWriters(ctx); err != nil {
		return nil, err
	}
	start := time.Now()
	// Delivered bytes every 20 ms: recovery is measured on them
	// (loadtest/recovery); the printed series is per second.
	sampler := recovery.Sample(20*time.Millisecond, func() (uint64, bool) { return r.delivered.Load(), true })
	defer sampler.Stop()
	fault, err := r.drive(ctx, start)
	if err != nil {
		return nil, err
	}
	r.finishWriters()
	rep := r.report(start, fault, sampler)
	cancel()
	return rep, nil
}

// build starts the lab and a host in each region, and the readers that
// count delivered bytes.
func (r *rig) build(ctx context.Context) error {
	o := r.o
	l, err := lab.New(ctx, lab.Config{
		Planes: o.Planes, OneWay: o.RTT / 2, Loss: o.Loss, RateBps: uint64(o.RateMbit * 1e6),
		Queue: int(float64(units.BitRate(o.RateMbit*1e6).Bytes()) * 0.02), // 20 ms of queue at the plane rate
		MTU:   4096, Paths: 16, Admin: false, Seed: uint64(time.Now().UnixNano()),
		Logger: o.Logger,
	})
	if err != nil {
		return err
	}
	r.lab = l
	l.Start()
	rctx, rcancel := context.WithTimeout(ctx, 20*time.Second)
	err = l.WaitReady(rctx)
	rcancel()
	if err != nil {
		return err
	}
	r.say("gateways up: gossip joined, 8 sealed WAN connections established\n")
	for reg, name := range map[string]string{lab.RegionA: "trainer-a", lab.RegionB: "trainer-b"} {
		h, err := newHost(ctx, host.Config{Name: name, Region: reg, Gateways: l.HostGateways(reg), Key: l.HostKey, Logger: o.Logger}, r.say)
		if err != nil {
			return err
		}
		r.hosts[reg] = h
		if err := h.RegisterMemory(memoryKey, make([]byte, int(areaPerFlow)*o.Flows)); err != nil {
			return err
		}
	}
	for _, h := range r.hosts {
		go func() {
			for {
				select {
				case d, ok := <-h.Received():
					if !ok {
						return
					}
					r.delivered.Add(d.Len)
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	return nil
}

func (r *rig) close() {
	for _, h := range r.hosts {
		h.Close()
	}
	if r.lab != nil {
		r.lab.Close()
	}
}

// startWriters opens o.Flows flows each way and writes messages on each
// until stopWriting closes; completions are awaited beside the writes.
func (r *rig) startWriters(ctx context.Context) error {
	for src, dst := range map[string]string{lab.RegionA: lab.RegionB, lab.RegionB: lab.RegionA} {
		dstName := "trainer-b"
		if dst == lab.RegionA {
			dstName = "trainer-a"
		}
		for i := range r.o.Flows {
			// The gateways were ready, and the destination host
			// registered: an OPEN refused or unanswered now is a machine
			// too busy to run the lab (TestDemoShort under -race at load
			// 10-16: "region unreachable" after a WAN connection was
			// dropped as silent, "OPEN timed out"), which the lab gets over
			// in seconds; lab.OpenFlow opens again, for at most openBudget.
			octx, ocancel := context.WithTimeout(ctx, openBudget)
			f, err := lab.OpenFlow(octx, r.hosts[src], dst, dstName, host.FlowOptions{}, func(format string, args ...any) {
				r.say(format+"\n", args...)
			})
			ocancel()
			if err != nil {
				return fmt.Errorf("open flow %s -> %s: %w", src, dst, err)
			}
			r.writers.Add(1)
			go r.write(ctx, f, i)
		}
	}
	return nil
}

// write is one flow's writer: random data to the flow's area, round-robin
// over its slots, every completion awaited in order beside it.
func (r *rig) write(ctx context.Context, f *host.Flow, i int) {
	defer r.writers.Done()
	size := r.o.MsgSize
	rng := rand.New(rand.NewPCG(uint64(i), 7))
	data := make([]byte, size)
	for j := range data {
		data[j] = byte(rng.Uint32())
	}
	slots := areaPerFlow / uint64(size)
	pend := make(chan *host.Pending, 4096)
	var waiters sync.WaitGroup
	waiters.Add(1)
	go func() {
		defer waiters.Done()
		for p := range pend {
			if err := p.Wait(ctx); err != nil {
				r.addErr(err.Error())
				continue
			}
			r.messages.Add(1)
			r.bytesOK.Add(uint64(size))
		}
	}()
	defer func() { close(pend); waiters.Wait() }()
	for n := uint64(0); ; n++ {
		select {
		case <-r.stopWriting:
			return
		default:
		}
		addr := uint64(i)*areaPerFlow + (n%slots)*uint64(size)
		p, err := f.Write(ctx, memoryKey, addr, data)
		if err != nil {
			if ctx.Err() == nil {
				r.addErr(err.Error())
			}
			return
		}
		pend <- p
	}
}

// planeFault is the plane failed halfway, if one was.
type planeFault struct {
	plane  int
	at     time.Duration
	series []float64 // delivered Mbit/s, second by second
}

// drive runs the traffic for o.Duration: a progress line each second, and
// plane 1 failed at half time (when there is more than one plane).
func (r *rig) drive(ctx context.Context, start time.Time) (planeFault, error) {
	o := r.o
	f := planeFault{plane: -1}
	failPlane := 1 % o.Planes
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var last uint64
	for time.Since(start) < o.Duration {
		select {
		case <-tick.C:
		case <-ctx.Done():
			return f, ctx.Err()
		}
		el := time.Since(start)
		if f.plane < 0 && el >= o.Duration/2 && o.Planes > 1 {
			if err := r.lab.Emu.Fail(failPlane); err == nil {
				f.plane, f.at = failPlane, el
				r.say("\n-- plane %d failed at %.1fs: its paths go down and traffic moves to the other planes --\n", failPlane, el.Seconds())
			}
		}
		d := r.delivered.Load()
		rate := float64(units.Throughput(float64(d-last), 1)) / 1e6 // a tick is a second
		last = d
		f.series = append(f.series, rate)
		rtt, retr := gatewayPathStats(r.lab)
		up := o.Planes
		if f.plane >= 0 {
			up--
		}
		line := fmt.Sprintf("t=%4.1fs  goodput %7.1f Mbit/s  messages %6d  path RTT %5.1f ms  retransmits %6d  planes up %d/%d",
			el.Seconds(), rate, r.messages.Load(), rtt, retr, up, o.Planes)
		if o.TTY {
			r.say("\r%s", line)
		} else {
			r.say("%s\n", line)
		}
	}
	if o.TTY {
		r.say("\n")
	}
	return f, nil
}

// finishWriters stops the writers and waits for their messages to
// complete, for at most 15 s.
func (r *rig) finishWriters() {
	close(r.stopWriting)
	finished := make(chan struct{})
	go func() { r.writers.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(15 * time.Second):
		r.addErr("messages still incomplete 15s after the end of traffic")
	}
}

// report gathers the run's figures from the emulator, the gateways and
// the hosts.
func (r *rig) report(start time.Time, f planeFault, sampler *recovery.Sampler) *Report {
	o := r.o
	rep := &Report{
		Duration: time.Since(start).Seconds(), Planes: o.Planes, RTTms: float64(o.RTT.Microseconds()) / 1000, Loss: o.Loss,
		PlaneRateMbit: o.RateMbit, FailedPlane: -1, Messages: r.messages.Load(), Bytes: r.bytesOK.Load(), Series: f.series,
	}
	if f.plane >= 0 {
		rep.FailedPlane, rep.FailedAt = f.plane, f.at.Seconds()
		sampler.Stop()
		target := float64(o.Planes-1) / float64(o.Planes)
		m := sampler.Series().Measure(start.Add(f.at), start.Add(o.Duration), o.RTT, target)
		rep.RecoverySeconds, rep.RecoveryRTTs = -1, m.RTTs
		if m.RTTs >= 0 {
			rep.RecoverySeconds = m.RTTs * o.RTT.Seconds()
		}
	}
	es := r.lab.Emu.Stats()
	for p := range o.Planes {
		dp := Plane{Plane: p, Down: r.lab.Emu.Down(p)}
		for d := range 2 {
			s := es.Links[d][p]
			dp.GoodputMbit += float64(units.Throughput(float64(s.BytesDelivered), o.Duration.Seconds())) / 1e6
			dp.Datagrams += s.Delivered
			dp.LossDrops += s.LossDrops
			dp.QueueDrops += s.QueueDrops
			dp.DownDrops += s.DownDrops
			rep.WireLost += s.LossDrops + s.QueueDrops + s.DownDrops
		}
		rep.PlaneStats = append(rep.PlaneStats, dp)
	}
	rep.GoodputMbit = float64(units.Throughput(float64(r.delivered.Load()), o.Duration.Seconds())) / 1e6
	rep.MeasuredRTTms, rep.Retransmits = gatewayPathStats(r.lab)
	for _, h := range r.hosts {
		s := h.Stats()
		rep.Duplicates += s.Duplicates
		rep.Reopens += s.Reopens
	}
	names := make([]string, 0, len(r.lab.Gateways))
	for n := range r.lab.Gateways {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		st := r.lab.Gateways[n].Status()
		up := 0
		for _, p := range st.Peers {
			if p.State == "up" {
				up++
			}
		}
		rep.Gateways = append(rep.Gateways, Gateway{Name: n, Completed: st.Flows.Completed, Resets: st.Flows.Resets,
			Peers: fmt.Sprintf("%d/%d up", up, len(st.Peers))})
	}
	r.errMu.Lock()
	rep.Errors = append([]string{}, r.errs...)
	r.errMu.Unlock()
	rep.Checks = checks(rep, o)
	rep.Machine = r.machine.done(es, o.RTT)
	return rep
}

// gatewayPathStats returns the mean smoothed RTT of the WAN paths that are
// up and the retransmissions of every WAN connection of every gateway.
func gatewayPathStats(l *lab.Lab) (rttMS float64, retrans uint64) {
	n := 0
	for _, g := range l.Gateways {
		for _, p := range g.Status().Peers {
			retrans += p.Retrans
			for _, pa := range p.Paths {
				if pa.State == "up" && pa.RTT > 0 {
					rttMS += pa.RTT
					n++
				}
			}
		}
	}
	if n > 0 {
		rttMS /= float64(n)
	}
	return rttMS, retrans
}

// openBudget bounds the opening of one flow, attempts included
// (lab.OpenFlow).
const openBudget = 60 * time.Second

// hostAttempts bounds newHost's attempts.
const hostAttempts = 4

// newHost starts a host, trying again when no gateway registered it within
// the host's OpenTimeout (5 s): the gateways are ready by then, so that
// only happens on a machine too busy to finish a few loopback round trips
// in time (seen under the race detector at a load average of 16), and a
// demo that gave up there would report the machine, not the gateway.
func newHost(ctx context.Context, cfg host.Config, say func(string, ...any)) (*host.Host, error) {
	for attempt := 1; ; attempt++ {
		h, err := host.New(cfg)
		if err == nil || !errors.Is(err, host.ErrNoGateway) || attempt == hostAttempts || ctx.Err() != nil {
			return h, err
		}
		say("host %s/%s not registered yet (attempt %d of %d): %v\n", cfg.Region, cfg.Name, attempt, hostAttempts, err)
	}
}
