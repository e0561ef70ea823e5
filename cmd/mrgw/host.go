package main

import (
	"context"
	crand "crypto/rand"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/mrgw/mrgw/cc"
	"github.com/mrgw/mrgw/config"
	"github.com/mrgw/mrgw/host"
	"github.com/mrgw/mrgw/internal/cli"
	"github.com/mrgw/mrgw/metaroce"

	"github.com/mrgw/mrgw/units"
)

// lanControllers are the controllers a host may use towards its gateways:
// those lan.congestion_control accepts (package config).
var lanControllers = []string{config.LANControllerAIMD, config.LANControllerFixed}

// hostFlags are the flags every host command shares.
type hostFlags struct {
	gateways    []string
	region      string
	name        string
	listen      string
	mtu         int
	paths       int
	ccName      string
	deadAfter   time.Duration
	openTimeout time.Duration
	verbose     bool
	keyFile     string
	takeover    bool
}

func (f *hostFlags) add(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringSliceVar(&f.gateways, "gateway", nil, "LAN addresses of the local gateway pair, ADDR:PORT[,ADDR:PORT]")
	fl.StringVar(&f.region, "region", "", "this host's region")
	fl.StringVar(&f.name, "name", "", "this host's endpoint name")
	fl.StringVar(&f.listen, "listen", "127.0.0.1:0", "local listening address")
	fl.IntVar(&f.mtu, "mtu", 4096, "MetaRoCE payload size")
	fl.IntVar(&f.paths, "paths", 4, "paths per gateway connection")
	fl.StringVar(&f.ccName, "cc", "fixed", "congestion controller of the gateway connections: "+strings.Join(lanControllers, " or ")+" (what the gateways' lan.congestion_control accepts)")
	fl.DurationVar(&f.deadAfter, "dead-after", host.DefaultDeadAfter, "give a gateway up (fail its flows over) when it has answered nothing this long while the host waited for it")
	fl.DurationVar(&f.openTimeout, "open-timeout", 5*time.Second, "bound on registering with the gateways and opening a flow")
	fl.BoolVarP(&f.verbose, "verbose", "v", false, "log connection and flow events")
	fl.StringVar(&f.keyFile, "key-file", "", "file holding this host's credential, ID:BASE64 (an entry of the gateways' lan.host_keys)")
	fl.BoolVar(&f.takeover, "takeover", false, "take the endpoint name over from a live host that holds it")
	_ = cmd.MarkFlagRequired("gateway")
	_ = cmd.MarkFlagRequired("region")
	_ = cmd.MarkFlagRequired("name")
}

func (f *hostFlags) config(stderr io.Writer) (host.Config, error) {
	cfg := host.Config{Name: f.name, Region: f.region, DeadAfter: f.deadAfter, OpenTimeout: f.openTimeout, Takeover: f.takeover}
	if f.keyFile != "" {
		b, err := os.ReadFile(f.keyFile)
		if err != nil {
			return cfg, fmt.Errorf("--key-file: %w", err)
		}
		k, err := config.ParseHostKey(string(b))
		if err != nil {
			return cfg, fmt.Errorf("--key-file %s: %v", f.keyFile, err)
		}
		cfg.Key = &host.Key{ID: k.ID, Secret: k.Secret}
	}
	cfg.Protocol.MTU = f.mtu
	cfg.Protocol.Paths = f.paths
	if !slices.Contains(lanControllers, f.ccName) {
		return cfg, fmt.Errorf("--cc %q: the LAN accepts %s", f.ccName, strings.Join(lanControllers, " or "))
	}
	ctl, err := cc.Lookup(f.ccName, cc.Params{})
	if err != nil {
		return cfg, fmt.Errorf("--cc: %w", err)
	}
	cfg.Protocol.CC = ctl
	for _, g := range f.gateways {
		a, err := netip.ParseAddrPort(strings.TrimSpace(g))
		if err != nil {
			return cfg, fmt.Errorf("--gateway %q: %w", g, err)
		}
		cfg.Gateways = append(cfg.Gateways, a)
	}
	l, err := netip.ParseAddrPort(f.listen)
	if err != nil {
		return cfg, fmt.Errorf("--listen %q: %w", f.listen, err)
	}
	cfg.Listen = l
	level := slog.LevelWarn
	if f.verbose {
		level = slog.LevelInfo
	}
	var hd slog.Handler = slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level})
	if !f.verbose {
		hd = dropFlowFailed{hd}
	}
	cfg.Logger = slog.New(hd)
	return cfg, nil
}

// dropFlowFailed leaves out the library's warning that a flow failed: the
// command reports the flow's error itself, as it exits, and one line says
// it once.
type dropFlowFailed struct{ slog.Handler }

func (h dropFlowFailed) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == host.MsgFlowFailed {
		return nil
	}
	return h.Handler.Handle(ctx, r)
}

func (h dropFlowFailed) WithAttrs(as []slog.Attr) slog.Handler {
	return dropFlowFailed{h.Handler.WithAttrs(as)}
}

func (h dropFlowFailed) WithGroup(name string) slog.Handler {
	return dropFlowFailed{h.Handler.WithGroup(name)}
}

