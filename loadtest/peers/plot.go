//go:build linux

package peers

import (
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"

	"github.com/mrgw/mrgw/internal/plot"
	"github.com/mrgw/mrgw/internal/report"
)

// Plot writes the plots of a scenario's rows and recorded runs (rec may be
// nil: the row plots only) into dir, in format ("svg" or "png"; "" is
// svg), and returns the files written. Names, <f> being the format:
//
//   - peers-loss-sweep-fraction-rtt-<rtt>.<f>: goodput over capacity
//     against loss, a line per system (and stream count) at one RTT;
//   - peers-planes-fraction-rtt-<rtt>.<f>: the same against the planes;
//   - peers-completion-time-rtt-<rtt>-loss-<loss>.<f>: p50 (solid,
//     circles) and p99 (dashed, triangles) completion time against
//     message size (log scale) per system;
//   - <scenario>-<NN>-<group>-goodput.<f>: goodput over time of the runs
//     of one group (a link setting: one line per system; a run of several
//     flows alone in its group: one line per flow), faults marked;
//   - <scenario>-<NN>-<group>-shares.<f>: for a run of several flows, the
//     flows' shares of what was delivered after the warm-up;
//   - <scenario>-<NN>-<group>-<run>-path-rtt.<f> and -path-cwnd.<f>: an
//     mrgw run's per-path smoothed RTT and window over time (the
//     production controller's runs, not the extra-cc rows'); <run> is
//     the run's label: "mrgw", or the pair in coexistence.
//
// NN numbers the groups of a scenario in the order they ran; the parts in
// angle brackets are slugs (fileSlug: "1 plane, rtt 50ms, loss 1%" is
// 1_plane_rtt_50ms_loss_1).
func Plot(dir, format string, rows []report.Row, rec *Recorder) ([]string, error) {
	format, err := plot.CheckFormat(format)
	if err != nil {
		return nil, err
	}
	var out []string
	save := func(spec plot.Spec, name string) error {
		f := filepath.Join(dir, name+"."+format)
		if err := plot.SaveSpec(spec, f); err != nil {
			return err
		}
		out = append(out, f)
		return nil
	}
	for _, spec := range rowPlots(rows) {
		if err := save(spec.Spec, spec.Name); err != nil {
			return out, err
		}
	}
	if rec == nil {
		return out, nil
	}
	type group struct {
		scenario, name string
		runs           []Series
	}
	var groups []*group
	for _, s := range rec.Runs() {
		var g *group
		for _, x := range groups {
			if x.scenario == s.Scenario && x.name == s.Group {
				g = x
			}
		}
		if g == nil {
			g = &group{scenario: s.Scenario, name: s.Group}
			groups = append(groups, g)
		}
		g.runs = append(g.runs, s)
	}
	index := map[string]int{}
	for _, g := range groups {
		base := fmt.Sprintf("%s-%02d-%s", g.scenario, index[g.scenario], fileSlug(g.name))
		index[g.scenario]++
		spec, shares := goodputPlot(g.scenario, g.name, g.runs)
		if len(spec.Lines) > 0 {
			if err := save(spec, base+"-goodput"); err != nil {
				return out, err
			}
		}
		if shares != nil {
			p, err := plot.Bars(fmt.Sprintf("%s: %s, shares after warm-up", g.scenario, g.name), "share of goodput",
				g.runs[0].Flows, shares, 0)
			if err != nil {
				return out, err
			}
			f := filepath.Join(dir, base+"-shares."+format)
			if err := plot.Save(p, plot.SmallW, plot.SmallH, f); err != nil {
				return out, err
			}
			out = append(out, f)
		}
		for _, s := range g.runs {
			if strings.Contains(s.Label, "extra cc") {
				continue // the production controller's runs only
			}
			for _, pp := range pathPlots(g.scenario, g.name, s) {
				if err := save(pp.Spec, base+"-"+fileSlug(s.Label)+"-"+pp.Name); err != nil {
					return out, err
				}
			}
		}
	}
	return out, nil
}

