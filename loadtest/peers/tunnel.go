//go:build linux

package peers

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mrgw/mrgw/cc"
	_ "github.com/mrgw/mrgw/cc/longrtt" // registers the long-RTT controllers
	"github.com/mrgw/mrgw/internal/report"
	"github.com/mrgw/mrgw/loadtest/tunemu"
	"github.com/mrgw/mrgw/metaroce"
	"github.com/mrgw/mrgw/netem"
	"github.com/mrgw/mrgw/netio/seal"
	"github.com/mrgw/mrgw/netio/udp"
	"github.com/mrgw/mrgw/pathmgr"
	"github.com/mrgw/mrgw/tunnel"
	"github.com/mrgw/mrgw/tunnel/tunneltest"

	"github.com/mrgw/mrgw/units"
)

// CCFixed selects, as Options.MRGWCC, a fixed unpaced window of 1.5 BDP
// (split over the paths) for mrgw instead of a controller from the registry.
const CCFixed = "fixed-1.5bdp"

// CCFixedPaced is CCFixed paced at the link's capacity: the transport and
// the pacer without a controller.
const CCFixedPaced = "fixed-1.5bdp-paced"

// CCPacedPrefix followed by a fraction ("paced-0.5") selects a window of
// 1.5 BDP paced at that fraction of the link's capacity: a sender that does
// not react to anything. Against a classic flow it separates what the
// controller does from what the datapath's timing does (does the classic
// flow get the rest of the link when mrgw holds a steady half?).
const CCPacedPrefix = "paced-"

// pacedFraction reports the fraction a CCPacedPrefix name asks for.
func pacedFraction(name string) (float64, bool, error) {
	rest, ok := strings.CutPrefix(name, CCPacedPrefix)
	if !ok {
		return 0, false, nil
	}
	f, err := strconv.ParseFloat(rest, 64)
	if err != nil || !(f > 0 && f <= 1) {
		return 0, true, fmt.Errorf("controller %q: the fraction after %q must be in (0, 1]", name, CCPacedPrefix)
	}
	return f, true, nil
}

// mrgwMTU is the MetaRoCE payload per datagram on the WAN: the largest
// whose sealed datagram fits the link's IP MTU (IPv4 and UDP headers 28
// bytes, AEAD envelope seal.Overhead, the DATA header of the link's wire
// version). At 1500 that is 1416 bytes of payload in a 1500-byte IP packet
// on version 2 (1368 on version 1), where TCP carries 1448 (with
// timestamps). Both emulators charge every packet its IP length, so the
// ceilings of goodput over capacity are 1416/1500 = 0.944 for mrgw (0.912
// on version 1) and 1448/1500 = 0.965 for TCP; at 9000, 8916/9000 = 0.991
// (0.985) and 8948/9000 = 0.994 (Ceiling).
func (l Link) mrgwMTU() int {
	return l.IPMTU() - 28 - seal.Overhead - dataHeaderLen(l.wire())
}

// rocev2MTU is mrgwMTU for the RoCEv2 baseline, which speaks version 1.
func (l Link) rocev2MTU() int {
	return l.IPMTU() - 28 - seal.Overhead - metaroce.DataHeaderLen
}

// wire is the link's wire version for mrgw (version 2 unless set).
func (l Link) wire() int {
	if l.Wire == 0 {
		return metaroce.Version2
	}
	return l.Wire
}

// dataHeaderLen is the DATA header of wire version v.
func dataHeaderLen(v int) int {
	if v == metaroce.Version2 {
		return metaroce.DataHeaderLenV2
	}
	return metaroce.DataHeaderLen
}

