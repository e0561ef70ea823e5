package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/mrgw/mrgw/internal/cli"
	"github.com/mrgw/mrgw/internal/plot"
	"github.com/mrgw/mrgw/internal/report"
	"github.com/mrgw/mrgw/internal/rtsched"
	"github.com/mrgw/mrgw/loadtest/datapath"
	"github.com/mrgw/mrgw/loadtest/peers"
	"github.com/mrgw/mrgw/netio/seal"
	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// newLoadtestCmd groups the real-time load tests over real sockets.
func newLoadtestCmd() *cobra.Command { return newLoadtestCmdWith(rtsched.FIFO) }

// newLoadtestCmdWith is newLoadtestCmd with the entry point --realtime
// calls (rtsched.FIFO) as a parameter, so that a test can check the flag's
// wiring without changing this process's scheduling.
func newLoadtestCmdWith(fifo func(prio int) (restore func() error, err error)) *cobra.Command {
	rt := &realtimeFlag{fifo: fifo}
	cmd := &cobra.Command{
		Use:   "loadtest",
		Short: "Run load tests with real sockets on this machine (loopback only)",
		// --realtime runs every thread of this process (emulators, mrgw,
		// the kernel flows' Go endpoints alike) under SCHED_FIFO, as a
		// dedicated gateway host runs its datapath: the measurement then
		// shows the controllers, not the load-test host's scheduler.
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			return rt.apply(cmd.ErrOrStderr())
		},
		PersistentPostRunE: func(*cobra.Command, []string) error {
			return rt.undo()
		},
	}
	cmd.PersistentFlags().IntVar(&rt.prio, "realtime", 0,
		"run every thread of the load test under SCHED_FIFO at this priority, 1-99 (root or CAP_SYS_NICE; 0: the host's normal scheduling). "+
			"Removes the host's millisecond stalls of the user-space senders; docs/CC.md §7")
	cmd.AddCommand(newDatapathCmd(),
		newPeersCmd("loss-sweep", "mrgw, RoCEv2, kernel TCP (cubic, bbr; 1 and 8 streams), QUIC and kcp on one emulated bottleneck, 0-10% loss at 10/50/100 ms RTT",
			peers.LossSweep, lossCols),
		newPeersCmd("planes", "the same systems over 1, 2, 4 and 8 planes behind ECMP: TCP streams land on planes by hash, mrgw sprays",
			peers.Planes, lossCols),
		newPeersCmd("completion-time", "p50/p99 completion of 1-64 MiB messages at 1% loss: a byte stream's head-of-line blocking against out-of-order placement",
			peers.CompletionTime, completionCols),
		newCoexistCmd(),
		newLinkModelCmd(), newLinkModelChildCmd(),
		newAppsCmd(),
	)
	cmd.AddCommand(newPeersFairnessCmds()...)
	cmd.AddCommand(NewGatewayLoadCmds()...)
	cmd.AddCommand(newChaosCmd())
	cmd.AddCommand(newFloodCmd())
	cmd.AddCommand(newHostsCmd())
	cmd.AddCommand(newRelayCostCmd())

	cmd.AddCommand(newFleetCmd())
	return cmd
}

// realtimeFlag is loadtest's --realtime: apply runs before the chosen load
// test (the command tree's PersistentPreRunE), undo after it
// (PersistentPostRunE).
type realtimeFlag struct {
	prio    int                                              // the flag; 0: leave scheduling alone
	fifo    func(prio int) (restore func() error, err error) // rtsched.FIFO
	restore func() error                                     // set by a successful apply
}

// apply puts every thread under SCHED_FIFO at prio, and says so on w. An
// error names the flag: a priority outside 1..rtsched.MaxPriority is
// refused before the scheduler is asked, and the scheduler's own refusal
// (no root or CAP_SYS_NICE) is passed on with its reason.
func (r *realtimeFlag) apply(w io.Writer) error {
	if r.prio == 0 {
		return nil
	}
	if r.prio < 1 || r.prio > rtsched.MaxPriority {
		return fmt.Errorf("--realtime %d: priority outside 1..%d (0: the host's normal scheduling)", r.prio, rtsched.MaxPriority)
	}
	restore, err := r.fifo(r.prio)
	if err != nil {
		return fmt.Errorf("--realtime %d: %w", r.prio, err)
	}
	r.restore = restore
	fmt.Fprintf(w, "loadtest: every thread under SCHED_FIFO priority %d (--realtime)\n", r.prio)
	return nil
}

