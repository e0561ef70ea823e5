//go:build linux

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/mrgw/mrgw/gateway"

	"github.com/mrgw/mrgw/units"
)

// newStatusCmd is `mrgw status`: a running gateway's peers, paths and
// rates, read from its admin endpoint (/status).
func newStatusCmd() *cobra.Command {
	var (
		admin   string
		asJSON  bool
		timeout time.Duration
		paths   bool
	)
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show a running gateway's peers, paths and rates",
		Long: `status reads the admin endpoint of a running gateway (admin.listen) and prints its
gossip members, its peer gateways with their WAN connection state and rates, each path's
state, RTT and window, and its flows and memory.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			body, err := adminGet(ctx, admin, "/status")
			if err != nil {
				return err
			}
			if asJSON {
				_, err := cmd.OutOrStdout().Write(body)
				return err
			}
			var st gateway.Status
			if err := json.Unmarshal(body, &st); err != nil {
				return fmt.Errorf("%s/status: %w", admin, err)
			}
			printStatus(cmd.OutOrStdout(), &st, paths)
			return nil
		},
	}
	cmd.Flags().StringVar(&admin, "admin", "127.0.0.1:9464", "admin address of the gateway (admin.listen)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the raw JSON")
	cmd.Flags().BoolVar(&paths, "paths", true, "list every path of every peer")
	cmd.Flags().DurationVar(&timeout, "timeout", 5*time.Second, "how long to wait for the gateway")
	return cmd
}

func printStatus(w io.Writer, st *gateway.Status, paths bool) {
	ready := "ready"
	if !st.Ready {
		ready = "NOT READY"
	}
	if st.Draining {
		ready += ", draining"
	}
	fmt.Fprintf(w, "gateway %s (region %s): %s, at %s\n", st.Node, st.Region, ready, st.At.Format(time.RFC3339))
	fmt.Fprintf(w, "flows %d active, %d refused, %d reset; %d messages completed; %d hosts registered\n",
		st.Flows.Active, st.Flows.Refused, st.Flows.Resets, st.Flows.Completed, st.Hosts)
	fmt.Fprintf(w, "memory %s in use, %s reserved, limit %s; LAN out %s, in %s\n",
		bytesH(float64(st.Memory.InUse)), bytesH(float64(st.Memory.Reserved)), bytesH(float64(st.Memory.Limit)),
		rateH(st.LANOutBps), rateH(st.LANInBps))
	switch {
	case st.WANRate <= 0:
		fmt.Fprintf(w, "WAN rate: none configured\n\n")
	case st.RegionShare != "" && st.RegionDemand != nil:
		d := st.RegionDemand
		limited := ""
		if d.Limited {
			limited = ", limited by its part"
		}
		fmt.Fprintf(w, "WAN rate %s (the region's rate by demand: part %s, fair part %s, share %s; demand %s%s)\n\n", rateH(st.WANRate.Bytes()),
			rateH(d.PartBps.Bytes()), rateH(d.FairBps.Bytes()), st.RegionShare, rateH(d.DemandBps.Bytes()), limited)
	case st.RegionShare != "":
		fmt.Fprintf(w, "WAN rate %s (the region's rate, share %s)\n\n", rateH(st.WANRate.Bytes()), st.RegionShare)
	default:
		fmt.Fprintf(w, "WAN rate %s\n\n", rateH(st.WANRate.Bytes()))
	}
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MEMBER\tREGION\tSTATE")
	sort.Slice(st.Members, func(i, j int) bool { return st.Members[i].Name < st.Members[j].Name })
	for _, m := range st.Members {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", m.Name, m.Region, m.State)
	}
	tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PEER\tREGION\tSTATE\tCONTROL RTT\tTX\tRX\tRETRANS\tLOST\tFLOWS\tPATHS UP")
	for _, p := range st.Peers {
		up := 0
		for _, pa := range p.Paths {
			if pa.State == "up" {
				up++
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d/%d\n", p.Name, p.Region, p.State, rttH(p.ControlRTT),
			rateH(p.TxBps), rateH(p.RxBps), p.Retrans, p.Lost, p.Flows, up, len(p.Paths))
	}
	tw.Flush()
	if !paths {
		return
	}
	for _, p := range st.Peers {
		if len(p.Paths) == 0 {
			continue
		}
		fmt.Fprintf(w, "\npaths to %s:\n", p.Name)
		tw = tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "PATH\tPLANE\tSTATE\tRTT\tMIN RTT\tCWND\tINFLIGHT\tSENT\tLOST")
		for _, pa := range p.Paths {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\n", pa.ID, pa.Plane, pa.State, rttH(pa.RTT), rttH(pa.MinRTT),
				bytesH(float64(pa.Cwnd)), bytesH(float64(pa.Inflight)), pa.Sent, pa.Lost)
		}
		tw.Flush()
	}
}

// rttH formats a round-trip time in milliseconds; 0 is a path or session
// that has not measured one (the JSON omits it).
func rttH(ms float64) string {
	if ms <= 0 {
		return "unknown"
	}
	return fmt.Sprintf("%.1f ms", ms)
}

// rateH formats bytes per second as bits per second.
func rateH(r units.ByteRate) string {
	b := float64(r.Bits())
	switch {
	case b >= 1e9:
		return fmt.Sprintf("%.2f Gbit/s", b/1e9)
	case b >= 1e6:
		return fmt.Sprintf("%.1f Mbit/s", b/1e6)
	case b >= 1e3:
		return fmt.Sprintf("%.1f kbit/s", b/1e3)
	}
	return fmt.Sprintf("%.0f bit/s", b)
}

func bytesH(b float64) string {
	switch {
	case b >= 1<<30:
		return fmt.Sprintf("%.1f GiB", b/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MiB", b/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.1f KiB", b/(1<<10))
	}
	return fmt.Sprintf("%.0f B", b)
}

// adminGet fetches pathQuery from a gateway's admin endpoint (host:port or
// a URL): the body of a 200 answer, at most 16 MiB, or an error that names
// the endpoint and, for another status, what the gateway said.
func adminGet(ctx context.Context, admin, pathQuery string) ([]byte, error) {
	base := admin
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(base, "/")+pathQuery, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("cannot reach the gateway's admin endpoint %s: %w", admin, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		path, _, _ := strings.Cut(pathQuery, "?")
		return nil, fmt.Errorf("%s%s: %s: %s", admin, path, resp.Status, strings.TrimSpace(string(body)))
	}
	return body, nil
}
