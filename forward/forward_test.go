//go:build linux

package forward_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mrgw/mrgw/forward"
	"github.com/mrgw/mrgw/host"
	"github.com/mrgw/mrgw/loadtest/lab"
	"github.com/mrgw/mrgw/loadtest/lab/labtest"
	"github.com/mrgw/mrgw/stream"
)

// patience bounds every wait: a deadline for a failure, never a
// performance threshold.
const patience = 3 * time.Minute

// deployment is a lab with a forwarding host in each region: "client" in
// eu-west forwards a local TCP port to us-east/server:7000, which
// "server" exposes to target.
type deployment struct {
	l              *lab.Lab
	client, server *forward.Forwarder
	cmux, smux     *stream.Mux
	local          string // the TCP address clients connect to
}

type setup struct {
	lab    lab.Config
	stream stream.Config
	fwd    forward.Config
	target string // the exposed TCP target; "" for none
}

func deploy(t *testing.T, ctx context.Context, s setup) *deployment {
	t.Helper()
	s.lab.Dir = t.TempDir()
	s.lab.Logger = labtest.Logger()
	l, err := lab.New(ctx, s.lab)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	l.Start()
	if err := l.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	d := &deployment{l: l}
	d.cmux = newMux(t, l, "client", lab.RegionA, s.stream)
	d.smux = newMux(t, l, "server", lab.RegionB, s.stream)
	s.fwd.Logger = labtest.Logger()
	d.client, d.server = forward.New(d.cmux, s.fwd), forward.New(d.smux, s.fwd)
	fctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		d.client.Close()
		d.server.Close()
	})
	if s.target != "" {
		ln, err := d.smux.Listen("7000")
		if err != nil {
			t.Fatal(err)
		}
		// Listening before the first dial: a dial that came before Expose
		// listened would be refused as not exposed.
		wg.Go(func() {
			if err := d.server.Serve(fctx, ln, s.target); err != nil {
				t.Error(err)
			}
		})
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d.local = ln.Addr().String()
	to, _ := stream.ParseAddr(lab.RegionB + "/server:7000")
	wg.Go(func() {
		if err := d.client.Local(fctx, ln, to); err != nil {
			t.Error(err)
		}
	})
	return d
}

func newMux(t *testing.T, l *lab.Lab, name, region string, cfg stream.Config) *stream.Mux {
	t.Helper()
	h, err := host.New(host.Config{Name: name, Region: region, Gateways: l.HostGateways(region), Key: l.HostKey,
		DeadAfter: time.Second, OpenTimeout: patience / 4, Logger: labtest.Logger()})
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

// echoServer answers every connection with what it read, then closes its
// side once the client closed its own; every connection's byte count
// goes to got.
func echoServer(t *testing.T) (addr string, got chan int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	got = make(chan int64, 4096)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				n, _ := io.Copy(c, c)
				got <- n
			}()
		}
	}()
	return ln.Addr().String(), got
}

// TestForwardEchoWithHalfClose: a TCP client's bytes cross to the target
// and back byte for byte; its half-close reaches the target (whose copy
// ends), and the target's close reaches the client as EOF.
func TestForwardEchoWithHalfClose(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	target, got := echoServer(t)
	d := deploy(t, ctx, setup{lab: lab.Config{Direct: true}, target: target})
	c, err := net.Dial("tcp", d.local)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	data := make([]byte, 3<<20+17)
	for i := range data {
		data[i] = byte(rand.Uint32())
	}
	errc := make(chan error, 1)
	go func() {
		_, err := c.Write(data)
		if err == nil {
			err = c.(*net.TCPConn).CloseWrite()
		}
		errc <- err
	}()
	back, err := io.ReadAll(c)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(back, data) {
		t.Fatalf("echo: %d bytes back of %d, equal %v", len(back), len(data), bytes.Equal(back, data))
	}
	if n := <-got; n != int64(len(data)) {
		t.Fatalf("target read %d bytes, want %d", n, len(data))
	}
	labtest.WaitFor(t, ctx, "the connection to end on both sides", func() bool {
		return d.client.Stats().Active == 0 && d.server.Stats().Active == 0
	})
	cs, ss := d.client.Stats(), d.server.Stats()
	if cs.BytesOut != uint64(len(data)) || cs.BytesBack != uint64(len(data)) || ss.BytesIn != uint64(len(data)) || cs.Resets+ss.Resets != 0 {
		t.Fatalf("client %+v, server %+v", cs, ss)
	}
}

// TestForwardCarriesResets: a target that resets its connection resets
// the client's, and a client that resets resets the target's.
func TestForwardCarriesResets(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	conns := make(chan net.Conn, 2)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns <- c
		}
	}()
	d := deploy(t, ctx, setup{lab: lab.Config{Direct: true}, target: ln.Addr().String()})

	// The target resets.
	c, err := net.Dial("tcp", d.local)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	tc := <-conns
	buf := make([]byte, 4)
	if _, err := io.ReadFull(tc, buf); err != nil {
		t.Fatal(err)
	}
	tc.(*net.TCPConn).SetLinger(0)
	tc.Close()
	if _, err := io.ReadAll(c); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("client read after the target's reset: %v, want ECONNRESET", err)
	}
	c.Close()

	// The client resets.
	c, err = net.Dial("tcp", d.local)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	tc = <-conns
	if _, err := io.ReadFull(tc, buf); err != nil {
		t.Fatal(err)
	}
	c.(*net.TCPConn).SetLinger(0)
	c.Close()
	if _, err := io.ReadAll(tc); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("target read after the client's reset: %v, want ECONNRESET", err)
	}
	tc.Close()
	labtest.WaitFor(t, ctx, "both resets counted", func() bool { return d.client.Stats().Resets == 2 && d.server.Stats().Resets == 2 })
}

