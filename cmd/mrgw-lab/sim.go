package main

import (
	"fmt"
	"os"
	"sort"
	"strings"

	_ "github.com/mrgw/mrgw/cc/longrtt" // registers the long-RTT controllers by name
	"github.com/mrgw/mrgw/internal/cli"
	"github.com/mrgw/mrgw/internal/report"
	"github.com/mrgw/mrgw/sim/scenario"
	"github.com/spf13/cobra"
)

// simScenario is one `mrgw-lab sim` scenario and how its table is laid out.
type simScenario struct {
	run  func(scenario.Options) ([]report.Row, error)
	cols []report.Column
	doc  string
}

var (
	colQueue  = report.Column{Title: "max queue", Value: func(r *report.Row) string { return fmt.Sprintf("%.1f MB", float64(r.MaxQueueBytes)/1e6) }}
	colSettle = report.Column{Title: "settle (RTTs)", Value: func(r *report.Row) string { return fmt.Sprintf("%.0f", r.SettleRTTs) }}
	colShares = report.Column{Title: "shares", Value: func(r *report.Row) string {
		parts := make([]string, len(r.Shares))
		for i, x := range r.Shares {
			parts[i] = fmt.Sprintf("%.3f", x)
		}
		return strings.Join(parts, " ")
	}}
	colState = report.Column{Title: "state/conn", Value: func(r *report.Row) string { return fmt.Sprintf("%.1f KiB", r.StateBytesPerConn/1024) }}
	// regions: a row is a region pair or a long-haul segment in one measurement window.
	colWindow   = report.Column{Title: "window", Value: func(r *report.Row) string { return r.Variant }}
	colElement  = report.Column{Title: "pair / segment", Value: func(r *report.Row) string { return r.Note }}
	colCapShare = report.Column{Title: "fair share / capacity", Value: func(r *report.Row) string { return report.FormatBps(r.CapacityBps) }}
	colFracUtil = report.Column{Title: "of share / utilisation", Value: func(r *report.Row) string { return fmt.Sprintf("%.3f", r.Fraction) }}
	colDrops    = report.Column{Title: "queue drops", Value: func(r *report.Row) string { return fmt.Sprint(r.QueueDrops) }}
	colNote     = report.Column{Title: "note", Value: func(r *report.Row) string { return r.Note }}
)

// segmentOnly leaves a regions column blank on region-pair rows: queues
// and drops belong to the segments.
func segmentOnly(c report.Column) report.Column {
	return report.Column{Title: c.Title, Value: func(r *report.Row) string {
		if strings.HasPrefix(r.Note, "pair ") {
			return ""
		}
		return c.Value(r)
	}}
}

func simScenarios() map[string]simScenario {
	base := []report.Column{report.ColSystem, report.ColCC, report.ColRTT, report.ColLoss, report.ColFlows, report.ColCapacity, report.ColGoodput, report.ColFraction}
	docs := map[string]simScenario{
		"loss-sweep": {cols: []report.Column{report.ColSystem, report.ColRTT, report.ColLoss, report.ColCapacity, report.ColGoodput, report.ColFraction, report.ColRel, report.ColRetx},
			doc: "mrgw and the RoCEv2 baseline, 1 plane of 100 Gbit/s, 10µs and 50ms RTT, 0-10% random loss (fixed window)"},
		"planes": {cols: []report.Column{report.ColSystem, report.ColPlanes, report.ColCapacity, report.ColGoodput, report.ColFraction, report.ColEff},
			doc: "one connection over 1, 2, 4 and 8 planes of 100 Gbit/s behind ECMP"},
		"utilization":        {cols: append(base, colQueue), doc: "one flow on a 100 Gbit/s ECN bottleneck at 10, 50 and 100 ms RTT"},
		"rtt-fairness":       {cols: append(base, report.ColJain, colShares, colNote), doc: "flows at 10, 50 and 150 ms RTT through one bottleneck: Jain index per controller"},
		"convergence":        {cols: append(base, colSettle, colShares, colNote), doc: "a second flow joins a busy 100 Gbit/s, 100 ms link: round trips to the fair share"},
		"incast":             {cols: append(base, colSettle, colQueue, report.ColJain, colNote), doc: "64 senders to one receiver at data-center RTT"},
		"multipath-coupling": {cols: append(base, colShares, colNote), doc: "an 8-path and a 1-path connection on one bottleneck; the 8-path one over 8 disjoint planes"},
		"loss-sweep-cc":      {cols: append(base, report.ColRel), doc: "loss sweep with the real controllers and ECN-marking bottlenecks at 50 ms"},
		"regions": {cols: []report.Column{colWindow, colElement, report.ColRTT, report.ColFlows, colCapShare, report.ColGoodput, colFracUtil, report.ColJain, segmentOnly(colQueue), segmentOnly(colDrops), colShares},
			doc: "4 regions on a line, 5 region pairs sharing long-haul segments (20-140 ms RTT, 4 planes), then one plane of a segment fails"},
		"coexistence": {cols: append(base, report.ColJain, colShares, colNote), doc: "mrgw and a classic-ECN flow on one 200 Mbit/s, 50 ms bottleneck marking at 0.1 BDP (and drop-tail): does either starve?"},
		"connections": {cols: []report.Column{report.ColSystem, report.ColFlows, report.ColPlanes, report.ColCapacity, report.ColGoodput, report.ColFraction, report.ColJain, colState, report.ColSpeed},
			doc: "1 to 10,000 concurrent connections over 8 planes: goodput, Jain index, protocol state per connection"},
	}
	out := make(map[string]simScenario, len(scenario.Scenarios))
	for name, run := range scenario.Scenarios {
		sc := docs[name]
		if sc.cols == nil {
			sc.cols = base
		}
		sc.run = run
		out[name] = sc
	}
	return out
}

