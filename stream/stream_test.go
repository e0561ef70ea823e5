//go:build linux

package stream_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/mrgw/mrgw/host"
	"github.com/mrgw/mrgw/loadtest/lab"
	"github.com/mrgw/mrgw/loadtest/lab/labtest"
	"github.com/mrgw/mrgw/stream"
)

// patience bounds every wait: a deadline for a failure, never a
// performance threshold.
const patience = 90 * time.Second

func newMux(t *testing.T, l *lab.Lab, name, region string, cfg stream.Config) *stream.Mux {
	t.Helper()
	return newMuxWith(t, l, name, region, cfg, 0)
}

// newMuxWith is newMux whose host gives a flow up after failAfter
// without a route (0: the default).
func newMuxWith(t *testing.T, l *lab.Lab, name, region string, cfg stream.Config, failAfter time.Duration) *stream.Mux {
	t.Helper()
	h, err := host.New(host.Config{Name: name, Region: region, Gateways: l.HostGateways(region), Key: l.HostKey,
		DeadAfter: time.Second, OpenTimeout: patience / 4, FailAfter: failAfter, Logger: labtest.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Logger = labtest.Logger()
	m, err := stream.New(h, cfg)
	if err != nil {
		h.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		m.Close()
		h.Close()
	})
	return m
}

// pair is a dialer in eu-west and a listener in us-east.
func pair(t *testing.T, ctx context.Context, l *lab.Lab, cfg stream.Config) (a, b *stream.Conn, ma, mb *stream.Mux) {
	t.Helper()
	ma = newMux(t, l, "client", lab.RegionA, cfg)
	mb = newMux(t, l, "server", lab.RegionB, cfg)
	ln, err := mb.Listen("7000")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	a, b = dialAccepted(t, ctx, ma, ln)
	return a, b, ma, mb
}

// dialAccepted dials ln's port from ma and returns both ends.
func dialAccepted(t *testing.T, ctx context.Context, ma *stream.Mux, ln *stream.Listener) (a, b *stream.Conn) {
	t.Helper()
	acc := make(chan *stream.Conn, 1)
	go func() {
		c, err := ln.AcceptStream(ctx)
		if err != nil {
			t.Error(err)
		}
		acc <- c
	}()
	a, err := ma.Dial(ctx, ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b = <-acc
	if b == nil {
		t.FailNow()
	}
	return a, b
}

func randBytes(seed uint64, n int) []byte {
	rng := rand.New(rand.NewPCG(seed, 1))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// pump writes data in random-sized pieces, then CloseWrite.
func pump(c *stream.Conn, data []byte, seed uint64) error {
	rng := rand.New(rand.NewPCG(seed, 2))
	for len(data) > 0 {
		n := min(len(data), 1+rng.IntN(300<<10))
		if _, err := c.Write(data[:n]); err != nil {
			return err
		}
		data = data[n:]
	}
	return c.CloseWrite()
}

// TestStreamBothWaysInOrder sends different data each way at once, in
// pieces of random sizes through a window small enough to wrap many
// times, and checks both arrive whole and in order, each ending in EOF
// after CloseWrite.
func TestStreamBothWaysInOrder(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	l := labtest.Start(t, ctx, lab.Config{Direct: true})
	a, b, ma, mb := pair(t, ctx, l, stream.Config{Window: 256 << 10})
	ab, ba := randBytes(1, 6<<20+123), randBytes(2, 5<<20+7)
	var wg sync.WaitGroup
	var gotB, gotA []byte
	var errs [4]error
	wg.Add(4)
	go func() { defer wg.Done(); errs[0] = pump(a, ab, 3) }()
	go func() { defer wg.Done(); errs[1] = pump(b, ba, 4) }()
	go func() { defer wg.Done(); gotB, errs[2] = io.ReadAll(b) }()
	go func() { defer wg.Done(); gotA, errs[3] = io.ReadAll(a) }()
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("goroutine %d: %v", i, err)
		}
	}
	if !bytes.Equal(gotB, ab) || !bytes.Equal(gotA, ba) {
		t.Fatalf("data differs: a→b %d of %d bytes (sha %x, want %x), b→a %d of %d", len(gotB), len(ab),
			sha256.Sum256(gotB), sha256.Sum256(ab), len(gotA), len(ba))
	}
	a.Close()
	b.Close()
	labtest.WaitFor(t, ctx, "both ends torn down", func() bool { return ma.Stats().Open == 0 && mb.Stats().Open == 0 })
	if s := ma.Stats(); s.Resets != 0 || s.BytesSent != uint64(len(ab)) || s.BytesReceived != uint64(len(ba)) {
		t.Fatalf("dialer stats %+v", s)
	}
}

// TestStreamRefusedAndReset: a dial to a port nobody listens on fails at
// once with ErrRefused; a Reset makes the peer's Read and Write fail with
// ErrReset; the refusals are counted on the refusing side.
func TestStreamRefusedAndReset(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	l := labtest.Start(t, ctx, lab.Config{Direct: true})
	a, b, ma, mb := pair(t, ctx, l, stream.Config{})
	if _, err := ma.Dial(ctx, lab.RegionB+"/server:7001"); !errors.Is(err, stream.ErrRefused) {
		t.Fatalf("dial to a closed port: %v, want ErrRefused", err)
	}
	if n := mb.Stats().RefusedNoListener; n != 1 {
		t.Fatalf("refusals counted: %d, want 1", n)
	}
	if _, err := a.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 5)
	if _, err := io.ReadFull(b, buf); err != nil || string(buf) != "hello" {
		t.Fatalf("read %q %v", buf, err)
	}
	b.Reset()
	_, err := a.Read(buf)
	var re *stream.ResetError
	if !errors.Is(err, stream.ErrReset) || !errors.As(err, &re) || !re.Remote || re.Code != stream.CodeAborted {
		t.Fatalf("read after the peer's reset: %v", err)
	}
	if _, err := a.Write([]byte("x")); !errors.Is(err, stream.ErrReset) {
		t.Fatalf("write after the peer's reset: %v", err)
	}
	labtest.WaitFor(t, ctx, "both ends torn down", func() bool { return ma.Stats().Open == 0 && mb.Stats().Open == 0 })
}