// protocol returns the MetaRoCE configuration of one tunnel end and the
// name of its controller.
func protocol(rocev2 bool, l Link, o Options, listen bool) (metaroce.Config, string, error) {
	capacity := l.Capacity()
	wire, mtu := l.wire(), l.mrgwMTU()
	if rocev2 {
		wire, mtu = metaroce.Version1, l.rocev2MTU()
	}
	if wire != metaroce.Version1 && wire != metaroce.Version2 {
		return metaroce.Config{}, "", fmt.Errorf("peers: wire version %d: want 1 or 2", wire)
	}
	cfg := metaroce.Config{
		MTU: mtu, Paths: o.Paths, Listen: listen, Seed: 7, WireVersions: []uint8{uint8(wire)},
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
	capacity *= protoShare(mtu, dataHeaderLen(wire))
	var name string
	if rocev2 {
		cfg.Mode = metaroce.ModeRoCEv2
		w := int(1.5 * l.BDP())
		cfg.CC = cc.NewFixed(max(w, 64<<10), units.BitRate(capacity).Bytes())
		name = "fixed"
	} else if frac, ok, err := pacedFraction(o.MRGWCC); ok {
		if err != nil {
			return cfg, "", err
		}
		w := int(1.5 * l.BDP() / float64(o.Paths))
		cfg.CC = cc.NewFixed(max(w, 16<<10), units.ByteRate(frac*float64(units.BitRate(capacity).Bytes())))
		name = o.MRGWCC
	} else if o.MRGWCC == CCFixed || o.MRGWCC == CCFixedPaced {
		// A fixed window of 1.5 BDP split over the paths, unpaced or paced
		// at the capacity.
		w := int(1.5 * l.BDP() / float64(o.Paths))
		var rate units.ByteRate
		if o.MRGWCC == CCFixedPaced {
			rate = units.BitRate(capacity).Bytes()
		}
		cfg.CC = cc.NewFixed(max(w, 16<<10), rate)
		name = o.MRGWCC
	} else {
		f, err := cc.Lookup(o.MRGWCC, cc.Params{LineRate: units.BitRate(capacity), BaseRTT: l.RTT, ClassicFallback: o.ClassicFallback})
		if err != nil {
			return cfg, "", err
		}
		cfg.CC = f
		name = o.MRGWCC
		if listen {
			// The receiver loop: the gateway knows its WAN capacity and
			// hands each sender its share in every ack.
			cfg.ReceiveCapacity = units.BitRate(capacity)
		}
	}
	return cfg, name, nil
}

// protoShare is the part of a full sealed datagram's IP packet that the
// protocol counts: MetaRoCE header and payload, without the AEAD envelope
// and the UDP and IPv4 headers, all of which the link carries and
// charges.
func protoShare(mtu, header int) float64 {
	return float64(mtu+header) / float64(mtu+header+seal.Overhead+netem.IPHeaderLen)
}

// Ceiling is the most of a link's capacity a system's goodput can reach on
// it, from its headers alone: its largest payload per packet over that
// packet's wire bytes (both emulators charge the whole IP packet). No
// system can exceed it however the machine runs: a busy machine only
// lowers goodput. Random loss lowers the expected figure to about
// (1 − loss) of it (loss strikes after the serialiser: a lost packet used
// its link time), but a run may draw fewer losses than expected, so that
// factor is no bound.
func Ceiling(system string, l Link) float64 {
	ip := float64(l.IPMTU())
	var payload float64
	switch system {
	case MRGW:
		payload = float64(l.mrgwMTU())
	case RoCEv2:
		payload = float64(l.rocev2MTU())
	case TCPBBR, TCPCubic:
		payload = ip - tcpHeaders
	case QUIC:
		payload = ip - netem.IPHeaderLen
	case KCP:
		payload = float64(kcpMTU(l)) - kcpHeader
		ip = float64(kcpMTU(l) + netem.IPHeaderLen)
	default:
		return 1
	}
	return payload / ip
}

// tcpHeaders is a kernel TCP segment's headers: IPv4 20, TCP 20, and the
// timestamp option 12 (Linux negotiates timestamps by default).
const tcpHeaders = 52

// kcpHeader is kcp's segment header (24 bytes), inside the UDP payload.
const kcpHeader = 24

// tunnelNet is where a tunnel pair's data planes meet: emu's relay on
// loopback (emuNet) or tunemu's two namespaces (tunNet, tunnel_tun.go).
// newTunnelPair and the bulk transfer are written against it once.
type tunnelNet interface {
	// site returns the data-plane listening address of site s's gateway
	// and the socket options its path sockets are opened with.
	site(s netem.Site) (netip.AddrPort, udp.Options)
	// expose returns the address at which the other site reaches site s's
	// gateway listening on real.
	expose(s netem.Site, real netip.AddrPort) (netip.AddrPort, error)
	// planeOf is the A→B plane of datagrams from local to B's real address.
	planeOf(local, realB netip.AddrPort) int
	// linkStats are the A→B and B→A totals and, where the emulator
	// measures it, its A→B lateness (Options.Trace).
	linkStats() (ab, ba netem.LinkStats, late netem.Lateness)
	// check reports a fault of the emulator that invalidates the run.
	check() error
}

// emuNet is the UDP relay: gateways on 127.0.0.1, each reached through
// the relay's stand-in address for it.
type emuNet struct {
	em  *netem.Emulator
	mtu int // the link's IP MTU
}

func (n emuNet) site(netem.Site) (netip.AddrPort, udp.Options) {
	return netip.MustParseAddrPort("127.0.0.1:0"), udp.Options{ReadBuffer: 8 << 20, WriteBuffer: 8 << 20}
}

func (n emuNet) expose(s netem.Site, real netip.AddrPort) (netip.AddrPort, error) {
	return n.em.Expose(s, real)
}

func (n emuNet) planeOf(local, realB netip.AddrPort) int {
	return n.em.PlaneOf(netem.AtoB, local, realB)
}

func (n emuNet) linkStats() (ab, ba netem.LinkStats, late netem.Lateness) {
	es := n.em.Stats()
	return es.Total(netem.AtoB), es.Total(netem.BtoA), es.Late[netem.AtoB]
}

func (n emuNet) check() error {
	if k := n.em.Stats().Truncated; k > 0 {
		return fmt.Errorf("peers: %d datagrams larger than the %d-byte IP MTU", k, n.mtu)
	}
	return nil
}

// tunnelPair is two mrgw gateways' tunnels whose data planes talk through
// a tunnelNet.
type tunnelPair struct {
	net   tunnelNet
	a, b  *tunnel.Tunnel
	stops []func()
}

func (p *tunnelPair) close() {
	for i := len(p.stops) - 1; i >= 0; i-- {
		p.stops[i]()
	}
}

// newTunnelPair builds two tunnels (control session over loopback with
// mutual TLS) whose data planes talk through n; onA and onB receive the
// endpoints' events.
func newTunnelPair(ctx context.Context, n tunnelNet, protoA, protoB metaroce.Config,
	onA, onB func(time.Duration, metaroce.Event)) (p *tunnelPair, err error) {
	p = &tunnelPair{net: n}
	defer func() {
		if err != nil {
			p.close()
		}
	}()
	ra, rb := tunnel.NewRouter(), tunnel.NewRouter()
	sp, err := tunneltest.LoopbackSessions(ctx, "peer-gw-a", "peer-gw-b", ra.OnEvent, rb.OnEvent)
	if err != nil {
		return nil, err
	}
	p.stops = append(p.stops, sp.Close)
	listenA, udpA := n.site(netem.SiteA)
	listenB, udpB := n.site(netem.SiteB)
	p.b, err = tunnel.New(sp.B, tunnel.Config{Protocol: protoB, Listen: listenB, UDP: udpB, Router: rb, OnEvent: onB})
	if err != nil {
		return nil, err
	}
	p.stops = append(p.stops, func() { p.b.Close() })
	realB := p.b.LocalAddr()
	p.a, err = tunnel.New(sp.A, tunnel.Config{Protocol: protoA, Listen: listenA, UDP: udpA, Router: ra, OnEvent: onA,
		PlaneOf: func(_ int, local netip.AddrPort) int { return n.planeOf(local, realB) }})
	if err != nil {
		return nil, err
	}
	p.stops = append(p.stops, func() { p.a.Close() })
	standA, err := n.expose(netem.SiteA, p.a.LocalAddr())
	if err != nil {
		return nil, err
	}
	standB, err := n.expose(netem.SiteB, realB)
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

// quickBulkMsg is the WRITE size of a Quick (test) bulk transfer: goodput
// counts completed messages, and under the race detector on a busy
// machine a tunnel may move less than one 1 MiB message per second (a
// test's whole window), which would read as a stall.
const quickBulkMsg = 64 << 10

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

// tunnelFlow is a running WRITE bulk transfer from gateway A to gateway B:
// 1 MiB messages kept queued (bulkOutstanding), goodput counted from
// messages completed at the receiver.
type tunnelFlow struct {
	p      *tunnelPair
	ccName string
	got    atomic.Uint64
	mu     sync.Mutex
	sender *metaroce.Conn
	// receiver is the receiving connection (read on B's endpoint).
	receiver *metaroce.Conn
}

// startTunnelFlow builds a tunnel pair over n and starts the transfer.
func startTunnelFlow(ctx context.Context, n tunnelNet, rocev2 bool, l Link, o Options) (f *tunnelFlow, err error) {
	protoA, ccName, err := protocol(rocev2, l, o, false)
	if err != nil {
		return nil, err
	}
	protoB, _, err := protocol(rocev2, l, o, true)
	if err != nil {
		return nil, err
	}
	f = &tunnelFlow{ccName: ccName}
	outstanding, msg := bulkOutstanding(l), bulkMsg
	if o.Quick {
		outstanding, msg = outstanding*(bulkMsg/quickBulkMsg), quickBulkMsg
	}
	src := make([]byte, msg)
	dst := make([]byte, msg)
	onA := func(now time.Duration, ev metaroce.Event) {
		switch ev.Kind {
		case metaroce.EventConnected:
			f.mu.Lock()
			f.sender = ev.Conn
			f.mu.Unlock()
			for range outstanding {
				_, _ = ev.Conn.Write(now, 0, 1, 0, src)
			}
		case metaroce.EventSendComplete:
			_, _ = ev.Conn.Write(now, 0, 1, 0, src) // refused once closing: the transfer just ends
		}
	}
	onB := func(_ time.Duration, ev metaroce.Event) {
		if ev.Kind == metaroce.EventRecvComplete && ev.Err == nil {
			f.mu.Lock()
			f.receiver = ev.Conn
			f.mu.Unlock()
			f.got.Add(ev.Len)
		}
	}
	f.p, err = newTunnelPair(ctx, n, protoA, protoB, onA, onB)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			f.p.close()
		}
	}()
	var regErr error
	if err := f.p.b.Endpoint().Call(ctx, func(_ time.Duration, ep *metaroce.Endpoint) { regErr = ep.Memory().Register(1, dst) }); err != nil {
		return nil, err
	}
	if regErr != nil {
		return nil, regErr
	}
	if _, err := f.p.a.Connect(ctx); err != nil {
		return nil, err
	}
	return f, nil
}

