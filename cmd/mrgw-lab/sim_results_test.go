package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mrgw/mrgw/sim/scenario"
)

// TestSimResults: with --results DIR, a scenario's rows land in
// DIR/SCENARIO.jsonl, and once DIR holds the rows of every scenario of the
// congestion-control page, DIR/cc.md is rebuilt from them (with no scenario
// named, only the page).
func TestSimResults(t *testing.T) {
	dir := t.TempDir()
	if _, _, err := run(t, "sim", "--results", dir, "--scale", "0.1", "--quiet", "incast"); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "incast.jsonl"))
	if err != nil || !strings.Contains(string(b), `"scenario":"incast"`) {
		t.Fatalf("incast.jsonl: %v\n%s", err, b)
	}
	if _, err := os.Stat(filepath.Join(dir, "cc.md")); err == nil {
		t.Fatal("cc.md written without the rows of every scenario of the page")
	}
	for _, n := range scenario.CCResultsScenarios {
		if n == "incast" {
			continue
		}
		rows, err := os.ReadFile(filepath.Join("..", "..", "docs", "results", n+".jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, n+".jsonl"), rows, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := run(t, "sim", "--results", dir); err != nil {
		t.Fatal(err)
	}
	page, err := os.ReadFile(filepath.Join(dir, "cc.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range scenario.CCResultsScenarios {
		if !strings.Contains(string(page), "\n## "+n+"\n") {
			t.Errorf("cc.md has no section %s", n)
		}
	}
}
