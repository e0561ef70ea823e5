//go:build linux

// Package forward carries ordinary TCP connections between regions over
// mrgw streams (package stream), for programs that know nothing of mrgw.
//
// On the sending side Local accepts TCP connections on a local port and
// dials a stream to REGION/ENDPOINT:PORT for each; on the receiving side
// Expose accepts the streams of a port and connects each on to a TCP
// target there. Bytes are copied both ways; a half-close (FIN) is carried
// as the stream's CloseWrite and a TCP reset as the stream's Reset, in
// both directions. A connection that cannot be set up (unknown endpoint,
// nothing exposed on the port, target refused, no credit at a gateway,
// the connection limit) is closed with a TCP reset at once, counted by
// reason and logged at warn, rate-limited.
//
// Memory is bounded: at most Config.MaxConns connections, each holding
// two copy buffers and its stream's windows (stream.Config.Window: a
// receive ring and a send copy per host).
//
// The gateway stays a MetaRoCE relay: nothing here runs in it.
package forward

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/mrgw/mrgw/flowctl"
	"github.com/mrgw/mrgw/internal/ratelog"
	"github.com/mrgw/mrgw/stream"
)

// Config tunes a Forwarder. Zero values take the defaults in brackets.
type Config struct {
	// MaxConns bounds the connections forwarded at once, both directions
	// together [1024]; beyond it a new one is reset at once.
	MaxConns int
	// BufferSize is each copy direction's buffer [256 KiB].
	BufferSize int
	// DialTimeout bounds setting a connection up: the stream's dial, or
	// the TCP dial to the target [10 s].
	DialTimeout time.Duration
	// Logger: nil discards.
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.MaxConns <= 0 {
		c.MaxConns = 1024
	}
	if c.BufferSize <= 0 {
		c.BufferSize = 256 << 10
	}
	if c.DialTimeout <= 0 {
		c.DialTimeout = 10 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// CodeTargetRefused is the stream reset code Expose answers with when the
// TCP target refuses the connection or cannot be reached.
const CodeTargetRefused = stream.CodeApplication + 1

// Refusal reasons, as counted in Stats.Refused.
const (
	ReasonUnknownEndpoint = "unknown_endpoint" // the destination endpoint is not registered
	ReasonUnreachable     = "unreachable"      // no route to the destination region or host
	ReasonNoCapacity      = "no_capacity"      // a gateway granted no credit
	ReasonNotExposed      = "not_exposed"      // nothing is exposed on the port there
	ReasonTargetRefused   = "target_refused"   // the TCP target refused or timed out
	ReasonLimit           = "limit"            // MaxConns connections are open
	ReasonOther           = "other"
)

// Reasons lists every refusal reason, for metrics.
var Reasons = []string{ReasonUnknownEndpoint, ReasonUnreachable, ReasonNoCapacity, ReasonNotExposed, ReasonTargetRefused, ReasonLimit, ReasonOther}

// Stats count a Forwarder's work since New.
type Stats struct {
	// Accepted counts TCP connections Local accepted; Exposed streams
	// Expose accepted.
	Accepted, Exposed uint64
	// Active is the connections being forwarded now.
	Active int64
	// Refused counts connections closed before forwarding, by reason.
	Refused map[string]uint64
	// Resets counts forwarded connections that ended in a reset (either
	// side), after being set up.
	Resets uint64
	// BytesOut counts bytes from local TCP clients into streams (Local)
	// and BytesIn bytes from streams to TCP targets (Expose); BytesBack
	// the answers the other way, on both sides.
	BytesOut, BytesIn, BytesBack uint64
}

// Forwarder runs forwarders over one stream.Mux.
type Forwarder struct {
	mux *stream.Mux
	cfg Config
	log *slog.Logger
	rl  *ratelog.Logger
	sem chan struct{}

	accepted, exposed, resets    atomic.Uint64
	active                       atomic.Int64
	bytesOut, bytesIn, bytesBack atomic.Uint64
	refusedMu                    sync.Mutex
	refused                      map[string]uint64
	wg                           sync.WaitGroup
	// base ends with Close: every connection still forwarded is reset.
	base   context.Context
	cancel context.CancelFunc
}

// New returns a Forwarder over mux.
func New(mux *stream.Mux, cfg Config) *Forwarder {
	cfg = cfg.withDefaults()
	f := &Forwarder{mux: mux, cfg: cfg, log: cfg.Logger, rl: ratelog.New(cfg.Logger, 10*time.Second),
		sem: make(chan struct{}, cfg.MaxConns), refused: map[string]uint64{}}
	f.base, f.cancel = context.WithCancel(context.Background())
	return f
}

// Wait waits until every connection the Forwarder started has ended.
func (f *Forwarder) Wait() { f.wg.Wait() }

// Close resets every connection still forwarded and waits for them.
func (f *Forwarder) Close() {
	f.cancel()
	f.wg.Wait()
}

// Stats returns a snapshot of the counters.
func (f *Forwarder) Stats() Stats {
	f.refusedMu.Lock()
	r := make(map[string]uint64, len(f.refused))
	for k, v := range f.refused {
		r[k] = v
	}
	f.refusedMu.Unlock()
	return Stats{Accepted: f.accepted.Load(), Exposed: f.exposed.Load(), Active: f.active.Load(), Refused: r,
		Resets: f.resets.Load(), BytesOut: f.bytesOut.Load(), BytesIn: f.bytesIn.Load(), BytesBack: f.bytesBack.Load()}
}

func (f *Forwarder) refuse(reason string, args ...any) {
	f.refusedMu.Lock()
	f.refused[reason]++
	f.refusedMu.Unlock()
	f.rl.Warn("refused:"+reason, "forward: connection refused", append([]any{"reason", reason}, args...)...)
}

// Local accepts TCP connections on ln and forwards each over a stream to
// to, until ctx ends or ln fails; then it closes ln. The connections it
// started go on (Wait, Close).
func (f *Forwarder) Local(ctx context.Context, ln net.Listener, to stream.Addr) error {
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	defer ln.Close()
	var backoff time.Duration
	for {
		tc, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return nil
			}
			// Out of descriptors or memory for a moment: back off and
			// accept again, as net/http does, rather than stop serving.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			f.rl.Warn("accept", "forward: accept failed; retrying", "listen", ln.Addr().String(), "err", err, "retry_in", backoff)
			select {
			case <-time.After(backoff):
			case <-ctx.Done():
				return nil
			}
			continue
		}
		backoff = 0
		f.accepted.Add(1)
		if !f.take() {
			f.refuse(ReasonLimit, "from", tc.RemoteAddr().String(), "to", to.String(), "max_conns", f.cfg.MaxConns)
			resetTCP(tc)
			continue
		}
		f.wg.Go(func() {
			defer f.release()
			dctx, cancel := context.WithTimeout(f.base, f.cfg.DialTimeout)
			sc, err := f.mux.DialAddr(dctx, to)
			cancel()
			if err != nil {
				f.refuse(dialReason(err), "from", tc.RemoteAddr().String(), "to", to.String(), "err", err)
				resetTCP(tc)
				return
			}
			f.splice(tc, sc, &f.bytesOut, &f.bytesBack)
		})
	}
}

