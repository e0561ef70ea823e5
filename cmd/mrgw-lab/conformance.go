package main

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/mrgw/mrgw/conformance"
	"github.com/mrgw/mrgw/conformance/responder"
	"github.com/spf13/cobra"
)

// newConformanceCmd runs the conformance suite against an implementation of
// docs/PROTOCOL.md, or serves mrgw's own responder for it.
func newConformanceCmd() *cobra.Command {
	var (
		target string
		opts   conformance.Options
		asJSON bool
		self   bool
	)
	cmd := &cobra.Command{
		Use:   "conformance",
		Short: "Check that an implementation speaks the MetaRoCE wire protocol",
		Long: `conformance drives the implementation at --target over UDP with crafted packets and
checks every answer against docs/PROTOCOL.md (the test contract the target must provide is in
docs/CONFORMANCE.md). With --self it starts mrgw's own responder on loopback and tests that.
It exits non-zero if any case fails.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			var addr netip.AddrPort
			switch {
			case self:
				r, err := responder.New("127.0.0.1:0", responder.Options{})
				if err != nil {
					return err
				}
				rctx, cancel := context.WithCancel(ctx)
				defer cancel()
				go func() { _ = r.Run(rctx) }()
				addr = r.Addr()
			case target != "":
				a, err := netip.ParseAddrPort(target)
				if err != nil {
					return fmt.Errorf("--target %q: want IP:PORT: %w", target, err)
				}
				addr = a
			default:
				return fmt.Errorf("give --target IP:PORT or --self")
			}
			if !asJSON {
				opts.Progress = cmd.ErrOrStderr()
			}
			res, err := conformance.Run(ctx, addr, opts)
			if err != nil {
				return err
			}
			if asJSON {
				err = conformance.WriteJSON(cmd.OutOrStdout(), res)
			} else {
				err = conformance.WriteTable(cmd.OutOrStdout(), res)
			}
			if err != nil {
				return err
			}
			if conformance.Failed(res) {
				return fmt.Errorf("conformance: %s", conformance.Summary(res))
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&target, "target", "", "IP:PORT of the implementation under test")
	f.BoolVar(&self, "self", false, "test mrgw's own responder, started on loopback")
	f.StringSliceVar(&opts.Cases, "case", nil, "run only these case ids (repeatable)")
	f.DurationVar(&opts.Timeout, "timeout", time.Second, "how long to wait for a required answer")
	f.BoolVar(&asJSON, "json", false, "print JSON rows (case, section, verdict, detail)")

	var listen string
	serve := &cobra.Command{
		Use:   "serve",
		Short: "Serve mrgw's responder for the conformance suite",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return responder.Serve(ctx, listen, responder.Options{
				OnListen: func(a netip.AddrPort) { fmt.Fprintf(cmd.OutOrStdout(), "conformance responder listening on %s\n", a) },
				Logf:     func(format string, args ...any) { fmt.Fprintf(cmd.ErrOrStderr(), format+"\n", args...) },
			})
		},
	}
	serve.Flags().StringVar(&listen, "listen", "127.0.0.1:4791", "UDP address to listen on")
	cmd.AddCommand(serve)
	return cmd
}
