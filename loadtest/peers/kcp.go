//go:build linux

package peers

import (
	"context"
	"math"
	"net"
	"sync"
	"sync/atomic"
	"time"

	kcp "github.com/xtaci/kcp-go/v5"

	"github.com/mrgw/mrgw/netem"
)

// kcpMTU is kcp-go's datagram size on l: 1400 (kcptun's default) on a
// 1500-byte link, the link's IP MTU less 100 on smaller ones; kcp-go takes
// no more than 1472 bytes (its maxPacketSize), so jumbo frames do not help
// it.
func kcpMTU(l Link) int {
	return min(1400, l.IPMTU()-100)
}

// kcpTune applies kcptun's "fast3" settings (nodelay, 10 ms interval, fast
// resend after 2 duplicate acks, no congestion window) with windows of
// 1.25 BDP in packets (at least 128, at most 32768).
func kcpTune(s *kcp.UDPSession, l Link) {
	wnd := int(math.Ceil(1.25 * l.BDP() / float64(kcpMTU(l))))
	wnd = min(max(wnd, 128), 32768)
	s.SetNoDelay(1, 10, 2, 1)
	s.SetWindowSize(wnd, wnd)
	// Stream mode is what kcptun runs (messages coalesce into full
	// segments); kcp-go marks the setter deprecated without a replacement.
	s.SetStreamMode(true) //lint:ignore SA1019 no other way to enable stream mode
	s.SetWriteDelay(false)
	s.SetMtu(kcpMTU(l))
	_ = s.SetReadBuffer(8 << 20)
	_ = s.SetWriteBuffer(8 << 20)
}

// kcpPair is one KCP session from A to B through an emu relay.
type kcpPair struct {
	em       *netem.Emulator
	ca, cb   *net.UDPConn
	ln       *kcp.Listener
	cli, srv *kcp.UDPSession
}

func (p *kcpPair) close() {
	if p.cli != nil {
		p.cli.Close()
	}
	if p.srv != nil {
		p.srv.Close()
	}
	if p.ln != nil {
		p.ln.Close()
	}
	for _, c := range []*net.UDPConn{p.ca, p.cb} {
		if c != nil {
			c.Close()
		}
	}
	if p.em != nil {
		p.em.Close()
	}
}

// dialKCP starts an emulator and a KCP session through it; the server side
// is accepted when the client's first segment arrives (accepted on a
// goroutine; wait with p.accept).
func dialKCP(ctx context.Context, l Link) (*kcpPair, <-chan error, error) {
	em, err := netem.New(ctx, l.emuConfig())
	if err != nil {
		return nil, nil, err
	}
	p := &kcpPair{em: em}
	lo := &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)}
	if p.cb, err = net.ListenUDP("udp4", lo); err != nil {
		p.close()
		return nil, nil, err
	}
	if p.ca, err = net.ListenUDP("udp4", lo); err != nil {
		p.close()
		return nil, nil, err
	}
	standB, err := em.Expose(netem.SiteB, p.cb.LocalAddr().(*net.UDPAddr).AddrPort())
	if err != nil {
		p.close()
		return nil, nil, err
	}
	if p.ln, err = kcp.ServeConn(nil, 0, 0, p.cb); err != nil {
		p.close()
		return nil, nil, err
	}
	if p.cli, err = kcp.NewConn3(1, net.UDPAddrFromAddrPort(standB), nil, 0, 0, p.ca); err != nil {
		p.close()
		return nil, nil, err
	}
	kcpTune(p.cli, l)
	acc := make(chan error, 1)
	go func() {
		s, err := p.ln.AcceptKCP()
		if err == nil {
			kcpTune(s, l)
			p.srv = s
		}
		acc <- err
	}()
	return p, acc, nil
}

// kcpBulk sends one KCP stream from A to B through netem.
func kcpBulk(ctx context.Context, l Link, warmup, duration time.Duration) (Result, error) {
	p, acc, err := dialKCP(ctx, l)
	if err != nil {
		return Result{}, err
	}
	defer p.close()
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	snmp0 := kcp.DefaultSnmp.Copy() // process-wide counters: take the difference
	var got, written atomic.Uint64
	var wg sync.WaitGroup
	wg.Add(2)
	const writeBuf = 64 << 10
	go func() {
		defer wg.Done()
		buf := make([]byte, writeBuf)
		for runCtx.Err() == nil {
			p.cli.SetWriteDeadline(time.Now().Add(200 * time.Millisecond))
			n, err := p.cli.Write(buf)
			written.Add(uint64(n))
			if err != nil && !isTimeout(err) {
				return
			}
		}
	}()
	go func() {
		defer wg.Done()
		select {
		case err := <-acc:
			if err != nil {
				return
			}
		case <-runCtx.Done():
			return
		}
		buf := make([]byte, 256<<10)
		for runCtx.Err() == nil {
			p.srv.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
			k, err := p.srv.Read(buf)
			got.Add(uint64(k))
			if err != nil && !isTimeout(err) {
				return
			}
		}
	}()
	one := func(c *atomic.Uint64) func() map[uint64]uint64 {
		return func() map[uint64]uint64 { return map[uint64]uint64{0: c.Load()} }
	}
	bps, err := measureSent(ctx, got.Load, writtenWindow(one(&got), one(&written), writeBuf), l.RTT/2, warmup, duration, func() {}, func() {})
	cancel()
	wg.Wait()
	if err != nil {
		return Result{}, err
	}
	snmp := kcp.DefaultSnmp.Copy()
	return Result{GoodputBps: bps, CC: "kcp-fast3", Emulator: EmuUDP, PlanesUsed: 1,
		Retransmits: snmp.RetransSegs - snmp0.RetransSegs}, nil
}
