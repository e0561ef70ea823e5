package main

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/mrgw/mrgw/config"
	"github.com/mrgw/mrgw/tunnel/pki"
	"github.com/spf13/cobra"
)

func newConfigCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "config", Short: "Work with gateway configuration files"}
	var (
		skipFiles bool
		expiry    time.Duration
	)
	check := &cobra.Command{
		Use:   "check FILE...",
		Short: "Validate configuration files and print every problem found",
		Long: `check loads each file as the daemon would (YAML or TOML, MRGW_* environment overrides
included), validates it strictly and prints every problem with the key it concerns. It
also parses the control.tls.* files as the daemon does at start: the certificate must
chain to the CA, match the key, name node.name and be valid now. Files checked together
are taken for one deployment: a node.name or an address (ip:port) used by two of them is
a problem of the later file. It exits non-zero if any file has a problem. Warnings (a certificate that expires soon, a limits.max_flows
that limits.memory_bytes cannot hold) are printed but do not fail the check.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var opts []config.Option
			if skipFiles {
				opts = append(opts, config.SkipFileChecks())
			}
			bad := 0
			probs := make([][]error, len(args))
			warns := make([][]error, len(args))
			cfgs := make([]*config.Config, len(args))
			for i, path := range args {
				c, err := config.Load(path, opts...)
				if err != nil {
					if probs[i] = config.Problems(err); len(probs[i]) == 0 {
						probs[i] = []error{err}
					}
					continue
				}
				cfgs[i] = c
				for _, w := range c.Warnings() {
					warns[i] = append(warns[i], w)
				}
				if !skipFiles {
					p, w := checkCertFiles(c, time.Now(), expiry)
					probs[i], warns[i] = append(probs[i], p...), append(warns[i], w...)
				}
			}
			// The files of one deployment against each other: names and
			// addresses in use twice.
			for i, p := range config.Fleet(args, cfgs) {
				probs[i] = append(probs[i], p...)
			}
			for i, path := range args {
				out := cmd.OutOrStdout()
				if len(probs[i]) > 0 {
					bad++
					out = cmd.ErrOrStderr()
					fmt.Fprintf(out, "%s: %d problem(s)\n", path, len(probs[i]))
				} else {
					fmt.Fprintf(out, "%s: ok\n", path)
				}
				for _, p := range probs[i] {
					fmt.Fprintf(out, "  - %v\n", p)
				}
				for _, w := range warns[i] {
					fmt.Fprintf(out, "  - warning: %v\n", w)
				}
			}
			if bad > 0 {
				return fmt.Errorf("%d of %d file(s) invalid: %w", bad, len(args), errSilentConfig)
			}
			return nil
		},
	}
	check.Flags().BoolVar(&skipFiles, "skip-file-checks", false, "do not check the certificate files (existence, contents, names, expiry)")
	check.Flags().DurationVar(&expiry, "expiry-warning", 14*24*time.Hour, "warn about a certificate or CA that expires within this time")
	cmd.AddCommand(check, newConfigKeysCmd())
	return cmd
}

// newConfigKeysCmd is `mrgw config keys`: every configuration key as a
// Markdown table, or, with --doc, that table written into a document
// between its markers (docs/CONFIG.md).
func newConfigKeysCmd() *cobra.Command {
	var doc string
	cmd := &cobra.Command{
		Use:   "keys",
		Short: "Print every configuration key: type, default, live reload, environment variable, meaning",
		Long: `keys prints every configuration key as a Markdown table: its type, default, whether a
reload (SIGHUP) applies it live, the environment variable that sets it and what it means.
With --doc FILE it rewrites the table between FILE's markers instead (docs/CONFIG.md:
mrgw config keys --doc docs/CONFIG.md).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if doc == "" {
				_, err := fmt.Fprint(cmd.OutOrStdout(), config.KeyTable())
				return err
			}
			b, err := os.ReadFile(doc)
			if err != nil {
				return err
			}
			out, err := config.WithKeyTable(string(b))
			if err != nil {
				return fmt.Errorf("%s: %w", doc, err)
			}
			return os.WriteFile(doc, []byte(out), 0o644)
		},
	}
	cmd.Flags().StringVar(&doc, "doc", "", "rewrite the key table between the markers of this file instead of printing it")
	return cmd
}

var errSilentConfig = errors.New("see above")

// checkCertFiles parses the control.tls.* files of c as the gateway does at
// start (pki.CheckFiles) and returns its problems and warnings, each naming
// the key of the file.
func checkCertFiles(c *config.Config, now time.Time, soon time.Duration) (problems, warnings []error) {
	tls := c.Control.TLS
	ps, ws := pki.CheckFilesIn(tls.CAFile, tls.CertFile, tls.KeyFile, c.Node.Region, c.Node.Name, now, soon)
	keyed := func(fe *pki.FileError) error {
		key := "control.tls.key_file"
		switch fe.Role {
		case pki.RoleCA:
			key = "control.tls.ca_file"
		case pki.RoleCert:
			key = "control.tls.cert_file"
		}
		return &config.FieldError{Key: key, Msg: fmt.Sprintf("%s: %v", fe.Path, fe.Err)}
	}
	for _, p := range ps {
		problems = append(problems, keyed(p))
	}
	for _, w := range ws {
		warnings = append(warnings, keyed(w))
	}
	return problems, warnings
}
