package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/mrgw/mrgw/internal/report"
	"github.com/mrgw/mrgw/loadtest/datapath"
	"github.com/mrgw/mrgw/tunnel/seal"
	"github.com/spf13/cobra"
)

// newLoadtestCmd groups the real-time load tests over real sockets.
func newLoadtestCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "loadtest",
		Short: "Run load tests with real sockets on this machine (loopback only)",
	}
	cmd.AddCommand(newDatapathCmd())
	return cmd
}

func newDatapathCmd() *cobra.Command {
	var (
		o      datapath.Options
		suite  string
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "datapath",
		Short: "Tunnel goodput on loopback against raw batched UDP between the same sockets",
		Long: `datapath measures, in one run on loopback: raw batched UDP (GSO/GRO where available),
the sealed MetaRoCE tunnel, and optionally the same transfer unencrypted; it reports goodput,
the ratio to raw UDP, CPU per Gbit/s, allocations per packet and the AEAD cost.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := seal.ParseSuite(suite)
			if err != nil {
				return err
			}
			o.Suite = s
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			rows, err := datapath.Run(ctx, o)
			if err != nil {
				return err
			}
			if asJSON {
				return report.WriteJSON(cmd.OutOrStdout(), rows)
			}
			fmt.Fprintln(cmd.OutOrStdout(), "## datapath (loopback)")
			fmt.Fprintln(cmd.OutOrStdout())
			return report.WriteTable(cmd.OutOrStdout(), rows,
				report.ColSystem,
				report.Column{Title: "goodput", Value: func(r *report.Row) string { return report.FormatBps(r.GoodputBps) }},
				report.Column{Title: "raw UDP", Value: func(r *report.Row) string { return report.FormatBps(r.RawUDPBps) }},
				report.Column{Title: "ratio", Value: func(r *report.Row) string { return fmt.Sprintf("%.2f", r.RatioToRawUDP) }},
				report.Column{Title: "CPU cores per Gbit/s", Value: func(r *report.Row) string { return fmt.Sprintf("%.3f", r.CPUPerGbps) }},
				report.Column{Title: "allocs/pkt", Value: func(r *report.Row) string { return fmt.Sprintf("%.2f", r.AllocsPerPacket) }},
				report.Column{Title: "note", Value: func(r *report.Row) string { return r.Note }},
			)
		},
	}
	f := cmd.Flags()
	f.DurationVar(&o.Duration, "duration", 0, "length of each measurement (default 3s)")
	f.IntVar(&o.MTU, "mtu", 0, "MetaRoCE payload per datagram (default 1400)")
	f.IntVar(&o.Paths, "paths", 0, "paths per connection (default 8)")
	f.BoolVar(&o.DisableGSO, "no-gso", false, "turn UDP GSO off")
	f.BoolVar(&o.DisableGRO, "no-gro", false, "turn UDP GRO off")
	f.BoolVar(&o.Plain, "plain", true, "also measure the transfer without encryption")
	f.StringVar(&suite, "cipher", "aes-128-gcm", "AEAD: aes-128-gcm, aes-256-gcm or chacha20-poly1305")
	f.BoolVar(&asJSON, "json", false, "print JSON rows")
	return cmd
}
