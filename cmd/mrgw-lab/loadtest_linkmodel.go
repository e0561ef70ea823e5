//go:build linux

package main

import (
	"context"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/mrgw/mrgw/internal/cli"
	"github.com/mrgw/mrgw/loadtest/peers"
	"github.com/spf13/cobra"
)

// newLinkModelCmd is `mrgw-lab loadtest link-model`: kernel bbr through
// tunemu under each choice of the link model a second emulator might make
// differently: a check of the baseline the peers are measured on.
func newLinkModelCmd() *cobra.Command {
	var (
		o    peers.LinkModelOptions
		nice int
	)
	cmd := &cobra.Command{
		Use:   "link-model",
		Short: "kernel bbr through tunemu under each choice of the link model (where loss is drawn, ACK-direction loss, ECN, endpoints in child processes), with the emulator's self-check (root; minutes)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cmd.Flags().Changed("nice") {
				o.Nice = &nice
			}
			exe, err := os.Executable()
			if err != nil {
				return err
			}
			o.Child = []string{exe, "loadtest", "link-model-child"}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return peers.LinkModelVariants(ctx, o, cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	cli.FractionsVar(f, &o.Losses, "loss", nil, "random loss rates (default 1%,5%,10%)")
	f.DurationVar(&o.RTT, "rtt", 0, "round trip (default 100ms)")
	f.StringSliceVar(&o.Variants, "variants", nil, "variants to run (default all: "+strings.Join(peers.LinkModelVariantNames(), ",")+")")
	f.IntSliceVar(&o.Streams, "streams", nil, "stream counts (default 1,8)")
	f.DurationVar(&o.Warmup, "warmup", 0, "warm-up before measuring (default the loss sweep's)")
	f.IntVar(&nice, "nice", 0, "the run's autogroup nice (tunemu.Prioritize), e.g. -20")
	cli.RateVar(f, &o.CapacityBps, "capacity", 0, "link capacity, e.g. 150mbit (default the loss sweep's, 200Mbit/s)")
	f.Uint64Var(&o.Seed, "seed", 0, "seed of the emulator, as loss-sweep's --seed (one seed is one loss pattern)")
	return cmd
}

// newLinkModelChildCmd is the link-model experiment's child process
// (peers.LinkModelChild), run by it inside an emulated site.
func newLinkModelChildCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "link-model-child recv N | send N ALGO",
		Hidden: true,
		Args:   cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return peers.LinkModelChild(ctx, args, cmd.OutOrStdout())
		},
	}
}
