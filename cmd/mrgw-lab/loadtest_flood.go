//go:build linux

package main

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/mrgw/mrgw/loadtest/flood"
)

// newFloodCmd is `mrgw-lab loadtest flood` (package loadtest/flood).
func newFloodCmd() *cobra.Command {
	var (
		o       flood.Options
		targets []string
		asJSON  bool
		quiet   bool
		noRaw   bool
		newIP   string
		jsonOut string
	)
	cmd := &cobra.Command{
		Use:   "flood",
		Short: "real gateways: junk, INIT and connection floods at every listening socket with a transfer in flight; lockout, false deaths, byte-exactness, RSS, goroutines, drops counted by reason",
		Long: `flood builds the two-region lab (loadtest/lab: four gateways, the link emulator between
the regions, 4 planes) afresh for each target, starts one transfer through a gateway and floods
that gateway's socket: ` + strings.Join(flood.AllTargets, ", ") + `.

Datagram floods send --count datagrams in at most --duration (1,000,000 in 10 s: 100k a second)
with sendmmsg from many source ports (lan-init: from raw sockets, every INIT from its own source
address, when root). Connection floods hold --conns connections open at once (--conn-total in
all) for --duration. During each flood a new host registers with the flooded gateway (lockout),
/readyz is fetched, every gateway's gossip view is watched for deaths and its WAN connections for
losses, the process's RSS and goroutines are sampled; afterwards the gateway's counters that
grew (drops, refusals, reclaims by reason) are set against what was sent, and the transfer is
checked byte for byte. Loopback only (127.0.0.0/8). Progress goes to stderr.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.Targets = targets
			if newIP != "" {
				a, err := netip.ParseAddr(newIP)
				if err != nil {
					return fmt.Errorf("--newcomer-ip: %w", err)
				}
				o.NewcomerIP = a
			}
			if noRaw {
				f := false
				o.Raw = &f
			}
			if !quiet {
				o.Progress = cmd.ErrOrStderr()
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			rows, err := flood.Run(ctx, o)
			out := cmd.OutOrStdout()
			if len(rows) > 0 && jsonOut != "" {
				f, ferr := os.Create(jsonOut)
				if ferr != nil {
					return ferr
				}
				werr := flood.WriteJSON(f, rows)
				if cerr := f.Close(); werr == nil {
					werr = cerr
				}
				if werr != nil {
					return werr
				}
			}
			if len(rows) > 0 {
				if asJSON {
					if werr := flood.WriteJSON(out, rows); werr != nil {
						return werr
					}
				} else {
					fmt.Fprintf(out, "## loadtest flood (real gateways, loopback; %d %s per datagram target in at most %v)\n\n",
						o.Count, "datagrams", o.Duration)
					if werr := flood.WriteTable(out, rows); werr != nil {
						return werr
					}
				}
			}
			return err
		},
	}
	fl := cmd.Flags()
	fl.StringSliceVar(&targets, "targets", nil, "targets to flood, comma-separated (default all: "+strings.Join(flood.AllTargets, ",")+")")
	fl.IntVar(&o.Count, "count", 1_000_000, "datagrams per datagram target")
	fl.DurationVar(&o.Duration, "duration", 10*time.Second, "each flood's length (a flood stops at --count or here, whichever comes first)")
	fl.IntVar(&o.Conns, "conns", 1000, "connection floods: connections held open at once")
	fl.IntVar(&o.ConnTotal, "conn-total", 10_000, "connection floods: connections opened in all, at most")
	fl.IntVar(&o.Workers, "workers", 4, "sending goroutines per datagram flood")
	fl.DurationVar(&o.Before, "before", 3*time.Second, "transfer goodput window before each flood")
	fl.DurationVar(&o.After, "after", 5*time.Second, "window after each flood (goodput, counters)")
	fl.Float64Var(&o.RateMbit, "rate", 10, "emulated WAN rate per plane (4 planes), Mbit/s: the transfer's ceiling")
	fl.Float64Var(&o.MaxRSSMB, "max-rss", 4096, "stop a flood early when the process's RSS passes this many MiB")
	fl.IntVar(&o.MaxGoroutines, "max-goroutines", 200_000, "stop a flood early past this many goroutines")
	fl.StringVar(&newIP, "newcomer-ip", "127.0.0.2", "address of the hosts that register during each flood (the transfer's hosts are on 127.0.0.1)")
	fl.BoolVar(&noRaw, "no-raw", false, "lan-init from 512 UDP source ports instead of raw sockets")
	fl.BoolVar(&asJSON, "json", false, "print one JSON object per target")
	fl.StringVar(&jsonOut, "json-out", "", "also write the JSON rows to this file")
	fl.BoolVar(&quiet, "quiet", false, "no progress on stderr")
	return cmd
}