// TestStreamResetCodeReachesABusyWriter: the listener resets streams
// with its own code while the dialer writes. The reset tears the
// listener's end down once its record has landed, so a WRITE that arrives
// later is refused, and that refusal can reach the dialer before it reads
// the record; the dialer's Write still fails with the listener's code,
// never as a lost route.
func TestStreamResetCodeReachesABusyWriter(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	l := labtest.Start(t, ctx, lab.Config{Direct: true})
	ma := newMux(t, l, "client", lab.RegionA, stream.Config{Window: 4 << 20})
	mb := newMux(t, l, "server", lab.RegionB, stream.Config{Window: 4 << 20})
	ln, err := mb.Listen("7000")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	const code = stream.CodeApplication + 7
	for i := range 20 {
		a, b := dialAccepted(t, ctx, ma, ln)
		written := make(chan error, 1)
		go func() {
			buf := make([]byte, 1<<10)
			// Bounded: 16 MiB at most, past the 4 MiB window the
			// listener stops reading at.
			for range 1 << 14 {
				if _, err := a.Write(buf); err != nil {
					written <- err
					return
				}
			}
			written <- nil
		}()
		// Reset as soon as accepted (the writer's first WRITEs race the
		// reset), or while the writer is busy, after the first 64 KiB.
		if i%2 == 1 {
			if _, err := io.ReadFull(b, make([]byte, 64<<10)); err != nil {
				t.Fatal(err)
			}
		}
		if err := b.ResetCode(code); err != nil {
			t.Fatal(err)
		}
		err = <-written
		var re *stream.ResetError
		if !errors.As(err, &re) || !re.Remote || re.Code != code {
			t.Fatalf("stream %d: the writer's error %v, want the peer's reset with code %d", i, err, code)
		}
		a.Close()
	}
}

// TestStreamDeadlines: a read deadline in the past fails Read with a
// timeout at once, one in the future fails it when it passes, and a
// cleared deadline lets the data through. A write deadline bounds the
// wait for window when the peer does not read.
func TestStreamDeadlines(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	l := labtest.Start(t, ctx, lab.Config{Direct: true})
	a, b, _, _ := pair(t, ctx, l, stream.Config{Window: 64 << 10})
	buf := make([]byte, 10)
	a.SetReadDeadline(time.Now().Add(-time.Second))
	if _, err := a.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read past its deadline: %v", err)
	}
	a.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	_, err := a.Read(buf)
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("read with a deadline and no data: %v, want a timeout", err)
	}
	a.SetReadDeadline(time.Time{})
	if _, err := b.Write([]byte("late")); err != nil {
		t.Fatal(err)
	}
	if n, err := a.Read(buf); err != nil || string(buf[:n]) != "late" {
		t.Fatalf("read after clearing the deadline: %q %v", buf[:n], err)
	}
	// Nobody reads b: a's window (64 KiB) fills, then Write waits for
	// room until its deadline.
	a.SetWriteDeadline(time.Now().Add(500 * time.Millisecond))
	n, err := a.Write(make([]byte, 1<<20))
	if !errors.Is(err, os.ErrDeadlineExceeded) || n != 64<<10 {
		t.Fatalf("write into a full window: %d bytes, %v; want 65536 and a timeout", n, err)
	}
}

