// Command mrgw is the MetaRoCE scale-across gateway daemon and its operator
// tools: run, status, config check, cert, host and version. It is the
// binary deployed on edge hosts, and it links only what the daemon needs;
// the simulator, the load tests, the demo and the conformance suite are in
// cmd/mrgw-lab.
package main

import (
	"github.com/spf13/cobra"

	"github.com/mrgw/mrgw/internal/cli"
)

// errSilent marks an error whose message the command has already printed.
var errSilent = cli.ErrSilent

func main() { cli.Main(newRoot()) }

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:   "mrgw",
		Short: "mrgw carries MetaRoCE traffic between regions over many parallel paths",
		Long: `mrgw is the MetaRoCE scale-across gateway. A pair of gateways at each region's edge
terminates local MetaRoCE traffic and relays it to other regions over many per-path tunnels,
with congestion control built for millisecond round trips.

This binary is the daemon and its operator tools. The demo, the simulator, the load tests
and the conformance suite are in the lab binary: go run ./cmd/mrgw-lab --help.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	cli.AddVersion(root)
	root.AddCommand(newConfigCmd(), newCertCmd(), newRunCmd(), newStatusCmd(), newHostCmd(), newProbeCmd())
	return root
}