// rowPlots are the plots drawn from the rows alone: the sweeps and the
// completion times.
func rowPlots(rows []report.Row) []plot.Named {
	var out []plot.Named
	// Lines and plots are in order of first appearance.
	type key struct{ plot, line string }
	lines := map[key]int{}
	var plots []plot.Named
	plotIdx := map[string]int{}
	add := func(name, title, xl, yl string, logX bool, line string, style plot.Style, x, y float64) {
		i, ok := plotIdx[name]
		if !ok {
			i = len(plots)
			plotIdx[name] = i
			plots = append(plots, plot.Named{Name: name, Spec: plot.Spec{Title: title, XLabel: xl, YLabel: yl, LogX: logX, ZeroY: true}})
		}
		k := key{name, line}
		n, ok := lines[k]
		if !ok {
			n = len(plots[i].Spec.Lines)
			plots[i].Spec.Lines = append(plots[i].Spec.Lines, plot.Line{Label: line, Style: style, Color: n})
			lines[k] = n
		}
		l := &plots[i].Spec.Lines[n]
		l.X = append(l.X, x)
		l.Y = append(l.Y, y)
	}
	for _, r := range rows {
		rtt := report.FormatNumber(r.RTTms) + "ms"
		switch r.Scenario {
		case "peers-loss-sweep":
			add("peers-loss-sweep-fraction-rtt-"+fileSlug(rtt), "loss sweep, one plane, rtt "+rtt,
				"random loss (%)", "goodput / capacity", false, rowLabel(r), plot.Points, r.Loss*100, r.Fraction)
		case "peers-planes":
			add("peers-planes-fraction-rtt-"+fileSlug(rtt), "planes behind ECMP, rtt "+rtt,
				"planes", "goodput / capacity", false, rowLabel(r), plot.Points, float64(r.Planes), r.Fraction)
		case "peers-completion-time":
			if r.Messages == 0 || r.MessageBytes <= 0 {
				continue // nothing completed at this size
			}
			loss := report.FormatPercent(r.Loss)
			name := "peers-completion-time-rtt-" + fileSlug(rtt) + "-loss-" + fileSlug(loss)
			title := "message completion, rtt " + rtt + ", loss " + loss
			mib := float64(r.MessageBytes) / (1 << 20)
			add(name, title, "message (MiB)", "completion time (ms)", true, rowLabel(r)+" p50", plot.Points, mib, r.P50ms)
			add(name, title, "message (MiB)", "completion time (ms)", true, rowLabel(r)+" p99", plot.DashedPoints, mib, r.P99ms)
		}
	}
	// p50 and p99 of a system share its colour.
	for i := range plots {
		if len(plots[i].Spec.Lines) > 0 && plots[i].Spec.LogX {
			for k := range plots[i].Spec.Lines {
				plots[i].Spec.Lines[k].Color = k / 2
			}
		}
		for k := range plots[i].Spec.Lines {
			l := &plots[i].Spec.Lines[k]
			sortXY(l.X, l.Y)
		}
	}
	out = append(out, plots...)
	return out
}

// rowLabel names a row's system as in the tables: "tcp-cubic x8",
// "mrgw (fixed-1.5bdp)" for the extra controller's rows.
func rowLabel(r report.Row) string {
	l := r.System
	if r.Streams > 0 && (r.System == TCPCubic || r.System == TCPBBR) {
		l = fmt.Sprintf("%s x%d", r.System, r.Streams)
	}
	if r.Variant == "extra-cc" {
		l += " (" + r.CC + ")"
	}
	return l
}

