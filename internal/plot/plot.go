// Package plot is the drawing code the scenario reports share: one palette,
// a line plot (lines, lines with point markers or scattered points, plus
// vertical fault markers) and a bar chart of shares, saved as SVG or PNG.
// It wraps gonum.org/v1/plot so that mrgw-lab sim and mrgw-lab loadtest draw their
// figures the same way; what to plot stays with each scenario.
package plot

import (
	"errors"
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"strings"

	gplot "gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Palette is the colour cycle of every plot (matplotlib's tab10 without
// olive and cyan).
var Palette = []color.Color{
	color.RGBA{31, 119, 180, 255}, color.RGBA{255, 127, 14, 255}, color.RGBA{44, 160, 44, 255},
	color.RGBA{214, 39, 40, 255}, color.RGBA{148, 103, 189, 255}, color.RGBA{140, 86, 75, 255},
	color.RGBA{227, 119, 194, 255}, color.RGBA{127, 127, 127, 255},
}

// Color is the i-th colour of Palette, cycling.
func Color(i int) color.Color { return Palette[((i%len(Palette))+len(Palette))%len(Palette)] }

// Formats: the file formats Save writes.
const (
	SVG = "svg"
	PNG = "png"
)

// CheckFormat returns format ("" means SVG) or an error if it is neither
// svg nor png.
func CheckFormat(format string) (string, error) {
	switch format {
	case "", SVG:
		return SVG, nil
	case PNG:
		return PNG, nil
	}
	return "", fmt.Errorf("plot: format %q (want svg or png)", format)
}

// Style is how a Line is drawn.
type Style int

const (
	// Solid is a plain line.
	Solid Style = iota
	// Dashed is a dashed line.
	Dashed
	// Points is a line with a glyph at every point (few points: sweeps).
	Points
	// Scatter is points only (sampled states such as per-path RTT).
	Scatter
	// DashedPoints is a dashed line with a triangle at every point (a
	// second statistic of a Points line, such as p99 beside p50).
	DashedPoints
)

// Line is one series of a line plot.
type Line struct {
	// Label is its legend entry ("" for none).
	Label string
	X, Y  []float64
	Style Style
	// Color indexes Palette (negative: the line's position in the plot).
	Color int
}

// Mark is a vertical dashed black line at X, such as a fault's time.
type Mark struct {
	X     float64
	Label string
}

// Spec is a line plot.
type Spec struct {
	Title, XLabel, YLabel string
	Lines                 []Line
	Marks                 []Mark
	// LogX draws the x axis on a log scale (x values must be > 0).
	LogX bool
	// ZeroY starts the y axis at 0 (rates, fractions).
	ZeroY bool
	// MaxLegend is the most legend entries shown (default 12): beyond it
	// the legend is left out, as it would hide the plot.
	MaxLegend int
}

// Plot builds the gonum plot of s. Lines with no points are left out.
func (s Spec) Plot() (*gplot.Plot, error) {
	p := gplot.New()
	p.Title.Text = s.Title
	p.X.Label.Text = s.XLabel
	p.Y.Label.Text = s.YLabel
	if s.LogX {
		p.X.Scale = gplot.LogScale{}
		p.X.Tick.Marker = gplot.LogTicks{Prec: -1}
	}
	maxLegend := s.MaxLegend
	if maxLegend <= 0 {
		maxLegend = 12
	}
	labelled := 0
	for _, l := range s.Lines {
		if l.Label != "" {
			labelled++
		}
	}
	labelled += len(s.Marks)
	legend := labelled <= maxLegend
	top := math.Inf(-1)
	bottom := math.Inf(1)
	for i, l := range s.Lines {
		if len(l.X) != len(l.Y) {
			return nil, fmt.Errorf("plot: line %q has %d x and %d y values", l.Label, len(l.X), len(l.Y))
		}
		if len(l.X) == 0 {
			continue
		}
		pts := make(plotter.XYs, len(l.X))
		for k := range l.X {
			if s.LogX && !(l.X[k] > 0) {
				return nil, fmt.Errorf("plot: line %q: x = %v on a log scale", l.Label, l.X[k])
			}
			pts[k].X, pts[k].Y = l.X[k], l.Y[k]
			top, bottom = max(top, l.Y[k]), min(bottom, l.Y[k])
		}
		c := l.Color
		if c < 0 {
			c = i
		}
		var thumb gplot.Thumbnailer
		switch l.Style {
		case Scatter:
			sc, err := plotter.NewScatter(pts)
			if err != nil {
				return nil, err
			}
			sc.GlyphStyle.Radius = vg.Points(1.2)
			sc.GlyphStyle.Shape = draw.CircleGlyph{}
			sc.GlyphStyle.Color = Color(c)
			p.Add(sc)
			thumb = sc
		case Points, DashedPoints:
			ln, sc, err := plotter.NewLinePoints(pts)
			if err != nil {
				return nil, err
			}
			ln.Color = Color(c)
			sc.GlyphStyle.Color = Color(c)
			sc.GlyphStyle.Radius = vg.Points(2)
			sc.GlyphStyle.Shape = draw.CircleGlyph{}
			if l.Style == DashedPoints {
				ln.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
				sc.GlyphStyle.Radius = vg.Points(2.5)
				sc.GlyphStyle.Shape = draw.TriangleGlyph{}
			}
			p.Add(ln, sc)
			thumb = ln
		default:
			ln, err := plotter.NewLine(pts)
			if err != nil {
				return nil, err
			}
			ln.Color = Color(c)
			if l.Style == Dashed {
				ln.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
			}
			p.Add(ln)
			thumb = ln
		}
		if legend && l.Label != "" {
			p.Legend.Add(l.Label, thumb)
		}
	}
	if len(s.Marks) > 0 {
		if math.IsInf(top, 0) {
			top, bottom = 1, 0
		}
		bottom = min(bottom, 0)
		for _, m := range s.Marks {
			ml, err := plotter.NewLine(plotter.XYs{{X: m.X, Y: bottom}, {X: m.X, Y: top * 1.05}})
			if err != nil {
				return nil, err
			}
			ml.Color = color.Black
			ml.Width = vg.Points(1.5)
			ml.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
			p.Add(ml)
			if legend && m.Label != "" {
				p.Legend.Add(m.Label, ml)
			}
		}
	}
	if s.ZeroY {
		p.Y.Min = min(p.Y.Min, 0)
	}
	if s.LogX && p.X.Min >= p.X.Max && p.X.Min > 0 {
		// One x value: a log axis needs a range (gonum panics without).
		p.X.Min, p.X.Max = p.X.Min/2, p.X.Max*2
	}
	p.Legend.Top = true
	return p, nil
}

// Bars is a bar chart of vals, one bar per name (as many names as values),
// each width wide (0: fitted to 240 points in all, at least 2).
func Bars(title, yLabel string, names []string, vals []float64, width vg.Length) (*gplot.Plot, error) {
	if len(names) != len(vals) {
		return nil, fmt.Errorf("plot: %d names for %d bars", len(names), len(vals))
	}
	if len(vals) == 0 {
		return nil, errors.New("plot: no bars")
	}
	if width <= 0 {
		width = vg.Points(max(2, 240/float64(len(vals))))
	}
	p := gplot.New()
	p.Title.Text = title
	p.Y.Label.Text = yLabel
	bars, err := plotter.NewBarChart(plotter.Values(vals), width)
	if err != nil {
		return nil, err
	}
	bars.Color = Palette[0]
	p.Add(bars)
	p.NominalX(names...)
	return p, nil
}

// Shares returns each value's part of their sum (all 0 if the sum is not
// positive).
func Shares(vals []float64) []float64 {
	var tot float64
	for _, v := range vals {
		tot += v
	}
	out := make([]float64, len(vals))
	if tot > 0 {
		for i, v := range vals {
			out[i] = v / tot
		}
	}
	return out
}

// Standard sizes.
var (
	WideW, WideH   = 7 * vg.Inch, 3.5 * vg.Inch
	SmallW, SmallH = 5 * vg.Inch, 3 * vg.Inch
)

// Save writes p to path, in the format its extension names (.svg or
// .png), creating the directory.
func Save(p *gplot.Plot, w, h vg.Length, path string) (err error) {
	// gonum panics on some degenerate axes: an error, not a crash.
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("plot: %s: %v", path, r)
		}
	}()
	if ext := strings.TrimPrefix(filepath.Ext(path), "."); ext != SVG && ext != PNG {
		return fmt.Errorf("plot: %s: want a .svg or .png file", path)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return p.Save(w, h, path)
}

