package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/mrgw/mrgw/tunnel/pki"
	"github.com/spf13/cobra"
)

// newCertCmd mints development certificates. Production deployments use the
// operator's own CA; these are for demos, tests and trying mrgw out.
func newCertCmd() *cobra.Command {
	var (
		dir      string
		caName   string
		region   string
		validity time.Duration
	)
	cmd := &cobra.Command{
		Use:   "cert [REGION/]GATEWAY...",
		Short: "Mint a development CA and a certificate per gateway",
		Long: `cert writes DIR/ca.pem and DIR/ca-key.pem (reusing them if they exist) and, for every
gateway given, DIR/NAME.pem and DIR/NAME-key.pem: ECDSA P-256, the name as DNS SAN
and CN, valid for client and server authentication, as the gateway's mutual-TLS control
channel expects. A gateway given as REGION/NAME (or NAME with --region) also gets its
identity as the URI SAN mrgw://REGION/NAME: peers accept it when that matches what it
announces in gossip, with no list of peers to keep. A bare NAME without --region makes
a certificate without a region, as before: peers accept it only when their
configuration names the gateway (control.peer_names or regions). Keys are written with
mode 0600. For production, use your own CA.`,
		Example: "  mrgw cert --dir config/examples/two-region/certs eu-west/euw-gw1 eu-west/euw-gw2 us-east/use-gw1 us-east/use-gw2\n" +
			"  mrgw cert --dir certs --region ap-south aps-gw1 aps-gw2",
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return err
			}
			now := time.Now()
			caCert, caKey := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "ca-key.pem")
			var ca *pki.CA
			if _, err := os.Stat(caCert); err == nil {
				if ca, err = pki.LoadCA(caCert, caKey, now); err != nil {
					return fmt.Errorf("existing CA: %w", err)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "using existing CA %s\n", caCert)
			} else {
				if ca, err = pki.NewCA(caName, now, 2*validity); err != nil {
					return err
				}
				if err := ca.WriteFiles(caCert, caKey); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "wrote CA %s\n", caCert)
			}
			for _, arg := range args {
				reg, name, ok := strings.Cut(arg, "/")
				if !ok {
					reg, name = region, arg
				}
				id, err := ca.IssueIn(reg, name, now, validity)
				if err != nil {
					return fmt.Errorf("%s: %w", arg, err)
				}
				cert, key := filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
				if err := id.WriteFiles(cert, key); err != nil {
					return err
				}
				if reg != "" {
					fmt.Fprintf(cmd.OutOrStdout(), "wrote %s and %s (%s)\n", cert, key, pki.IdentityURI(reg, name))
				} else {
					fmt.Fprintf(cmd.OutOrStdout(), "wrote %s and %s (no region)\n", cert, key)
				}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "certs", "directory to write the files into")
	cmd.Flags().StringVar(&caName, "ca-name", "mrgw-dev-ca", "common name of a new CA")
	cmd.Flags().StringVar(&region, "region", "", "region of the gateways given without one (REGION/NAME overrides it)")
	cmd.Flags().DurationVar(&validity, "validity", 90*24*time.Hour, "validity of each gateway certificate (the CA gets twice this)")
	return cmd
}
