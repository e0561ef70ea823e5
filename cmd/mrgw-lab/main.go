// Command mrgw-lab is mrgw's lab: the two-region demo, the simulator, the
// load tests over emulated links and the wire-protocol conformance suite.
// It is for trying mrgw out, measuring it and testing other
// implementations; the daemon deployed on edge hosts is cmd/mrgw, which
// links none of this.
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
		Use:   "mrgw-lab",
		Short: "mrgw's lab: demo, simulator, load tests and conformance suite",
		Long: `mrgw-lab runs mrgw where nothing needs deploying: a two-region demo in one process
(demo), the transport in a discrete-event simulator (sim), real sockets over loopback link
emulators against TCP, QUIC, kcp and RoCEv2 (loadtest), and the wire-protocol conformance
suite (conformance). The gateway daemon itself is the mrgw binary (cmd/mrgw).`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	cli.AddVersion(root)
	root.AddCommand(newSimCmd(), newLoadtestCmd(), newConformanceCmd(), newDemoCmd())
	return root
}
