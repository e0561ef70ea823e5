package main

import (
	"testing"

	"github.com/mrgw/mrgw/internal/report"
)

// A completion-time row whose messages did not complete prints no
// quantiles: 0.0 ms would read as instant completion.
func TestCompletionColumnsWithoutMessages(t *testing.T) {
	cell := func(r *report.Row, title string) string {
		for _, c := range completionCols {
			if c.Title == title {
				return c.Value(r)
			}
		}
		t.Fatalf("no column %q", title)
		return ""
	}
	none := &report.Row{Incomplete: 4}
	if p50, p99 := cell(none, "p50"), cell(none, "p99"); p50 != "-" || p99 != "-" {
		t.Errorf("no message completed: p50 %q, p99 %q, want -", p50, p99)
	}
	done := &report.Row{Messages: 20, P50ms: 12.34, P99ms: 56.78}
	if p50, p99 := cell(done, "p50"), cell(done, "p99"); p50 != "12.3 ms" || p99 != "56.8 ms" {
		t.Errorf("20 messages: p50 %q, p99 %q", p50, p99)
	}
}
