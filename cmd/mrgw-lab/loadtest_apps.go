//go:build linux

package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/mrgw/mrgw/internal/cli"
	"github.com/mrgw/mrgw/internal/plot"
	"github.com/mrgw/mrgw/internal/report"
	"github.com/mrgw/mrgw/loadtest/apps"
	"github.com/mrgw/mrgw/loadtest/tunemu"
)

func newAppsCmd() *cobra.Command {
	var (
		o       apps.Options
		asJSON  bool
		quiet   bool
		jsonOut string
		plotDir string
		format  string
	)
	cmd := &cobra.Command{
		Use:   "apps",
		Short: "iperf3 (1 and 8 streams) and a file copy over kernel TCP (cubic, bbr) and through mrgw (forward, stream), against mrgw's own transport, on one emulated WAN",
		Long: `apps runs the workloads users put between regions over the same emulated WAN (--planes planes
of --rate each, every --rtt and --loss): iperf3 -P 1 and -P 8, and a copy of a --file-size file
written to disk at the other end. Systems:

  tcp-cubic, tcp-bbr  kernel TCP between two network namespaces (loadtest/tunemu; root)
  mrgw-forward        iperf3 through package forward (Local on an eu-west host, Expose on a
                      us-east host) over a two-region lab of gateways (loadtest/lab, netem)
  mrgw-stream         the copy through a stream.Conn on the same lab
  mrgw-cp             the copy by mrgw host cp (package filecopy) on the same lab
  mrgw-transport      the reference: host flows' WRITEs on the same lab, one flow per stream

Every run starts from fresh namespaces or a fresh lab. Targets, at 1% and 5% loss: through mrgw at
least 0.9 of mrgw-transport, 10 x tcp-cubic and 1 x tcp-bbr with the same stream count; the report
states each met or not. cpu_cores is this process's CPU (the run's emulator, and for mrgw the
gateways, hosts and adapters) plus the iperf3 processes', over the run's wall time.

Needs iperf3 (apt-get install iperf3) and, for kernel TCP, root: rows that cannot run are skipped
and named in the error; nothing is estimated in their place.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.Validate(); err != nil {
				return err
			}
			if plotDir != "" {
				if _, err := plot.CheckFormat(format); err != nil {
					return err
				}
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			stderr := cmd.ErrOrStderr()
			var bar *progressbar.ProgressBar
			if !quiet {
				n, d := apps.Estimate(o)
				fmt.Fprintf(stderr, "apps: %d runs, about %s (at most; copies end at --copy-limit)\n", n, roundDur(d))
				o.Progress = func(i, n int, what string) {
					if bar == nil {
						bar = progressbar.NewOptions(n, progressbar.OptionSetWriter(stderr),
							progressbar.OptionSetWidth(30), progressbar.OptionShowCount(), progressbar.OptionClearOnFinish())
					}
					bar.Describe(what)
					_ = bar.Set(i - 1)
				}
			}
			rows, err := apps.Run(ctx, o)
			if bar != nil {
				_ = bar.Finish()
			}
			skipped := err != nil && (errors.Is(err, tunemu.ErrUnavailable) || errors.Is(err, apps.ErrMissingProgram))
			if err != nil && skipped {
				fmt.Fprintln(stderr, "skipped:", err)
			}
			if plotDir != "" && len(rows) > 0 {
				files, perr := apps.Plot(plotDir, format, rows)
				for _, f := range files {
					fmt.Fprintf(stderr, "plot: %s\n", f)
				}
				if perr != nil {
					fmt.Fprintf(stderr, "plots: %v\n", perr)
				}
			}
			if jsonOut != "" && len(rows) > 0 {
				if werr := writeJSONFile(jsonOut, rows); werr != nil {
					return werr
				}
			}
			if len(rows) > 0 {
				out := cmd.OutOrStdout()
				if asJSON {
					if werr := report.WriteJSON(out, rows); werr != nil {
						return werr
					}
				} else {
					fmt.Fprintf(out, "## loadtest apps\n\n")
					if werr := report.WriteTable(out, rows, apps.Columns...); werr != nil {
						return werr
					}
					if ts := apps.Targets(rows); len(ts) > 0 {
						fmt.Fprintf(out, "\nTargets at 1%% and 5%% loss:\n\n")
						if werr := apps.WriteTargets(out, ts); werr != nil {
							return werr
						}
					}
				}
			}
			if skipped {
				return nil // said on stderr; the rows that could run are out
			}
			return err
		},
	}
	f := cmd.Flags()
	cli.RateVar(f, &o.PlaneRateBps, "rate", apps.DefaultPlaneRateBps, "rate of each plane, each direction (all systems)")
	f.IntVar(&o.Planes, "planes", apps.DefaultPlanes, "emulated ECMP planes")
	cli.DurationsVar(f, &o.RTTs, "rtt", apps.DefaultRTTs, "round-trip times")
	cli.FractionsVar(f, &o.Losses, "loss", apps.DefaultLosses, "random loss rates, fractions or percentages, on every plane, both directions")
	f.StringSliceVar(&o.Workloads, "workloads", apps.AllWorkloads, "workloads to run")
	f.StringSliceVar(&o.Systems, "systems", apps.AllSystems, "systems to run (each runs the workloads it applies to)")
	f.DurationVar(&o.Duration, "duration", apps.DefaultDuration, "iperf3's measured time (-t), whole seconds; mrgw-transport measures the same")
	f.DurationVar(&o.Warmup, "warmup", apps.DefaultWarmup, "iperf3's warm-up left out (-O), whole seconds")
	cli.SizeVar(f, &o.FileSize, "file-size", int64(apps.DefaultFileSize), "size of the copied file")
	f.DurationVar(&o.CopyLimit, "copy-limit", apps.DefaultCopyLimit, "bound on one copy: a copy still running then counts what arrived")
	f.StringVar(&o.Dir, "dir", "", "directory for the source file and the copies (default: the system's temporary directory)")
	cli.SizeVar(f, &o.Window, "window", 0, "each stream's receive window; the gateways' credit per flow is twice it (default: the smallest power of two from 4MiB holding twice the WAN's bandwidth-delay product)")
	f.Uint64Var(&o.Seed, "seed", 1, "seed of the emulators and the file's content")
	f.BoolVar(&asJSON, "json", false, "print JSON rows")
	f.BoolVar(&quiet, "quiet", false, "no estimate and no progress bar on stderr")
	f.StringVar(&jsonOut, "json-out", "", "also write the JSON rows to this file")
	f.StringVar(&plotDir, "plot-dir", "", "write the plots (goodput over capacity against loss, a line per system, per workload and rtt) into this directory")
	f.StringVar(&format, "plot-format", "svg", "plot format: svg or png")
	return cmd
}
