//go:build linux

package gwload

import (
	"fmt"
	"path/filepath"
	"strconv"

	"github.com/mrgw/mrgw/internal/plot"
	"github.com/mrgw/mrgw/internal/report"
)

// Plot writes the series' plots into dir, named after prefix, in format
// ("svg" or "png"; default svg): goodput over time with the faults marked,
// the watched WAN connection's per-path RTT and window over time, the
// flows' shares (up to 64 flows) and, for stepped workloads, each step's
// time against the ideal. It returns the files written.
func Plot(dir, prefix, format string, s *Series) ([]string, error) {
	format, err := plot.CheckFormat(format)
	if err != nil {
		return nil, fmt.Errorf("gwload: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	base := filepath.Join(dir, report.Slug(prefix))
	var out []string
	save := func(spec plot.Spec, name string) error {
		f := base + "-" + name + "." + format
		if err := plot.SaveSpec(spec, f); err != nil {
			return err
		}
		out = append(out, f)
		return nil
	}
	title := s.Scenario + ": " + s.Variant
	if len(s.T) > 0 {
		mbps := make([]float64, len(s.T))
		for i, g := range s.Goodput {
			mbps[i] = g / 1e6
		}
		spec := plot.Spec{Title: title, XLabel: "time (s)", YLabel: "goodput (Mbit/s)", ZeroY: true,
			Lines: []plot.Line{{Label: "delivered to hosts", X: s.T, Y: mbps}}}
		for i, m := range s.Faults {
			label := m.Label
			if i >= 4 {
				label = "" // the legend would hide the plot
			}
			spec.Marks = append(spec.Marks, plot.Mark{X: m.At, Label: label})
		}
		if err := save(spec, "goodput"); err != nil {
			return out, err
		}
	}
	for _, pp := range plot.PathSpecs(fmt.Sprintf("%s, paths of %s", title, s.Watched), s.T, s.PathRTT, s.PathCwnd, nil) {
		if err := save(pp.Spec, pp.Name); err != nil {
			return out, err
		}
	}
	if n := len(s.FlowBytes); n > 1 && n <= 64 {
		names := make([]string, n)
		for i := range names {
			names[i] = strconv.Itoa(i + 1)
		}
		p, err := plot.Bars(title+", shares", "share of bytes delivered", names, plot.Shares(s.FlowBytes), 0)
		if err != nil {
			return out, err
		}
		p.X.Label.Text = "flow"
		f := base + "-shares." + format
		if err := plot.Save(p, plot.SmallW+plot.SmallW/5, plot.SmallH, f); err != nil {
			return out, err
		}
		out = append(out, f)
	}
	if len(s.StepMs) > 0 {
		// Step times against the ideal: which steps were slow (the first,
		// with the connections' windows still small, or one hit by a
		// stall), not only their mean.
		steps := make([]float64, len(s.StepMs))
		for i := range steps {
			steps[i] = float64(i + 1)
		}
		spec := plot.Spec{Title: title + ", step times", XLabel: "step", YLabel: "ms", ZeroY: true,
			Lines: []plot.Line{{Label: "slowest transfer", X: steps, Y: s.StepMs, Style: plot.Scatter}}}
		if s.IdealStepMs > 0 {
			spec.Lines = append(spec.Lines, plot.Line{Label: "ideal (capacity)", Style: plot.Dashed, Color: 3,
				X: []float64{0.5, float64(len(s.StepMs)) + 0.5}, Y: []float64{s.IdealStepMs, s.IdealStepMs}})
		}
		if err := save(spec, "steps"); err != nil {
			return out, err
		}
	}
	return out, nil
}
