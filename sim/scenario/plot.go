package scenario

import (
	"fmt"
	"image/color"
	"os"
	"path/filepath"

	"github.com/mrgw/mrgw/internal/report"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
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

var palette = []color.Color{
	color.RGBA{31, 119, 180, 255}, color.RGBA{255, 127, 14, 255}, color.RGBA{44, 160, 44, 255},
	color.RGBA{214, 39, 40, 255}, color.RGBA{148, 103, 189, 255}, color.RGBA{140, 86, 75, 255},
	color.RGBA{227, 119, 194, 255}, color.RGBA{127, 127, 127, 255},
}

func timePlot(path, title, what string, r Result, series [][]float64) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "time (s)"
	p.Y.Label.Text = what + " (Gbit/s)"
	for f, ys := range series {
		pts := make(plotter.XYs, len(ys))
		for k, y := range ys {
			pts[k].X = r.Times[k].Seconds()
			pts[k].Y = y / 1e9
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			return err
		}
		l.Color = palette[f%len(palette)]
		p.Add(l)
		if len(series) <= 8 {
			p.Legend.Add(fmt.Sprintf("flow %d", f), l)
		}
	}
	p.Legend.Top = true
	return p.Save(7*vg.Inch, 3.5*vg.Inch, path)
}

func sharePlot(path, title string, perFlow []float64) error {
	p := plot.New()
	p.Title.Text = title
	p.Y.Label.Text = "share of goodput"
	total := 0.0
	for _, b := range perFlow {
		total += b
	}
	vals := make(plotter.Values, len(perFlow))
	names := make([]string, len(perFlow))
	for i, b := range perFlow {
		if total > 0 {
			vals[i] = b / total
		}
		names[i] = fmt.Sprintf("flow %d", i)
	}
	bars, err := plotter.NewBarChart(vals, vg.Points(30))
	if err != nil {
		return err
	}
	bars.Color = palette[0]
	p.Add(bars)
	p.NominalX(names...)
	return p.Save(5*vg.Inch, 3*vg.Inch, path)
}
