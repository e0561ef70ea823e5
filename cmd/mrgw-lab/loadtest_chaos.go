//go:build linux

package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/mrgw/mrgw/internal/report"
	"github.com/mrgw/mrgw/loadtest/chaos"
)

// newChaosCmd is `mrgw-lab loadtest chaos` (package loadtest/chaos), with its
// hidden host-process subcommand (chaos.ChildArgs).
func newChaosCmd() *cobra.Command {
	var (
		o         chaos.Options
		faults    string
		asJSON    bool
		verbose   bool
		binary    string
		keep      bool
		quiet     bool
		deadAfter time.Duration
	)
	cmd := &cobra.Command{
		Use:   "chaos",
		Short: "real gateway processes and hosts under seeded random faults: plane loss, kill -9, gossip partition, key rotation, SIGHUP, junk, a rolling upgrade; no message lost, duplicated or corrupted, worst stall per fault",
		Long: `chaos starts four gateway daemons (mrgw run, two regions of two, each its own process),
in-process hosts and a host process on both sides of the loopback link emulator, and moves
checked messages (sequence, checksum, address) between the regions while it injects, one at a
time at seeded random times: ` + strings.Join(chaos.AllFaults, ", ") + `.
After every fault it waits for every flow to deliver again and checks that nothing was lost,
duplicated or corrupted; at the end it prints, per fault type, the worst stall (the longest time
a flow went without a delivery after an injection) and the messages lost, duplicated, corrupted
and failed. Progress goes to stderr. Exit status 1 if anything was lost, duplicated, corrupted or
failed, a flow did not recover, or a check failed.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if faults != "" {
				o.Faults = strings.Split(faults, ",")
			}
			if !quiet {
				o.Progress = cmd.ErrOrStderr()
			}
			o.KeepDir = keep
			o.HostDeadAfter = deadAfter
			// The gateways run on the daemon binary (--mrgw-bin, or
			// built from the module), the host processes on this one.
			o.Binary = binary
			exe, err := os.Executable()
			if err != nil {
				return err
			}
			o.LabBinary = exe
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			rep, err := chaos.Run(ctx, o)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				if err := report.WriteJSONLines(out, rep.Rows); err != nil {
					return err
				}
			} else {
				writeChaosReport(out, rep, verbose)
			}
			if !rep.OK() {
				fmt.Fprintf(cmd.ErrOrStderr(), "chaos: FAILED (%d lost, %d duplicated, %d corrupted, %d failed, %d errors); files kept in %s\n",
					rep.Lost, rep.Duplicated, rep.Corrupted, rep.Failed, len(rep.Errors), rep.Dir)
				for _, e := range rep.Errors {
					fmt.Fprintln(cmd.ErrOrStderr(), "  "+e)
				}
				return errSilent
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.DurationVar(&o.Duration, "duration", 3*time.Minute, "how long faults are injected")
	fl.Uint64Var(&o.Seed, "seed", 1, "seed of the fault order, times and targets")
	fl.StringVar(&faults, "faults", "", "comma-separated fault types to inject (default all: "+strings.Join(chaos.AllFaults, ",")+")")
	fl.BoolVar(&asJSON, "json", false, "print a JSON object per fault type (fault, recovery_ms, messages_lost, messages_duplicated, messages_corrupted, ...)")
	fl.BoolVarP(&verbose, "verbose", "v", false, "also print every injection")
	fl.DurationVar(&deadAfter, "host-dead-after", 0, "hosts give a gateway up when it has answered nothing this long while they waited for it (0: the host library's default)")
	fl.DurationVar(&o.GossipProbe, "gossip-probe", 500*time.Millisecond, "gossip.probe_interval of the gateways (probe_timeout 4/5 of it, suspicion_mult 3)")
	fl.StringVar(&binary, "mrgw-bin", "", "mrgw daemon binary that runs the gateways (default: go build ./cmd/mrgw from the module)")
	fl.StringVar(&o.UpgradeBinary, "upgrade-bin", "", "mrgw daemon binary the rolling-upgrade fault replaces each gateway's with, one at a time (default: --mrgw-bin)")
	fl.BoolVar(&quiet, "quiet", false, "no progress lines on stderr")
	fl.BoolVar(&keep, "keep", false, "keep the directory of configurations and logs (kept anyway when the run fails)")
	fl.StringVar(&o.LogLevel, "log-level", "", "log.level of the gateways and level of the host logs (a-proc.log, hosts.log) in the directory: debug traces flow openings, path transitions and WAN connection losses (default: info for the gateways, warn for the host process, no in-process host log)")
	child := &cobra.Command{
		Use:                "host-child",
		Hidden:             true,
		Short:              "a host process of the chaos scenario (started by it)",
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			return chaos.RunChild(context.Background(), args, os.Stdin, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	cmd.AddCommand(child)
	return cmd
}

func writeChaosReport(out io.Writer, rep *chaos.Report, verbose bool) {
	fmt.Fprintf(out, "## loadtest chaos (seed %d, %.0f s, host dead-after %s)\n\n", rep.Seed, rep.DurationS, rep.HostDeadAfter)
	fmt.Fprintln(out, "| fault | injections | worst stall | lost | dup | corrupt | failed | not recovered | note |")
	fmt.Fprintln(out, "|---|--:|--:|--:|--:|--:|--:|--:|---|")
	for _, r := range rep.Rows {
		fmt.Fprintf(out, "| %s | %d | %.0f ms | %d | %d | %d | %d | %d | %s |\n", r.Fault, r.Injections, r.RecoveryMs,
			r.MessagesLost, r.MessagesDuplicated, r.MessagesCorrupted, r.MessagesFailed, r.FlowsNotRecovered, mdCell(r.Note))
	}
	fmt.Fprintf(out, "\n%d messages delivered (%.1f MB), %d completed at the sources; %d junk datagrams sent.\n",
		rep.Messages, float64(rep.Bytes)/1e6, rep.Completed, rep.JunkSent)
	if verbose {
		fmt.Fprintln(out)
		fmt.Fprintln(out, "| at | fault | target | cleared | recovered | stall | worst flow | note |")
		fmt.Fprintln(out, "|--:|---|---|--:|--:|--:|---|---|")
		for _, in := range rep.Injections {
			fmt.Fprintf(out, "| %.1fs | %s | %s | %.1fs | %.1fs | %.0f ms | %s | %s |\n", in.AtS, in.Fault, in.Target, in.ClearS, in.EndS, in.StallMs, mdCell(in.Worst), mdCell(in.Note+errSuffixCmd(in.Err)))
		}
	}
}

// mdCell is s fit for a Markdown table cell: a '|' would end the cell.
func mdCell(s string) string { return strings.ReplaceAll(s, "|", "\\|") }

func errSuffixCmd(e string) string {
	if e == "" {
		return ""
	}
	return " ERROR: " + e
}
