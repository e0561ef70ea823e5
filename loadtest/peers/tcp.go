//go:build linux

package peers

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mrgw/mrgw/internal/sleep"
	"github.com/mrgw/mrgw/internal/tcpcc"
	"github.com/mrgw/mrgw/loadtest/tunemu"
	"github.com/mrgw/mrgw/netem"
	"github.com/mrgw/mrgw/units"
)

// tcpPair is a listener at site B and n connections to it from site A.
type tcpPair struct {
	ln    net.Listener
	conns []net.Conn // A side
	peers []net.Conn // B side, in accept order
	last  []uint64   // per peer: its last tcpi_bytes_received (received)
	mu    sync.Mutex
	wg    sync.WaitGroup
}

func (p *tcpPair) close() {
	for _, c := range p.conns {
		c.Close()
	}
	if p.ln != nil {
		p.ln.Close()
	}
	p.mu.Lock()
	for _, c := range p.peers {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// dialTCP opens n connections from A to B through te using algo; serve is
// run on its own goroutine for each accepted connection.
func dialTCP(ctx context.Context, te *tunemu.Emulator, algo string, n int, serve func(net.Conn)) (*tcpPair, error) {
	p := &tcpPair{}
	ln, err := te.Listen(tunemu.SiteB, "tcp4", net.JoinHostPort(tunemu.AddrB.String(), "0"))
	if err != nil {
		return nil, err
	}
	p.ln = ln
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			p.peers = append(p.peers, c)
			p.mu.Unlock()
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				serve(c)
			}()
		}
	}()
	d := tcpcc.Dialer(algo)
	for range n {
		c, err := te.Dial(ctx, tunemu.SiteA, d, "tcp4", ln.Addr().String())
		if err != nil {
			p.close()
			return nil, err
		}
		p.conns = append(p.conns, c)
	}
	return p, nil
}

// received returns the bytes the B side's kernels have received in order
// on every accepted connection (tcpi_bytes_received), each connection's
// last reading kept once it is closed, so the sum never goes back.
func (p *tcpPair) received() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.last) < len(p.peers) {
		p.last = append(p.last, make([]uint64, len(p.peers)-len(p.last))...)
	}
	var sum uint64
	for i, c := range p.peers {
		if n, ok := tcpBytesReceived(c); ok && n > p.last[i] {
			p.last[i] = n
		}
		sum += p.last[i]
	}
	return sum
}

// tcpBytesReceived reads a TCP socket's tcpi_bytes_received.
func tcpBytesReceived(c net.Conn) (uint64, bool) {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return 0, false
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return 0, false
	}
	var n uint64
	ok = false
	_ = rc.Control(func(fd uintptr) {
		if info, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO); err == nil {
			n, ok = info.Bytes_received, true
		}
	})
	return n, ok
}

// window opens a measured window (windowStart) over the connections:
// per connection, the bytes its receiver took in order beyond what its
// sender had first sent at the start (tcpi_bytes_sent less
// tcpi_bytes_retrans: the sequence space sent at least once) or its
// receiver had taken by then, whichever is more. Per connection, so that
// a connection that moved nothing cannot offset another's count.
func (p *tcpPair) window() func() uint64 {
	sent := map[string]uint64{}
	for _, c := range p.conns {
		if in := tcpInfo(c); in.State != 0 {
			sent[c.LocalAddr().String()] = in.Bytes_sent - in.Bytes_retrans
		}
	}
	got := p.receivedBy()
	base := make(map[string]uint64, len(sent))
	for k, v := range sent {
		base[k] = max(got[k], v)
	}
	return func() uint64 {
		var n uint64
		for k, v := range p.receivedBy() {
			b, ok := base[k]
			if !ok {
				continue // its sender could not be read at the start
			}
			if v > b {
				n += v - b
			}
		}
		return n
	}
}

// receivedBy is each accepted connection's tcpi_bytes_received, by its
// peer's address (the sender's local address).
func (p *tcpPair) receivedBy() map[string]uint64 {
	p.mu.Lock()
	peers := append([]net.Conn(nil), p.peers...)
	p.mu.Unlock()
	m := make(map[string]uint64, len(peers))
	for _, c := range peers {
		if n, ok := tcpBytesReceived(c); ok {
			m[c.RemoteAddr().String()] = n
		}
	}
	return m
}

// planesUsed counts the distinct A→B planes of the connections.
func planesUsed(te *tunemu.Emulator, conns []net.Conn, proto uint8) int {
	seen := map[int]bool{}
	for _, c := range conns {
		la, _ := netip.ParseAddrPort(c.LocalAddr().String())
		ra, _ := netip.ParseAddrPort(c.RemoteAddr().String())
		seen[te.PlaneOf(netem.AtoB, proto, la, ra)] = true
	}
	return len(seen)
}