// Expose accepts the streams to port and connects each to the TCP address
// target, until ctx ends. The connections it started go on (Wait, Close).
func (f *Forwarder) Expose(ctx context.Context, port string, target string) error {
	ln, err := f.mux.Listen(port)
	if err != nil {
		return fmt.Errorf("forward: expose %s: %w", port, err)
	}
	return f.Serve(ctx, ln, target)
}

// Serve is Expose on a listener the caller opened, so that the port
// accepts from the moment Listen returned rather than from when Serve
// starts running. It closes ln when it returns.
func (f *Forwarder) Serve(ctx context.Context, ln *stream.Listener, target string) error {
	port := strconv.Itoa(int(ln.Addr().(stream.Addr).Port))
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	defer ln.Close()
	var d net.Dialer
	for {
		sc, err := ln.AcceptStream(ctx)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, stream.ErrClosed) {
				return nil
			}
			return fmt.Errorf("forward: accept on port %s: %w", port, err)
		}
		f.exposed.Add(1)
		if !f.take() {
			f.refuse(ReasonLimit, "from", sc.RemoteAddr().String(), "port", port, "max_conns", f.cfg.MaxConns)
			sc.ResetCode(CodeTargetRefused)
			continue
		}
		f.wg.Go(func() {
			defer f.release()
			dctx, cancel := context.WithTimeout(f.base, f.cfg.DialTimeout)
			tc, err := d.DialContext(dctx, "tcp", target)
			cancel()
			if err != nil {
				f.refuse(ReasonTargetRefused, "from", sc.RemoteAddr().String(), "target", target, "err", err)
				sc.ResetCode(CodeTargetRefused)
				return
			}
			f.splice(tc, sc, &f.bytesIn, &f.bytesBack)
		})
	}
}

