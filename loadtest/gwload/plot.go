//go:build linux

package gwload

import (
	"fmt"
	"image/color"
	"os"
	"path/filepath"

	"github.com/mrgw/mrgw/internal/report"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

var palette = []color.Color{
	color.RGBA{31, 119, 180, 255}, color.RGBA{255, 127, 14, 255}, color.RGBA{44, 160, 44, 255},
	color.RGBA{214, 39, 40, 255}, color.RGBA{148, 103, 189, 255}, color.RGBA{140, 86, 75, 255},
	color.RGBA{227, 119, 194, 255}, color.RGBA{127, 127, 127, 255},
}

// Plot writes the series' plots into dir, named after prefix, in format
// ("svg" or "png"; default svg): goodput over time with the faults marked,
// the watched WAN connection's per-path RTT and window over time, the
// flows' shares (up to 64 flows) and, for synchronized workloads, the step
// times against the ideal. It returns the files written.
func Plot(dir, prefix, format string, s *Series) ([]string, error) {
	if format == "" {
		format = "svg"
	}
	if format != "svg" && format != "png" {
		return nil, fmt.Errorf("gwload: plot format %q (want svg or png)", format)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	base := filepath.Join(dir, report.Slug(prefix))
	var out []string
	save := func(p *plot.Plot, name string, w, h vg.Length) error {
		f := base + "-" + name + "." + format
		if err := p.Save(w, h, f); err != nil {
			return err
		}
		out = append(out, f)
		return nil
	}
	title := s.Scenario + ": " + s.Variant
	if len(s.T) > 0 {
		p := plot.New()
		p.Title.Text = title
		p.X.Label.Text = "time (s)"
		p.Y.Label.Text = "goodput (Mbit/s)"
		pts := make(plotter.XYs, len(s.T))
		top := 0.0
		for i := range s.T {
			pts[i].X, pts[i].Y = s.T[i], s.Goodput[i]/1e6
			top = max(top, pts[i].Y)
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			return out, err
		}
		l.Color = palette[0]
		p.Add(l)
		p.Legend.Add("delivered to hosts", l)
		for i, m := range s.Faults {
			fl, err := plotter.NewLine(plotter.XYs{{X: m.At, Y: 0}, {X: m.At, Y: top * 1.05}})
			if err != nil {
				return out, err
			}
			fl.Color = palette[3]
			fl.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
			p.Add(fl)
			if i < 4 {
				p.Legend.Add(m.Label, fl)
			}
		}
		p.Legend.Top = true
		if err := save(p, "goodput", 7*vg.Inch, 3.5*vg.Inch); err != nil {
			return out, err
		}
	}
	for _, pp := range []struct {
		name, label string
		data        [][]float64
		scale       float64
	}{{"path-rtt", "smoothed RTT (ms)", s.PathRTT, 1}, {"path-cwnd", "window (KiB)", s.PathCwnd, 1.0 / 1024}} {
		cols := 0
		for _, row := range pp.data {
			cols = max(cols, len(row))
		}
		if cols == 0 || len(pp.data) != len(s.T) {
			continue
		}
		p := plot.New()
		p.Title.Text = fmt.Sprintf("%s, paths of %s", title, s.Watched)
		p.X.Label.Text = "time (s)"
		p.Y.Label.Text = pp.label
		for c := range cols {
			var pts plotter.XYs
			for i, row := range pp.data {
				if c < len(row) && row[c] > 0 {
					pts = append(pts, plotter.XY{X: s.T[i], Y: row[c] * pp.scale})
				}
			}
			if len(pts) == 0 {
				continue
			}
			sc, err := plotter.NewScatter(pts)
			if err != nil {
				return out, err
			}
			sc.GlyphStyle.Radius = vg.Points(1.2)
			sc.GlyphStyle.Shape = draw.CircleGlyph{}
			sc.GlyphStyle.Color = palette[c%len(palette)]
			p.Add(sc)
		}
		if err := save(p, pp.name, 7*vg.Inch, 3.5*vg.Inch); err != nil {
			return out, err
		}
	}
	if n := len(s.FlowBytes); n > 1 && n <= 64 {
		var tot float64
		for _, b := range s.FlowBytes {
			tot += b
		}
		vals := make(plotter.Values, n)
		for i, b := range s.FlowBytes {
			if tot > 0 {
				vals[i] = b / tot
			}
		}
		p := plot.New()
		p.Title.Text = title + ", shares"
		p.X.Label.Text = "flow"
		p.Y.Label.Text = "share of bytes delivered"
		bars, err := plotter.NewBarChart(vals, vg.Points(max(2, 240/float64(n))))
		if err != nil {
			return out, err
		}
		bars.Color = palette[0]
		bars.LineStyle.Width = 0
		p.Add(bars)
		if err := save(p, "shares", 6*vg.Inch, 3*vg.Inch); err != nil {
			return out, err
		}
	}
	if len(s.StepMs) > 0 {
		// Step times against the ideal: which steps were slow (the first,
		// with the connections' windows still small, or one hit by a
		// stall), not only their mean.
		p := plot.New()
		p.Title.Text = title + ", step times"
		p.X.Label.Text = "step"
		p.Y.Label.Text = "ms"
		pts := make(plotter.XYs, len(s.StepMs))
		for i, v := range s.StepMs {
			pts[i].X, pts[i].Y = float64(i+1), v
		}
		sc, err := plotter.NewScatter(pts)
		if err != nil {
			return out, err
		}
		sc.Color = palette[0]
		p.Add(sc)
		p.Legend.Add("slowest transfer", sc)
		if s.IdealStepMs > 0 {
			ideal, err := plotter.NewLine(plotter.XYs{{X: 0.5, Y: s.IdealStepMs}, {X: float64(len(s.StepMs)) + 0.5, Y: s.IdealStepMs}})
			if err != nil {
				return out, err
			}
			ideal.Color = palette[3]
			ideal.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
			p.Add(ideal)
			p.Legend.Add("ideal (capacity)", ideal)
		}
		p.Y.Min = 0
		if err := save(p, "steps", 5*vg.Inch, 3*vg.Inch); err != nil {
			return out, err
		}
	}
	return out, nil
}