// hostSignalContext ends on SIGINT or SIGTERM.
func hostSignalContext(cmd *cobra.Command) (context.Context, context.CancelFunc) {
	parent := cmd.Context()
	if parent == nil {
		parent = context.Background()
	}
	return signal.NotifyContext(parent, os.Interrupt, syscall.SIGTERM)
}

// hostRunContext is hostSignalContext ended also after limit, when limit
// is positive (a command's --duration or --timeout).
func hostRunContext(cmd *cobra.Command, limit time.Duration) (context.Context, context.CancelFunc) {
	ctx, stop := hostSignalContext(cmd)
	if limit <= 0 {
		return ctx, stop
	}
	ctx, cancel := context.WithTimeout(ctx, limit)
	return ctx, func() { cancel(); stop() }
}

func newHostCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "host",
		Short: "Move traffic by hand as a host behind the local gateway pair",
		Long: `host runs the host side of mrgw (package host): it connects to the local gateway
pair, registers an endpoint name, and sends to or receives from an endpoint in another
region. Completions are end to end: a message counts as sent only once the destination
reported it in its memory. send and recv move test traffic; forward carries TCP
connections; cp copies files and directory trees to the receiver cp-serve runs on an
endpoint of another region.

On one machine give every process its own loopback IP (127.0.0.2, 127.0.0.3, ...).`,
	}
	cmd.AddCommand(newHostRecvCmd(), newHostSendCmd(), newHostForwardCmd(), newHostCpCmd(), newHostCpServeCmd())
	return cmd
}

func newHostRecvCmd() *cobra.Command {
	var (
		hf       hostFlags
		memBytes uint64
		key      uint32
		duration time.Duration
		credit   int64
		quiet    bool
	)
	cmd := &cobra.Command{
		Use:   "recv",
		Short: "Register memory and report every message that lands in it",
		Example: `  # us-east of config/examples/two-region (the gateways' lan.listen):
  mrgw host recv --gateway 127.0.0.21:14793,127.0.0.22:14794 --region us-east \
      --name trainer-0 --listen 127.0.0.31:0 --memory 256MiB --duration 60s \
      --key-file config/examples/two-region/host.key`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := hf.config(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			if credit != 0 {
				cfg.ReceiveCredit = uint64(credit)
			}
			ctx, stop := hostRunContext(cmd, duration)
			defer stop()
			h, err := host.New(cfg)
			if err != nil {
				return err
			}
			defer h.Close()
			if err := h.RegisterMemory(key, make([]byte, memBytes)); err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "%s/%s listening on %v, %d bytes under key %d\n", cfg.Region, cfg.Name, h.LocalAddr(), memBytes, key)
			start := time.Now()
			var msgs, total uint64
			flows := map[uint64]bool{}
		loop:
			for {
				select {
				case d, ok := <-h.Received():
					if !ok {
						break loop
					}
					msgs++
					total += d.Len
					flows[d.Flow] = true
					if !quiet {
						op := "WRITE"
						if d.Op == metaroce.OpSend {
							op = "SEND"
						}
						fmt.Fprintf(out, "flow %016x seq %d from %s/%s: %s %d bytes (key %d, addr %d); total %d messages, %d bytes\n",
							d.Flow, d.Seq, d.SrcRegion, d.SrcEndpoint, op, d.Len, d.Key, d.Addr, msgs, total)
					}
				case <-ctx.Done():
					break loop
				}
			}
			el := time.Since(start)
			st := h.Stats()
			fmt.Fprintf(out, "received %d messages, %d bytes, from %d flows in %v (%s); %d duplicates dropped\n",
				msgs, total, len(flows), el.Round(time.Millisecond), hostRate(total, el), st.Duplicates)
			return nil
		},
	}
	hf.add(cmd)
	fl := cmd.Flags()
	cli.SizeVar(fl, &memBytes, "memory", 64<<20, "memory to register (units: 256MiB, 1GiB)")
	fl.Uint32Var(&key, "key", 1, "memory key to register them under")
	fl.DurationVar(&duration, "duration", 0, "stop after this long (0: until interrupted)")
	cli.SizeVar(fl, &credit, "credit", 0, "credit granted to each incoming flow (default 64MiB)")
	fl.BoolVarP(&quiet, "quiet", "q", false, "print only the summary")
	return cmd
}