// TestForwardRefusals: a connection that cannot be forwarded is reset
// at once for the client and counted by reason: the target refuses,
// nothing is exposed on the port, the endpoint does not exist.
func TestForwardRefusals(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	// A port with no listener: the target refuses.
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.Addr().String()
	dead.Close()
	d := deploy(t, ctx, setup{lab: lab.Config{Direct: true}, target: deadAddr})
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("client %+v\nserver %+v", d.client.Stats(), d.server.Stats())
		}
	})
	expectReset := func(addr string) {
		t.Helper()
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_, _ = c.Write([]byte("x"))
		if _, err := io.ReadAll(c); !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("client of %s: %v, want ECONNRESET", addr, err)
		}
	}
	expectReset(d.local)
	// Both sides count the refusal by its reason: the client's stream reads
	// the reset code even when its own WRITE is refused by the torn-down
	// stream first.
	labtest.WaitFor(t, ctx, "target_refused counted at the server and at the client", func() bool {
		return d.server.Stats().Refused[forward.ReasonTargetRefused] == 1 && d.client.Stats().Refused[forward.ReasonTargetRefused] == 1
	})
	if r := d.client.Stats().Resets; r != 0 {
		t.Errorf("client counted %d resets besides the refusal", r)
	}

	// Forwarders to a port nothing exposes and to an unknown endpoint.
	var wg sync.WaitGroup
	fctx, stop := context.WithCancel(ctx)
	defer func() {
		stop()
		wg.Wait()
	}()
	for _, to := range []string{lab.RegionB + "/server:7999", lab.RegionB + "/nobody:7000"} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		a, _ := stream.ParseAddr(to)
		wg.Go(func() { _ = d.client.Local(fctx, ln, a) })
		expectReset(ln.Addr().String())
	}
	s := d.client.Stats()
	if s.Refused[forward.ReasonNotExposed] != 1 || s.Refused[forward.ReasonUnknownEndpoint] != 1 {
		t.Fatalf("refusals %v", s.Refused)
	}
}

// TestForwardThousandConnections holds 1,000 forwarded connections open
// at once, each echoing its own data, then closes them all: every byte
// comes back to its own connection.
func TestForwardThousandConnections(t *testing.T) {
	const conns = 1000
	ctx, cancel := context.WithTimeout(context.Background(), 2*patience)
	defer cancel()
	target, _ := echoServer(t)
	d := deploy(t, ctx, setup{
		// Two flows per connection through each gateway pair, 2,000 in
		// all: the lab's default limits admit 64.
		lab:    lab.Config{Direct: true, MaxFlows: 2 * conns, FlowCreditBytes: 256 << 10, MemoryBytes: 1 << 30},
		stream: stream.Config{Window: 32 << 10},
		fwd:    forward.Config{MaxConns: conns, BufferSize: 16 << 10, DialTimeout: patience},
		target: target,
	})
	var wg sync.WaitGroup
	open := make(chan struct{})
	var opened sync.WaitGroup
	opened.Add(conns)
	errs := make(chan error, conns)
	for i := range conns {
		wg.Go(func() {
			c, err := net.Dial("tcp", d.local)
			if err != nil {
				opened.Done()
				errs <- err
				return
			}
			defer c.Close()
			msg := []byte(fmt.Sprintf("connection %d:", i))
			msg = append(msg, bytes.Repeat([]byte{byte(i)}, 4096)...)
			if _, err := c.Write(msg); err != nil {
				opened.Done()
				errs <- err
				return
			}
			buf := make([]byte, len(msg))
			_, err = io.ReadFull(c, buf)
			opened.Done()
			if err != nil {
				errs <- fmt.Errorf("connection %d: %w", i, err)
				return
			}
			if !bytes.Equal(buf, msg) {
				errs <- fmt.Errorf("connection %d got another's bytes", i)
				return
			}
			<-open // hold it until every connection has echoed once
			if err := c.(*net.TCPConn).CloseWrite(); err != nil {
				errs <- err
				return
			}
			if rest, err := io.ReadAll(c); err != nil || len(rest) != 0 {
				errs <- fmt.Errorf("connection %d after close: %d bytes, %v", i, len(rest), err)
			}
		})
	}
	opened.Wait()
	active := d.client.Stats().Active
	close(open)
	wg.Wait()
	close(errs)
	n := 0
	for err := range errs {
		if n++; n < 5 {
			t.Error(err)
		}
	}
	if n > 0 {
		t.Fatalf("%d connections failed; client %+v, server %+v; streams %+v / %+v", n, d.client.Stats(), d.server.Stats(), d.cmux.Stats(), d.smux.Stats())
	}
	if active != conns {
		t.Fatalf("%d connections forwarded at once, want %d", active, conns)
	}
	labtest.WaitFor(t, ctx, "every connection to end", func() bool {
		return d.client.Stats().Active == 0 && d.server.Stats().Active == 0 && d.cmux.Stats().Open == 0 && d.smux.Stats().Open == 0
	})
	if s := d.client.Stats(); len(s.Refused) != 0 || s.Resets != 0 {
		t.Fatalf("client: %+v", s)
	}
}

// TestMetricNamesMatchTheCollector: MetricNames lists exactly what
// Collector describes.
func TestMetricNamesMatchTheCollector(t *testing.T) {
	ch := make(chan *prometheus.Desc, 32)
	forward.Collector(nil, nil).Describe(ch)
	close(ch)
	var got []string
	for d := range ch {
		s := d.String()
		i := strings.Index(s, `fqName: "`) + len(`fqName: "`)
		got = append(got, s[i:i+strings.IndexByte(s[i:], '"')])
	}
	want := forward.MetricNames()
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("collector describes %v, MetricNames says %v", got, want)
	}
}