// tcpInfoHook, if set (by an experiment), sees a bulk run's sending
// sockets at the end of its window, before they close.
var tcpInfoHook func(senders []net.Conn)

// tcpStartHook, if set (by an experiment), sees them once connected.
var tcpStartHook func(senders []net.Conn)

// tcpWindowHook, if set (by an experiment), sees the emulator as the
// measured window starts (after the warm-up).
var tcpWindowHook func(te *tunemu.Emulator)

// tcpBulk runs n parallel TCP streams from A to B through tunemu.
func tcpBulk(ctx context.Context, algo string, n int, l Link, warmup, duration time.Duration) (Result, error) {
	return tcpBulkOn(ctx, algo, n, l.tunConfig(), warmup, duration)
}

// tcpBulkOn is tcpBulk through an emulator configured as cfg.
func tcpBulkOn(ctx context.Context, algo string, n int, cfg tunemu.Config, warmup, duration time.Duration) (Result, error) {
	te, err := tunemu.New(ctx, cfg)
	if err != nil {
		return Result{}, err
	}
	defer te.Close()
	var got atomic.Uint64
	p, err := dialTCP(ctx, te, algo, n, func(c net.Conn) {
		countReads(c, &got)
	})
	if err != nil {
		return Result{}, err
	}
	defer p.close()
	if tcpStartHook != nil {
		tcpStartHook(p.conns)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, c := range p.conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tcpWriteLoop(c, stop, nil)
		}()
	}
	var h0, h1 tunemu.Health
	// The figure counts what the receiving kernels took in order
	// (tcpi_bytes_received), not what the readers read: a reader held off
	// the CPU at one edge of the window leaves bytes in its socket buffer
	// that a later read counts into the window (rows above capacity came
	// from that, up to 1.023); and only bytes first sent inside the window
	// (tcpWindow): a hole open at the start would otherwise bring up to a
	// receive queue of bytes that crossed before it.
	oneWay := cfg.Link.Delay
	for _, pd := range cfg.PairDelays {
		oneWay = min(oneWay, pd.Delay)
	}
	bps, err := measureSent(ctx, p.received, p.window, oneWay, warmup, duration,
		func() {
			if tcpWindowHook != nil {
				tcpWindowHook(te)
			}
			h0 = te.Health()
		}, func() { h1 = te.Health() })
	var r Result
	if err == nil {
		v := h1.Sub(h0).Check()
		r.Check = &v
	}
	if tcpInfoHook != nil {
		tcpInfoHook(p.conns)
	}
	var cc string
	cc, r.Retransmits = tcpCCs(p.conns)
	close(stop)
	p.close()
	wg.Wait()
	if err != nil {
		return Result{}, err
	}
	r.GoodputBps, r.CC, r.Emulator = bps, cc, EmuTUN
	r.PlanesUsed = planesUsed(te, p.conns, netem.ProtoTCP)
	if r.CC != algo {
		return r, fmt.Errorf("peers: asked for TCP congestion control %s, sockets use %q", algo, r.CC)
	}
	return r, nil
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// tcpCCs returns the congestion controls the connections ran (each name
// once, in order, joined by commas) and their retransmissions in all.
func tcpCCs(conns []net.Conn) (string, uint64) {
	var names []string
	var retx uint64
	for _, c := range conns {
		name, n := tcpcc.Info(c)
		retx += uint64(n)
		if !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	return strings.Join(names, ","), retx
}

// measureWindow is measure with the emulator's self-check around the
// measured window: atStart runs just before the window's first sample,
// atEnd just after its last, so the check covers what the figure covers
// (warm-up and bbr's startup excluded, as from the figure).
func measureWindow(ctx context.Context, count func() uint64, warmup, duration time.Duration, atStart, atEnd func()) (float64, error) {
	if err := firstProgress(ctx, count); err != nil {
		return 0, err
	}
	stop := sample(ctx, []func() uint64{count}, warmup, warmup+duration)
	defer stop()
	if err := sleep.Ctx(ctx, warmup); err != nil {
		return 0, err
	}
	atStart()
	t0, b0 := time.Now(), count()
	if err := sleep.Ctx(ctx, duration); err != nil {
		return 0, err
	}
	t1, b1 := time.Now(), count()
	atEnd()
	return float64(units.Throughput(float64(b1-b0), t1.Sub(t0).Seconds())), nil
}
