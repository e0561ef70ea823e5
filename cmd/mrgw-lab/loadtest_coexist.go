package main

import (
	"fmt"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/mrgw/mrgw/internal/report"
	"github.com/mrgw/mrgw/loadtest/peers"
)

// coexistCols: one line per flow, its pair first.
var coexistCols = []report.Column{
	{Title: "pair", Value: func(r *report.Row) string { return r.Variant }},
	report.ColSystem, report.ColCC, report.ColRTT, report.ColGoodput,
	{Title: "share", Value: func(r *report.Row) string { return fmt.Sprintf("%.3f", r.Share) }},
	{Title: "utilisation", Value: func(r *report.Row) string { return fmt.Sprintf("%.3f", r.Utilization) }},
	report.ColJain,
	{Title: "cubic vs baseline", Value: func(r *report.Row) string { return ratioOrDash(r.RelBaseline) }},
	{Title: "starved", Value: func(r *report.Row) string {
		if r.Starved == nil {
			return "-"
		}
		return map[bool]string{true: "STARVED", false: "no"}[*r.Starved]
	}},
	report.ColRetx,
	{Title: "note", Value: func(r *report.Row) string { return r.Note }},
}

func newCoexistCmd() *cobra.Command {
	cmd := newPeersCmd("coexistence",
		"mrgw sharing one emulated bottleneck with a kernel TCP cubic flow (and bbr+cubic, cubic+cubic as baselines): shares, utilisation, starvation",
		peers.Coexistence, coexistCols,
		func(f *pflag.FlagSet, o *peers.Options) {
			f.StringSliceVar(&o.Pairs, "pairs", nil,
				"pairs as flow+against of mrgw, tcp-cubic, tcp-bbr (default tcp-cubic+tcp-cubic,tcp-bbr+tcp-cubic,mrgw+tcp-cubic,mrgw+tcp-bbr)")
		})
	cmd.Long += fmt.Sprintf(`

Coexistence runs both flows of a pair through tunemu (one plane, one queue; mrgw's sockets are opened
inside the namespaces), at 50 ms RTT unless --rtt names others (each runs every pair), for --warmup (default %v) and
--duration (default %v). A flow is starved when its share of the pair's goodput is below %.3f
(a quarter of its fair half).`, peers.DefaultCoexistWarmup, peers.DefaultCoexistDuration, peers.StarvedShare)
	return cmd
}
