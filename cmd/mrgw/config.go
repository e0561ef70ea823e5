package main

import (
	"errors"
	"fmt"

	"github.com/mrgw/mrgw/config"
	"github.com/spf13/cobra"
)

func newConfigCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "config", Short: "Work with gateway configuration files"}
	var skipFiles bool
	check := &cobra.Command{
		Use:   "check FILE...",
		Short: "Validate configuration files and print every problem found",
		Long: `check loads each file as the daemon would (YAML or TOML, MRGW_* environment overrides
included), validates it strictly and prints every problem with the key it concerns.
It exits non-zero if any file has a problem.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var opts []config.Option
			if skipFiles {
				opts = append(opts, config.SkipFileChecks())
			}
			bad := 0
			for _, path := range args {
				err := config.Check(path, opts...)
				if err == nil {
					fmt.Fprintf(cmd.OutOrStdout(), "%s: ok\n", path)
					continue
				}
				bad++
				probs := config.Problems(err)
				if len(probs) == 0 {
					probs = []error{err}
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "%s: %d problem(s)\n", path, len(probs))
				for _, p := range probs {
					fmt.Fprintf(cmd.ErrOrStderr(), "  - %v\n", p)
				}
			}
			if bad > 0 {
				return fmt.Errorf("%d of %d file(s) invalid: %w", bad, len(args), errSilentConfig)
			}
			return nil
		},
	}
	check.Flags().BoolVar(&skipFiles, "skip-file-checks", false, "do not check that certificate files exist and are readable")
	cmd.AddCommand(check)
	return cmd
}

var errSilentConfig = errors.New("see above")
