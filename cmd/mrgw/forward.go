package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"

	"github.com/mrgw/mrgw/forward"
	"github.com/mrgw/mrgw/host"
	"github.com/mrgw/mrgw/internal/cli"
	"github.com/mrgw/mrgw/stream"
)

// localRule is --local ADDR=REGION/ENDPOINT:PORT.
type localRule struct {
	listen string
	to     stream.Addr
}

// exposeRule is --expose PORT=HOST:PORT.
type exposeRule struct {
	port, target string
}

func parseLocalRules(specs []string) ([]localRule, error) {
	var out []localRule
	for _, s := range specs {
		l, r, ok := strings.Cut(s, "=")
		if !ok || l == "" {
			return nil, fmt.Errorf("--local %q: want LISTEN-ADDR=REGION/ENDPOINT:PORT, as 127.0.0.1:5201=us-east/trainer-0:5201", s)
		}
		if _, _, err := net.SplitHostPort(l); err != nil {
			return nil, fmt.Errorf("--local %q: listen address: %v", s, err)
		}
		to, err := stream.ParseAddr(r)
		if err != nil {
			return nil, fmt.Errorf("--local %q: %v", s, err)
		}
		out = append(out, localRule{listen: l, to: to})
	}
	return out, nil
}

func parseExposeRules(specs []string) ([]exposeRule, error) {
	var out []exposeRule
	seen := map[string]bool{}
	for _, s := range specs {
		p, t, ok := strings.Cut(s, "=")
		if !ok {
			return nil, fmt.Errorf("--expose %q: want PORT=TARGET-HOST:PORT, as 5201=127.0.0.1:5201", s)
		}
		if _, err := stream.ParsePort(p); err != nil {
			return nil, fmt.Errorf("--expose %q: %v", s, err)
		}
		if _, _, err := net.SplitHostPort(t); err != nil {
			return nil, fmt.Errorf("--expose %q: target: %v", s, err)
		}
		if seen[p] {
			return nil, fmt.Errorf("--expose %q: port %s exposed twice", s, p)
		}
		seen[p] = true
		out = append(out, exposeRule{port: p, target: t})
	}
	return out, nil
}

