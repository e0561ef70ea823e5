// Command mrgw is the MetaRoCE scale-across gateway: the daemon, its
// operator tools, the simulator and the load tests, in one binary.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

// errSilent marks an error whose message the command has already printed.
var errSilent = errors.New("")

func main() {
	root := newRoot()
	if err := root.Execute(); err != nil {
		if !errors.Is(err, errSilent) {
			fmt.Fprintln(os.Stderr, "mrgw:", err)
		}
		os.Exit(1)
	}
}

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:   "mrgw",
		Short: "mrgw carries MetaRoCE traffic between regions over many parallel paths",
		Long: `mrgw is the MetaRoCE scale-across gateway. A pair of gateways at each region's edge
terminates local MetaRoCE traffic and relays it to other regions over many per-path tunnels,
with congestion control built for millisecond round trips.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newVersionCmd(), newSimCmd(), newConfigCmd(), newCertCmd(), newLoadtestCmd(), newConformanceCmd(),
		newRunCmd(), newDemoCmd(), newStatusCmd(), newHostCmd(), newProbeCmd())
	return root
}
