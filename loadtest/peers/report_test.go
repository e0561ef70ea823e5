//go:build linux

package peers

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/mrgw/mrgw/internal/report"
)

// TestReport runs a full scenario and prints its table and JSON rows, for
// docs/results/peers.md (until `mrgw loadtest` wires the scenarios in):
//
//	MRGW_PEERS_REPORT=loss-sweep MRGW_PEERS_RTTS=50ms go test -count=1 -timeout 60m -run TestReport -v ./loadtest/peers
//	MRGW_PEERS_REPORT=planes go test ...    MRGW_PEERS_REPORT=completion-time go test ...
func TestReport(t *testing.T) {
	which := os.Getenv("MRGW_PEERS_REPORT")
	if which == "" {
		t.Skip("set MRGW_PEERS_REPORT to loss-sweep, planes or completion-time")
	}
	var o Options
	if v := os.Getenv("MRGW_PEERS_RTTS"); v != "" {
		for _, f := range strings.Split(v, ",") {
			d, err := time.ParseDuration(f)
			if err != nil {
				t.Fatal(err)
			}
			o.RTTs = append(o.RTTs, d)
		}
	}
	if v := os.Getenv("MRGW_PEERS_SYSTEMS"); v != "" {
		o.Systems = strings.Split(v, ",")
	}
	o.Progress = func(i, n int, what string) { fmt.Fprintf(os.Stderr, "[%d/%d] %s\n", i, n, what) }
	scen := map[string]func(context.Context, Options) ([]report.Row, error){
		"loss-sweep": LossSweep, "planes": Planes, "completion-time": CompletionTime,
	}[which]
	if scen == nil {
		t.Fatalf("unknown scenario %q", which)
	}
	t0 := time.Now()
	rows, err := scen(context.Background(), o)
	if err != nil {
		t.Log(err)
	}
	cols := []report.Column{report.ColSystem,
		{Title: "streams", Value: func(r *report.Row) string { return fmt.Sprint(r.Streams) }},
		report.ColCC, report.ColPlanes, report.ColRTT, report.ColLoss, report.ColGoodput, report.ColFraction,
		{Title: "mrgw ratio", Value: func(r *report.Row) string { return fmt.Sprintf("%.2f", r.MRGWRatio) }},
		{Title: "emulator", Value: func(r *report.Row) string { return r.Emulator }},
		{Title: "note", Value: func(r *report.Row) string { return r.Note }}}
	if which == "planes" {
		cols = append(cols[:9], append([]report.Column{report.ColEff}, cols[9:]...)...)
	}
	if which == "completion-time" {
		cols = []report.Column{report.ColSystem, report.ColCC,
			{Title: "size", Value: func(r *report.Row) string { return fmt.Sprintf("%d MiB", r.MessageBytes>>20) }},
			{Title: "n", Value: func(r *report.Row) string { return fmt.Sprint(r.Messages) }},
			{Title: "p50", Value: func(r *report.Row) string { return fmt.Sprintf("%.0f ms", r.P50ms) }},
			{Title: "p99", Value: func(r *report.Row) string { return fmt.Sprintf("%.0f ms", r.P99ms) }},
			{Title: "p50/mrgw", Value: func(r *report.Row) string { return fmt.Sprintf("%.2f", r.P50Ratio) }},
			{Title: "p99/mrgw", Value: func(r *report.Row) string { return fmt.Sprintf("%.2f", r.P99Ratio) }},
			{Title: "incomplete", Value: func(r *report.Row) string { return fmt.Sprint(r.Incomplete) }},
			{Title: "emulator", Value: func(r *report.Row) string { return r.Emulator }},
			{Title: "note", Value: func(r *report.Row) string { return r.Note }}}
	}
	var b strings.Builder
	report.WriteTable(&b, rows, cols...)
	b.WriteString("\n")
	report.WriteJSON(&b, rows)
	fmt.Printf("%s\nscenario %s took %v\n", b.String(), which, time.Since(t0).Round(time.Second))
}
