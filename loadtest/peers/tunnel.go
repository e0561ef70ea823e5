//go:build linux

package peers

import (
	"context"
	"fmt"
	"io"
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
	"github.com/mrgw/mrgw/tunnel/seal"
	"github.com/mrgw/mrgw/tunnel/udp"
)

// CCFixed selects, as Options.MRGWCC, a fixed unpaced window of 1.5 BDP
// (split over the paths) for mrgw instead of a controller from the registry.
const CCFixed = "fixed-1.5bdp"

// CCFixedPaced is CCFixed paced at the link's capacity: the transport and
// the pacer without a controller.
const CCFixedPaced = "fixed-1.5bdp-paced"

// ipMTU is the IP MTU every system gets: tunemu's TUN devices carry TCP
// and QUIC in 1500-byte IP packets, so mrgw's sealed datagram fits one too.
const ipMTU = 1500

// mrgwMTU is the MetaRoCE payload per datagram on the WAN: the largest
// whose sealed datagram fits ipMTU (IPv4 and UDP headers 28 bytes, AEAD
// envelope seal.Overhead, DATA header metaroce.DataHeaderLen): 1368 bytes
// of payload in a 1472-byte UDP payload, where TCP carries 1448 (with
// timestamps). As emu and tunemu charge a datagram's UDP payload (a TCP
// segment its IP length less 28), the ceilings of goodput over capacity
// are 1368/1472 = 0.929 for mrgw and 1448/1472 = 0.984 for TCP.
const mrgwMTU = ipMTU - 28 - seal.Overhead - metaroce.DataHeaderLen

