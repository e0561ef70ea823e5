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
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mrgw/mrgw/loadtest/tunemu"
	"github.com/mrgw/mrgw/netem"
)

// tcpDialer returns a dialer whose sockets use congestion control algo.
func tcpDialer(algo string) *net.Dialer {
	return &net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		if err := rc.Control(func(fd uintptr) {
			serr = unix.SetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION, algo)
		}); err != nil {
			return err
		}
		if serr != nil {
			return fmt.Errorf("TCP_CONGESTION %s: %w", algo, serr)
		}
		return nil
	}}
}

// tcpCC reads a socket's congestion control and total retransmissions.
func tcpCC(c net.Conn) (string, uint32) {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return "", 0
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return "", 0
	}
	var name string
	var retx uint32
	_ = rc.Control(func(fd uintptr) {
		name, _ = unix.GetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION)
		if info, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO); err == nil {
			retx = info.Total_retrans
		}
	})
	return strings.TrimRight(name, "\x00"), retx
}

// tcpPair is a listener at site B and n connections to it from site A.
type tcpPair struct {
	ln    net.Listener
	conns []net.Conn // A side
	peers []net.Conn // B side, in accept order
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
	d := tcpDialer(algo)
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

// tcpBulk runs n parallel TCP streams from A to B through tunemu.
func tcpBulk(ctx context.Context, algo string, n int, l Link, warmup, duration time.Duration) (Result, error) {
	te, err := tunemu.New(ctx, l.tunConfig())
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
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, c := range p.conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tcpWriteLoop(c, stop, nil)
		}()
	}
	bps, err := measure(ctx, got.Load, warmup, duration)
	var r Result
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
		name, n := tcpCC(c)
		retx += uint64(n)
		if !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	return strings.Join(names, ","), retx
}