// received is the bytes of messages completed at the receiver so far.
func (f *tunnelFlow) received() uint64 { return f.got.Load() }

// window opens a measured window (windowStart): the bytes of messages
// completed inside it beyond every byte that may have been sent before it,
// i.e. the payload the receiver had placed when it opened (read second)
// and the bytes the sender had in flight (read first: a byte in flight then
// is either still in flight or placed by the second reading). A byte first
// sent before the window and lost is not in either; its copy that
// completes the message is sent inside the window. Messages complete in
// order, so what completes inside the window beyond that bound was sent
// inside it.
func (f *tunnelFlow) window(ctx context.Context) func() uint64 {
	var inflight, placed uint64
	f.withSender(ctx, func(c *metaroce.Conn) { inflight = uint64(c.InflightBytes()) })
	_ = f.p.b.Endpoint().Call(ctx, func(time.Duration, *metaroce.Endpoint) {
		f.mu.Lock()
		c := f.receiver
		f.mu.Unlock()
		if c != nil {
			placed = c.Stats.PayloadBytesPlaced
		}
	})
	base := max(f.got.Load(), placed+inflight)
	return func() uint64 {
		if got := f.got.Load(); got > base {
			return got - base
		}
		return 0
	}
}

// result reads the sender's retransmissions and the planes its paths use.
func (f *tunnelFlow) result(ctx context.Context) Result {
	r := Result{CC: f.ccName}
	planes := map[int]bool{}
	f.withSender(ctx, func(c *metaroce.Conn) {
		r.Retransmits = c.Stats.Retransmits
		for _, path := range c.Paths().Paths {
			if la, ok := f.p.a.Endpoint().PathAddr(tunnel.PeerID, path.Entropy); ok {
				planes[f.p.net.planeOf(la, f.p.b.LocalAddr())] = true
			}
		}
	})
	r.PlanesUsed = len(planes)
	return r
}