func (f *Forwarder) take() bool {
	select {
	case f.sem <- struct{}{}:
		f.active.Add(1)
		return true
	default:
		return false
	}
}

func (f *Forwarder) release() {
	f.active.Add(-1)
	<-f.sem
}

// dialReason names why a stream dial failed.
func dialReason(err error) string {
	var fe *flowctl.Error
	switch {
	case errors.As(err, &fe) && fe.Code == flowctl.CodeUnknownEndpoint:
		return ReasonUnknownEndpoint
	case errors.As(err, &fe) && fe.Code == flowctl.CodeNoCapacity:
		return ReasonNoCapacity
	case errors.As(err, &fe):
		return ReasonUnreachable
	case errors.Is(err, stream.ErrRefused):
		return ReasonNotExposed
	case stream.IsResetCode(err, CodeTargetRefused):
		return ReasonTargetRefused
	case errors.Is(err, context.DeadlineExceeded):
		return ReasonUnreachable
	}
	return ReasonOther
}

// splice copies both ways until both directions end: an EOF becomes a
// half-close on the other side, a reset on either side resets the other.
func (f *Forwarder) splice(tc net.Conn, sc *stream.Conn, fwd, back *atomic.Uint64) {
	stop := context.AfterFunc(f.base, func() {
		sc.Reset()
		resetTCP(tc)
	})
	defer stop()
	var wg sync.WaitGroup
	var reset, refusedThere atomic.Bool
	var backN atomic.Int64
	wg.Add(2)
	// TCP → stream.
	go func() {
		defer wg.Done()
		buf := make([]byte, f.cfg.BufferSize)
		_, err := copyCount(sc, tc, buf, fwd)
		if stream.IsResetCode(err, CodeTargetRefused) {
			refusedThere.Store(true)
		}
		if err != nil && !reset.Swap(true) {
			// The TCP side reset (or failed): reset the stream.
			sc.Reset()
			resetTCP(tc)
			return
		}
		if err == nil {
			_ = sc.CloseWrite()
		}
	}()
	// Stream → TCP.
	go func() {
		defer wg.Done()
		buf := make([]byte, f.cfg.BufferSize)
		n, err := copyCount(tc, sc, buf, back)
		backN.Store(n)
		if stream.IsResetCode(err, CodeTargetRefused) {
			refusedThere.Store(true)
		}
		if err != nil && !reset.Swap(true) {
			// The stream was reset (or the TCP write failed).
			resetTCP(tc)
			sc.Reset()
			return
		}
		if err == nil {
			if cw, ok := tc.(interface{ CloseWrite() error }); ok {
				_ = cw.CloseWrite()
			}
		}
	}()
	wg.Wait()
	if reset.Load() {
		// The far side could not reach its target (a reset with that
		// code before any byte came back): a refusal, whichever direction
		// saw the reset first; any other reset is a reset.
		if refusedThere.Load() && backN.Load() == 0 {
			f.refuse(ReasonTargetRefused, "to", sc.RemoteAddr().String())
		} else {
			f.resets.Add(1)
		}
		return
	}
	tc.Close()
	sc.Close()
}

// copyCount is io.CopyBuffer counting into n as it goes; a clean EOF of
// src is a nil error.
func copyCount(dst io.Writer, src io.Reader, buf []byte, n *atomic.Uint64) (int64, error) {
	var total int64
	for {
		r, rerr := src.Read(buf)
		if r > 0 {
			w, werr := dst.Write(buf[:r])
			total += int64(w)
			n.Add(uint64(w))
			if werr != nil {
				return total, werr
			}
		}
		if rerr == io.EOF {
			return total, nil
		}
		if rerr != nil {
			return total, rerr
		}
	}
}

// resetTCP closes c with a reset (SO_LINGER 0), as a refused or aborted
// connection should end for its client: at once, and visibly.
func resetTCP(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

// IsReset reports whether err is a TCP reset seen by a reader or writer.
func IsReset(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}
