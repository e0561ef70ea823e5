package main

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	_ "github.com/mrgw/mrgw/cc/longrtt" // registers the long-RTT controllers by name
	"github.com/mrgw/mrgw/internal/cli"
	"github.com/mrgw/mrgw/internal/report"
	"github.com/mrgw/mrgw/sim/scenario"
	"github.com/mrgw/mrgw/units"
	"github.com/spf13/cobra"
)

// simScenario is one `mrgw-lab sim` scenario and how its table is laid out.
type simScenario struct {
	run  func(scenario.Options) ([]report.Row, error)
	cols []report.Column
	doc  string
	cost simCost
}

// simCost is what a scenario costs at its defaults (--rate unset, --scale
// 1) on a 2-core machine: the wall time of the docs/results run
// (wall_seconds of its rows) or, where docs/results has none, a rough
// figure from --scale 0.05 and 0.25 runs (shorter runs cost more than
// their share: set-up and warm-up). The work grows with the simulated
// packets: with the rate and with --scale.
type simCost struct {
	rateBps float64 // the scenario's own default rate (what --rate replaces)
	seconds float64 // wall seconds at the defaults
}

// simCosts per scenario; TestSimCostsCoverEveryScenario keeps it whole.
var simCosts = map[string]simCost{
	"loss-sweep":           {100e9, 180},
	"planes":               {100e9, 20},
	"utilization":          {100e9, 960},
	"rtt-fairness":         {10e9, 90},
	"convergence":          {100e9, 600},
	"incast":               {100e9, 1},
	"multipath-coupling":   {10e9, 40},
	"loss-sweep-cc":        {100e9, 1410},
	"regions":              {100e9, 150},
	"coexistence":          {scenario.CoexistRateBps, 15},
	"coexistence-stalls":   {scenario.CoexistRateBps, 15},
	"coexistence-fallback": {scenario.CoexistRateBps, 8},
	"connections":          {100e9, 150},
	"standing-queue":       {scenario.QueueRateBps, 100},
}

// estimate is the expected wall time of a run with opts.
func (c simCost) estimate(o scenario.Options) time.Duration {
	s := c.seconds
	if o.Scale > 0 {
		s *= o.Scale
	}
	if o.RateBps > 0 && c.rateBps > 0 {
		s *= o.RateBps / c.rateBps
	}
	return time.Duration(s * float64(time.Second))
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
		"planes": {cols: []report.Column{report.ColSystem, report.ColCC, report.ColRTT, report.ColPlanes, report.ColCapacity, report.ColGoodput, report.ColFraction, report.ColEff, colQueue, colNote},
			doc: "one connection over 1, 2, 4 and 8 planes of 100 Gbit/s behind ECMP (fixed window); then with the long-RTT controllers over planes of 10 Gbit/s at 10 µs and 50 ms, and over six unequal planes (one 5 ms slower, one at 2% loss, one at half rate) at 50 ms"},
		"utilization":        {cols: append(base, colQueue), doc: "one flow on a 100 Gbit/s ECN bottleneck at 10, 50 and 100 ms RTT"},
		"rtt-fairness":       {cols: append(base, report.ColJain, colShares, colNote), doc: "flows at 10, 50 and 150 ms RTT through one bottleneck: Jain index per controller"},
		"convergence":        {cols: append(base, colSettle, colShares, colNote), doc: "a second flow joins a busy 100 Gbit/s, 100 ms link: round trips to the fair share"},
		"incast":             {cols: append(base, colSettle, colQueue, report.ColJain, colNote), doc: "64 senders to one receiver at data-center RTT"},
		"multipath-coupling": {cols: append(base, colShares, colNote), doc: "an 8-path and a 1-path connection on one bottleneck; the 8-path one over 8 disjoint planes"},
		"loss-sweep-cc":      {cols: append(base, report.ColRel), doc: "loss sweep with the real controllers and ECN-marking bottlenecks at 50 ms"},
		"regions": {cols: []report.Column{colWindow, colElement, report.ColRTT, report.ColFlows, colCapShare, report.ColGoodput, colFracUtil, report.ColJain, segmentOnly(colQueue), segmentOnly(colDrops), colShares},
			doc: "4 regions on a line, 5 region pairs sharing long-haul segments (20-140 ms RTT, 4 planes), then one plane of a segment fails"},
		"coexistence":          {cols: append(base, report.ColJain, colShares, colNote), doc: "mrgw and a classic-ECN flow on one 200 Mbit/s, 50 ms bottleneck marking at 0.1 BDP (and drop-tail): does either starve?"},
		"coexistence-fallback": {cols: append(base, report.ColJain, colShares, colNote), doc: "coexistence at the marking bottleneck with the classic fallback on (cc.Params.ClassicFallback): the classic flow's share against a sender that answers marks as CUBIC does, and the fallback's cost alone"},
		"coexistence-stalls":   {cols: append(base, report.ColJain, colShares, colNote), doc: "coexistence with the mrgw sender stalling as on a busy host (every 15-45 ms for 0-12 ms, catching up half a round trip); the classic flow and receiver unstalled: the classic flow's share and mrgw's own efficiency side by side"},
		"standing-queue": {cols: append(base, report.ColJain, colQueue, colDrops, colNote),
			doc: "1 to 256 connections on one 1 Gbit/s, 50 ms bottleneck marking at 0.1 BDP (hints off): does the standing queue grow with their number?"},
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
		sc.cost = simCosts[name]
		out[name] = sc
	}
	return out
}