func newHostForwardCmd() *cobra.Command {
	var (
		hf               hostFlags
		locals, exposes  []string
		window, buffer   uint64
		maxConns         int
		metricsAddr      string
		drain            time.Duration
		dialTimeout      time.Duration
		connectionsTotal = func(f *forward.Forwarder) string {
			s := f.Stats()
			return fmt.Sprintf("%d local, %d exposed, %d resets, refused %v", s.Accepted, s.Exposed, s.Resets, s.Refused)
		}
	)
	cmd := &cobra.Command{
		Use:   "forward",
		Short: "Carry TCP connections to and from endpoints in other regions",
		Long: `forward carries ordinary TCP connections between regions over mrgw streams.

--local LISTEN=REGION/ENDPOINT:PORT listens on a local TCP address and forwards every
connection to a port of an endpoint in another region; --expose PORT=TARGET connects
every stream that arrives on PORT of this endpoint on to a TCP target here. One process
may do both, any number of times. Half-closes and resets are carried both ways; a
connection that cannot be forwarded (unknown endpoint, nothing exposed there, target
refused, no credit at a gateway, --max-conns reached) is reset at once, logged and
counted (--metrics serves the counters to Prometheus).

Memory: at most --max-conns connections, each holding up to 2 x --window of stream
buffers and 2 x --buffer of copy buffers on each host. One connection carries at most
--window per round trip: 4MiB at 50 ms is 670 Mbit/s.

SIGINT or SIGTERM stops accepting, waits up to --drain for the connections to end,
then resets the rest.`,
		Example: `  # us-east: expose an iperf3 server that listens on 127.0.0.1:5201
  mrgw host forward --gateway 127.0.0.21:14793,127.0.0.22:14794 --region us-east \
      --name trainer-0 --listen 127.0.0.31:0 --key-file config/examples/two-region/host.key \
      --expose 5201=127.0.0.1:5201
  # eu-west: clients connect to 127.0.0.1:15201
  mrgw host forward --gateway 127.0.0.11:14791,127.0.0.12:14792 --region eu-west \
      --name loader-0 --listen 127.0.0.32:0 --key-file config/examples/two-region/host.key \
      --local 127.0.0.1:15201=us-east/trainer-0:5201
  iperf3 -c 127.0.0.1 -p 15201 -P 8`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			lr, err := parseLocalRules(locals)
			if err != nil {
				return err
			}
			er, err := parseExposeRules(exposes)
			if err != nil {
				return err
			}
			if len(lr)+len(er) == 0 {
				return errors.New("nothing to forward: give --local and/or --expose")
			}
			if maxConns < 1 {
				return fmt.Errorf("--max-conns %d: want at least 1", maxConns)
			}
			cfg, err := hf.config(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			log := cfg.Logger
			// Listen on every local address before registering, so that a
			// port in use is reported before anything else happens.
			var lns []net.Listener
			defer func() {
				for _, ln := range lns {
					ln.Close()
				}
			}()
			for _, r := range lr {
				ln, err := net.Listen("tcp", r.listen)
				if err != nil {
					return fmt.Errorf("--local %s: %w", r.listen, err)
				}
				lns = append(lns, ln)
			}
			h, err := host.New(cfg)
			if err != nil {
				return err
			}
			defer h.Close()
			mux, err := stream.New(h, stream.Config{Window: int(window), MaxStreams: 2 * maxConns, Logger: log})
			if err != nil {
				return fmt.Errorf("--window: %w", err)
			}
			defer mux.Close()
			fwd := forward.New(mux, forward.Config{MaxConns: maxConns, BufferSize: int(buffer), DialTimeout: dialTimeout, Logger: log})
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "%s/%s registered; memory bound %s (%d connections x (2 x %s window + 2 x %s buffer))\n",
				cfg.Region, cfg.Name, sizeString(uint64(maxConns)*(2*window+2*buffer)), maxConns, sizeString(window), sizeString(buffer))
			if metricsAddr != "" {
				stopMetrics, err := serveForwardMetrics(metricsAddr, fwd, mux, log)
				if err != nil {
					return err
				}
				defer stopMetrics()
			}
			sig, stop := hostSignalContext(cmd)
			defer stop()
			// The signal stops accepting; connections then have --drain
			// to finish before they are reset.
			accept, stopAccept := context.WithCancel(context.Background())
			defer stopAccept()
			errc := make(chan error, len(lr)+len(er))
			var wg sync.WaitGroup
			for i, r := range lr {
				ln := lns[i]
				fmt.Fprintf(out, "forwarding %v -> %v\n", ln.Addr(), r.to)
				wg.Go(func() { errc <- fwd.Local(accept, ln, r.to) })
			}
			for _, r := range er {
				fmt.Fprintf(out, "exposing port %s -> %s\n", r.port, r.target)
				wg.Go(func() { errc <- fwd.Expose(accept, r.port, r.target) })
			}
			select {
			case <-sig.Done():
			case err = <-errc:
				if err != nil {
					log.Error("forward stopped", "err", err)
				}
			}
			stopAccept()
			wg.Wait()
			fmt.Fprintf(out, "stopping: %d connections active, draining up to %v\n", fwd.Stats().Active, drain)
			drained := make(chan struct{})
			go func() { fwd.Wait(); close(drained) }()
			select {
			case <-drained:
			case <-time.After(drain):
			}
			fwd.Close()
			fmt.Fprintf(out, "stopped: %s\n", connectionsTotal(fwd))
			return err
		},
	}
	hf.add(cmd)
	fl := cmd.Flags()
	fl.StringArrayVar(&locals, "local", nil, "LISTEN-ADDR=REGION/ENDPOINT:PORT: forward TCP connections to LISTEN-ADDR to that stream port (repeatable)")
	fl.StringArrayVar(&exposes, "expose", nil, "PORT=TARGET-HOST:PORT: connect streams arriving on PORT to the TCP target (repeatable)")
	cli.SizeVar(fl, &window, "window", 4<<20, "each stream's receive window (a connection carries at most this per round trip)")
	cli.SizeVar(fl, &buffer, "buffer", 256<<10, "copy buffer per connection and direction")
	fl.IntVar(&maxConns, "max-conns", 256, "connections forwarded at once; more are reset at once")
	fl.DurationVar(&dialTimeout, "dial-timeout", 10*time.Second, "bound on setting a connection up (the stream, or the TCP target)")
	fl.DurationVar(&drain, "drain", 30*time.Second, "on SIGTERM, how long connections may go on before they are reset")
	fl.StringVar(&metricsAddr, "metrics", "", "serve Prometheus metrics (/metrics) and /healthz on this address")
	return cmd
}

// serveForwardMetrics serves /metrics and /healthz on addr.
func serveForwardMetrics(addr string, f *forward.Forwarder, m *stream.Mux, log *slog.Logger) (func(), error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(forward.Collector(f, m), collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics %s: %w", addr, err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: 60 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server", "err", err)
		}
	}()
	return func() { srv.Close() }, nil
}

// sizeString formats a byte count with a binary unit.
func sizeString(n uint64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1fGiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1fMiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1fKiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%dB", n)
}
