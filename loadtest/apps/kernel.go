//go:build linux

package apps

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mrgw/mrgw/internal/tcpcc"
	"github.com/mrgw/mrgw/loadtest/tunemu"
)

// kernelIperf runs iperf3 with n streams from namespace A to namespace B
// of a fresh tunemu with congestion control algo. The emulator's
// self-check covers the measured time (after the warm-up).
func kernelIperf(ctx context.Context, o *Options, p point, algo string, n int) (Result, error) {
	te, err := tunemu.New(ctx, o.tunConfig(p))
	if err != nil {
		return Result{}, err
	}
	defer te.Close()
	srv, err := startIperfServer(te.Command(ctx, tunemu.SiteB, "iperf3", serverArgs(tunemu.AddrB.String(), iperfPort)...))
	if err != nil {
		return Result{}, err
	}
	cli := te.Command(ctx, tunemu.SiteA, "iperf3", clientArgs(tunemu.AddrB.String(), iperfPort, n, o, algo)...)
	// The self-check's window opens when the warm-up ends (iperf3's -O),
	// taken on a goroutine so that the client starts on time. On a machine
	// too busy to fire the timer before the run ends, the window is the
	// whole run.
	h0 := te.Health()
	h0c := make(chan tunemu.Health, 1)
	warm := time.AfterFunc(o.Warmup, func() { h0c <- te.Health() })
	r, err := iperfRun(ctx, srv, cli)
	if !warm.Stop() {
		h0 = <-h0c // taken, or being taken
	}
	if err != nil {
		return Result{}, err
	}
	v := te.Health().Sub(h0).Check()
	r.Check = &v
	r.Emulator = "tunemu"
	if r.CC != algo {
		return r, fmt.Errorf("asked iperf3 for congestion control %s, its sockets ran %q", algo, r.CC)
	}
	return r, nil
}

// kernelCopy copies the source file over one kernel TCP connection from
// namespace A to namespace B of a fresh tunemu with congestion control
// algo, with the copy loop every system runs.
func kernelCopy(ctx context.Context, o *Options, p point, algo string, src *sourceFile) (Result, error) {
	te, err := tunemu.New(ctx, o.tunConfig(p))
	if err != nil {
		return Result{}, err
	}
	defer te.Close()
	ln, err := te.Listen(tunemu.SiteB, "tcp4", net.JoinHostPort(tunemu.AddrB.String(), "0"))
	if err != nil {
		return Result{}, err
	}
	defer ln.Close()
	h0 := te.Health()
	var mu sync.Mutex
	var sender net.Conn
	var cc string
	var retx uint64
	r, err := copyRun(ctx, o, src, func(ctx context.Context, dst string, got *atomic.Int64) error {
		return connCopy(ctx, src.path, dst, got,
			func(ctx context.Context) (net.Conn, error) {
				c, err := te.Dial(ctx, tunemu.SiteA, tcpcc.Dialer(algo), "tcp4", ln.Addr().String())
				if err == nil {
					mu.Lock()
					sender = c
					mu.Unlock()
				}
				return c, err
			},
			func(ctx context.Context) (net.Conn, error) { return acceptCtx(ctx, ln) },
			func() {
				// Read before the sender closes: what its socket ran.
				mu.Lock()
				defer mu.Unlock()
				if sender != nil {
					var n uint32
					cc, n = tcpcc.Info(sender)
					retx = uint64(n)
				}
			})
	})
	if err != nil {
		return Result{}, err
	}
	v := te.Health().Sub(h0).Check() // the whole copy, its start included
	r.Check = &v
	r.CC, r.Retransmits, r.Emulator = cc, retx, "tunemu"
	if r.CC != algo {
		return r, fmt.Errorf("asked for TCP congestion control %s, the socket ran %q", algo, r.CC)
	}
	return r, nil
}

// acceptCtx accepts one connection on ln, or fails when ctx ends.
func acceptCtx(ctx context.Context, ln net.Listener) (net.Conn, error) {
	stop := context.AfterFunc(ctx, func() {
		if tl, ok := ln.(*net.TCPListener); ok {
			_ = tl.SetDeadline(time.Unix(1, 0))
		}
	})
	defer stop()
	c, err := ln.Accept()
	if err != nil && ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return c, err
}
