//go:build linux

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/mrgw/mrgw/gateway"
)

// newProbeCmd is `mrgw probe`: an active measurement of the WAN towards a
// peer region, run by a gateway over its sealed WAN connections (admin
// GET /probe): per plane RTT, loss, ECN marking, usable MTU and the ECMP
// paths its source ports reached.
func newProbeCmd() *cobra.Command {
	var (
		admin, region string
		rounds, size  int
		every         time.Duration
		asJSON        bool
	)
	cmd := &cobra.Command{
		Use:   "probe",
		Short: "Measure the WAN towards a peer region, per plane",
		Long: `probe asks a running gateway (its admin endpoint, admin.listen) to measure the WAN towards
the gateways of a peer region: over the sealed WAN connection to each, it sends --rounds rounds of
small ECN-capable probes on every path (each path is its own UDP source port), which the peer's
MetaRoCE stack answers without keeping state. It prints per peer and plane: the paths probed, RTT
(min/avg/max), loss, the fraction of probes that arrived ECN-marked, the path MTU that path MTU
discovery validated (and whether data uses the plane), and how many distinct ECMP paths the
source ports reached: exact through the loopback emulator ("emulator"), in production a lower
bound from distinct RTT signatures ("rtt-signature"). It takes about rounds x every.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			q := url.Values{}
			q.Set("region", region)
			q.Set("rounds", strconv.Itoa(rounds))
			q.Set("every", every.String())
			q.Set("size", strconv.Itoa(size))
			wait := time.Duration(rounds)*every + 10*time.Second
			ctx, cancel := context.WithTimeout(cmd.Context(), wait)
			defer cancel()
			body, err := adminGet(ctx, admin, "/probe?"+q.Encode())
			if err != nil {
				return err
			}
			if asJSON {
				_, err := cmd.OutOrStdout().Write(body)
				return err
			}
			var res gateway.ProbeResult
			if err := json.Unmarshal(body, &res); err != nil {
				return fmt.Errorf("%s/probe: %w", admin, err)
			}
			printProbe(cmd.OutOrStdout(), &res)
			return nil
		},
	}
	cmd.Flags().StringVar(&admin, "admin", "127.0.0.1:9464", "admin address of the gateway that probes (admin.listen)")
	cmd.Flags().StringVar(&region, "region", "", "peer region to probe (default: every peer)")
	cmd.Flags().IntVar(&rounds, "rounds", 20, "probes per path")
	cmd.Flags().DurationVar(&every, "every", 50*time.Millisecond, "time between rounds")
	cmd.Flags().IntVar(&size, "size", 64, "probe size in bytes")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func printProbe(w io.Writer, res *gateway.ProbeResult) {
	fmt.Fprintf(w, "probe from %s towards %s, %.1f s\n", res.Node, orAll(res.Region), res.Took)
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PEER\tPLANE\tPATHS\tRTT MIN/AVG/MAX\tLOSS\tECN\tPMTU\tDATA\tECMP PATHS")
	for _, p := range res.Peers {
		if len(p.Planes) == 0 {
			fmt.Fprintf(tw, "%s\t-\t-\t(%s: no WAN connection)\t\t\t\t\t\n", p.Name, p.State)
			continue
		}
		for _, pl := range p.Planes {
			data := "no"
			if pl.Data {
				data = "yes"
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%.2f/%.2f/%.2f ms\t%.1f%%\t%.1f%%\t%d (%s)\t%s\t%d (%s)\n", p.Name, pl.Plane, pl.Paths,
				pl.RTTMin, pl.RTTAvg, pl.RTTMax, 100*pl.Loss, 100*pl.ECN, pl.PMTU, pl.PMTUState, data, pl.ECMPPaths, pl.ECMPMethod)
		}
	}
	tw.Flush()
}

func orAll(region string) string {
	if region == "" {
		return "every peer"
	}
	return region
}