// undo puts the threads back to the policy they had before apply, once.
func (r *realtimeFlag) undo() error {
	restore := r.restore
	if restore == nil {
		return nil
	}
	r.restore = nil
	return restore()
}

var lossCols = []report.Column{
	report.ColSystem,
	{Title: "streams", Value: func(r *report.Row) string { return intOrDash(r.Streams) }},
	report.ColPlanes, report.ColRTT, report.ColLoss, report.ColCapacity, report.ColGoodput, report.ColFraction,
	{Title: "mrgw ×", Value: func(r *report.Row) string { return ratioOrDash(r.MRGWRatio) }},
	{Title: "cc", Value: func(r *report.Row) string { return r.CC }},
	{Title: "emulator", Value: func(r *report.Row) string { return r.Emulator }},
}

var completionCols = []report.Column{
	report.ColSystem, report.ColRTT, report.ColLoss,
	{Title: "message", Value: func(r *report.Row) string { return fmt.Sprintf("%d MiB", r.MessageBytes>>20) }},
	{Title: "p50", Value: func(r *report.Row) string { return completionMs(r, r.P50ms) }},
	{Title: "p99", Value: func(r *report.Row) string { return completionMs(r, r.P99ms) }},
	{Title: "p50 / mrgw", Value: func(r *report.Row) string { return ratioOrDash(r.P50Ratio) }},
	{Title: "p99 / mrgw", Value: func(r *report.Row) string { return ratioOrDash(r.P99Ratio) }},
	{Title: "emulator", Value: func(r *report.Row) string { return r.Emulator }},
}

// completionMs is a completion-time quantile, or "-" for a row whose
// messages did not complete (its quantiles are no measurement).
func completionMs(r *report.Row, ms float64) string {
	if r.Messages == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f ms", ms)
}

func intOrDash(n int) string {
	if n == 0 {
		return "-"
	}
	return fmt.Sprint(n)
}

func ratioOrDash(x float64) string {
	if x == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", x)
}