func (f *tunnelFlow) close() { f.p.close() }

// withSender runs fn on the sending endpoint's goroutine with the sender's
// connection, if it has one yet.
func (f *tunnelFlow) withSender(ctx context.Context, fn func(c *metaroce.Conn)) {
	_ = f.p.a.Endpoint().Call(ctx, func(time.Duration, *metaroce.Endpoint) {
		f.mu.Lock()
		c := f.sender
		f.mu.Unlock()
		if c != nil {
			fn(c)
		}
	})
}

// diagnose describes the sender's state for an error that says a flow
// stalled: its counters and each path's state, so that a rare stall seen
// on a CI machine says where it was.
func (f *tunnelFlow) diagnose(ctx context.Context) string {
	out := "no connection"
	f.withSender(ctx, func(c *metaroce.Conn) {
		st := c.Stats
		var b strings.Builder
		fmt.Fprintf(&b, "sent %d, retransmits %d, acks %d, lost %d, timeouts %d, messages %d sent %d failed, pmtu probes %d/%d acked; paths:",
			st.DataSent, st.Retransmits, st.AcksReceived, st.PacketsLost, st.Timeouts, st.MessagesSent, st.MessagesFailed, st.PMTUProbesSent, st.PMTUProbesAcked)
		for i, p := range c.Paths().Paths {
			fmt.Fprintf(&b, " %d:%v/srtt %v/window %d", i, p.State, p.SRTT, c.Controller().Window(i))
		}
		out = b.String()
	})
	return out
}

