//go:build linux

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/mrgw/mrgw/internal/report"
	"github.com/mrgw/mrgw/loadtest/datapath"
	"github.com/mrgw/mrgw/loadtest/relaycost"
)

// newRelayCostCmd is `mrgw-lab loadtest relay-cost` (package
// loadtest/relaycost).
func newRelayCostCmd() *cobra.Command {
	var (
		o      relaycost.Options
		binary string
		procs  []int
		asJSON bool
		quiet  bool
	)
	cmd := &cobra.Command{
		Use:   "relay-cost",
		Short: "cores per relayed Gbit/s on each gateway (two mrgw run processes, hosts in this one), next to the datapath floor, at GOMAXPROCS 1 and 2",
		Long: `relay-cost relays a bulk transfer host → gateway → WAN → gateway → host through two
gateway daemons (mrgw run, one process each; loopback WAN with no emulation, so the gateways
are the bottleneck) and reads each daemon's CPU from /proc/PID/stat over the measured window:
cores, and cores per Gbit/s of end-to-end goodput, for the sending and the receiving gateway.
Before it, in the same run and on loopback at the same link MTU, it measures loadtest
datapath's raw UDP, its floor (raw UDP with the tunnel's AEAD, sealed and opened) and the
tunnel alone; each gateway's cost is given as a multiple of the floor. One relay row per
--gomaxprocs value (the gateways' GOMAXPROCS; default 1 and the number of CPUs), and the
goodput and cores of the last over the first. Each gateway runs as this binary's hidden
"relay-cost gateway" command: mrgw run's gateway with the lab's smallest probe timeout (30 ms;
the daemon's 50 µs fires spurious timeouts on a shared machine's loopback); --mrgw-bin runs
the daemon itself instead. About 45 s at the defaults. --profile-dir keeps a CPU profile of each
gateway per row (go tool pprof -top FILE) and reports the share of each gateway's CPU spent under
its endpoint's owner goroutine, the stage that bounds how many cores one endpoint keeps busy. Progress on
stderr.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if binary != "" {
				o.Gateway = []string{binary, "run", "--pprof"}
			} else {
				self, err := os.Executable()
				if err != nil {
					return err
				}
				o.Gateway = append([]string{self}, relaycost.GatewayArgs...)
			}
			o.Procs, o.Datapath = procs, relayCostDatapath
			if !quiet {
				o.Progress = cmd.ErrOrStderr()
			}
			res, err := relaycost.Run(ctx, o)
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(res)
			}
			printRelayCost(cmd.OutOrStdout(), res)
			return nil
		},
	}
	cmd.AddCommand(newRelayCostGatewayCmd())
	fl := cmd.Flags()
	fl.DurationVar(&o.Duration, "duration", 6*time.Second, "measured window of each relay row")
	fl.DurationVar(&o.Warmup, "warmup", 2*time.Second, "traffic before each relay row's window")
	fl.DurationVar(&o.FloorDuration, "floor-duration", 3*time.Second, "window of each datapath row (negative: skip them)")
	fl.IntVar(&o.LinkMTU, "mtu", 1400, "the WAN link's IP MTU (wan.mtu is the DATA payload that fits it, sealed)")
	fl.IntSliceVar(&procs, "gomaxprocs", nil, "the gateways' GOMAXPROCS, a relay row each (default 1 and the number of CPUs)")
	fl.IntVar(&o.Flows, "flows", 4, "host flows")
	fl.IntVar(&o.Window, "window", 8, "WRITEs in flight per flow")
	fl.IntVar(&o.MessageBytes, "message", 1<<20, "bytes per WRITE")
	fl.StringVar(&o.ProfileDir, "profile-dir", "", "write a CPU profile of each gateway per row here")
	fl.StringVar(&o.Dir, "dir", "", "keep the configurations and the daemons' logs here (default: a temporary directory, removed)")
	fl.StringVar(&binary, "mrgw-bin", "", "run the gateways as this mrgw daemon's `run --pprof`, with its own path timings (default: this binary's gateway command, with the lab's smallest probe timeout)")
	fl.BoolVar(&asJSON, "json", false, "print the result as JSON")
	fl.BoolVar(&quiet, "quiet", false, "no progress lines on stderr")
	return cmd
}

// relayCostDatapath is relay-cost's datapath rows: loadtest datapath's
// raw UDP, floor and tunnel on loopback at one link MTU.
func relayCostDatapath(ctx context.Context, mtu int, d time.Duration) ([]report.Row, float64, error) {
	rows, err := datapath.Run(ctx, datapath.Options{Duration: d, MTUs: []int{mtu}, Loopback: true,
		Systems: []string{datapath.SysRawUDP, datapath.SysFloor, datapath.SysMRGW}})
	if err != nil {
		return nil, 0, err
	}
	var out []report.Row
	var floor float64
	for _, r := range rows {
		if r.CPUPerGbps == 0 {
			continue // the AEAD's per-packet rows
		}
		out = append(out, r)
		if r.System == datapath.SysFloor {
			floor = r.CPUPerGbps
		}
	}
	return out, floor, nil
}

func printRelayCost(w io.Writer, res *relaycost.Result) {
	fmt.Fprintf(w, "## relay-cost: cores per relayed Gbit/s per gateway (link MTU %d, wan.mtu %d, loopback)\n\n", res.LinkMTU, res.WANMTU)
	if len(res.Datapath) > 0 {
		fmt.Fprintln(w, "| datapath (one process, both ends) | goodput | cores per Gbit/s | × floor |")
		fmt.Fprintln(w, "|---|---:|---:|---:|")
		for _, r := range res.Datapath {
			x := "-"
			if res.FloorCPUPerGbps > 0 {
				x = fmt.Sprintf("%.2f", r.CPUPerGbps/res.FloorCPUPerGbps)
			}
			fmt.Fprintf(w, "| %s | %s | %.3f | %s |\n", r.System, report.FormatBps(r.GoodputBps), r.CPUPerGbps, x)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w, "| GOMAXPROCS | goodput | sending gw cores | per Gbit/s | × floor | receiving gw cores | per Gbit/s | × floor | hosts cores | WAN retransmitted | load start → end |")
	fmt.Fprintln(w, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
	for _, r := range res.Rows {
		retx := "-"
		if r.WANDataSent > 0 {
			retx = fmt.Sprintf("%.1f%%", 100*float64(r.WANRetransmits)/float64(r.WANDataSent))
		}
		fmt.Fprintf(w, "| %d | %s | %.2f | %.3f | %s | %.2f | %.3f | %s | %.2f | %s | %.2f → %.2f |\n",
			r.GOMAXPROCS, report.FormatBps(r.GoodputBps), r.Send.Cores, r.Send.CPUPerGbps, xFloor(r.Send.XFloor),
			r.Recv.Cores, r.Recv.CPUPerGbps, xFloor(r.Recv.XFloor), r.HostsCores, retx, r.LoadStart, r.LoadEnd)
	}
	if res.Scaling > 0 {
		first, last := res.Rows[0], res.Rows[len(res.Rows)-1]
		fmt.Fprintf(w, "\nGOMAXPROCS %d over %d: goodput %.2f ×, the gateways' cores %.2f ×\n", last.GOMAXPROCS, first.GOMAXPROCS, res.Scaling, res.CoreScaling)
		if res.SendGainBound > 0 && res.RecvGainBound > 0 {
			fmt.Fprintf(w, "At these costs per Gbit/s, %d cores of its own would carry at most %.2f × what %d carries through the sending gateway, %.2f × through the receiving one (a bound, not a measurement)\n",
				last.GOMAXPROCS, res.SendGainBound, first.GOMAXPROCS, res.RecvGainBound)
		}
	}
	for _, r := range res.Rows {
		for _, p := range []string{r.Send.Profile, r.Recv.Profile} {
			if p != "" {
				fmt.Fprintf(w, "profile: %s\n", p)
			}
		}
		if r.Note != "" {
			fmt.Fprintf(w, "GOMAXPROCS %d: %s\n", r.GOMAXPROCS, r.Note)
		}
	}
}

// xFloor prints a ratio to the floor, "-" when the floor was not measured.
func xFloor(x float64) string {
	if x <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", x)
}

// newRelayCostGatewayCmd is `mrgw-lab loadtest relay-cost gateway`, one
// gateway process of the load test (relaycost.RunGateway).
func newRelayCostGatewayCmd() *cobra.Command {
	var path string
	cmd := &cobra.Command{
		Use:    "gateway --config FILE",
		Short:  "one gateway of relay-cost (started by it)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return relaycost.RunGateway(ctx, path, cmd.ErrOrStderr())
		},
	}
	cmd.Flags().StringVar(&path, "config", "", "configuration file")
	return cmd
}
