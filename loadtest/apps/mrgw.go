//go:build linux

package apps

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mrgw/mrgw/filecopy"
	"github.com/mrgw/mrgw/forward"
	"github.com/mrgw/mrgw/host"
	"github.com/mrgw/mrgw/internal/sleep"
	"github.com/mrgw/mrgw/loadtest/lab"
	"github.com/mrgw/mrgw/stream"
	"github.com/mrgw/mrgw/units"
)

// Endpoint names of the lab's two hosts.
const (
	srcName = "src" // eu-west: the client side, the sender
	dstName = "dst" // us-east: the server side, the receiver
)

// labEnv is one run's deployment: a fresh lab and a host in each region,
// with a stream.Mux on each when the run uses streams.
type labEnv struct {
	l      *lab.Lab
	a, b   *host.Host
	ma, mb *stream.Mux
}

// labPatience bounds bringing a lab up (gateways ready, hosts registered).
const labPatience = time.Minute

// newLabEnv builds the deployment of point p.
func newLabEnv(ctx context.Context, o *Options, p point, muxes bool) (_ *labEnv, err error) {
	l, err := lab.New(ctx, o.labConfig(p))
	if err != nil {
		return nil, err
	}
	e := &labEnv{l: l}
	defer func() {
		if err != nil {
			e.close()
		}
	}()
	l.Start()
	rctx, cancel := context.WithTimeout(ctx, labPatience)
	defer cancel()
	if err := l.WaitReady(rctx); err != nil {
		return nil, err
	}
	if e.a, err = host.New(hostConfig(l, lab.RegionA, srcName, o)); err != nil {
		return nil, fmt.Errorf("host %s: %w", srcName, err)
	}
	if e.b, err = host.New(hostConfig(l, lab.RegionB, dstName, o)); err != nil {
		return nil, fmt.Errorf("host %s: %w", dstName, err)
	}
	if muxes {
		sc := stream.Config{Window: o.window(p), Logger: o.Logger}
		if e.ma, err = stream.New(e.a, sc); err != nil {
			return nil, err
		}
		if e.mb, err = stream.New(e.b, sc); err != nil {
			return nil, err
		}
	}
	return e, nil
}

func (e *labEnv) close() {
	for _, m := range []*stream.Mux{e.ma, e.mb} {
		if m != nil {
			m.Close()
		}
	}
	for _, h := range []*host.Host{e.a, e.b} {
		if h != nil {
			h.Close()
		}
	}
	e.l.Close()
}

// hostConfig is a lab host's configuration: the host library's defaults
// with the lab's LAN protocol (lab.HostProtocol), as the gateway load
// tests' hosts.
func hostConfig(l *lab.Lab, region, name string, o *Options) host.Config {
	return host.Config{Name: name, Region: region, Gateways: l.HostGateways(region), Key: l.HostKey,
		DeadAfter: time.Second, OpenTimeout: 20 * time.Second, Logger: o.Logger, Protocol: lab.HostProtocol()}
}

// iperfStreamPort is the stream port the us-east forwarder exposes the
// iperf3 server on.
const iperfStreamPort = 5201

// forwardIperf runs iperf3 through forward: the client connects to a Local
// port of the eu-west host, whose streams the us-east host's Expose
// connects on to the iperf3 server; both iperf3 processes run on loopback.
func forwardIperf(ctx context.Context, o *Options, p point, n int) (Result, error) {
	env, err := newLabEnv(ctx, o, p, true)
	if err != nil {
		return Result{}, err
	}
	defer env.close()
	port, err := freePort()
	if err != nil {
		return Result{}, err
	}
	fctx, stop := context.WithCancel(ctx)
	defer stop()
	fb := forward.New(env.mb, forward.Config{Logger: o.Logger})
	fa := forward.New(env.ma, forward.Config{Logger: o.Logger})
	var wg sync.WaitGroup
	defer func() {
		stop()
		wg.Wait()
		fa.Close()
		fb.Close()
	}()
	sl, err := env.mb.Listen(strconv.Itoa(iperfStreamPort))
	if err != nil {
		return Result{}, err
	}
	wg.Go(func() { _ = fb.Serve(fctx, sl, net.JoinHostPort("127.0.0.1", strconv.Itoa(port))) })
	to := stream.Addr{Region: lab.RegionB, Endpoint: dstName, Port: iperfStreamPort}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return Result{}, err
	}
	wg.Go(func() { _ = fa.Local(fctx, ln, to) })
	srv, err := startIperfServer(exec.CommandContext(ctx, "iperf3", serverArgs("127.0.0.1", port)...))
	if err != nil {
		return Result{}, err
	}
	local := ln.Addr().(*net.TCPAddr)
	r, err := iperfRun(ctx, srv, exec.CommandContext(ctx, "iperf3", clientArgs("127.0.0.1", local.Port, n, o, "")...))
	if err != nil {
		return Result{}, fmt.Errorf("%w (forward: local %+v, exposed %+v)", err, fa.Stats(), fb.Stats())
	}
	r.CC, r.Emulator = "", "emu"
	return r, nil
}

