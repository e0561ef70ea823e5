//go:build linux

package gwload

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// A synthetic series (no gateways) gives every documented plot, non-empty,
// in the format asked for; a bad format is refused before anything is written.
func TestPlotWritesEveryPlot(t *testing.T) {
	s := &Series{Scenario: "incast", Variant: "8 hosts",
		T: []float64{0.1, 0.2, 0.3}, Goodput: []float64{1e6, 2e6, 1.5e6},
		Faults:    []Mark{{At: 0.15, Label: "plane 1 down"}},
		Watched:   "w1→e1",
		PathRTT:   [][]float64{{40, 41}, {42, 0}, {43, 44}},
		PathCwnd:  [][]float64{{4096, 8192}, {4096, 0}, {8192, 8192}},
		FlowBytes: []float64{10, 30}, StepMs: []float64{120, 80}, IdealStepMs: 50}
	for _, format := range []string{"svg", "png"} {
		dir := t.TempDir()
		files, err := Plot(dir, "Incast 8", format, s)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, f := range files {
			st, err := os.Stat(f)
			if err != nil || st.Size() == 0 {
				t.Fatalf("%s: %v (size %d)", f, err, st.Size())
			}
			names = append(names, filepath.Base(f))
		}
		for _, want := range []string{"goodput", "path-rtt", "path-cwnd", "shares", "steps"} {
			if !slices.Contains(names, "incast_8-"+want+"."+format) {
				t.Errorf("%s: no %s plot in %v", format, want, names)
			}
		}
	}
	if _, err := Plot(t.TempDir(), "x", "gif", s); err == nil {
		t.Fatal("gif accepted")
	}
}
