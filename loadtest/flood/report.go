//go:build linux

package flood

import (
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"strings"
	"text/tabwriter"
)

// WriteJSON writes one JSON object per row.
func WriteJSON(w io.Writer, rows []Row) error {
	enc := json.NewEncoder(w)
	for i := range rows {
		if err := enc.Encode(&rows[i]); err != nil {
			return err
		}
	}
	return nil
}

// WriteTable writes the rows as a Markdown table, then each row's counters
// by reason and whatever went wrong.
func WriteTable(w io.Writer, rows []Row) error {
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', tabwriter.Debug)
	fmt.Fprintln(tw, "| target\t socket\t sent\t rate_pps\t counted\t uncounted\t of which kernel / state machines / nowhere\t byte_exact\t stall_ms (before)\t goodput Mbit/s before/during/after\t lockout\t register_ms\t admin_ok\t false_deaths\t wan_losses\t rss_peak_mb (base) / bound_mb\t goroutines_peak (base)\t")
	fmt.Fprintln(tw, "| ---\t ---\t ---\t ---\t ---\t ---\t ---\t ---\t ---\t ---\t ---\t ---\t ---\t ---\t ---\t ---\t ---\t")
	for i := range rows {
		r := &rows[i]
		sent := fmt.Sprintf("%d", r.DatagramsSent)
		if r.Unit != "datagrams" {
			sent += " conns"
		}
		if r.Aborted != "" {
			sent += " (aborted)"
		}
		var proto uint64
		if !r.ProtocolDropsExported {
			for _, v := range r.ProtocolDrops {
				proto += v
			}
		}
		kernel := fmt.Sprint(r.KernelDrops)
		where := "-"
		switch {
		case r.Unit != "datagrams":
			kernel += " listen overflows"
			where = kernel
		case r.KernelDropsExported:
			where = fmt.Sprintf("(%s counted) / %d / %d", kernel, proto, r.Unaccounted)
		default:
			where = fmt.Sprintf("%s / %d / %d", kernel, proto+gossipDropped(r), r.Unaccounted)
		}
		fmt.Fprintf(tw, "| %s\t %s\t %s\t %.0f\t %d\t %d\t %s\t %v\t %.0f (%.0f)\t %.1f / %.1f / %.1f\t %v\t %.0f\t %v\t %d\t %d\t %.0f (%.0f) / %.0f\t %d (%d)\t\n",
			r.Target, r.Socket, sent, r.RatePPS, r.Counted, r.Uncounted, where, r.TransferByteExact, r.StallMs, r.StallBeforeMs,
			r.GoodputBefore, r.GoodputDuring, r.GoodputAfter, r.Lockout, r.RegisterMs, r.AdminOK, r.FalseDeaths, r.WANLosses,
			r.RSSPeakMB, r.RSSBaseMB, r.BoundMB, r.GoroutinesPeak, r.GoroutinesBase)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	for i := range rows {
		r := &rows[i]
		fmt.Fprintf(w, "* **%s** (%s on %s): %s\n", r.Target, r.Socket, r.Gateway, countersLine(r.DroppedCounted))
		if r.Admitted > 0 {
			fmt.Fprintf(w, "  admitted as LAN peers (not dropped; reclaimed unregistered after 10 s): %d\n", r.Admitted)
		}
		if len(r.ProtocolDrops) > 0 && !r.ProtocolDropsExported {
			fmt.Fprintf(w, "  not exported: MetaRoCE endpoint drops %v\n", r.ProtocolDrops)
		}
		if len(r.GossipDrops) > 0 {
			fmt.Fprintf(w, "  gossip (region.Stats, not exported): %v\n", r.GossipDrops)
		}
		if r.Unit != "datagrams" {
			fmt.Fprintf(w, "  connections: %d opened, at most %d held at once, %d closed by the gateway, %d dials failed\n",
				r.DatagramsSent, r.MaxHeld, r.ServerClosed, r.DialFailures)
		}
		var bad []string
		if r.Error != "" {
			bad = append(bad, "error: "+r.Error)
		}
		if r.Aborted != "" {
			bad = append(bad, "flood aborted: "+r.Aborted)
		}
		for _, f := range r.RegisterFails {
			bad = append(bad, "registration failed: "+f)
		}
		bad = append(bad, r.Deaths...)
		if !r.TransferByteExact {
			bad = append(bad, fmt.Sprintf("transfer: %d completed, %d missing, %d corrupt, %d duplicated, %d failed %v",
				r.Transfer.Messages, r.Transfer.Missing, r.Transfer.Corrupt, r.Transfer.Dups, r.Transfer.Failed, r.Transfer.Errors))
		}
		if r.Note != "" {
			bad = append(bad, "note: "+r.Note)
		}
		for _, b := range bad {
			fmt.Fprintf(w, "  %s\n", b)
		}
	}
	return nil
}

// gossipDropped sums the region's unexported datagram drops.
func gossipDropped(r *Row) uint64 {
	var n uint64
	if gossipExported(r.DroppedCounted) {
		return 0
	}
	for k, v := range r.GossipDrops {
		if strings.HasPrefix(k, "DatagramsDropped") || k == "BadMessages" {
			n += v
		}
	}
	return n
}

var labelRe = regexp.MustCompile(`([a-z_]+)="([^"]*)"`)

// countersLine prints the counters compactly: lan_datagrams_dropped{unknown_source}=N.
func countersLine(m map[string]uint64) string {
	if len(m) == 0 {
		return "no drop, refusal or reclaim counter moved"
	}
	var parts []string
	for _, k := range sortedKeys(m) {
		name, labels := k, ""
		if i := strings.IndexByte(k, '{'); i >= 0 {
			name, labels = k[:i], k[i:]
		}
		name = strings.TrimSuffix(strings.TrimPrefix(name, "mrgw_"), "_total")
		var vs []string
		for _, m := range labelRe.FindAllStringSubmatch(labels, -1) {
			vs = append(vs, m[2])
		}
		s := name
		if len(vs) > 0 {
			s += "{" + strings.Join(vs, ",") + "}"
		}
		parts = append(parts, fmt.Sprintf("%s=%d", s, m[k]))
	}
	return strings.Join(parts, ", ")
}