// protocol returns the MetaRoCE configuration of one tunnel end and the
// name of its controller.
func protocol(rocev2 bool, l Link, o Options, listen bool) (metaroce.Config, string, error) {
	capacity := l.Capacity()
	cfg := metaroce.Config{
		MTU: mrgwMTU, Paths: o.Paths, Listen: listen, Seed: 7,
		MaxAckDelay: 2 * time.Millisecond,
		// A late driver catches up half a round trip of pacing (see
		// metaroce.Config.PacingCatchUp): this process also runs the
		// emulator and the other gateway on 2 shared cores.
		PacingCatchUp: 0.5,
		Path: pathmgr.Config{
			InitialRTT: max(l.RTT, time.Millisecond), MinPTO: 10 * time.Millisecond, MaxAckDelay: 2 * time.Millisecond,
			DownAfter: 3, ProbeInterval: 20 * time.Millisecond, MaxProbeInterval: time.Second, UpAfter: 2,
		},
	}
	// The controller and the receiver's hints count MetaRoCE bytes (header
	// and payload); the link also carries the AEAD envelope of every
	// datagram. Told the link's capacity as it is, a sender paced at it
	// overdrives the link by the envelope's share (1.9% here): a queue
	// builds until the marks cut the rate (by a quarter to a third in one
	// episode) and the link then idles until the rate has grown back. In
	// the simulator, the same overdrive takes longrtt-htcp from 0.95 to
	// 0.86 of capacity at 50 ms. So the capacity is stated in the unit the
	// controller counts.
	capacity *= protoShare(mrgwMTU)
	var name string
	if rocev2 {
		cfg.Mode = metaroce.ModeRoCEv2
		w := int(1.5 * l.BDP())
		cfg.CC = cc.NewFixed(max(w, 64<<10), capacity/8)
		name = "fixed"
	} else if o.MRGWCC == CCFixed || o.MRGWCC == CCFixedPaced {
		// A fixed window of 1.5 BDP split over the paths, unpaced or paced
		// at the capacity.
		w := int(1.5 * l.BDP() / float64(o.Paths))
		rate := 0.0
		if o.MRGWCC == CCFixedPaced {
			rate = capacity / 8
		}
		cfg.CC = cc.NewFixed(max(w, 16<<10), rate)
		name = o.MRGWCC
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

// protoShare is the part of a full sealed datagram that the protocol
// counts: MetaRoCE header and payload, without the AEAD envelope. (emu
// charges a UDP datagram's payload, so UDP and IP headers do not count.)
func protoShare(mtu int) float64 {
	return float64(mtu+metaroce.DataHeaderLen) / float64(mtu+metaroce.DataHeaderLen+seal.Overhead)
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

// bulkOutstanding is how many WRITEs a bulk transfer keeps queued. Messages
// complete in order, so the oldest one, waiting for its last repairs, holds
// the whole queue: under 10% loss a retransmission is lost again often
// enough that a 1 MiB message (749 chunks) typically needs 3-4 round trips
// of repair after its last chunk was first sent. The queue must cover that
// and the window, or the sender runs out of data while the window has room
// (measured: 4 MiB queued left the window half empty at 1% loss). TCP's
// peers get 32 MiB of socket buffer; mrgw gets as much, and at least 8 BDP.
func bulkOutstanding(l Link) int {
	return max(32, int(8*l.BDP()/bulkMsg)+2)
}

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
	outstanding := bulkOutstanding(l)
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
	if o.Trace != nil {
		stop := traceTunnel(ctx, o.Trace, p, em, &mu, &sender, got.Load, l)
		defer stop()
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
	if n := em.Stats().Truncated; n > 0 {
		return r, fmt.Errorf("peers: %d datagrams larger than the %d-byte IP MTU", n, ipMTU)
	}
	if bps == 0 {
		return r, fmt.Errorf("peers: %s moved nothing during the measurement", map[bool]string{false: MRGW, true: RoCEv2}[rocev2])
	}
	return r, nil
}

// traceSnap is one sample of a tunnel bulk run's counters.
type traceSnap struct {
	at                      time.Time
	got                     uint64
	st                      metaroce.ConnStats
	inflight, window, queue int
	pacing                  float64
	link                    emu.LinkStats
	back                    emu.LinkStats
	late                    emu.Lateness
}

// traceTunnel writes a line of deltas every 500 ms until the returned stop
// is called (Options.Trace).
func traceTunnel(ctx context.Context, w io.Writer, p *tunnelPair, em *emu.Emulator, mu *sync.Mutex, sender **metaroce.Conn,
	got func() uint64, l Link) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	snap := func() (traceSnap, bool) {
		s := traceSnap{at: time.Now(), got: got()}
		ok := false
		err := p.a.Endpoint().Call(ctx, func(_ time.Duration, _ *metaroce.Endpoint) {
			mu.Lock()
			c := *sender
			mu.Unlock()
			if c == nil {
				return
			}
			ok = true
			s.st = c.Stats
			s.inflight = c.InflightBytes()
			s.queue = c.Queued()
			for i := range c.Paths().Paths {
				s.window += c.Controller().Window(i)
			}
			s.pacing = c.Controller().PacingRate()
		})
		es := em.Stats()
		s.link, s.back = es.Total(emu.AtoB), es.Total(emu.BtoA)
		s.late = es.Late[emu.AtoB]
		return s, ok && err == nil
	}
	go func() {
		defer close(done)
		t := time.NewTicker(500 * time.Millisecond)
		defer t.Stop()
		prev, _ := snap()
		bdp := l.BDP()
		fmt.Fprintf(w, "trace rtt=%v loss=%g bdp=%.0fB\n", l.RTT, l.Loss, bdp)
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			cur, ok := snap()
			if !ok {
				continue // not connected yet, or stopping
			}
			if prev.st.DataSent > cur.st.DataSent {
				prev = cur // first sample after connecting
				continue
			}
			dt := cur.at.Sub(prev.at).Seconds()
			d := func(a, b uint64) uint64 { return a - b }
			fmt.Fprintf(w, "  good=%6.1fMb/s sent=%5d retx=%4d lost=%4d pto=%2d acks=%5d | infl=%.2fbdp win=%.2fbdp pace=%.0fMb/s q=%d"+
				" forfeit=%3dms | link in=%5d deliv=%5d qdrop=%3d loss=%3d ce=%4d maxq=%.2fbdp | back loss=%3d | emu late mean=%v max=%v\n",
				float64(cur.got-prev.got)*8/dt/1e6,
				d(cur.st.DataSent, prev.st.DataSent), d(cur.st.Retransmits, prev.st.Retransmits),
				d(cur.st.PacketsLost, prev.st.PacketsLost), d(cur.st.Timeouts, prev.st.Timeouts),
				d(cur.st.AcksReceived, prev.st.AcksReceived),
				float64(cur.inflight)/bdp, float64(cur.window)/bdp, cur.pacing*8/1e6, cur.queue,
				d(cur.st.PacingForfeitNs, prev.st.PacingForfeitNs)/1e6,
				d(cur.link.In, prev.link.In), d(cur.link.Delivered, prev.link.Delivered),
				d(cur.link.QueueDrops, prev.link.QueueDrops), d(cur.link.LossDrops, prev.link.LossDrops),
				d(cur.link.CEMarks, prev.link.CEMarks), float64(cur.link.MaxQueueBytes)/bdp,
				d(cur.back.LossDrops, prev.back.LossDrops), cur.late.Mean.Round(time.Microsecond), cur.late.Max.Round(time.Microsecond))
			prev = cur
		}
	}()
	return func() { cancel(); <-done }
}
