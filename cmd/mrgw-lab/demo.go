//go:build linux

package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"

	"github.com/spf13/cobra"

	"github.com/mrgw/mrgw/internal/cli"
	"github.com/mrgw/mrgw/loadtest/demo"
)

// demoOptions are the flags of `mrgw-lab demo`.
type demoOptions struct {
	demo.Options
	asJSON   bool
	logLevel string
	rateBps  float64 // --rate; demo.Options takes Mbit/s
}

// newDemoCmd is `mrgw-lab demo`: two regions, two gateway pairs, hosts on both
// sides and the emulated WAN, in this process, with no configuration.
func newDemoCmd() *cobra.Command {
	o := demoOptions{Options: demo.Defaults()}
	o.rateBps = o.RateMbit * 1e6
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run two regions of gateways over an emulated WAN, in one process, and report",
		Long: `demo builds a complete deployment on loopback with no setup: regions eu-west and us-east,
each with a gateway pair (both members active), a host on each side, and the link emulator
between the regions (ECMP planes with delay, random loss and a rate). Hosts send messages in
both directions through the gateways for --duration; halfway through one plane fails, and the
gateways route around it. A progress line shows the live rates; a final table reports goodput
per plane, RTT, loss recovered, messages completed and errors. Certificates are minted in a
temporary directory that is removed at the end.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.RateMbit = o.rateBps / 1e6
			return runDemo(cmd.Context(), cmd.OutOrStdout(), o)
		},
	}
	f := cmd.Flags()
	f.DurationVar(&o.Duration, "duration", o.Duration, "how long traffic runs")
	f.IntVar(&o.Planes, "planes", o.Planes, "emulated ECMP planes between the regions")
	f.DurationVar(&o.RTT, "rtt", o.RTT, "round-trip time between the regions")
	cli.FractionVar(f, &o.Loss, "loss", o.Loss, "random loss per plane and direction (0.01 or 1%)")
	cli.RateVar(f, &o.rateBps, "rate", o.rateBps, "rate of each plane and direction, e.g. 50mbit, 1gbit (chosen so a 2-core machine is not the bottleneck)")
	f.BoolVar(&o.asJSON, "json", false, "print the final report as JSON")
	f.IntVar(&o.Flows, "flows", o.Flows, "flows per direction")
	cli.SizeVar(f, &o.MsgSize, "message-size", o.MsgSize, "bytes per message (units: 64KiB, 1MiB)")
	f.StringVar(&o.logLevel, "log-level", "", "write the gateways' logs to stderr at this level (debug, info, warn, error)")
	return cmd
}

// runDemo runs the demo scenario (loadtest/demo) and prints its report.
func runDemo(ctx context.Context, out io.Writer, o demoOptions) error {
	if ctx == nil {
		ctx = context.Background()
	}
	o.Logger = demoLogger(o.logLevel)
	if !o.asJSON {
		o.Progress = out
		if f, ok := out.(*os.File); ok {
			if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
				o.TTY = true
			}
		}
	}
	rep, err := demo.Run(ctx, o.Options)
	if err != nil {
		return err
	}
	if o.asJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	rep.Print(out)
	if len(rep.Errors) > 0 {
		return errSilent
	}
	return nil
}

func demoLogger(level string) *slog.Logger {
	if level == "" {
		return nil
	}
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		l = slog.LevelInfo
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: l}))
}
