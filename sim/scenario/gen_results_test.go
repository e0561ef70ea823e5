package scenario

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mrgw/mrgw/internal/report"
)

// TestGenerateCCResults regenerates docs/results at the `mrgw sim` defaults.
// It runs only with MRGW_GEN_RESULTS=<dir> (minutes of simulation);
// MRGW_GEN_ONLY=<scenario,...> limits it to some scenarios.
func TestGenerateCCResults(t *testing.T) {
	dir := os.Getenv("MRGW_GEN_RESULTS")
	if dir == "" {
		t.Skip("set MRGW_GEN_RESULTS=<dir> to regenerate the cc results")
	}
	names := ccResultsScenarios
	if only := os.Getenv("MRGW_GEN_ONLY"); only == "none" {
		names = nil // only rewrite cc.md from the rows
	} else if only != "" {
		// A comma-separated subset, so that scenarios can run in separate
		// processes (on several cores) or be redone alone.
		names = strings.Split(only, ",")
	}
	for _, name := range names {
		if Scenarios[name] == nil {
			t.Fatalf("unknown scenario %q", name)
		}
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
	if err := writeCCMarkdown(dir); err != nil {
		t.Fatal(err)
	}
}
