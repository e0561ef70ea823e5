//go:build linux

package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"

	"github.com/spf13/cobra"

	"github.com/mrgw/mrgw/loadtest/demo"
)

// demoOptions are the flags of `mrgw-lab demo`.
type demoOptions struct {
	demo.Options
	asJSON   bool
	logLevel string
}

// newDemoCmd is `mrgw-lab demo`: two regions, two gateway pairs, hosts on both
// sides and the emulated WAN, in this process, with no configuration.
func newDemoCmd() *cobra.Command {
	o := demoOptions{Options: demo.Defaults()}
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
			return runDemo(cmd.Context(), cmd.OutOrStdout(), o)
		},
	}
	f := cmd.Flags()
	f.DurationVar(&o.Duration, "duration", o.Duration, "how long traffic runs")
	f.IntVar(&o.Planes, "planes", o.Planes, "emulated ECMP planes between the regions")
	f.DurationVar(&o.RTT, "rtt", o.RTT, "round-trip time between the regions")
	f.Float64Var(&o.Loss, "loss", o.Loss, "random loss per plane and direction (0.01 = 1%)")
	f.Float64Var(&o.RateMbit, "rate", o.RateMbit, "rate of each plane and direction in Mbit/s (chosen so a 2-core machine is not the bottleneck)")
	f.BoolVar(&o.asJSON, "json", false, "print the final report as JSON")
	f.IntVar(&o.Flows, "flows", o.Flows, "flows per direction")
	f.IntVar(&o.MsgSize, "message-size", o.MsgSize, "bytes per message")
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
