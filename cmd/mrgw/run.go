//go:build linux

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/mrgw/mrgw/config"
	"github.com/mrgw/mrgw/gateway"
	"github.com/mrgw/mrgw/metrics"
)

// newRunCmd is `mrgw run`: the gateway daemon.
func newRunCmd() *cobra.Command {
	var (
		path    string
		drainIn time.Duration
		pprofOn bool
		wire    []uint
		metaV   int
	)
	cmd := &cobra.Command{
		Use:   "run --config FILE",
		Short: "Run the gateway daemon",
		Long: `run starts the gateway described by a configuration file (YAML or TOML; MRGW_*
environment variables and --key=value flags override it, see docs/CONFIG.md).

Signals: SIGHUP reloads the file; the keys marked live in docs/CONFIG.md take effect at
once, and a reload that changes anything else is refused (the daemon keeps running with
its configuration and logs which keys need a restart). SIGINT or SIGTERM drains the
gateway (new flows refused, in-flight messages finished or reset so hosts move to the
region's other gateways, peers told) and exits; a second signal exits at once.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if path == "" {
				return errors.New("--config FILE is required")
			}
			cfg, err := config.Load(path, config.WithFlags(cmd.Flags()))
			if err != nil {
				printProblems(cmd, err)
				return errSilent
			}
			log := daemonLogger(cfg, cmd.ErrOrStderr())
			logWarnings(log, cfg)
			applyMemoryLimit(log, cfg, os.Getenv)
			opts := gateway.Options{LogOutput: cmd.ErrOrStderr(), Pprof: pprofOn, GossipMetaVersion: metaV}
			for _, v := range wire {
				if v < 1 || v > 2 {
					return fmt.Errorf("--wire-versions: %d is not a wire version (1 or 2)", v)
				}
				opts.WireVersions = append(opts.WireVersions, uint8(v))
			}
			g, err := gateway.New(cfg, opts)
			if err != nil {
				return err
			}
			sigs := make(chan os.Signal, 4)
			signal.Notify(sigs, syscall.SIGHUP, syscall.SIGINT, syscall.SIGTERM)
			defer signal.Stop(sigs)
			done := make(chan error, 1)
			go func() { done <- g.Run(context.Background()) }()
			for {
				select {
				case err := <-done:
					return err
				case s := <-sigs:
					if s == syscall.SIGHUP {
						next, err := config.Load(path, config.WithFlags(cmd.Flags()))
						if err != nil {
							g.Metrics().ConfigReload(metrics.ResultInvalid)
							log.Error("reload: configuration invalid; keeping the running one", "err", err)
							continue
						}
						if err := g.Reload(next); err != nil {
							log.Error("reload refused; keeping the running configuration", "err", err)
							continue
						}
						logWarnings(log, next)
						applyMemoryLimit(log, next, os.Getenv)
						continue
					}
					log.Info("signal: draining", "signal", s.String(), "timeout", drainIn)
					ctx, cancel := context.WithTimeout(context.Background(), drainIn)
					go func() {
						select {
						case <-sigs:
							log.Warn("second signal: stopping at once")
							g.Close()
						case <-ctx.Done():
						}
					}()
					err := g.Shutdown(ctx)
					cancel()
					<-done
					return err
				}
			}
		},
	}
	cmd.Flags().StringVar(&path, "config", "", "configuration file (.yaml, .yml or .toml)")
	cmd.Flags().DurationVar(&drainIn, "drain-timeout", 30*time.Second, "longest graceful shutdown before exiting (keep the service manager's stop timeout above it)")
	cmd.Flags().BoolVar(&pprofOn, "pprof", false, "serve Go runtime profiles at /debug/pprof/ on the admin listener (admin.listen)")
	// Tests of a fleet in the middle of an upgrade run some gateways as
	// the release before wire version 2 (loadtest/chaos, rolling-upgrade).
	cmd.Flags().UintSliceVar(&wire, "wire-versions", nil, "MetaRoCE wire versions to speak (default 1,2; 1 alone speaks as the release before version 2)")
	_ = cmd.Flags().MarkHidden("wire-versions")
	cmd.Flags().IntVar(&metaV, "gossip-meta-version", 0, "gossip metadata version to announce (default the newest; 1 announces as a release before version 2)")
	_ = cmd.Flags().MarkHidden("gossip-meta-version")
	config.BindFlags(cmd.Flags())
	return cmd
}

// applyMemoryLimit sets the Go runtime's soft memory limit from
// limits.memory_bytes (gateway.MemoryLimit), unless GOMEMLIMIT is set in
// the environment, which the runtime has applied already and which wins.
// It returns the limit in force. Without it the heap grew to three times
// limits.memory_bytes in registration storms (745-806 MB RSS with 256 MiB)
// before the garbage collector ran.
func applyMemoryLimit(log *slog.Logger, cfg *config.Config, getenv func(string) string) int64 {
	if v := getenv("GOMEMLIMIT"); v != "" {
		cur := debug.SetMemoryLimit(-1)
		log.Info("memory limit from GOMEMLIMIT", "bytes", cur)
		return cur
	}
	n := gateway.MemoryLimit(cfg)
	debug.SetMemoryLimit(n)
	log.Info("memory limit", "bytes", n, "limits.memory_bytes", cfg.Limits.MemoryBytes)
	return n
}

// daemonLogger is the logger of the daemon's own lines (configuration
// warnings, signals, reloads): on w, in the configuration's log.format,
// at its log.level as it was at start, named like the gateway's lines.
func daemonLogger(cfg *config.Config, w io.Writer) *slog.Logger {
	var level slog.Level
	if err := level.UnmarshalText([]byte(cfg.Log.Level)); err != nil {
		level = slog.LevelInfo
	}
	ho := &slog.HandlerOptions{Level: level}
	var h slog.Handler = slog.NewTextHandler(w, ho)
	if cfg.Log.Format == config.LogJSON {
		h = slog.NewJSONHandler(w, ho)
	}
	return slog.New(h).With("gateway", cfg.Node.Name)
}

// logWarnings logs every [config.Config.Warnings]: settings that are
// allowed but probably not what the operator meant (`mrgw config check`
// prints the same).
func logWarnings(log *slog.Logger, cfg *config.Config) {
	for _, w := range cfg.Warnings() {
		log.Warn("configuration warning", "key", w.Key, "problem", w.Msg)
	}
}

func printProblems(cmd *cobra.Command, err error) {
	probs := config.Problems(err)
	if len(probs) == 0 {
		probs = []error{err}
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "mrgw: configuration has %d problem(s):\n", len(probs))
	for _, p := range probs {
		fmt.Fprintf(cmd.ErrOrStderr(), "  - %v\n", p)
	}
}
