//go:build linux

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/mrgw/mrgw/internal/plot"
	"github.com/mrgw/mrgw/internal/report"
	"github.com/mrgw/mrgw/loadtest/fleet"
)

// newFleetCmd is `mrgw-lab loadtest fleet` (package loadtest/fleet).
func newFleetCmd() *cobra.Command {
	var (
		o                fleet.Options
		gateways, planes string
		asJSON, quiet    bool
		plotDir, plotFmt string
		plotFrom         string
	)
	cmd := &cobra.Command{
		Use:   "fleet",
		Short: "path-health and membership gossip at fleet size: G gateways' real memberlist and region code in R regions × P planes on loopback; verdict, death and new-region convergence, gossip bytes, CPU, memory and tables per gateway, steady and in a storm",
		Long: `fleet starts G gateways' gossip in this process (real memberlist on the guarded transport,
encrypted, package region) in R regions with P planes each, each with a stand-in for the relay
built from pathmgr (a path set per peer gateway, its plane verdicts published, the others'
taken in through pathmgr.Reports). It measures, per size: a plane failing at one gateway until
every gateway of the other regions has the verdict (the failing gateway's relay publishes at
t0; no other gateway detects it by itself); a gateway killed until every other one routes
around it; a new region's first gateway until every other one can route to it; gossip bytes
per second, CPU and memory per gateway and the size of every table, in steady state and while
a quarter of all planes flap (with the plane verdicts of that storm); broadcasts lost and
events not seen everywhere (both must be 0). --gateways and --planes take lists
(8,32,64,128); each size is one run (about 1-3 min). Progress on stderr. Exit status 1 if
anything was lost or missed, a table overflowed or a size was cut short (--timeout:
its rows are printed, the step cut short marked partial).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if plotFrom != "" {
				rows, err := readFleetRows(plotFrom)
				if err != nil {
					return err
				}
				if plotDir == "" {
					return fmt.Errorf("--plot-from needs --plot-dir")
				}
				return plotFleet(rows, plotDir, plotFmt)
			}
			gs, err := intList(gateways)
			if err != nil {
				return fmt.Errorf("--gateways: %w", err)
			}
			ps, err := intList(planes)
			if err != nil {
				return fmt.Errorf("--planes: %w", err)
			}
			if !quiet {
				o.Progress = cmd.ErrOrStderr()
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			out := cmd.OutOrStdout()
			var all []fleet.Row
			ok := true
			for _, p := range ps {
				for _, g := range gs {
					run := o
					run.Gateways, run.Planes = g, p
					rep, err := fleet.Run(ctx, run)
					if rep != nil {
						// A run cut short still prints what it measured:
						// the step cut short is marked (partial).
						ok = ok && rep.OK()
						all = append(all, rep.Rows...)
						if asJSON {
							if werr := report.WriteJSONLines(out, rep.Rows); werr != nil {
								return werr
							}
						} else {
							writeFleet(out, rep.Rows)
						}
						for _, n := range rep.Notes {
							fmt.Fprintln(cmd.ErrOrStderr(), "fleet: "+n)
						}
					}
					switch {
					case err == nil:
					case errors.Is(err, fleet.ErrTimeout) && rep != nil:
						ok = false // this size's rows are out; on to the next
					default:
						return err
					}
				}
			}
			if plotDir != "" {
				if err := plotFleet(all, plotDir, plotFmt); err != nil {
					return err
				}
			}
			if !ok {
				fmt.Fprintln(cmd.ErrOrStderr(), "fleet: FAILED: broadcasts lost, events missed, a table over its bound or a size cut short")
				return errSilent
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&gateways, "gateways", "32", "gateways G (a list runs each: 8,32,64,128)")
	fl.StringVar(&planes, "planes", "16", "planes P per gateway (a list runs each: 8,16)")
	fl.IntVar(&o.Regions, "regions", 0, "regions R (default G/4 within 2..32)")
	fl.StringVar(&o.Profile, "profile", "tuned", "gossip timings: tuned (probe 200 ms, timeout 100 ms, suspicion ×2, gossip 50 ms) or lan")
	fl.IntVar(&o.Failures, "failures", 20, "plane failures measured")
	fl.IntVar(&o.Deaths, "deaths", 3, "gateways killed")
	fl.IntVar(&o.Joins, "joins", 3, "new regions started")
	fl.DurationVar(&o.Steady, "steady", 10*time.Second, "steady-state window")
	fl.DurationVar(&o.Storm, "storm", 20*time.Second, "storm duration (a quarter of all planes flap)")
	fl.DurationVar(&o.Flap, "flap", 3*time.Second, "a flapping plane's time down, then up (±25%)")
	fl.Uint64Var(&o.Seed, "seed", 1, "seed of the choices")
	fl.DurationVar(&o.Timeout, "timeout", 0, "bound each size's run (0: none); when it passes, the rows measured so far are printed, the step it cut short marked partial (the \"partial\" field with --json, naming the timeout), and the next size runs; an interrupt prints them too")
	fl.DurationVar(&o.EventTimeout, "event-timeout", 10*time.Second, "a verdict not seen everywhere within this counts as missed (a death or new region: memberlist's push/pull interval more)")
	fl.BoolVar(&o.NoDamping, "no-damping", false, "turn flap damping off: every transition of a flapping plane goes on the wire")
	fl.BoolVar(&o.Compress, "compress", false, "keep memberlist's gossip compression, as the gateway does (off by default: in one process it was the largest CPU cost; bytes are then an upper bound)")
	fl.BoolVar(&asJSON, "json", false, "one JSON object per row (gateways, planes, event, p50_ms, p99_ms, max_ms, gossip_bytes_sent_per_s, broadcasts_lost, ...)")
	fl.BoolVar(&quiet, "quiet", false, "no progress lines on stderr")
	fl.StringVar(&plotDir, "plot-dir", "", "write convergence and traffic against G to this directory")
	fl.StringVar(&plotFmt, "plot-format", "svg", "svg or png")
	fl.StringVar(&plotFrom, "plot-from", "", "only plot the rows of earlier --json runs (files, comma-separated) into --plot-dir")
	return cmd
}

func readFleetRows(files string) ([]fleet.Row, error) {
	var rows []fleet.Row
	for _, f := range strings.Split(files, ",") {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		dec := json.NewDecoder(strings.NewReader(string(b)))
		for dec.More() {
			var r fleet.Row
			if err := dec.Decode(&r); err != nil {
				return nil, fmt.Errorf("%s: %w", f, err)
			}
			rows = append(rows, r)
		}
	}
	return rows, nil
}

func intList(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q is not a positive number", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// writeFleet prints one size's rows as a Markdown table under a line
// naming the size, then the late deliveries and the steps cut short.
func writeFleet(out io.Writer, rows []fleet.Row) {
	if len(rows) == 0 {
		return
	}
	r0 := rows[0]
	fmt.Fprintf(out, "**%d gateways**, %d regions, %d planes (%s profile; load average %.1f at the end):\n\n", r0.Gateways, r0.Regions, r0.Planes, r0.Profile, rows[len(rows)-1].LoadAvg)
	fmt.Fprintln(out, "| event | n | p50 | p99 | max | sent B/s | recv B/s | health B/s | cpu/gw | mem/gw | verdicts | own | queued | reports | lost | missed | held | known | lag p99 |")
	fmt.Fprintln(out, "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
	var partial []string
	for _, r := range rows {
		ev := r.Event
		if r.Partial != "" {
			ev += " (partial)"
			partial = append(partial, fmt.Sprintf("%s: %s", r.Event, r.Partial))
		}
		fmt.Fprintf(out, "| %s | %d | %.0f ms | %.0f ms | %.0f ms | %.0f | %.0f | %.0f | %.4f | %.1f MB | %d/%d | %d | %d | %d | %d | %d | %d | %d | %.0f ms |\n",
			ev, r.Samples, r.P50ms, r.P99ms, r.MaxMs, r.BytesSentPerS, r.BytesRecvPerS, r.HealthBytesPerS,
			r.CPUPerGateway, r.MemPerGateway/1e6, r.VerdictsMax, r.VerdictBound, r.OwnMax, r.QueuedMax, r.ReportsMax,
			r.BroadcastsLost, r.Missed, r.UpsHeld, r.Known, r.SchedLagP99ms)
	}
	fmt.Fprintln(out)
	for _, r := range rows {
		if r.Late > 0 {
			fmt.Fprintf(out, "late: %s: %d deliveries came by memberlist's push/pull after the event timeout (the broadcast missed them)\n", r.Event, r.Late)
		}
	}
	for _, p := range partial {
		fmt.Fprintln(out, "partial: "+p)
	}
	fmt.Fprintln(out)
}

// plotFleet draws convergence time and gossip traffic against G, one line
// per (event, planes).
func plotFleet(rows []fleet.Row, dir, format string) error {
	ext, err := plot.CheckFormat(format)
	if err != nil {
		return err
	}
	conv := plot.Spec{Title: "convergence against fleet size (p99; dashed: max)", XLabel: "gateways", YLabel: "ms", ZeroY: true}
	traffic := plot.Spec{Title: "gossip per gateway against fleet size", XLabel: "gateways", YLabel: "bytes/s sent", ZeroY: true}
	type key struct {
		event  string
		planes int
	}
	lines := map[key]*[3]plot.Line{}
	var order []key
	for _, r := range rows {
		k := key{r.Event, r.Planes}
		l := lines[k]
		if l == nil {
			l = &[3]plot.Line{}
			lines[k] = l
			order = append(order, k)
		}
		g := float64(r.Gateways)
		if r.Samples > 0 {
			l[0].X, l[0].Y = append(l[0].X, g), append(l[0].Y, r.P99ms)
			l[1].X, l[1].Y = append(l[1].X, g), append(l[1].Y, r.MaxMs)
		}
		l[2].X, l[2].Y = append(l[2].X, g), append(l[2].Y, r.BytesSentPerS)
	}
	for i, k := range order {
		l := lines[k]
		name := fmt.Sprintf("%s P=%d", k.event, k.planes)
		if len(l[0].X) > 0 {
			conv.Lines = append(conv.Lines,
				plot.Line{Label: name, X: l[0].X, Y: l[0].Y, Style: plot.Points, Color: i},
				plot.Line{X: l[1].X, Y: l[1].Y, Style: plot.DashedPoints, Color: i})
		}
		if k.event == "steady" || k.event == "storm" {
			traffic.Lines = append(traffic.Lines, plot.Line{Label: name, X: l[2].X, Y: l[2].Y, Style: plot.Points, Color: i})
		}
	}
	for name, s := range map[string]plot.Spec{"fleet-convergence": conv, "fleet-traffic": traffic} {
		if err := plot.SaveSpec(s, filepath.Join(dir, name+"."+ext)); err != nil {
			return err
		}
	}
	return nil
}
