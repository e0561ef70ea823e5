//go:build linux

package apps

import (
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/mrgw/mrgw/internal/plot"
	"github.com/mrgw/mrgw/internal/report"
)

// Columns are the table's columns.
var Columns = []report.Column{
	{Title: "workload", Value: func(r *report.Row) string { return r.Workload }},
	report.ColSystem, report.ColRTT, report.ColLoss, report.ColCapacity, report.ColGoodput, report.ColFraction,
	{Title: "mrgw ×", Value: func(r *report.Row) string {
		if r.MRGWRatio == 0 {
			return "-"
		}
		return fmt.Sprintf("%.2f", r.MRGWRatio)
	}},
	{Title: "cpu cores", Value: func(r *report.Row) string { return fmt.Sprintf("%.2f", r.CPUCores) }},
	{Title: "emulator", Value: func(r *report.Row) string {
		if r.EmulatorOK != nil && !*r.EmulatorOK {
			return r.Emulator + " (not ok)"
		}
		return r.Emulator
	}},
	{Title: "note", Value: func(r *report.Row) string { return r.Note }},
}

// Target is one of the benchmark's targets at one point: an adapter's
// goodput over a reference system's, against the least ratio wanted.
type Target struct {
	Workload, Adapter, Against string
	RTTms, Loss                float64
	Want, Got                  float64
	// Missing: the row to compare against (or the adapter's) is not in
	// the run.
	Missing bool
}

// Met reports whether the target is met.
func (t Target) Met() bool { return !t.Missing && t.Got >= t.Want }

// targetLosses are the loss rates the targets hold at.
var targetLosses = []float64{0.01, 0.05}

// wants are the targets: through mrgw at least 0.9 of mrgw's own transport
// (the adapters cost at most 10%), 10 times kernel cubic and as much as
// kernel bbr, each with the same stream count.
var wants = []struct {
	against string
	want    float64
}{{MRGWTransport, 0.9}, {TCPCubic, 10}, {TCPBBR, 1}}

// Targets lists every target at the rows' points with 1% and 5% loss, for
// every adapter row.
func Targets(rows []report.Row) []Target {
	var out []Target
	for _, a := range rows {
		if !adapter(a.System) || !isTargetLoss(a.Loss) {
			continue
		}
		for _, w := range wants {
			t := Target{Workload: a.Workload, Adapter: a.System, Against: w.against, RTTms: a.RTTms, Loss: a.Loss, Want: w.want, Missing: true}
			for _, b := range rows {
				if b.System == w.against && sameGroup(a, b) && b.GoodputBps > 0 {
					t.Got, t.Missing = a.GoodputBps/b.GoodputBps, false
				}
			}
			out = append(out, t)
		}
	}
	return out
}

func isTargetLoss(l float64) bool {
	for _, t := range targetLosses {
		if l == t {
			return true
		}
	}
	return false
}

// WriteTargets writes the targets as a Markdown table, each met or not,
// and a count.
func WriteTargets(w io.Writer, ts []Target) error {
	var b strings.Builder
	b.WriteString("| workload | through mrgw | against | rtt | loss | wanted | got | met |\n|---|---|---|---|---|---|---|---|\n")
	met := 0
	for _, t := range ts {
		got, verdict := fmt.Sprintf("%.2f ×", t.Got), "no"
		switch {
		case t.Missing:
			got, verdict = "-", "not measured"
		case t.Met():
			verdict = "yes"
			met++
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | ≥ %s × | %s | %s |\n", t.Workload, t.Adapter, t.Against,
			report.FormatRTT(t.RTTms), report.FormatPercent(t.Loss), report.FormatNumber(t.Want), got, verdict)
	}
	fmt.Fprintf(&b, "\n%d of %d targets met.\n", met, len(ts))
	_, err := io.WriteString(w, b.String())
	return err
}

// Plot writes, for each workload and RTT, goodput over capacity against
// loss with a line per system: apps-<workload>-rtt-<rtt>.<format>. It
// returns the files written.
func Plot(dir, format string, rows []report.Row) ([]string, error) {
	format, err := plot.CheckFormat(format)
	if err != nil {
		return nil, err
	}
	var specs []plot.Named
	index := map[string]int{}
	for _, r := range rows {
		rtt := report.FormatNumber(r.RTTms) + "ms"
		name := "apps-" + slug(r.Workload) + "-rtt-" + slug(rtt)
		i, ok := index[name]
		if !ok {
			i = len(specs)
			index[name] = i
			specs = append(specs, plot.Named{Name: name, Spec: plot.Spec{
				Title:  fmt.Sprintf("%s, %d planes, rtt %s", r.Workload, r.Planes, rtt),
				XLabel: "random loss (%)", YLabel: "goodput / capacity", ZeroY: true}})
		}
		s := &specs[i].Spec
		k := -1
		for j := range s.Lines {
			if s.Lines[j].Label == r.System {
				k = j
			}
		}
		if k < 0 {
			k = len(s.Lines)
			s.Lines = append(s.Lines, plot.Line{Label: r.System, Style: plot.Points, Color: systemColor(r.System)})
		}
		s.Lines[k].X = append(s.Lines[k].X, r.Loss*100)
		s.Lines[k].Y = append(s.Lines[k].Y, r.Fraction)
	}
	var out []string
	for _, n := range specs {
		f := filepath.Join(dir, n.Name+"."+format)
		if err := plot.SaveSpec(n.Spec, f); err != nil {
			return out, err
		}
		out = append(out, f)
	}
	return out, nil
}

// systemColor keeps a system's colour the same in every plot.
func systemColor(s string) int {
	for i, n := range AllSystems {
		if n == s {
			return i
		}
	}
	return len(AllSystems)
}

// slug is report.Slug with runs of '_' folded and none at the ends.
func slug(s string) string {
	s = report.Slug(s)
	for strings.Contains(s, "__") {
		s = strings.ReplaceAll(s, "__", "_")
	}
	return strings.Trim(s, "_")
}