// TestStreamSurvivesGatewayDeath kills the gateway that carries one
// direction of a stream (in the dialer's region, then in the listener's)
// while data crosses the emulated WAN both ways: the stream stays open
// and every byte arrives once, in order.
func TestStreamSurvivesGatewayDeath(t *testing.T) {
	for _, side := range []string{lab.RegionA, lab.RegionB} {
		t.Run(side, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*patience)
			defer cancel()
			l := labtest.Start(t, ctx, lab.Config{OneWay: 5 * time.Millisecond, Loss: 0.005})
			a, b, ma, mb := pair(t, ctx, l, stream.Config{Window: 1 << 20})
			route := a.Route()
			if side == lab.RegionB {
				route = b.Route()
			}
			victim := ""
			for i, addr := range l.HostGateways(side) {
				if addr == route {
					victim = l.Names[side][i]
				}
			}
			if victim == "" {
				t.Fatalf("route %v is none of %v", route, l.HostGateways(side))
			}
			ab, ba := randBytes(5, 24<<20), randBytes(6, 8<<20)
			var wg sync.WaitGroup
			var gotB, gotA []byte
			var errs [4]error
			wg.Add(4)
			go func() { defer wg.Done(); errs[0] = pump(a, ab, 7) }()
			go func() { defer wg.Done(); errs[1] = pump(b, ba, 8) }()
			go func() { defer wg.Done(); gotB, errs[2] = io.ReadAll(b) }()
			go func() { defer wg.Done(); gotA, errs[3] = io.ReadAll(a) }()
			// Kill the gateway once a quarter of the data has crossed.
			labtest.WaitFor(t, ctx, "a quarter of the data", func() bool { return mb.Stats().BytesReceived >= uint64(len(ab)/4) })
			l.Gateways[victim].Close()
			wg.Wait()
			for i, err := range errs {
				if err != nil {
					t.Fatalf("goroutine %d: %v", i, err)
				}
			}
			if !bytes.Equal(gotB, ab) || !bytes.Equal(gotA, ba) {
				t.Fatalf("data differs: a→b %d of %d bytes, b→a %d of %d", len(gotB), len(ab), len(gotA), len(ba))
			}
			sa, sb := ma.Host().Stats(), mb.Host().Stats()
			t.Logf("%s killed: re-opens %d + %d, duplicates dropped %d + %d", victim, sa.Reopens, sb.Reopens, sa.Duplicates, sb.Duplicates)
			if sa.Reopens+sb.Reopens == 0 {
				t.Fatalf("no flow failed over")
			}
		})
	}
}