// pathProbe reads the sender's per-path state for plots (Options.Record).
func (f *tunnelFlow) pathProbe() probeFunc {
	return pathProbe(f.p.a, func() *metaroce.Conn {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.sender
	})
}

// pathProbe returns a reader of the per-path smoothed RTT (ms) and window
// (bytes) of the connection conn returns on t's endpoint (nil slices
// while there is none; 0 for a path not usable), at most maxPaths paths.
func pathProbe(t *tunnel.Tunnel, conn func() *metaroce.Conn) probeFunc {
	return func(ctx context.Context) (rttMs, cwnd []float64) {
		_ = t.Endpoint().Call(ctx, func(_ time.Duration, _ *metaroce.Endpoint) {
			c := conn()
			if c == nil {
				return
			}
			ps := c.Paths().Paths
			n := min(len(ps), maxPaths)
			rttMs, cwnd = make([]float64, n), make([]float64, n)
			for i := range n {
				if ps[i].State.Usable() && ps[i].SRTT > 0 {
					rttMs[i] = float64(ps[i].SRTT) / 1e6
					cwnd[i] = float64(c.Controller().Window(i))
				}
			}
		})
		return rttMs, cwnd
	}
}

// tunnelBulk runs a WRITE bulk transfer from gateway A to gateway B
// through emu, or through tunemu when Options.MRGWEmulator says so.
func tunnelBulk(ctx context.Context, rocev2 bool, l Link, warmup, duration time.Duration, o Options) (Result, error) {
	n, emName, closeNet, err := o.tunnelNet(ctx, l)
	if err != nil {
		return Result{}, err
	}
	defer closeNet()
	f, err := startTunnelFlow(ctx, n, rocev2, l, o)
	if err != nil {
		return Result{}, err
	}
	defer f.close()
	if o.Trace != nil {
		stop := traceTunnel(ctx, o.Trace, f, l)
		defer stop()
	}
	if !rocev2 {
		setPathProbe(ctx, f.pathProbe())
	}
	bps, err := measureSent(ctx, f.received, func() func() uint64 { return f.window(ctx) }, l.RTT/2, warmup, duration, func() {}, func() {})
	if err != nil {
		return Result{}, err
	}
	r := f.result(ctx)
	r.GoodputBps, r.Emulator = bps, emName
	if err := n.check(); err != nil {
		return r, err
	}
	if bps == 0 {
		// Go-back-N collapsing under reordering (RoCEv2 over several
		// planes) is that system's measured result, a row with nothing
		// moved; mrgw moving nothing is a failure of the run.
		if rocev2 {
			r.Note = report.JoinNote(r.Note, "go-back-N moved nothing: "+f.diagnose(ctx))
			return r, nil
		}
		return r, fmt.Errorf("peers: %s moved nothing during the measurement (%s)", MRGW, f.diagnose(ctx))
	}
	return r, nil
}

