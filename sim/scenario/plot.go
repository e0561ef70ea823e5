package scenario

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/mrgw/mrgw/internal/plot"
	"github.com/mrgw/mrgw/internal/report"
	"gonum.org/v1/plot/vg"
)

// plot writes the runs' plots into o.PlotDir, if set: for every run, the
// goodput of each flow over time (and, for incast, each sender's pacing
// rate), and for runs of several flows a bar chart of their shares.
func (o *Options) plot(scenario string, runs []namedRun) error {
	if o.PlotDir == "" {
		return nil
	}
	if err := os.MkdirAll(o.PlotDir, 0o755); err != nil {
		return err
	}
	for i, r := range runs {
		if len(r.Res.Times) == 0 {
			continue
		}
		base := filepath.Join(o.PlotDir, fmt.Sprintf("%s-%02d-%s", scenario, i, report.Slug(r.Label)))
		series, what := r.Res.Goodput, "goodput"
		if scenario == "incast" {
			series, what = r.Res.Rate, "pacing rate"
		}
		if err := timePlot(base+".svg", fmt.Sprintf("%s: %s", scenario, r.Label), what, r.Res, series); err != nil {
			return err
		}
		if n := len(r.Res.PerFlowBps); n > 1 && n <= 8 {
			if err := sharePlot(base+"-shares.svg", fmt.Sprintf("%s: %s, shares", scenario, r.Label), r.Res.PerFlowBps); err != nil {
				return err
			}
		}
	}
	return nil
}

func timePlot(path, title, what string, r Result, series [][]float64) error {
	spec := plot.Spec{Title: title, XLabel: "time (s)", YLabel: what + " (Gbit/s)", MaxLegend: 8}
	for f, ys := range series {
		l := plot.Line{Label: fmt.Sprintf("flow %d", f), X: make([]float64, len(ys)), Y: make([]float64, len(ys)), Color: f}
		for k, y := range ys {
			l.X[k], l.Y[k] = r.Times[k].Seconds(), y/1e9
		}
		spec.Lines = append(spec.Lines, l)
	}
	return plot.SaveSpec(spec, path)
}

func sharePlot(path, title string, perFlow []float64) error {
	names := make([]string, len(perFlow))
	for i := range perFlow {
		names[i] = fmt.Sprintf("flow %d", i)
	}
	p, err := plot.Bars(title, "share of goodput", names, plot.Shares(perFlow), vg.Points(30))
	if err != nil {
		return err
	}
	return plot.Save(p, plot.SmallW, plot.SmallH, path)
}