// TestStreamPeerHostDeathResets: when the peer's host dies (kill -9: its
// gateways just stop hearing from it), an idle stream's keepalive record
// finds no route and the stream is reset, instead of its reader waiting
// forever.
func TestStreamPeerHostDeathResets(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	l := labtest.Start(t, ctx, lab.Config{Direct: true})
	cfg := stream.Config{KeepAlive: 100 * time.Millisecond}
	ma := newMuxWith(t, l, "client", lab.RegionA, cfg, 2*time.Second)
	hb, err := host.New(host.Config{Name: "server", Region: lab.RegionB, Gateways: l.HostGateways(lab.RegionB), Key: l.HostKey,
		DeadAfter: time.Second, OpenTimeout: patience / 4, Logger: labtest.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	mb, err := stream.New(hb, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := mb.Listen("7000")
	if err != nil {
		t.Fatal(err)
	}
	go ln.Accept()
	a, err := ma.Dial(ctx, lab.RegionB+"/server:7000")
	if err != nil {
		t.Fatal(err)
	}
	hb.Kill()
	_, err = a.Read(make([]byte, 1))
	var re *stream.ResetError
	if !errors.As(err, &re) || re.Remote || re.Code != stream.CodeUnreachable {
		t.Fatalf("read on a stream whose peer died: %v, want a local reset for an unreachable peer", err)
	}
	mb.Close()
}

// TestStreamAbandonedDialIsReclaimed: a dialer that gives up before the
// answer arrives leaves no stream behind at the listener: the accepted
// end is reset once the dialer has not confirmed it for Linger.
func TestStreamAbandonedDialIsReclaimed(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	l := labtest.Start(t, ctx, lab.Config{Direct: true})
	cfg := stream.Config{Linger: 300 * time.Millisecond, KeepAlive: 50 * time.Millisecond}
	ma := newMux(t, l, "client", lab.RegionA, cfg)
	mb := newMux(t, l, "server", lab.RegionB, cfg)
	ln, err := mb.Listen("7000")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	// A dial whose context ends before any answer can come back.
	dctx, dcancel := context.WithCancel(ctx)
	go func() {
		for mb.Stats().Open == 0 && ctx.Err() == nil {
			time.Sleep(time.Millisecond)
		}
		dcancel()
	}()
	if _, err := ma.Dial(dctx, lab.RegionB+"/server:7000"); err == nil {
		t.Skip("the dial completed before it could be abandoned")
	}
	labtest.WaitFor(t, ctx, "the listener's end reclaimed", func() bool { return mb.Stats().Open == 0 && ma.Stats().Open == 0 })
	if c, err := ln.AcceptStream(ctx); err == nil {
		_, err = c.Read(make([]byte, 1))
		t.Logf("accepted end: %v", err)
	}
}

// TestStreamCloseUnblocks: Close makes a Write that waits for window and a
// Read that waits for data return at once, as net.Conn requires.
func TestStreamCloseUnblocks(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	l := labtest.Start(t, ctx, lab.Config{Direct: true})
	a, b, _, _ := pair(t, ctx, l, stream.Config{Window: 64 << 10})
	werr := make(chan error, 1)
	go func() {
		_, err := a.Write(make([]byte, 1<<20)) // b never reads: the window fills
		werr <- err
	}()
	rerr := make(chan error, 1)
	go func() {
		_, err := b.Read(make([]byte, 0)) // returns at once, nothing asked
		if err == nil {
			_, err = a.Read(make([]byte, 1)) // nothing comes: waits
		}
		rerr <- err
	}()
	labtest.WaitFor(t, ctx, "the window to fill", func() bool { return a.Stats().Sent >= 64<<10 })
	a.Close()
	for name, ch := range map[string]chan error{"write": werr, "read": rerr} {
		select {
		case err := <-ch:
			if !errors.Is(err, net.ErrClosed) {
				t.Errorf("%s after Close: %v, want net.ErrClosed", name, err)
			}
		case <-ctx.Done():
			t.Fatalf("%s still blocked after Close", name)
		}
	}
}

// TestStreamEndsCleanlyWhenAHostClosesAtEOF: a client that reads the
// server's answer to EOF and closes its host at once leaves the server's
// end nothing to re-send: the DONE for the server's FIN leaves before the
// client's gateway connections close, so the server's end finishes at
// once, without a reset. (Its flow may still re-open with nothing
// unfinished: the client's gateway RESETs it when the client's
// connection closes, and a flow keeps a route while it lives.)
func TestStreamEndsCleanlyWhenAHostClosesAtEOF(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	l := labtest.Start(t, ctx, lab.Config{Direct: true})
	h, err := host.New(host.Config{Name: "client", Region: lab.RegionA, Gateways: l.HostGateways(lab.RegionA), Key: l.HostKey,
		DeadAfter: time.Second, OpenTimeout: patience / 4, Logger: labtest.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	ma, err := stream.New(h, stream.Config{})
	if err != nil {
		t.Fatal(err)
	}
	mb := newMux(t, l, "server", lab.RegionB, stream.Config{})
	ln, err := mb.Listen("7000")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.AcceptStream(ctx)
		if err != nil {
			return
		}
		io.Copy(io.Discard, c)
		c.Write([]byte("answer"))
		c.Close()
	}()
	c, err := ma.Dial(ctx, lab.RegionB+"/server:7000")
	if err != nil {
		t.Fatal(err)
	}
	c.Write([]byte("question"))
	c.CloseWrite()
	if b, err := io.ReadAll(c); err != nil || string(b) != "answer" {
		t.Fatalf("answer %q, %v", b, err)
	}
	c.Close()
	ma.Close()
	h.Close()
	labtest.WaitFor(t, ctx, "the server's end torn down", func() bool { return mb.Stats().Open == 0 })
	if r := mb.Stats().Resets; r != 0 {
		t.Fatalf("the server's end was reset %d times: its FIN was not DONE when the client closed", r)
	}
	if r := mb.Host().Stats().ResumedReopens; r != 0 {
		t.Fatalf("the server's flow re-opened %d times to send its FIN again after the client closed", r)
	}
}