// newPeersCmd wraps one scenario of loadtest/peers: real sockets through the
// loopback emulators, every system in the same run.
// extra adds scenario-specific flags bound to the scenario's options.
func newPeersCmd(name, doc string, run func(context.Context, peers.Options) ([]report.Row, error), cols []report.Column,
	extra ...func(*pflag.FlagSet, *peers.Options)) *cobra.Command {
	var (
		o       peers.Options
		asJSON  bool
		quiet   bool
		trace   bool
		jsonOut string
		plotDir string
		format  string
	)
	cmd := &cobra.Command{
		Use:   name,
		Short: doc,
		Long: doc + `

Runs real sockets on this machine only: the UDP relay emulator (netem) for mrgw, RoCEv2
and kcp, and the TUN + network-namespace emulator (loadtest/tunemu, root only) for kernel TCP and
QUIC, both with the same link model. Rows that cannot run (not root, no TUN) are reported as an
error naming the reason; nothing is estimated in their place.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if plotDir != "" {
				if _, err := plot.CheckFormat(format); err != nil {
					return err
				}
				o.Record = peers.NewRecorder()
			}
			if trace {
				o.Trace = cmd.ErrOrStderr()
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			var bar *progressbar.ProgressBar
			if !quiet {
				// On stderr, also with --json: stdout keeps only the rows.
				o.Progress = func(i, n int, what string) {
					if bar == nil {
						per := peersRunTime(name, o)
						fmt.Fprintf(cmd.ErrOrStderr(), "%s: %d runs of about %s each (warm-up, measurement, setup): about %s\n",
							name, n, roundDur(per), roundDur(time.Duration(n)*per))
						bar = progressbar.NewOptions(n, progressbar.OptionSetWriter(cmd.ErrOrStderr()),
							progressbar.OptionSetWidth(30), progressbar.OptionShowCount(), progressbar.OptionClearOnFinish())
					}
					bar.Describe(what)
					_ = bar.Set(i - 1)
				}
			}
			rows, err := run(ctx, o)
			if bar != nil {
				_ = bar.Finish()
			}
			if plotDir != "" {
				// Plots of whatever ran, also when a part was skipped.
				files, perr := peers.Plot(plotDir, format, rows, o.Record)
				for _, p := range files {
					fmt.Fprintf(cmd.ErrOrStderr(), "plot: %s\n", p)
				}
				if perr != nil {
					fmt.Fprintf(cmd.ErrOrStderr(), "plots: %v\n", perr)
				}
			}
			if len(rows) > 0 && jsonOut != "" {
				if werr := writeJSONFile(jsonOut, rows); werr != nil {
					return werr
				}
			}
			if len(rows) > 0 {
				if asJSON {
					if werr := report.WriteJSON(cmd.OutOrStdout(), rows); werr != nil {
						return werr
					}
				} else {
					fmt.Fprintf(cmd.OutOrStdout(), "## loadtest %s\n\n", name)
					if werr := report.WriteTable(cmd.OutOrStdout(), rows, cols...); werr != nil {
						return werr
					}
				}
			}
			return err
		},
	}
	f := cmd.Flags()
	cli.RateVar(f, &o.CapacityBps, "capacity", 0, "bottleneck capacity, e.g. 200mbit, 1gbit (default 200Mbit/s)")
	f.DurationVar(&o.Duration, "duration", 0, "measured time per run (default 6s)")
	f.DurationVar(&o.Warmup, "warmup", 0, "warm-up before measuring (default 2s)")
	cli.DurationsVar(f, &o.RTTs, "rtt", nil, "round-trip times (default 10ms,50ms,100ms)")
	cli.FractionsVar(f, &o.Losses, "loss", nil, "random loss rates, fractions or percentages (default 0,0.1%,1%,5%,10%)")
	f.StringSliceVar(&o.Systems, "systems", nil, "systems to run (default all: mrgw,rocev2,tcp-cubic,tcp-bbr,quic,kcp)")
	f.IntVar(&o.MTU, "mtu", 0, "IP MTU of every system: tunemu's TUN devices, netem's largest datagram and MTU clamp (default 1500; 9000: jumbo frames)")
	f.StringVar(&o.MRGWCC, "cc", "", "mrgw's congestion controller (default longrtt-htcp; also fixed-1.5bdp, fixed-1.5bdp-paced, or paced-F: a sender paced at the fraction F of the capacity that reacts to nothing)")
	f.BoolVar(&o.ClassicFallback, "classic-fallback", false, "mrgw's controller answers ECN marks as CUBIC does and keeps 3% of its ceiling free (for WANs shared with classic-ECN traffic; docs/CC.md §4)")
	f.IntVar(&o.Wire, "wire", 2, "mrgw's wire version, 1 or 2 (its payload fills the MTU behind that version's DATA header; rocev2 speaks 1)")
	f.Uint64Var(&o.Seed, "seed", 1, "seed of the emulators")
	f.BoolVar(&o.Quick, "quick", false, "short runs (a smoke test, not a measurement)")
	f.BoolVar(&asJSON, "json", false, "print JSON rows")
	f.BoolVar(&quiet, "quiet", false, "no estimate and no progress bar on stderr")
	f.StringVar(&jsonOut, "json-out", "", "also write the JSON rows to this file (for docs/results)")
	f.Float64Var(&o.QueueBDP, "queue-bdp", 0, "drop-tail queue per plane in BDPs (default 1)")
	f.Float64Var(&o.ECNBDP, "ecn-bdp", 0, "ECN marking threshold in BDPs (default 0.1; negative: no marking)")
	f.BoolVar(&trace, "trace", false, "print mrgw's sender and emulator counters every 500 ms to stderr (diagnosis)")
	f.StringVar(&o.MRGWExtraCC, "extra-cc", "", `a second mrgw row with this controller ("fixed-1.5bdp" by default; "none": no extra row)`)
	f.StringVar(&o.MRGWEmulator, "emulator", "", `emulator for mrgw and rocev2 bulk runs: "emu" (default, the UDP relay) or "tunemu" (TCP's own; root)`)
	f.StringVar(&plotDir, "plot-dir", "", "write plots into this directory: sweeps against loss or planes, completion times, goodput over time per run (faults marked), shares, mrgw's per-path RTT and window")
	f.StringVar(&format, "plot-format", "svg", "plot format: svg or png")
	for _, x := range extra {
		x(f, &o)
	}
	return cmd
}

// peersRunTime is about how long one run of a peers scenario takes with
// o: its warm-up and measured time (the scenario's defaults where o has
// none) and a second to set it up and tear it down.
func peersRunTime(name string, o peers.Options) time.Duration {
	warm, dur := peers.DefaultWarmup, peers.DefaultDuration
	switch {
	case o.Quick:
		warm, dur = 500*time.Millisecond, time.Second
	case name == "coexistence":
		warm, dur = peers.DefaultCoexistWarmup, peers.DefaultCoexistDuration
	}
	if o.Warmup > 0 {
		warm = o.Warmup
	}
	if o.Duration > 0 {
		dur = o.Duration
	}
	return warm + dur + time.Second
}

func newDatapathCmd() *cobra.Command {
	var (
		o      datapath.Options
		suite  string
		asJSON bool
		pf     bool
		plain  bool
		wire   int
		pfo    datapath.PlaneFailureOptions
	)
	cmd := &cobra.Command{
		Use:   "datapath",
		Short: "CPU per Gbit/s of mrgw's datapath against raw UDP, its AEAD floor and wireguard-go",
		Long: `datapath measures, in one run and at each link MTU (default 1400 and 9000 bytes), the
CPU cores each system spends per Gbit/s of goodput: raw batched UDP (GSO/GRO), raw UDP plus
mrgw's AEAD sealed and opened on every datagram (raw-udp+aead: the floor of any encrypted
tunnel), the mrgw tunnel (wire version 2), and wireguard-go (golang.zx2c4.com/wireguard) carrying
UDP between two network namespaces over its TUN devices. Every system crosses the same veth
pair between two namespaces, whose MTU is the link MTU (root needed; without it the first three
run on loopback and wireguard-go is skipped). CPU is the process's own rusage over the
measured interval (every system runs in this process, one at a time), so the figure does not
depend on how busy the machine is; goodput does, and the load average is in every row's note.
--json rows name the systems raw-udp, raw-udp+aead, mrgw and wireguard-go, each with
cpu_per_gbps and its link MTU as variant "mtu-N".`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := seal.ParseSuite(suite)
			if err != nil {
				return err
			}
			o.Suite = s
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if pf {
				return runPlaneFailure(ctx, cmd, pfo, asJSON)
			}
			if plain {
				o.Systems = append(append([]string{}, datapath.AllSystems...), datapath.SysPlain)
			}
			o.WireVersion = uint8(wire)
			rows, err := datapath.Run(ctx, o)
			if err != nil && len(rows) == 0 {
				return err
			}
			if err != nil {
				fmt.Fprintln(cmd.ErrOrStderr(), "skipped:", err) // a system that cannot run here; the rest measured
			}
			if asJSON {
				return report.WriteJSON(cmd.OutOrStdout(), rows)
			}
			fmt.Fprintln(cmd.OutOrStdout(), "## datapath: CPU per Gbit/s against the floor (raw UDP + AEAD)")
			fmt.Fprintln(cmd.OutOrStdout())
			// A row has either throughput figures or a per-packet cost
			// (the AEAD rows): leave the others' cells empty.
			num := func(v float64, f func(float64) string) string {
				if v == 0 {
					return ""
				}
				return f(v)
			}
			fixed := func(format string) func(float64) string {
				return func(v float64) string { return fmt.Sprintf(format, v) }
			}
			return report.WriteTable(cmd.OutOrStdout(), rows,
				report.Column{Title: "link", Value: func(r *report.Row) string { return r.Variant }},
				report.ColSystem,
				report.Column{Title: "goodput", Value: func(r *report.Row) string { return num(r.GoodputBps, report.FormatBps) }},
				report.Column{Title: "CPU cores per Gbit/s", Value: func(r *report.Row) string { return num(r.CPUPerGbps, fixed("%.3f")) }},
				report.Column{Title: "allocs/pkt", Value: func(r *report.Row) string {
					if r.NsPerPacket > 0 {
						return ""
					}
					return fmt.Sprintf("%.3f", r.AllocsPerPacket)
				}},
				report.Column{Title: "ns/pkt", Value: func(r *report.Row) string { return num(r.NsPerPacket, fixed("%.0f")) }},
				report.Column{Title: "note", Value: func(r *report.Row) string { return r.Note }},
			)
		},
	}
	f := cmd.Flags()
	f.DurationVar(&o.Duration, "duration", 0, "length of each measurement (default 3s)")
	f.IntSliceVar(&o.MTUs, "mtu", nil, "link IP MTUs to measure, e.g. 1400,9000 (default 1400,9000)")
	f.StringSliceVar(&o.Systems, "systems", nil, "systems to measure (default raw-udp,raw-udp+aead,mrgw,wireguard-go)")
	f.BoolVar(&o.Loopback, "loopback", false, "run on loopback instead of two namespaces over a veth (no wireguard-go)")
	f.IntVar(&wire, "wire", 2, "mrgw's wire version (1 or 2)")
	f.IntVar(&o.Paths, "paths", 0, "paths per connection (default 8)")
	cli.SizeVar(f, &o.WindowBytes, "window", 0, "fixed window per path, e.g. 256KiB (default 256KiB)")
	f.IntVar(&o.Senders, "senders", 0, "sealing and sending goroutines per endpoint (default 2)")
	f.BoolVar(&o.DisableGSO, "no-gso", false, "turn UDP GSO off")
	f.BoolVar(&o.DisableGRO, "no-gro", false, "turn UDP GRO off")
	f.BoolVar(&plain, "plain", false, "also measure mrgw's transfer without encryption (netio-plain)")
	f.StringVar(&suite, "cipher", "aes-128-gcm", "AEAD: aes-128-gcm, aes-256-gcm or chacha20-poly1305")
	f.BoolVar(&pf, "plane-failure", false, "instead: a steady sealed transfer through the link emulator, plane 0 failing in the middle")
	cli.FractionVar(f, &pfo.Loss, "loss", 0.01, "with --plane-failure: random loss on every plane (0.01 or 1%)")
	f.IntVar(&pfo.DownAfter, "down-after", 1, "with --plane-failure: consecutive timeouts that take a path down")
	f.BoolVar(&asJSON, "json", false, "print JSON rows")
	return cmd
}

// runPlaneFailure prints the tunnel plane-failure measurement.
func runPlaneFailure(ctx context.Context, cmd *cobra.Command, o datapath.PlaneFailureOptions, asJSON bool) error {
	r, err := datapath.PlaneFailure(ctx, o)
	if err != nil {
		return err
	}
	rows := []report.Row{r}
	if asJSON {
		return report.WriteJSON(cmd.OutOrStdout(), rows)
	}
	fmt.Fprintln(cmd.OutOrStdout(), "## datapath: plane failure through the link emulator")
	fmt.Fprintln(cmd.OutOrStdout())
	return report.WriteTable(cmd.OutOrStdout(), rows,
		report.ColPlanes, report.ColRTT, report.ColLoss,
		report.Column{Title: "capacity", Value: func(r *report.Row) string { return report.FormatBps(r.CapacityBps) }},
		report.Column{Title: "goodput after", Value: func(r *report.Row) string { return report.FormatBps(r.GoodputBps) }},
		report.Column{Title: "after/before", Value: func(r *report.Row) string { return fmt.Sprintf("%.2f", r.Fraction) }},
		report.Column{Title: "recovery", Value: func(r *report.Row) string {
			if r.RecoveryRTTs < 0 {
				return "not within the run"
			}
			return fmt.Sprintf("%.0f ms = %.1f RTT", r.RecoveryMs, r.RecoveryRTTs)
		}},
		report.Column{Title: "lost/dup/failed", Value: func(r *report.Row) string {
			return fmt.Sprintf("%d/%d/%d", *r.MessagesLost, *r.MessagesDuplicated, r.MessagesFailed)
		}},
		report.Column{Title: "note", Value: func(r *report.Row) string { return r.Note }},
	)
}

// writeJSONFile writes rows as JSON lines to path.
func writeJSONFile(path string, rows []report.Row) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := report.WriteJSON(f, rows); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
