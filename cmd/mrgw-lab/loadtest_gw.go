//go:build linux

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/mrgw/mrgw/internal/report"
	"github.com/mrgw/mrgw/loadtest/gwload"
)

// gwCols are the columns of the gateway load tests' tables.
var gwCols = []report.Column{
	{Title: "scenario", Value: func(r *report.Row) string { return r.Scenario }},
	{Title: "variant", Value: func(r *report.Row) string { return r.Variant }},
	report.ColPlanes, report.ColRTT, report.ColLoss, report.ColCapacity, report.ColGoodput, report.ColFraction,
	report.ColJain, colShares,
	{Title: "msgs", Value: func(r *report.Row) string { return fmt.Sprint(r.Messages) }},
	{Title: "lost", Value: func(r *report.Row) string { return ptrOrDash(r.MessagesLost) }},
	{Title: "dup", Value: func(r *report.Row) string { return ptrOrDash(r.MessagesDuplicated) }},
	{Title: "failed", Value: func(r *report.Row) string { return fmt.Sprint(r.MessagesFailed) }},
	{Title: "incomplete", Value: func(r *report.Row) string { return fmt.Sprint(r.Incomplete) }},
	{Title: "fault", Value: func(r *report.Row) string { return orDash(r.Fault) }},
	{Title: "recovery", Value: func(r *report.Row) string {
		switch {
		case r.Fault == "":
			return "-"
		case r.RecoveryRTTs < 0:
			return "not in run"
		}
		return fmt.Sprintf("%.0f ms = %.1f RTT", r.RecoveryMs, r.RecoveryRTTs)
	}},
	{Title: "step / ideal", Value: func(r *report.Row) string {
		if r.Steps == 0 {
			return "-"
		}
		return fmt.Sprintf("%.0f / %.0f ms (x%.2f, max %.0f)", r.StepMs, r.IdealStepMs, r.StepRatio, r.MaxStepMs)
	}},
	{Title: "gw B/flow", Value: func(r *report.Row) string { return bytesOrDash(r.GatewayBytesPerFlow) }},
	{Title: "heap B/flow", Value: func(r *report.Row) string { return bytesOrDash(r.HeapBytesPerFlow) }},
	{Title: "note", Value: func(r *report.Row) string { return r.Note }},
}

func ptrOrDash(p *int64) string {
	if p == nil {
		return "-"
	}
	return fmt.Sprint(*p)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func bytesOrDash(b float64) string {
	switch {
	case b <= 0:
		return "-"
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MiB", b/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.1f KiB", b/(1<<10))
	}
	return fmt.Sprintf("%.0f B", b)
}

// gwFlags are the flags shared by the gateway load tests.
type gwFlags struct {
	asJSON  bool
	quiet   bool
	quick   bool
	plotDir string
	format  string
	cpuProf string
	trace   bool
}

func (f *gwFlags) add(cmd *cobra.Command, quick bool) {
	fl := cmd.Flags()
	fl.BoolVar(&f.asJSON, "json", false, "print JSON rows (the fields of mrgw-lab sim)")
	fl.BoolVar(&f.quiet, "quiet", false, "no progress on stderr")
	if quick {
		fl.BoolVar(&f.quick, "quick", false, "short runs and fewer points (a smoke test, not a measurement)")
	}
	fl.StringVar(&f.plotDir, "plot-dir", "", "write plots into this directory")
	fl.StringVar(&f.format, "plot-format", "svg", "plot format: svg or png")
	fl.BoolVar(&f.trace, "trace", false, "print a line per sampling bin to stderr: goodput, the emulator's rates and drops, every WAN connection's rate, window and bytes in flight")
	fl.StringVar(&f.cpuProf, "cpuprofile", "", "write a CPU profile of the runs (go tool pprof) to this file")
}

