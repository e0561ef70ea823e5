package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/mrgw/mrgw/internal/report"
	"github.com/mrgw/mrgw/loadtest/peers"
)

// newPeersFairnessCmds are the peers scenarios in which the design should
// put mrgw ahead: flows at different round trips on one bottleneck, and a
// plane failing under a transfer.
func newPeersFairnessCmds() []*cobra.Command {
	return []*cobra.Command{
		newPeersCmd("rtt-fairness", "three flows at 10, 50 and 150 ms RTT on one bottleneck (0 and 1% loss): shares, Jain index and utilisation of mrgw, kernel TCP bbr and cubic, and QUIC",
			peers.RTTFairness, fairnessCols),
		newPeersCmd("plane-failure-peers", "one of 4 ECMP planes fails under a transfer: goodput before, in the first second after and sustained, for mrgw, 8-stream TCP bbr and cubic, and QUIC",
			peers.PlaneFailure, planeFailCols),
	}
}

var fairnessCols = []report.Column{
	report.ColSystem, report.ColLoss,
	{Title: "shares (in RTT order)", Value: func(r *report.Row) string {
		s := make([]string, len(r.Shares))
		for i, x := range r.Shares {
			s[i] = fmt.Sprintf("%.3f", x)
		}
		return strings.Join(s, " / ")
	}},
	report.ColJain,
	{Title: "utilisation", Value: func(r *report.Row) string { return fmt.Sprintf("%.3f", r.Fraction) }},
	{Title: "mrgw jain ×", Value: func(r *report.Row) string { return ratioOrDash(r.MRGWRatio) }},
	{Title: "cc", Value: func(r *report.Row) string { return r.CC }},
	{Title: "emulator", Value: func(r *report.Row) string { return r.Emulator }},
	{Title: "note", Value: func(r *report.Row) string { return r.Note }},
}

var planeFailCols = []report.Column{
	report.ColSystem,
	{Title: "streams", Value: func(r *report.Row) string { return intOrDash(r.Streams) }},
	{Title: "phase", Value: func(r *report.Row) string { return r.Variant }},
	report.ColGoodput,
	{Title: "of capacity", Value: func(r *report.Row) string { return fmt.Sprintf("%.3f", r.Fraction) }},
	{Title: "mrgw ×", Value: func(r *report.Row) string { return ratioOrDash(r.MRGWRatio) }},
	{Title: "lost", Value: func(r *report.Row) string {
		if r.MessagesLost == nil {
			return "-"
		}
		return fmt.Sprint(*r.MessagesLost)
	}},
	{Title: "emulator", Value: func(r *report.Row) string { return r.Emulator }},
	{Title: "note", Value: func(r *report.Row) string { return r.Note }},
}