func newHostSendCmd() *cobra.Command {
	var (
		hf       hostFlags
		to       string
		n        uint64
		count    int
		key      uint32
		addr     uint64
		inflight int
		class    string
		timeout  time.Duration
	)
	cmd := &cobra.Command{
		Use:   "send",
		Short: "WRITE random data to an endpoint in another region and measure it",
		Example: `  # eu-west of config/examples/two-region (the gateways' lan.listen):
  mrgw host send --gateway 127.0.0.11:14791,127.0.0.12:14792 --region eu-west \
      --name loader-0 --listen 127.0.0.32:0 --to us-east/trainer-0 --size 1MiB --count 100 \
      --key-file config/examples/two-region/host.key`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			region, endpoint, ok := strings.Cut(to, "/")
			if !ok || region == "" || endpoint == "" {
				return fmt.Errorf("--to %q: want REGION/ENDPOINT", to)
			}
			if n < 1 {
				return fmt.Errorf("--size must be at least 1 byte")
			}
			if count < 1 || inflight < 1 {
				return fmt.Errorf("--count and --inflight must be at least 1")
			}
			cfg, err := hf.config(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			sigCtx, stop := hostSignalContext(cmd)
			defer stop()
			ctx := sigCtx
			if timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, timeout)
				defer cancel()
			}
			h, err := host.New(cfg)
			if err != nil {
				return err
			}
			defer h.Close()
			out := cmd.OutOrStdout()
			f, err := h.OpenFlow(ctx, region, endpoint, host.FlowOptions{Class: class})
			if err != nil {
				if sigCtx.Err() != nil {
					fmt.Fprintf(out, "interrupted before the flow to %s opened\n", to)
					return nil
				}
				return err
			}
			defer f.Close()
			fmt.Fprintf(out, "flow %016x to %s via %v, credit %d bytes\n", f.ID(), to, f.Gateway(), f.Credit())
			// One random buffer, written again and again: it is only read
			// while messages are in flight.
			data := make([]byte, n)
			_, _ = crand.Read(data)
			lat := make([]time.Duration, 0, count)
			var mu sync.Mutex
			var firstErr error
			sem := make(chan struct{}, inflight)
			var wg sync.WaitGroup
			start := time.Now()
			sent := 0
			for i := 0; i < count && ctx.Err() == nil; i++ {
				select {
				case sem <- struct{}{}:
				case <-ctx.Done():
					continue
				}
				t0 := time.Now()
				p, err := f.Write(ctx, key, addr, data)
				if err != nil && p == nil {
					<-sem
					mu.Lock()
					firstErr = hostFirstErr(firstErr, err)
					mu.Unlock()
					break
				}
				sent++
				wg.Go(func() {
					defer func() { <-sem }()
					werr := p.Wait(ctx)
					mu.Lock()
					defer mu.Unlock()
					if werr != nil {
						firstErr = hostFirstErr(firstErr, werr)
						return
					}
					lat = append(lat, time.Since(t0))
				})
				if err != nil {
					mu.Lock()
					firstErr = hostFirstErr(firstErr, err)
					mu.Unlock()
					break
				}
			}
			wg.Wait()
			el := time.Since(start)
			done := uint64(len(lat))
			fmt.Fprintf(out, "%d of %d messages of %d bytes completed end to end in %v: %s\n",
				done, count, n, el.Round(time.Millisecond), hostRate(done*n, el))
			if len(lat) > 0 {
				slices.Sort(lat)
				fmt.Fprintf(out, "latency p50 %v p90 %v p99 %v max %v\n",
					hostPct(lat, 50), hostPct(lat, 90), hostPct(lat, 99), lat[len(lat)-1])
			}
			if st := h.Stats(); st.Reopens > 0 {
				fmt.Fprintf(out, "flow re-opened %d times (failover)\n", st.Reopens)
			}
			// Interrupted (Ctrl-C, SIGTERM): what completed is reported
			// above; the messages cut short are no error of the transfer.
			if sigCtx.Err() != nil {
				fmt.Fprintf(out, "interrupted after %d of %d messages\n", done, count)
				return nil
			}
			if firstErr != nil {
				return firstErr
			}
			if sent < count {
				return fmt.Errorf("stopped after %d of %d messages: %w", sent, count, context.Cause(ctx))
			}
			return nil
		},
	}
	hf.add(cmd)
	fl := cmd.Flags()
	fl.StringVar(&to, "to", "", "destination REGION/ENDPOINT")
	cli.SizeVar(fl, &n, "size", 1<<20, "bytes per message (units: 4096, 64KiB, 1MiB, 1.5MB)")
	fl.IntVar(&count, "count", 100, "messages to send")
	fl.Uint32Var(&key, "key", 1, "destination memory key")
	fl.Uint64Var(&addr, "addr", 0, "destination offset in the region (every message writes there)")
	fl.IntVar(&inflight, "inflight", 16, "messages in flight at once (the credit may allow fewer)")
	fl.StringVar(&class, "class", "", "scheduling class of the flow")
	fl.DurationVar(&timeout, "timeout", 0, "give up after this long (0: none)")
	_ = cmd.MarkFlagRequired("to")
	return cmd
}

// hostFirstErr keeps the first error.
func hostFirstErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

// hostPct returns the p-th percentile of sorted durations.
func hostPct(sorted []time.Duration, p int) time.Duration {
	i := (len(sorted)*p + 99) / 100
	return sorted[min(max(i-1, 0), len(sorted)-1)]
}

// hostRate formats bytes over d as Gbit/s and MB/s.
func hostRate(bytes uint64, d time.Duration) string {
	if d <= 0 {
		return "n/a"
	}
	r := units.Throughput(float64(bytes), d.Seconds())
	return fmt.Sprintf("%.3f Gbit/s (%.1f MB/s)", float64(r)/1e9, float64(r.Bytes())/1e6)
}
