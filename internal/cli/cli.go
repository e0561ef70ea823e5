// Package cli holds what the mrgw daemon binary (cmd/mrgw) and the lab
// binary (cmd/mrgw-lab) share: how they exit on an error, how they say
// which build they are, their unit flags, and what their tests share
// (Run, CheckVersion).
package cli

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/mrgw/mrgw/internal/buildinfo"
	"github.com/mrgw/mrgw/metaroce"
)

// ErrSilent marks an error whose message the command has already printed.
var ErrSilent = errors.New("")

// Main runs root and exits non-zero on an error, printing it unless it is
// [ErrSilent].
func Main(root *cobra.Command) {
	if err := root.Execute(); err != nil {
		if !errors.Is(err, ErrSilent) {
			fmt.Fprintf(os.Stderr, "%s: %v\n", root.Name(), err)
		}
		os.Exit(1)
	}
}

// VersionLine is what `PROGRAM version` and `PROGRAM --version` print:
// the program, its build ([buildinfo.Get], the same as the mrgw_build_info
// metric) and the wire-protocol version it speaks.
func VersionLine(program string) string {
	return fmt.Sprintf("%s %s, wire protocol v%d", program, buildinfo.Get(), metaroce.Version)
}

// AddVersion gives root a --version flag and a version subcommand that
// print [VersionLine].
func AddVersion(root *cobra.Command) {
	root.Version = VersionLine(root.Name())
	root.SetVersionTemplate("{{.Version}}\n")
	root.AddCommand(&cobra.Command{
		Use:   "version",
		Short: "Print the build (version, VCS revision and time, Go version) and the wire-protocol version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintln(cmd.OutOrStdout(), VersionLine(root.Name()))
			return nil
		},
	})
}