func newSimCmd() *cobra.Command {
	var (
		asJSON  bool
		opts    scenario.Options
		quiet   bool
		results string
	)
	cmd := &cobra.Command{
		Use:   "sim [scenario...]",
		Short: "Run reference scenarios in the deterministic simulator",
		Long: `sim runs the unchanged MetaRoCE state machine in a deterministic discrete-event
network simulator and prints a table per scenario (or JSON rows with --json).
The same seed gives the same numbers, bit for bit. With no scenario named it lists them.

With --results DIR each scenario's rows are also written to DIR/SCENARIO.jsonl and its
plots into DIR, and DIR/cc.md, the congestion-control results page, is rebuilt from the
rows there (with no scenario named, only the page is rebuilt):
  mrgw-lab sim --results docs/results ` + strings.Join(scenario.CCResultsScenarios, " "),
		RunE: func(cmd *cobra.Command, args []string) error {
			all := simScenarios()
			names := make([]string, 0, len(all))
			for n := range all {
				names = append(names, n)
			}
			sort.Strings(names)
			if results != "" && opts.PlotDir == "" {
				opts.PlotDir = results
			}
			if len(args) == 0 && results != "" {
				return scenario.WriteCCPage(results)
			}
			if len(args) == 0 {
				fmt.Fprintln(cmd.OutOrStdout(), "scenarios (default rate per plane; time at the defaults on a 2-core machine):")
				for _, n := range names {
					c := all[n].cost
					fmt.Fprintf(cmd.OutOrStdout(), "  %-20s %-10s %-8s %s\n", n, units.FormatRate(c.rateBps), "~"+roundDur(c.estimate(scenario.Options{})), all[n].doc)
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
			for _, a := range args {
				sc := all[a]
				var p *progress
				if !quiet {
					// On stderr, also with --json: stdout keeps only the rows.
					p = newProgress(cmd.ErrOrStderr(), a)
					est := sc.cost.estimate(opts)
					rate := "its own rate per plane (" + units.FormatRate(sc.cost.rateBps) + ")"
					if opts.RateBps > 0 {
						rate = units.FormatRate(opts.RateBps) + " per plane"
					}
					p.say("%s: at %s and --scale %g, about %s on a 2-core machine%s", a, rate, scaleOr1(opts.Scale), roundDur(est), quickHint(est))
					opts.Progress = p.update
				}
				rows, err := sc.run(opts)
				if p != nil {
					p.finish()
				}
				if err != nil {
					return fmt.Errorf("%s: %w", a, err)
				}
				if results != "" {
					if err := writeRows(filepath.Join(results, a+".jsonl"), rows); err != nil {
						return err
					}
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
			if results != "" && hasCCRows(results) {
				return scenario.WriteCCPage(results)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.BoolVar(&asJSON, "json", false, "print one JSON object per result row instead of a table")
	f.Uint64Var(&opts.Seed, "seed", 1, "random seed (same seed, same result)")
	f.Float64Var(&opts.Scale, "scale", 1, "multiply every simulated duration (use <1 for a quick look)")
	cli.RateVar(f, &opts.RateBps, "rate", 0, "link rate per plane, e.g. 100gbit, 10gbit (default: each scenario's own, as `mrgw-lab sim` lists them and docs/results uses; the run time grows with it)")
	f.BoolVar(&quiet, "quiet", false, "no estimate and no progress line on stderr")
	f.StringVar(&opts.PlotDir, "plots", "", "write SVG plots of the congestion-control scenarios into this directory")
	f.StringVar(&results, "results", "", "also write each scenario's rows to DIR/SCENARIO.jsonl and its plots into DIR, and rebuild DIR/cc.md from the rows there")
	return cmd
}

// writeRows writes rows as JSON lines to path, replacing it.
func writeRows(path string, rows []report.Row) error {
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

// hasCCRows reports whether dir holds the rows of every scenario of the
// congestion-control results page.
func hasCCRows(dir string) bool {
	for _, n := range scenario.CCResultsScenarios {
		if _, err := os.Stat(filepath.Join(dir, n+".jsonl")); err != nil {
			return false
		}
	}
	return true
}
