//go:build linux

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/mrgw/mrgw/host"
	"github.com/mrgw/mrgw/loadtest/lab"
	"github.com/mrgw/mrgw/loadtest/recovery"
	"github.com/mrgw/mrgw/netem"
)

// demoOptions are the flags of `mrgw demo`.
type demoOptions struct {
	duration time.Duration
	planes   int
	rtt      time.Duration
	loss     float64
	rateMbit float64
	asJSON   bool
	flows    int
	msgSize  int
	logLevel string
}

// newDemoCmd is `mrgw demo`: two regions, two gateway pairs, hosts on both
// sides and the emulated WAN, in this process, with no configuration.
func newDemoCmd() *cobra.Command {
	var o demoOptions
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run two regions of gateways over an emulated WAN, in one process, and report",
		Long: `demo builds a complete deployment on loopback with no setup: regions eu-west and us-east,
each with a gateway pair (both members active), a host on each side, and the link emulator
between the regions (ECMP planes with delay, random loss and a rate). Hosts send messages in
both directions through the gateways for --duration; halfway through one plane fails, and the
gateways route around it. A progress line shows the live rates; a final table reports goodput
per plane, RTT, loss recovered, messages completed and errors. Certificates are minted in a
temporary directory that is removed at the end.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runDemo(cmd.Context(), cmd.OutOrStdout(), o)
		},
	}
	f := cmd.Flags()
	f.DurationVar(&o.duration, "duration", 15*time.Second, "how long traffic runs")
	f.IntVar(&o.planes, "planes", 4, "emulated ECMP planes between the regions")
	f.DurationVar(&o.rtt, "rtt", 40*time.Millisecond, "round-trip time between the regions")
	f.Float64Var(&o.loss, "loss", 0.01, "random loss per plane and direction (0.01 = 1%)")
	f.Float64Var(&o.rateMbit, "rate", 50, "rate of each plane and direction in Mbit/s (chosen so a 2-core machine is not the bottleneck)")
	f.BoolVar(&o.asJSON, "json", false, "print the final report as JSON")
	f.IntVar(&o.flows, "flows", 4, "flows per direction")
	f.IntVar(&o.msgSize, "message-size", 256<<10, "bytes per message")
	f.StringVar(&o.logLevel, "log-level", "", "write the gateways' logs to stderr at this level (debug, info, warn, error)")
	return cmd
}

// demoReport is the final result.
type demoReport struct {
	Duration      float64     `json:"duration_seconds"`
	Planes        int         `json:"planes"`
	RTTms         float64     `json:"configured_rtt_ms"`
	Loss          float64     `json:"loss"`
	PlaneRateMbit float64     `json:"plane_rate_mbit_per_second"`
	FailedPlane   int         `json:"failed_plane"`
	FailedAt      float64     `json:"failed_at_seconds"`
	PlaneStats    []demoPlane `json:"plane_stats"`
	MeasuredRTTms float64     `json:"measured_path_rtt_ms"`
	GoodputMbit   float64     `json:"goodput_mbit_per_second"`
	Retransmits   uint64      `json:"retransmits"`
	WireLost      uint64      `json:"datagrams_lost_on_wire"`
	Messages      uint64      `json:"messages_completed"`
	Bytes         uint64      `json:"bytes_completed"`
	Duplicates    uint64      `json:"duplicates_dropped"`
	Reopens       uint64      `json:"flow_reopens"`
	Errors        []string    `json:"errors"`
	Series        []float64   `json:"goodput_mbit_per_second_by_second"`
	// RecoverySeconds and RecoveryRTTs: from the failure until goodput
	// over a window of four round trips is back to (P-1)/P of the goodput
	// in the second before it, the window's length included
	// (loadtest/recovery, as gwload and the tunnel tests measure it); -1
	// if it did not come back within the run.
	RecoverySeconds float64       `json:"recovery_seconds"`
	RecoveryRTTs    float64       `json:"recovery_rtts"`
	Gateways        []demoGateway `json:"gateways"`
}

type demoPlane struct {
	Plane       int     `json:"plane"`
	GoodputMbit float64 `json:"goodput_mbit_per_second"`
	Datagrams   uint64  `json:"datagrams"`
	LossDrops   uint64  `json:"loss_drops"`
	QueueDrops  uint64  `json:"queue_drops"`
	DownDrops   uint64  `json:"down_drops"`
	Down        bool    `json:"down_at_end"`
}

type demoGateway struct {
	Name      string `json:"name"`
	Completed uint64 `json:"messages_completed"`
	Resets    uint64 `json:"flow_resets"`
	Peers     string `json:"peers"`
}

func runDemo(parent context.Context, out io.Writer, o demoOptions) error {
	if parent == nil {
		parent = context.Background()
	}
	if o.duration < 2*time.Second {
		return fmt.Errorf("--duration must be at least 2s")
	}
	if o.planes < 1 || o.planes > netem.MaxPlanes {
		return fmt.Errorf("--planes must be 1..%d", netem.MaxPlanes)
	}
	tty := false
	if f, ok := out.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			tty = true
		}
	}
	say := func(format string, args ...any) {
		if !o.asJSON {
			fmt.Fprintf(out, format, args...)
		}
	}
	say("mrgw demo: 2 regions (eu-west, us-east) x 2 gateways, 1 host each side, %d planes, RTT %v, loss %.2g%%,\n", o.planes, o.rtt, o.loss*100)
	say("           %.0f Mbit/s per plane and direction (chosen so this machine's CPU is not the bottleneck)\n", o.rateMbit)
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	l, err := lab.New(ctx, lab.Config{
		Planes: o.planes, OneWay: o.rtt / 2, Loss: o.loss, RateBps: uint64(o.rateMbit * 1e6),
		Queue: int(o.rateMbit * 1e6 / 8 * 0.02), // 20 ms of queue at the plane rate
		MTU:   4096, Paths: 16, Admin: false, Seed: uint64(time.Now().UnixNano()),
		Logger: demoLogger(o.logLevel),
	})
	if err != nil {
		return err
	}
	defer l.Close()
	l.Start()
	rctx, rcancel := context.WithTimeout(ctx, 20*time.Second)
	err = l.WaitReady(rctx)
	rcancel()
	if err != nil {
		return err
	}
	say("gateways up: gossip joined, 8 sealed WAN connections established\n")

	hosts := map[string]*host.Host{}
	for reg, name := range map[string]string{lab.RegionA: "trainer-a", lab.RegionB: "trainer-b"} {
		h, err := host.New(host.Config{Name: name, Region: reg, Gateways: l.HostGateways(reg), Key: l.HostKey, DeadAfter: time.Second, Logger: demoLogger(o.logLevel)})
		if err != nil {
			return err
		}
		defer h.Close()
		hosts[reg] = h
	}
	const key = 1
	areaPerFlow := uint64(16 << 20)
	for _, h := range hosts {
		if err := h.RegisterMemory(key, make([]byte, int(areaPerFlow)*o.flows)); err != nil {
			return err
		}
	}
	var delivered atomic.Uint64
	var wg sync.WaitGroup
	for _, h := range hosts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case d, ok := <-h.Received():
					if !ok {
						return
					}
					delivered.Add(d.Len)
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	var (
		errMu    sync.Mutex
		errs     []string
		messages atomic.Uint64
		bytesOK  atomic.Uint64
	)
	addErr := func(e string) {
		errMu.Lock()
		if len(errs) < 20 {
			errs = append(errs, e)
		}
		errMu.Unlock()
	}
	stopWriting := make(chan struct{})
	var writers sync.WaitGroup
	for src, dst := range map[string]string{lab.RegionA: lab.RegionB, lab.RegionB: lab.RegionA} {
		dstName := "trainer-b"
		if dst == lab.RegionA {
			dstName = "trainer-a"
		}
		for i := range o.flows {
			f, err := hosts[src].OpenFlow(ctx, dst, dstName, host.FlowOptions{})
			if err != nil {
				return fmt.Errorf("open flow %s -> %s: %w", src, dst, err)
			}
			writers.Add(1)
			go func() {
				defer writers.Done()
				rng := rand.New(rand.NewPCG(uint64(i), 7))
				data := make([]byte, o.msgSize)
				for j := range data {
					data[j] = byte(rng.Uint32())
				}
				slots := areaPerFlow / uint64(o.msgSize)
				pend := make(chan *host.Pending, 4096)
				var waiters sync.WaitGroup
				waiters.Add(1)
				go func() {
					defer waiters.Done()
					for p := range pend {
						if err := p.Wait(ctx); err != nil {
							addErr(err.Error())
							continue
						}
						messages.Add(1)
						bytesOK.Add(uint64(o.msgSize))
					}
				}()
				defer func() { close(pend); waiters.Wait() }()
				for n := uint64(0); ; n++ {
					select {
					case <-stopWriting:
						return
					default:
					}
					addr := uint64(i)*areaPerFlow + (n%slots)*uint64(o.msgSize)
					p, err := f.Write(ctx, key, addr, data)
					if err != nil {
						if ctx.Err() == nil {
							addErr(err.Error())
						}
						return
					}
					pend <- p
				}
			}()
		}
	}

	start := time.Now()
	// Delivered bytes every 20 ms: recovery is measured on them
	// (loadtest/recovery); the printed series is per second.
	sampler := recovery.Sample(20*time.Millisecond, func() (uint64, bool) { return delivered.Load(), true })
	defer sampler.Stop()
	failPlane := 1 % o.planes
	failed := false
	var failedAt time.Duration
	var series []float64
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var last uint64
	for time.Since(start) < o.duration {
		select {
		case <-tick.C:
		case <-ctx.Done():
			return ctx.Err()
		}
		el := time.Since(start)
		if !failed && el >= o.duration/2 && o.planes > 1 {
			if err := l.Emu.Fail(failPlane); err == nil {
				failed, failedAt = true, el
				say("\n-- plane %d failed at %.1fs: its paths go down and traffic moves to the other planes --\n", failPlane, el.Seconds())
			}
		}
		d := delivered.Load()
		rate := float64(d-last) * 8 / 1e6
		last = d
		series = append(series, rate)
		rtt, retr := gatewayPathStats(l)
		line := fmt.Sprintf("t=%4.1fs  goodput %7.1f Mbit/s  messages %6d  path RTT %5.1f ms  retransmits %6d  planes up %d/%d",
			el.Seconds(), rate, messages.Load(), rtt, retr, o.planes-boolInt(failed), o.planes)
		if tty {
			say("\r%s", line)
		} else {
			say("%s\n", line)
		}
	}
	if tty {
		say("\n")
	}
	close(stopWriting)
	finished := make(chan struct{})
	go func() { writers.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(15 * time.Second):
		addErr("messages still incomplete 15s after the end of traffic")
	}
	elapsed := time.Since(start)
	rep := demoReport{
		Duration: elapsed.Seconds(), Planes: o.planes, RTTms: float64(o.rtt.Microseconds()) / 1000, Loss: o.loss,
		PlaneRateMbit: o.rateMbit, FailedPlane: -1, Messages: messages.Load(), Bytes: bytesOK.Load(), Series: series,
	}
	if failed {
		rep.FailedPlane, rep.FailedAt = failPlane, failedAt.Seconds()
		sampler.Stop()
		target := float64(o.planes-1) / float64(o.planes)
		m := sampler.Series().Measure(start.Add(failedAt), start.Add(o.duration), o.rtt, target)
		rep.RecoverySeconds, rep.RecoveryRTTs = -1, m.RTTs
		if m.RTTs >= 0 {
			rep.RecoverySeconds = m.RTTs * o.rtt.Seconds()
		}
	}
	es := l.Emu.Stats()
	var delivBytes uint64
	for p := range o.planes {
		var dp demoPlane
		dp.Plane = p
		for d := range 2 {
			s := es.Links[d][p]
			delivBytes += s.BytesDelivered
			dp.GoodputMbit += float64(s.BytesDelivered) * 8 / 1e6 / o.duration.Seconds()
			dp.Datagrams += s.Delivered
			dp.LossDrops += s.LossDrops
			dp.QueueDrops += s.QueueDrops
			dp.DownDrops += s.DownDrops
			rep.WireLost += s.LossDrops + s.QueueDrops + s.DownDrops
		}
		dp.Down = l.Emu.Down(p)
		rep.PlaneStats = append(rep.PlaneStats, dp)
	}
	rep.GoodputMbit = float64(delivered.Load()) * 8 / 1e6 / o.duration.Seconds()
	rep.MeasuredRTTms, rep.Retransmits = gatewayPathStats(l)
	for _, h := range hosts {
		s := h.Stats()
		rep.Duplicates += s.Duplicates
		rep.Reopens += s.Reopens
	}
	names := make([]string, 0, len(l.Gateways))
	for n := range l.Gateways {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		st := l.Gateways[n].Status()
		up := 0
		for _, p := range st.Peers {
			if p.State == "up" {
				up++
			}
		}
		rep.Gateways = append(rep.Gateways, demoGateway{Name: n, Completed: st.Flows.Completed, Resets: st.Flows.Resets,
			Peers: fmt.Sprintf("%d/%d up", up, len(st.Peers))})
	}
	errMu.Lock()
	rep.Errors = append([]string{}, errs...)
	errMu.Unlock()
	cancel()
	if o.asJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	printDemo(out, &rep)
	if len(rep.Errors) > 0 {
		return errSilent
	}
	return nil
}

func printDemo(out io.Writer, r *demoReport) {
	fmt.Fprintf(out, "\nresult after %.1fs (RTT %.0f ms configured, %.1f ms measured on the paths; loss %.2g%% per plane)\n\n",
		r.Duration, r.RTTms, r.MeasuredRTTms, r.Loss*100)
	tw := tabwriter.NewWriter(out, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "plane\twire goodput (both ways)\tdatagrams\tlost (random)\tqueue drops\tlost (plane down)\tstate\t")
	for _, p := range r.PlaneStats {
		state := "up"
		if p.Down {
			state = "FAILED"
		}
		fmt.Fprintf(tw, "%d\t%.1f Mbit/s\t%d\t%d\t%d\t%d\t%s\t\n", p.Plane, p.GoodputMbit, p.Datagrams, p.LossDrops, p.QueueDrops, p.DownDrops, state)
	}
	tw.Flush()
	fmt.Fprintf(out, "\nhost goodput (end to end, both directions): %.1f Mbit/s\n", r.GoodputMbit)
	fmt.Fprintf(out, "messages completed end to end:              %d (%.1f MiB)\n", r.Messages, float64(r.Bytes)/(1<<20))
	fmt.Fprintf(out, "loss recovered: %d datagrams lost on the wire, %d retransmitted by the gateways' WAN connections\n", r.WireLost, r.Retransmits)
	fmt.Fprintf(out, "duplicates dropped at the destinations: %d; flows re-opened: %d\n", r.Duplicates, r.Reopens)
	if r.FailedPlane >= 0 {
		if r.RecoveryRTTs < 0 {
			fmt.Fprintf(out, "plane %d failed at %.1fs; goodput did not come back to (P-1)/P of its level before the failure within the run\n", r.FailedPlane, r.FailedAt)
		} else {
			fmt.Fprintf(out, "plane %d failed at %.1fs; goodput (4-RTT window) back to (P-1)/P of its level in the second before the failure after %.0f ms = %.1f RTT\n",
				r.FailedPlane, r.FailedAt, r.RecoverySeconds*1000, r.RecoveryRTTs)
		}
	}
	for _, g := range r.Gateways {
		fmt.Fprintf(out, "  %s: peers %s, %d messages completed (outbound), %d flow resets\n", g.Name, g.Peers, g.Completed, g.Resets)
	}
	if len(r.Errors) == 0 {
		fmt.Fprintln(out, "errors: none")
		return
	}
	fmt.Fprintf(out, "errors (%d):\n", len(r.Errors))
	for _, e := range r.Errors {
		fmt.Fprintf(out, "  - %s\n", e)
	}
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

func demoLogger(level string) *slog.Logger {
	if level == "" {
		return nil
	}
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		l = slog.LevelInfo
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: l}))
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
