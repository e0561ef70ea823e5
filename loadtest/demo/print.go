//go:build linux

package demo

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/mrgw/mrgw/internal/report"
)

// Print writes the report for people: the per-plane table (rates are per
// second over the run, counts are totals), then the end-to-end figures.
func (r *Report) Print(out io.Writer) {
	fmt.Fprintf(out, "\nresult after %.1fs (RTT %.0f ms configured; %.1f ms smoothed on the WAN paths, queueing in the emulator and gateways included; loss %s per plane)\n\n",
		r.Duration, r.RTTms, r.MeasuredRTTms, report.FormatPercent(r.Loss))
	tw := tabwriter.NewWriter(out, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "plane\twire goodput (both ways, per second)\tdatagrams (total)\tlost at random (total)\tqueue drops (total)\tlost while down (total)\tstate at end\t")
	for _, p := range r.PlaneStats {
		state := "up"
		if p.Down {
			state = "FAILED"
		}
		fmt.Fprintf(tw, "%d\t%.1f Mbit/s\t%d\t%d\t%d\t%d\t%s\t\n", p.Plane, p.GoodputMbit, p.Datagrams, p.LossDrops, p.QueueDrops, p.DownDrops, state)
	}
	tw.Flush()
	fmt.Fprintf(out, "\nhost goodput (end to end, both directions): %.1f Mbit/s\n", r.GoodputMbit)
	fmt.Fprintf(out, "messages completed end to end:              %d (%.1f MiB)\n", r.Messages, float64(r.Bytes)/(1<<20))
	fmt.Fprintf(out, "loss recovered: %d datagrams lost on the wire, %d retransmitted by the gateways' WAN connections\n", r.WireLost, r.Retransmits)
	fmt.Fprintf(out, "duplicates dropped at the destinations: %d; flows re-opened: %d\n", r.Duplicates, r.Reopens)
	if r.FailedPlane >= 0 {
		if r.RecoveryRTTs < 0 {
			fmt.Fprintf(out, "plane %d failed at %.1fs; goodput did not come back to (P-1)/P of its level before the failure within the run\n", r.FailedPlane, r.FailedAt)
		} else {
			fmt.Fprintf(out, "plane %d failed at %.1fs; goodput (4-RTT window) back to (P-1)/P of its level in the second before the failure after %.0f ms = %.1f RTT\n",
				r.FailedPlane, r.FailedAt, r.RecoverySeconds*1000, r.RecoveryRTTs)
		}
	}
	for _, g := range r.Gateways {
		fmt.Fprintf(out, "  %s: peers %s, %d messages completed (outbound), %d flow resets\n", g.Name, g.Peers, g.Completed, g.Resets)
	}
	if len(r.Errors) == 0 {
		fmt.Fprintln(out, "errors: none")
	} else {
		fmt.Fprintf(out, "errors (%d):\n", len(r.Errors))
		for _, e := range r.Errors {
			fmt.Fprintf(out, "  - %s\n", e)
		}
	}
	r.printVerdict(out)
}

// printVerdict writes each figure against its expected range, the
// machine's load, and the verdict.
func (r *Report) printVerdict(out io.Writer) {
	if len(r.Checks) == 0 {
		return
	}
	fmt.Fprintln(out, "\nexpected ranges (quiet machines):")
	missed := 0
	for _, c := range r.Checks {
		met := "met"
		if !c.Met {
			met = "NOT MET"
			missed++
		}
		rng := fmt.Sprintf("%.4g-%.4g", c.Min, c.Max)
		if c.Min == c.Max {
			rng = fmt.Sprintf("%.4g", c.Min)
		}
		fmt.Fprintf(out, "  %-33s %8.4g %-6s expected %s (%s): %s\n", c.Figure, c.Value, c.Unit, rng, c.Basis, met)
	}
	m := r.Machine
	steal := "unknown"
	if m.Steal >= 0 {
		steal = report.FormatPercent(m.Steal)
	}
	others := "unknown"
	if m.OtherCores >= 0 {
		others = fmt.Sprintf("%.2f cores", m.OtherCores)
	}
	fmt.Fprintf(out, "machine: %d cores, load average %.2f before, %.2f after; other processes %s; CPU steal %s; emulator late %.3f ms on average, %.1f ms at worst\n",
		m.Cores, m.Load1Start, m.Load1End, others, steal, m.EmuLateMeanMs, m.EmuLateMaxMs)
	if m.Busy {
		fmt.Fprintln(out, "WARNING: this machine was too busy for the figures to mean much:")
		for _, w := range m.Why {
			fmt.Fprintf(out, "  - %s\n", w)
		}
	}
	switch {
	case missed == 0:
		fmt.Fprintf(out, "verdict: all %d figures in their expected range\n", len(r.Checks))
	case m.Busy:
		fmt.Fprintf(out, "verdict: %d of %d figures out of range on a busy machine: run it again on a quiet one before drawing conclusions\n", missed, len(r.Checks))
	default:
		fmt.Fprintf(out, "verdict: %d of %d figures out of range on a quiet machine: that is the gateways' doing\n", missed, len(r.Checks))
	}
}
