package scenario

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/mrgw/mrgw/internal/report"
)

// TestGenerateCCResults regenerates docs/results at the `mrgw sim` defaults.
// It runs only with MRGW_GEN_RESULTS=<dir> (minutes of simulation).
func TestGenerateCCResults(t *testing.T) {
	dir := os.Getenv("MRGW_GEN_RESULTS")
	if dir == "" {
		t.Skip("set MRGW_GEN_RESULTS=<dir> to regenerate the cc results")
	}
	for _, name := range []string{"utilization", "rtt-fairness", "convergence", "incast", "multipath-coupling", "loss-sweep-cc"} {
		rows, err := Scenarios[name](Options{Seed: 1, PlotDir: dir, Progress: func(i, n int, what string) { fmt.Fprintf(os.Stderr, "[%d/%d] %s\n", i, n, what) }})
		if err != nil {
			t.Fatal(err)
		}
		f, err := os.Create(filepath.Join(dir, name+".jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		if err := report.WriteJSON(f, rows); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
}