// copySystemDef is a way mrgw carries the copy workload: run moves the
// source file from the eu-west host of env to dst at the us-east host.
type copySystemDef struct {
	name string
	// muxes: the run uses stream.Mux on both hosts.
	muxes bool
	run   func(ctx context.Context, env *labEnv, o *Options, p point, src, dst string, got *atomic.Int64) error
}

// copySystems are the systems that run the copy through mrgw, each also
// listed in AllSystems. A native file copy (a host-to-host copy that
// places chunks at their offsets) is one more entry here, with its own
// system name: every copy runs under copyRun's limit and byte-for-byte
// check, on a fresh lab of the same WAN.
var copySystems = []copySystemDef{
	{name: MRGWStream, muxes: true, run: streamCopy},
	{name: MRGWCopy, muxes: true, run: fileCopy},
}

// copyFilePort is the stream port the native copy's receiver serves.
const copyFilePort = 7002

// fileCopy is `mrgw host cp`: package filecopy's receiver on the us-east
// host, its sender on the eu-west host, the file WRITTEN into the
// receiver's mapping of its destination. The receiver's root is a
// directory of its own; the copy is moved to dst once complete.
func fileCopy(ctx context.Context, env *labEnv, _ *Options, _ point, src, dst string, got *atomic.Int64) error {
	root, err := os.MkdirTemp(filepath.Dir(dst), "mrgw-apps-cp-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(root)
	srv, err := filecopy.NewServer(env.mb, filecopy.ServerConfig{Root: root, Port: strconv.Itoa(copyFilePort)})
	if err != nil {
		return err
	}
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	go srv.Serve(sctx)
	defer srv.Close()
	to := stream.Addr{Region: lab.RegionB, Endpoint: dstName, Port: copyFilePort}
	if _, err := filecopy.Send(ctx, env.ma, to, "", []string{src}, filecopy.Options{
		Progress: func(done, _ int64) { got.Store(done) },
	}); err != nil {
		return err
	}
	return os.Rename(filepath.Join(root, filepath.Base(src)), dst)
}

func copySystem(name string) (copySystemDef, bool) {
	for _, c := range copySystems {
		if c.name == name {
			return c, true
		}
	}
	return copySystemDef{}, false
}

// copyStreamPort is the stream port the copy's receiver listens on.
const copyStreamPort = 7001

// streamCopy is the copy loop over a stream.Conn: the us-east host listens,
// the eu-west host dials.
func streamCopy(ctx context.Context, env *labEnv, _ *Options, _ point, src, dst string, got *atomic.Int64) error {
	ln, err := env.mb.Listen(strconv.Itoa(copyStreamPort))
	if err != nil {
		return err
	}
	defer ln.Close()
	to := stream.Addr{Region: lab.RegionB, Endpoint: dstName, Port: copyStreamPort}
	return connCopy(ctx, src, dst, got,
		func(ctx context.Context) (net.Conn, error) { return env.ma.DialAddr(ctx, to) },
		func(ctx context.Context) (net.Conn, error) { return ln.AcceptStream(ctx) },
		nil)
}

// mrgwCopy runs the copy through mrgw with cs on a fresh lab.
func mrgwCopy(ctx context.Context, o *Options, p point, cs copySystemDef, src *sourceFile) (Result, error) {
	env, err := newLabEnv(ctx, o, p, cs.muxes)
	if err != nil {
		return Result{}, err
	}
	defer env.close()
	r, err := copyRun(ctx, o, src, func(ctx context.Context, dst string, got *atomic.Int64) error {
		return cs.run(ctx, env, o, p, src.path, dst, got)
	})
	r.Emulator = "emu"
	return r, err
}

// Reference transfer: each flow keeps a stream's window of refMessage
// WRITEs in flight (a stream's largest message: stream.Config.MaxMessage
// is a quarter of the window), so that the reference and the adapters
// put as many bytes on the WAN per flow; the WRITEs land in the
// receiver's memory at wrapping offsets.
const (
	refMessage = 1 << 20
	refKey     = 1
)

// transportRun is mrgw's own transport on the lab: n host flows from the
// eu-west host to the us-east host, each with a window of WRITEs in
// flight; goodput is what the receiver reported delivered over o.Duration
// after o.Warmup, CPU this process's over both.
func transportRun(ctx context.Context, o *Options, p point, n int) (Result, error) {
	env, err := newLabEnv(ctx, o, p, false)
	if err != nil {
		return Result{}, err
	}
	var rwg sync.WaitGroup
	defer func() {
		env.close() // closes Received: the reader ends
		rwg.Wait()
	}()
	inFlight := max(1, o.window(p)/refMessage)
	refArea := 2 * inFlight * refMessage
	if err := env.b.RegisterMemory(refKey, make([]byte, refArea)); err != nil {
		return Result{}, err
	}
	var delivered deliveries
	rwg.Go(func() {
		for d := range env.b.Received() {
			delivered.add(d.Len, time.Now())
		}
	})
	var flows []*host.Flow
	for range n {
		octx, cancel := context.WithTimeout(ctx, labPatience)
		f, err := lab.OpenFlow(octx, env.a, lab.RegionB, dstName, host.FlowOptions{}, nil)
		cancel()
		if err != nil {
			return Result{}, err
		}
		flows = append(flows, f)
	}
	data := make([]byte, refMessage)
	for i := range data {
		data[i] = byte(i * 7)
	}
	wctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var failed atomic.Pointer[error]
	for i, f := range flows {
		// slots holds a token per message in flight: at most the window.
		slots := make(chan struct{}, inFlight)
		pend := make(chan *host.Pending, inFlight)
		wg.Go(func() {
			defer close(pend)
			for k := 0; ; k++ {
				select {
				case slots <- struct{}{}:
				case <-wctx.Done():
					return
				}
				addr := uint64((i+k)%(refArea/refMessage)) * refMessage
				pn, err := f.Write(wctx, refKey, addr, data)
				if err != nil {
					if wctx.Err() == nil {
						failed.CompareAndSwap(nil, &err)
					}
					return
				}
				pend <- pn
			}
		})
		wg.Go(func() {
			for pn := range pend {
				if err := pn.Wait(wctx); err != nil && wctx.Err() == nil {
					failed.CompareAndSwap(nil, &err)
				}
				<-slots
			}
		})
	}
	win, cpu, wall, err := measureWindow(ctx, &delivered, o.Warmup, o.Duration, max(8, 4*n))
	stop()
	wg.Wait()
	if err != nil {
		return Result{}, err
	}
	if e := failed.Load(); e != nil {
		return Result{}, fmt.Errorf("a WRITE failed: %w", *e)
	}
	res := Result{GoodputBps: win.bps, CPUSelf: cpu, Wall: wall, Emulator: "emu"}
	if win.span > o.Duration*11/10 {
		res.Note = fmt.Sprintf("measured over %.1f s to hold %d whole messages", win.span.Seconds(), win.messages)
	}
	return res, nil
}

// startLimit bounds the wait for a transfer's first delivered byte.
const startLimit = 30 * time.Second

// deliveries is the receiver's running total of delivered bytes, how many
// deliveries made it and the time of the last one.
type deliveries struct {
	mu    sync.Mutex
	bytes uint64
	n     int
	at    time.Time
}

func (d *deliveries) add(n uint64, at time.Time) {
	d.mu.Lock()
	d.bytes += n
	d.n++
	d.at = at
	d.mu.Unlock()
}

// mark is the state after one delivery.
type mark struct {
	bytes uint64
	n     int
	at    time.Time
}

// next waits for the first delivery after the current one and returns the
// state it left.
func (d *deliveries) next(ctx context.Context) (mark, error) {
	d.mu.Lock()
	n0 := d.n
	d.mu.Unlock()
	for {
		d.mu.Lock()
		m := mark{d.bytes, d.n, d.at}
		d.mu.Unlock()
		if m.n != n0 {
			return m, nil
		}
		if err := sleep.Ctx(ctx, time.Millisecond); err != nil {
			return mark{}, err
		}
	}
}

// window is a measured stretch of a transfer: bits per second, and how
// long it lasted and how many messages it held.
type window struct {
	bps      float64
	span     time.Duration
	messages int
}

// measureWindow waits for the first delivery, then for warmup, then
// measures from one delivery to the first delivery after duration, going
// on until the window holds at least minMessages deliveries. It returns
// the window, this process's CPU seconds and the wall time from the first
// byte to the end.
//
// Deliveries come a whole 1 MiB message at a time, a few per second on a
// slow lab, so a window bounded by clock ticks would count a message more
// or less at each edge (a quarter of a one-second window's bytes).
// Bounded by deliveries, the window holds whole gaps between deliveries;
// and at least minMessages of them, so that messages finishing together
// at an edge move the rate by a small fraction.
func measureWindow(ctx context.Context, d *deliveries, warmup, duration time.Duration, minMessages int) (window, float64, time.Duration, error) {
	sctx, cancel := context.WithTimeout(ctx, startLimit)
	defer cancel()
	if _, err := d.next(sctx); err != nil {
		return window{}, 0, 0, fmt.Errorf("nothing delivered within %v: %w", startLimit, err)
	}
	cpu0, start := processCPU(), time.Now()
	if err := sleep.Ctx(ctx, warmup); err != nil {
		return window{}, 0, 0, err
	}
	m0, err := d.next(ctx)
	if err != nil {
		return window{}, 0, 0, err
	}
	if err := sleep.Ctx(ctx, duration-time.Since(m0.at)); err != nil {
		return window{}, 0, 0, err
	}
	m1, err := d.next(ctx)
	for err == nil && m1.n-m0.n < minMessages {
		m1, err = d.next(ctx)
	}
	if err != nil {
		return window{}, 0, 0, err
	}
	span := m1.at.Sub(m0.at)
	w := window{bps: float64(units.Throughput(float64(m1.bytes-m0.bytes), span.Seconds())), span: span, messages: m1.n - m0.n}
	return w, processCPU() - cpu0, time.Since(start), nil
}
