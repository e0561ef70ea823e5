//go:build linux

package peers

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mrgw/mrgw/cc"
	_ "github.com/mrgw/mrgw/cc/longrtt" // registers the long-RTT controllers
	"github.com/mrgw/mrgw/loadtest/emu"
	"github.com/mrgw/mrgw/metaroce"
	"github.com/mrgw/mrgw/pathmgr"
	"github.com/mrgw/mrgw/tunnel"
	"github.com/mrgw/mrgw/tunnel/udp"
)

// CCFixed selects, as Options.MRGWCC, a fixed unpaced window of 1.5 BDP
// (split over the paths) for mrgw instead of a controller from the registry.
const CCFixed = "fixed-1.5bdp"

// mrgwMTU is the MetaRoCE payload per datagram on the WAN: with the DATA
// header and the AEAD envelope a datagram stays within a 1500-byte MTU.
const mrgwMTU = 1400

// protocol returns the MetaRoCE configuration of one tunnel end and the
// name of its controller.
func protocol(rocev2 bool, l Link, o Options, listen bool) (metaroce.Config, string, error) {
	capacity := l.Capacity()
	cfg := metaroce.Config{
		MTU: mrgwMTU, Paths: o.Paths, Listen: listen, Seed: 7,
		MaxAckDelay: 2 * time.Millisecond,
		Path: pathmgr.Config{
			InitialRTT: max(l.RTT, time.Millisecond), MinPTO: 10 * time.Millisecond, MaxAckDelay: 2 * time.Millisecond,
			DownAfter: 3, ProbeInterval: 20 * time.Millisecond, MaxProbeInterval: time.Second, UpAfter: 2,
		},
	}
	var name string
	if rocev2 {
		cfg.Mode = metaroce.ModeRoCEv2
		w := int(1.5 * l.BDP())
		cfg.CC = cc.NewFixed(max(w, 64<<10), capacity/8)
		name = "fixed"
	} else if o.MRGWCC == CCFixed {
		// A fixed window of 1.5 BDP split over the paths, unpaced.
		w := int(1.5 * l.BDP() / float64(o.Paths))
		cfg.CC = cc.NewFixed(max(w, 16<<10), 0)
		name = CCFixed
	} else {
		f, err := cc.Lookup(o.MRGWCC, cc.Params{LineRateBps: capacity, BaseRTT: l.RTT})
		if err != nil {
			return cfg, "", err
		}
		cfg.CC = f
		name = o.MRGWCC
		if listen {
			// The receiver loop: the gateway knows its WAN capacity and
			// hands each sender its share in every ack.
			cfg.ReceiveCapacityBps = capacity
		}
	}
	return cfg, name, nil
}

// tunnelPair is two mrgw gateways' tunnels through an emu relay.
type tunnelPair struct {
	em    *emu.Emulator
	a, b  *tunnel.Tunnel
	stops []func()
}

func (p *tunnelPair) close() {
	for i := len(p.stops) - 1; i >= 0; i-- {
		p.stops[i]()
	}
}

// newTunnelPair builds two tunnels (control session over loopback with
// mutual TLS) whose data planes talk through em; onA and onB receive the
// endpoints' events.
func newTunnelPair(ctx context.Context, em *emu.Emulator, protoA, protoB metaroce.Config,
	onA, onB func(time.Duration, metaroce.Event)) (p *tunnelPair, err error) {
	p = &tunnelPair{em: em}
	defer func() {
		if err != nil {
			p.close()
		}
	}()
	sp, err := tunnel.LoopbackSessions(ctx, "peer-gw-a", "peer-gw-b")
	if err != nil {
		return nil, err
	}
	p.stops = append(p.stops, sp.Close)
	ra, rb := sp.RouterA, sp.RouterB
	loop := netip.MustParseAddrPort("127.0.0.1:0")
	udpOpts := udp.Options{ReadBuffer: 8 << 20, WriteBuffer: 8 << 20}
	var realB netip.AddrPort
	p.b, err = tunnel.New(sp.B, tunnel.Config{Protocol: protoB, Listen: loop, UDP: udpOpts, Router: rb, OnEvent: onB})
	if err != nil {
		return nil, err
	}
	p.stops = append(p.stops, func() { p.b.Close() })
	realB = p.b.LocalAddr()
	p.a, err = tunnel.New(sp.A, tunnel.Config{Protocol: protoA, Listen: loop, UDP: udpOpts, Router: ra, OnEvent: onA,
		PlaneOf: func(_ int, local netip.AddrPort) int { return em.PlaneOf(emu.AtoB, local, realB) }})
	if err != nil {
		return nil, err
	}
	p.stops = append(p.stops, func() { p.a.Close() })
	standA, err := em.Expose(emu.SiteA, p.a.LocalAddr())
	if err != nil {
		return nil, err
	}
	standB, err := em.Expose(emu.SiteB, realB)
	if err != nil {
		return nil, err
	}
	if err := p.a.SetPeerAddr(standB); err != nil {
		return nil, err
	}
	if err := p.b.SetPeerAddr(standA); err != nil {
		return nil, err
	}
	return p, nil
}