// SaveSpec builds s and saves it at the wide size.
func SaveSpec(s Spec, path string) error {
	p, err := s.Plot()
	if err != nil {
		return err
	}
	return Save(p, WideW, WideH, path)
}

// Named is a Spec with the short name its file is saved under.
type Named struct {
	Name string
	Spec Spec
}

// PathSpecs draws a connection's per-path samples over time: "path-rtt"
// (smoothed RTT in ms) and "path-cwnd" (window in bytes, drawn in KiB), one
// scatter per path, with marks (faults) drawn across. t are the sample
// times; rttMs[i] and cwnd[i] hold each path's value at t[i], 0 where the
// path had none. A series whose rows do not match t, or that has no path,
// is left out.
func PathSpecs(title string, t []float64, rttMs, cwnd [][]float64, marks []Mark) []Named {
	var out []Named
	for _, pp := range []struct {
		name, label string
		data        [][]float64
		scale       float64
	}{{"path-rtt", "smoothed RTT (ms)", rttMs, 1}, {"path-cwnd", "window (KiB)", cwnd, 1.0 / 1024}} {
		cols := 0
		for _, row := range pp.data {
			cols = max(cols, len(row))
		}
		if cols == 0 || len(pp.data) != len(t) {
			continue
		}
		spec := Spec{Title: title, XLabel: "time (s)", YLabel: pp.label, ZeroY: true, Marks: marks}
		for c := range cols {
			l := Line{Label: fmt.Sprintf("path %d", c), Style: Scatter, Color: c}
			for i, row := range pp.data {
				if c < len(row) && row[c] > 0 {
					l.X = append(l.X, t[i])
					l.Y = append(l.Y, row[c]*pp.scale)
				}
			}
			spec.Lines = append(spec.Lines, l)
		}
		out = append(out, Named{pp.name, spec})
	}
	return out
}