// sortXY sorts the points of a line by x.
func sortXY(x, y []float64) {
	idx := make([]int, len(x))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int {
		switch {
		case x[a] < x[b]:
			return -1
		case x[a] > x[b]:
			return 1
		}
		return 0
	})
	sx, sy := slices.Clone(x), slices.Clone(y)
	for i, j := range idx {
		x[i], y[i] = sx[j], sy[j]
	}
}

// smoothWindow is the span goodput over time is averaged over: mrgw's and
// RoCEv2's receivers count whole 1 MiB messages, a 100 ms sample of them
// is a multiple of 84 Mbit/s.
const smoothWindow = 0.5

// smooth returns y averaged over the trailing window (seconds of x) at
// each point, each sample weighted by its interval.
func smooth(x, y []float64, window float64) []float64 {
	out := make([]float64, len(y))
	for i := range y {
		var sum, span float64
		for j := i; j >= 0; j-- {
			dt := x[j]
			if j > 0 {
				dt = x[j] - x[j-1]
			}
			if span > 0 && x[i]-x[j] >= window {
				break
			}
			sum += y[j] * dt
			span += dt
		}
		if span > 0 {
			out[i] = sum / span
		}
	}
	return out
}

// goodputPlot draws a group's goodput over time (averaged over the last
// smoothWindow); a lone run of several
// flows also gets its flows' shares after the warm-up (nil otherwise).
func goodputPlot(scenario, group string, runs []Series) (plot.Spec, []float64) {
	spec := plot.Spec{Title: scenario + ": " + group, XLabel: "time (s)", YLabel: "goodput (Mbit/s, 0.5 s mean)", ZeroY: true}
	var shares []float64
	alone := len(runs) == 1 && len(runs[0].Flows) > 1
	for i, s := range runs {
		if alone {
			bytes := make([]float64, len(s.Flows))
			for k, name := range s.Flows {
				l := plot.Line{Label: name, Color: k}
				for j, t := range s.T {
					l.X = append(l.X, t)
					l.Y = append(l.Y, s.Bps[j][k]/1e6)
					if t > s.Warmup && j > 0 { // what was delivered after the warm-up
						bytes[k] += s.Bps[j][k] * (t - s.T[j-1])
					}
				}
				l.Y = smooth(l.X, l.Y, smoothWindow)
				spec.Lines = append(spec.Lines, l)
			}
			shares = plot.Shares(bytes)
		} else {
			l := plot.Line{Label: s.Label, Color: i}
			for j, t := range s.T {
				var sum float64
				for _, b := range s.Bps[j] {
					sum += b
				}
				l.X = append(l.X, t)
				l.Y = append(l.Y, sum/1e6)
			}
			l.Y = smooth(l.X, l.Y, smoothWindow)
			spec.Lines = append(spec.Lines, l)
		}
		for _, f := range s.Faults {
			dup := false
			for _, m := range spec.Marks {
				dup = dup || (m.Label == f.Label && math.Abs(m.X-f.At) < 0.25)
			}
			if !dup {
				spec.Marks = append(spec.Marks, plot.Mark{X: f.At, Label: f.Label})
			}
		}
	}
	if shares != nil && slices.Max(shares) == 0 {
		shares = nil // nothing delivered after the warm-up: no shares to draw
	}
	return spec, shares
}

// pathPlots draws a run's per-path smoothed RTT and window over time.
func pathPlots(scenario, group string, s Series) []plot.Named {
	var marks []plot.Mark
	for _, f := range s.Faults {
		marks = append(marks, plot.Mark{X: f.At, Label: f.Label})
	}
	return plot.PathSpecs(fmt.Sprintf("%s: %s, %s, paths", scenario, group, s.Label), s.PathT, s.PathRTTms, s.PathCwnd, marks)
}

// fileSlug is report.Slug with runs of '_' folded and none at the ends.
func fileSlug(s string) string {
	s = report.Slug(s)
	for strings.Contains(s, "__") {
		s = strings.ReplaceAll(s, "__", "_")
	}
	return strings.Trim(s, "_")
}
