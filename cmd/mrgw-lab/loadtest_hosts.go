//go:build linux

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/mrgw/mrgw/loadtest/chaos"
	"github.com/mrgw/mrgw/loadtest/hostcap"
)

// newHostsCmd is `mrgw-lab loadtest hosts` (package loadtest/hostcap).
func newHostsCmd() *cobra.Command {
	var (
		o      hostcap.Options
		binary string
		quiet  bool
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "hosts",
		Short: "what a registered host costs a gateway: one gateway daemon, --count hosts registered and PINGing, its RSS, descriptors and path sockets before and after",
		Long: `hosts runs one gateway daemon (mrgw run, its own process) with lan.max_hosts above --count,
registers --count hosts with it (the host library, spread over --source-ips loopback addresses,
--parallel at a time), keeps them PINGing for --settle, and prints the daemon's resident memory,
Go heap, open descriptors and path sockets before and after, per host, and its CPU meanwhile, as
a Markdown table (--json: one JSON object), with the registration times (p50, p99) and failures by reason,
with its peak resident memory (VmHWM) against the most it may hold: limits.memory_bytes (256 MiB)
plus the fixed overhead plus 64 KiB per host of lan.max_hosts, and the generator's own cost per
host (Go heap and resident memory). The hosts are idle (PINGing every 5 s, housekeeping every
500 ms); more than --per-process of them are spread over child processes of this binary (each host
holds five descriptors). A registration that times out is tried again while others still
complete (--stall); failures are reported by reason. Loopback only (127.0.0.0/8). Progress goes
to stderr.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if binary == "" {
				dir, err := os.MkdirTemp("", "mrgw-hostcap-bin-")
				if err != nil {
					return err
				}
				defer os.RemoveAll(dir)
				if binary, err = chaos.Build(ctx, dir, "mrgw"); err != nil {
					return err
				}
			}
			o.Binary = binary
			exe, err := os.Executable()
			if err != nil {
				return err
			}
			o.Worker = []string{exe, "loadtest", "hosts", "worker"}
			if !quiet {
				o.Progress = cmd.ErrOrStderr()
			}
			res, err := hostcap.Run(ctx, o)
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(res)
			}
			writeHosts(cmd.OutOrStdout(), res)
			return nil
		},
	}
	cmd.AddCommand(&cobra.Command{
		Use:    "worker",
		Short:  "a generator process of loadtest hosts: a job on stdin, its report on stdout",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return hostcap.ServeWorker(ctx, cmd.InOrStdin(), cmd.OutOrStdout())
		},
	})
	fl := cmd.Flags()
	fl.IntVar(&o.Hosts, "count", 1000, "hosts to register")
	fl.IntVar(&o.Parallel, "parallel", 16, "registrations at once (shared out among the generator processes)")
	fl.IntVar(&o.PerProcess, "per-process", 2000, "most hosts one generator process holds; more are spread over child processes")
	fl.DurationVar(&o.Stall, "stall", time.Minute, "a timed-out registration is tried again while some host registered within this")
	fl.IntVar(&o.SourceIPs, "source-ips", 64, "loopback addresses the hosts spread over (127.0.1.1 up)")
	fl.DurationVar(&o.Settle, "settle", 3*time.Second, "how long the hosts stay registered before the gateway is measured")
	fl.DurationVar(&o.DeadAfter, "dead-after", 10*time.Second, "the gateway's wan.dead_after: a host whose paths have all been down this long is declared gone")
	fl.StringVar(&binary, "mrgw-bin", "", "mrgw daemon binary (default: go build ./cmd/mrgw from the module)")
	fl.StringVar(&o.Dir, "dir", "", "keep the configuration and the daemon's log here (default: a temporary directory, removed)")
	fl.StringVar(&o.HeapProfile, "heap-profile", "", "write this process's heap profile (the hosts' side) here with every host registered")
	fl.BoolVar(&quiet, "quiet", false, "no progress lines on stderr")
	fl.BoolVar(&asJSON, "json", false, "print the result as one JSON object (every field)")
	return cmd
}

// writeHosts prints the result as a Markdown table: one line per measure,
// the daemon's first, then the registrations and the generator's cost.
func writeHosts(out io.Writer, r *hostcap.Result) {
	fmt.Fprintf(out, "## loadtest hosts: %d hosts\n\n", r.Hosts)
	lines := [][2]string{
		{"hosts registered (the gateway's count at the end)", fmt.Sprintf("%d of %d", r.Registered, r.Hosts)},
		{"registration: all, each p50 / p99", fmt.Sprintf("%.1f s; %.2f s / %.2f s", r.RegisterSecs, r.RegisterP50, r.RegisterP99)},
		{"registrations tried again / failed", fmt.Sprintf("%d / %d", r.Retries, r.RegisterFails)},
		{"daemon RSS before → after", fmt.Sprintf("%.1f → %.1f MB", r.RSSBeforeMB, r.RSSAfterMB)},
		{"daemon RSS per host", fmt.Sprintf("%.1f KiB", r.KiBPerHost)},
		{"daemon Go heap before → after, per host", fmt.Sprintf("%.1f → %.1f MB, %.1f KiB", r.HeapBeforeMB, r.HeapAfterMB, r.HeapKiBPerHost)},
		{"daemon descriptors before → after, per host", fmt.Sprintf("%d → %d, %.3f", r.FDsBefore, r.FDsAfter, r.FDsPerHost)},
		{"path sockets", fmt.Sprint(r.PathSockets)},
		{"daemon peak RSS / its bound", fmt.Sprintf("%.1f / %.1f MB (within: %v)", r.RSSPeakMB, r.BoundMB, r.Within)},
		{"daemon CPU while the hosts idled", fmt.Sprintf("%.2f cores", r.GatewayIdleCPU)},
		{"generator: processes; Go heap and RSS per host", fmt.Sprintf("%d; %.0f KiB and %.0f KiB", r.Processes, r.GenHeapKiBPerHost, r.GenRSSKiBPerHost)},
		{"hosts' registrations / connects / failed handshakes / silent gateways", fmt.Sprintf("%d / %d / %d / %d", r.HostRegistrations, r.HostConnects, r.HostConnectFailures, r.HostSilentGateways)},
	}
	reasons := make([]string, 0, len(r.Failures))
	for k := range r.Failures {
		reasons = append(reasons, k)
	}
	sort.Strings(reasons)
	for _, k := range reasons {
		lines = append(lines, [2]string{"failed: " + k, fmt.Sprintf("%d (%s)", r.Failures[k], mdCell(r.FailureExamples[k]))})
	}
	fmt.Fprintln(out, "| measure | value |")
	fmt.Fprintln(out, "|---|---|")
	for _, l := range lines {
		fmt.Fprintf(out, "| %s | %s |\n", l[0], l[1])
	}
}