func newSimCmd() *cobra.Command {
	var (
		asJSON bool
		opts   scenario.Options
		quiet  bool
	)
	cmd := &cobra.Command{
		Use:   "sim [scenario...]",
		Short: "Run reference scenarios in the deterministic simulator",
		Long: `sim runs the unchanged MetaRoCE state machine in a deterministic discrete-event
network simulator and prints a table per scenario (or JSON rows with --json).
The same seed gives the same numbers, bit for bit. With no scenario named it lists them.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			all := simScenarios()
			names := make([]string, 0, len(all))
			for n := range all {
				names = append(names, n)
			}
			sort.Strings(names)
			if len(args) == 0 {
				fmt.Fprintln(cmd.OutOrStdout(), "scenarios:")
				for _, n := range names {
					fmt.Fprintf(cmd.OutOrStdout(), "  %-20s %s\n", n, all[n].doc)
				}
				return nil
			}
			if len(args) == 1 && args[0] == "all" {
				args = names
			}
			for _, a := range args {
				if _, ok := all[a]; !ok {
					return fmt.Errorf("unknown scenario %q (known: %s)", a, strings.Join(names, ", "))
				}
			}
			if !quiet && !asJSON {
				opts.Progress = func(i, n int, what string) {
					fmt.Fprintf(os.Stderr, "\r\033[K[%d/%d] %s", i, n, what)
				}
			}
			for _, a := range args {
				sc := all[a]
				rows, err := sc.run(opts)
				if opts.Progress != nil {
					fmt.Fprint(os.Stderr, "\r\033[K")
				}
				if err != nil {
					return fmt.Errorf("%s: %w", a, err)
				}
				if asJSON {
					if err := report.WriteJSON(cmd.OutOrStdout(), rows); err != nil {
						return err
					}
					continue
				}
				fmt.Fprintf(cmd.OutOrStdout(), "## %s (seed %d)\n\n", a, opts.Seed)
				if err := report.WriteTable(cmd.OutOrStdout(), rows, sc.cols...); err != nil {
					return err
				}
				fmt.Fprintln(cmd.OutOrStdout())
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.BoolVar(&asJSON, "json", false, "print one JSON object per result row instead of a table")
	f.Uint64Var(&opts.Seed, "seed", 1, "random seed (same seed, same result)")
	f.Float64Var(&opts.Scale, "scale", 1, "multiply every simulated duration (use <1 for a quick look)")
	cli.RateVar(f, &opts.RateBps, "rate", 100e9, "link rate per plane, e.g. 100gbit, 10gbit")
	f.BoolVar(&quiet, "quiet", false, "no progress line")
	f.StringVar(&opts.PlotDir, "plots", "", "write SVG plots of the congestion-control scenarios into this directory")
	return cmd
}