// tunnelNet starts the emulator mrgw and rocev2 run through
// (Options.MRGWEmulator) and returns it with its name and its closer.
func (o *Options) tunnelNet(ctx context.Context, l Link) (tunnelNet, string, func(), error) {
	switch o.MRGWEmulator {
	case "", EmuUDP, EmuTUN:
	default:
		return nil, "", nil, fmt.Errorf("peers: emulator %q: want %q or %q", o.MRGWEmulator, EmuUDP, EmuTUN)
	}
	if o.MRGWEmulator == EmuTUN {
		te, err := tunemu.New(ctx, l.tunConfig())
		if err != nil {
			return nil, "", nil, err
		}
		return tunNet{te}, EmuTUN, func() { te.Close() }, nil
	}
	em, err := netem.New(ctx, l.emuConfig())
	if err != nil {
		return nil, "", nil, err
	}
	return emuNet{em, l.IPMTU()}, EmuUDP, func() { em.Close() }, nil
}

// traceSnap is one sample of a tunnel bulk run's counters.
type traceSnap struct {
	at                      time.Time
	got                     uint64
	st                      metaroce.ConnStats
	inflight, window, queue int
	pacing                  units.ByteRate
	link                    netem.LinkStats
	back                    netem.LinkStats
	late                    netem.Lateness
}

// traceTunnel writes a line of deltas every 500 ms until the returned stop
// is called (Options.Trace).
func traceTunnel(ctx context.Context, w io.Writer, f *tunnelFlow, l Link) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	snap := func() (traceSnap, bool) {
		s := traceSnap{at: time.Now(), got: f.received()}
		ok := false
		err := f.p.a.Endpoint().Call(ctx, func(_ time.Duration, _ *metaroce.Endpoint) {
			f.mu.Lock()
			c := f.sender
			f.mu.Unlock()
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
		s.link, s.back, s.late = f.p.net.linkStats()
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
				float64(units.Throughput(float64(cur.got-prev.got), dt))/1e6,
				d(cur.st.DataSent, prev.st.DataSent), d(cur.st.Retransmits, prev.st.Retransmits),
				d(cur.st.PacketsLost, prev.st.PacketsLost), d(cur.st.Timeouts, prev.st.Timeouts),
				d(cur.st.AcksReceived, prev.st.AcksReceived),
				float64(cur.inflight)/bdp, float64(cur.window)/bdp, float64(cur.pacing.Bits())/1e6, cur.queue,
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