// NewGatewayLoadCmds returns the load tests that run real gateways with
// real sockets over the loopback emulator (package loadtest/gwload): one
// command per built-in scenario set and `run --file` for scenario files.
func NewGatewayLoadCmds() []*cobra.Command {
	docs := map[string]string{
		"plane-failure":   "real gateways: a plane fails mid-transfer; messages lost and duplicated (must be 0), recovery in RTTs",
		"gateway-failure": "real gateways: the busiest source gateway is killed mid-transfer; messages lost and duplicated (must be 0), recovery in RTTs",
		"connections":     "real gateways: 1, 10, 100, 1000, 10000 concurrent host flows through the gateway pairs; goodput, Jain, memory per flow",
		"incast":          "real gateways: 8, 32, 64 hosts send 1 MiB each at once to one host; step time against the ideal, fairness",
		"allreduce":       "real gateways: 2, 4, 8 hosts per region exchange 4 MiB shards each step; step time (slowest transfer) against the ideal",
		"fairness":        "real gateways: flows from 3 regions 10, 50 and 150 ms away share one destination gateway's WAN; Jain index, per-region shares",
	}
	var cmds []*cobra.Command
	for _, name := range gwload.BuiltinNames {
		var f gwFlags
		cmd := &cobra.Command{
			Use:   name,
			Short: docs[name],
			Long: docs[name] + `

Builds two regions of two gateways each, in this process, on loopback, with the link emulator
(netem) between them, and hosts on both sides; every number is measured at the hosts.
Each run states its duration; draining messages in flight afterwards takes at most 15 s.`,
			Args: cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				scs, err := gwload.Builtin(name, f.quick)
				if err != nil {
					return err
				}
				return runGatewayScenarios(cmd, scs, &f)
			},
		}
		f.add(cmd, true)
		cmds = append(cmds, cmd)
	}
	var (
		f    gwFlags
		file string
	)
	run := &cobra.Command{
		Use:   "run",
		Short: "real gateways: run a scenario file (YAML: planes, links, loss, workload, faults with times)",
		Long: `run loads a scenario file and runs it on the two-region gateway lab. Example
(loadtest/gwload/testdata/plane-failure.yaml):

  name: plane-failure
  duration: 10s
  planes: 4
  link: {rate: 50mbit, delay: 20ms, loss: 0.1%}
  links:
    - {plane: 2, dir: a-b, loss: 1%}
  workload: {pattern: bulk, flows: 8, hosts: 2, message_size: 256KiB}
  faults:
    - {at: 4s, kind: plane-fail, target: "1"}
    - {at: 7s, kind: plane-restore, target: "1"}

Patterns: bulk, incast, allreduce. Fault kinds: plane-fail, plane-restore (target: plane
index), gateway-kill (target: a gateway name such as use-gw1, or busiest-src, busiest-dst).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if file == "" {
				return errors.New("--file is required")
			}
			sc, err := gwload.LoadScenario(file)
			if err != nil {
				return err
			}
			return runGatewayScenarios(cmd, []gwload.Scenario{sc}, &f)
		},
	}
	run.Flags().StringVar(&file, "file", "", "scenario file (YAML)")
	f.add(run, false)
	return append(cmds, run)
}

func runGatewayScenarios(cmd *cobra.Command, scs []gwload.Scenario, f *gwFlags) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	out := cmd.OutOrStdout()
	if f.cpuProf != "" {
		// Where the lab's CPU goes (one process holds hosts, gateways and
		// the emulator): the way to find what limits a run on this machine.
		pf, err := os.Create(f.cpuProf)
		if err != nil {
			return err
		}
		defer pf.Close()
		if err := pprof.StartCPUProfile(pf); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	if !f.quiet && len(scs) > 0 {
		// Up front: the runs' stated durations and a few seconds each to
		// build the lab and drain (at most 15 s).
		var total time.Duration
		for _, sc := range scs {
			n, _ := sc.Normalize()
			total += n.Duration + 5*time.Second
		}
		fmt.Fprintf(cmd.ErrOrStderr(), "%d run(s), about %s (up to %s if every drain takes its 15 s)\n", len(scs), roundDur(total), roundDur(total+time.Duration(len(scs))*10*time.Second))
	}
	var rows []report.Row
	var firstErr error
	for i, sc := range scs {
		n, _ := sc.Normalize()
		if !f.quiet {
			// On stderr, also with --json: stdout keeps only the rows.
			fmt.Fprintf(cmd.ErrOrStderr(), "[%d/%d] %s: %s (duration %v, then up to 15s draining)\n", i+1, len(scs), n.Name, n.Description, n.Duration)
		}
		var o gwload.Options
		if f.trace {
			o.Trace = cmd.ErrOrStderr()
		}
		var bar *progressbar.ProgressBar
		if !f.quiet {
			bar = progressbar.NewOptions(1000, progressbar.OptionSetWriter(cmd.ErrOrStderr()),
				progressbar.OptionSetWidth(30), progressbar.OptionClearOnFinish(), progressbar.OptionThrottle(0))
			o.Progress = func(frac float64, what string) {
				bar.Describe(what)
				_ = bar.Set(int(frac * 1000))
			}
		}
		rs, ser, err := gwload.Run(ctx, sc, o)
		if bar != nil {
			_ = bar.Finish()
		}
		if err != nil {
			fmt.Fprintf(cmd.ErrOrStderr(), "%s: %v\n", n.Name, err)
			if firstErr == nil {
				firstErr = err
			}
			if ctx.Err() != nil {
				break
			}
			continue
		}
		rows = append(rows, rs...)
		if f.plotDir != "" && ser != nil {
			files, perr := gwload.Plot(f.plotDir, fmt.Sprintf("%s-%02d", n.Name, i), f.format, ser)
			if perr != nil {
				fmt.Fprintf(cmd.ErrOrStderr(), "plots: %v\n", perr)
			}
			if !f.asJSON {
				for _, p := range files {
					fmt.Fprintf(cmd.ErrOrStderr(), "  plot: %s\n", p)
				}
			}
		}
	}
	if err := writeGatewayRows(out, rows, f.asJSON, scs); err != nil {
		return err
	}
	return firstErr
}

func writeGatewayRows(out io.Writer, rows []report.Row, asJSON bool, scs []gwload.Scenario) error {
	if len(rows) == 0 {
		return nil
	}
	if asJSON {
		return report.WriteJSON(out, rows)
	}
	fmt.Fprintf(out, "## loadtest %s (real gateways, loopback emulator)\n\n", rows[0].Scenario)
	return report.WriteTable(out, rows, gwCols...)
}