// bulkMsg is the size of each WRITE in bulk transfers.
const bulkMsg = 1 << 20

// tunnelBulk runs a WRITE bulk transfer from gateway A to gateway B
// through emu: messages of 1 MiB kept queued (enough to cover twice the
// BDP), goodput counted from messages completed at the receiver.
func tunnelBulk(ctx context.Context, rocev2 bool, l Link, warmup, duration time.Duration, o Options) (Result, error) {
	em, err := emu.New(ctx, l.emuConfig())
	if err != nil {
		return Result{}, err
	}
	defer em.Close()
	protoA, ccName, err := protocol(rocev2, l, o, false)
	if err != nil {
		return Result{}, err
	}
	protoB, _, err := protocol(rocev2, l, o, true)
	if err != nil {
		return Result{}, err
	}
	outstanding := max(4, int(2*l.BDP()/bulkMsg)+2)
	src := make([]byte, bulkMsg)
	dst := make([]byte, bulkMsg)
	var got atomic.Uint64
	var mu sync.Mutex
	var sender *metaroce.Conn
	onA := func(now time.Duration, ev metaroce.Event) {
		switch ev.Kind {
		case metaroce.EventConnected:
			mu.Lock()
			sender = ev.Conn
			mu.Unlock()
			for range outstanding {
				_, _ = ev.Conn.Write(now, 0, 1, 0, src)
			}
		case metaroce.EventSendComplete:
			_, _ = ev.Conn.Write(now, 0, 1, 0, src) // refused once closing: the transfer just ends
		}
	}
	onB := func(_ time.Duration, ev metaroce.Event) {
		if ev.Kind == metaroce.EventRecvComplete && ev.Err == nil {
			got.Add(ev.Len)
		}
	}
	p, err := newTunnelPair(ctx, em, protoA, protoB, onA, onB)
	if err != nil {
		return Result{}, err
	}
	defer p.close()
	var regErr error
	if err := p.b.Endpoint().Call(ctx, func(_ time.Duration, ep *metaroce.Endpoint) { regErr = ep.Memory().Register(1, dst) }); err != nil {
		return Result{}, err
	}
	if regErr != nil {
		return Result{}, regErr
	}
	if _, err := p.a.Connect(ctx); err != nil {
		return Result{}, err
	}
	bps, err := measure(ctx, got.Load, warmup, duration)
	if err != nil {
		return Result{}, err
	}
	r := Result{GoodputBps: bps, CC: ccName, Emulator: EmuUDP}
	planes := map[int]bool{}
	_ = p.a.Endpoint().Call(ctx, func(_ time.Duration, ep *metaroce.Endpoint) {
		mu.Lock()
		c := sender
		mu.Unlock()
		if c == nil {
			return
		}
		r.Retransmits = c.Stats.Retransmits
		for _, path := range c.Paths().Paths {
			if la, ok := p.a.Endpoint().PathAddr(tunnel.PeerID, path.Entropy); ok {
				planes[em.PlaneOf(emu.AtoB, la, p.b.LocalAddr())] = true
			}
		}
	})
	r.PlanesUsed = len(planes)
	if bps == 0 {
		return r, fmt.Errorf("peers: %s moved nothing during the measurement", map[bool]string{false: MRGW, true: RoCEv2}[rocev2])
	}
	return r, nil
}
