//go:build linux

package host

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mrgw/mrgw/cc"
	"github.com/mrgw/mrgw/flowctl"
	"github.com/mrgw/mrgw/metaroce"
	"github.com/mrgw/mrgw/netio"
	"github.com/mrgw/mrgw/pathmgr"
)

// fakeGW is the gateway side of docs/GATEWAY.md, minimally: it serves
// both regions of one region pair at once (source and destination hosts
// register with it), so a flow is host → fakeGW → host. It registers
// hosts, forwards OPEN to the registered destination on a stream of its
// LAN connection, relays chunks cut-through (WriteRelay/Supply, same
// sequence), relays DONE back, and sends RESET upstream when the
// downstream connection of a flow closes. It also measures each flow's
// bytes in flight (seen and not DONE) against the credit it granted.
type fakeGW struct {
	ep       *netio.Endpoint
	credit   uint64
	dropDone atomic.Bool  // withhold DONE from the sources
	resets   atomic.Int64 // RESETs received from a host (any flow)
	errs     atomic.Int64
	lastErr  atomic.Value
	killOnce sync.Once

	mu       sync.Mutex
	hostAddr map[netip.Addr]netip.AddrPort // listening address of each host IP

	// Owner goroutine only.
	mep        *metaroce.Endpoint
	nextPeer   metaroce.PeerID
	peerIP     map[metaroce.PeerID]netip.Addr
	hosts      map[string]*metaroce.Conn
	names      map[*metaroce.Conn]string
	flows      map[uint64]*gwFlow
	ups        map[streamKey]*gwFlow
	nextStream map[*metaroce.Conn]uint32
	ctl        map[*metaroce.Conn]map[uint64][]byte
	maxOver    uint64 // largest excess of a flow's bytes in flight over its credit
	maxOut     uint64 // largest bytes in flight of any flow
	relayed    uint64 // messages relayed
}

type gwFlow struct {
	id        uint64
	up, down  *metaroce.Conn
	su, sd    uint32
	credit    uint64
	msgs      map[uint64]*gwMsg
	lens      map[uint64]uint64 // in flight: seen, not DONE
	out       uint64
	doneBelow uint64
}

type gwMsg struct {
	rm   *metaroce.RelayMessage
	left int
}

func testProto() metaroce.Config {
	p := pathmgr.DefaultConfig()
	p.InitialRTT = time.Millisecond
	p.MinPTO = 20 * time.Millisecond
	p.MaxAckDelay = time.Millisecond
	p.ProbeInterval = 10 * time.Millisecond
	p.MaxProbeInterval = 50 * time.Millisecond
	return metaroce.Config{MTU: 2048, Paths: 4, CC: cc.NewFixed(256<<10, 0), Path: p, DeadAfter: 300 * time.Millisecond}
}

func newFakeGW(t *testing.T, ip string, credit uint64) *fakeGW {
	t.Helper()
	g := &fakeGW{
		credit:     credit,
		hostAddr:   map[netip.Addr]netip.AddrPort{},
		nextPeer:   100,
		peerIP:     map[metaroce.PeerID]netip.Addr{},
		hosts:      map[string]*metaroce.Conn{},
		names:      map[*metaroce.Conn]string{},
		flows:      map[uint64]*gwFlow{},
		ups:        map[streamKey]*gwFlow{},
		nextStream: map[*metaroce.Conn]uint32{},
		ctl:        map[*metaroce.Conn]map[uint64][]byte{},
	}
	proto := testProto()
	proto.Listen = true
	ep, err := netio.New(netio.Config{
		Protocol:   proto,
		Listen:     netip.MustParseAddrPort(ip + ":0"),
		AcceptPeer: g.accept,
		OnEvent:    g.onEvent,
	})
	if err != nil {
		t.Fatal(err)
	}
	g.ep = ep
	t.Cleanup(g.kill)
	if err := ep.Call(testCtx(t), func(_ time.Duration, mep *metaroce.Endpoint) {
		g.mep = mep
		mep.BindSinkAll(flowctl.ControlStream, gwCtlSink{g})
	}); err != nil {
		t.Fatal(err)
	}
	return g
}

func (g *fakeGW) addr() netip.AddrPort { return g.ep.LocalAddr() }

// knowHost tells the gateway a host's listening address, so that its
// datagrams to the host go there rather than to the socket the host's INIT
// came from (which may be retired when the path's entropy is re-rolled).
func (g *fakeGW) knowHost(a netip.AddrPort) {
	g.mu.Lock()
	g.hostAddr[a.Addr()] = a
	g.mu.Unlock()
}

// kill stops the gateway at once, as a crash would: no CLOSE is sent.
func (g *fakeGW) kill() { g.killOnce.Do(func() { g.ep.Close() }) }

func (g *fakeGW) fail(format string, args ...any) {
	g.errs.Add(1)
	g.lastErr.Store(fmt.Sprintf(format, args...))
}

func (g *fakeGW) accept(src netip.AddrPort) (metaroce.PeerID, bool) {
	id := g.nextPeer
	g.nextPeer++
	g.peerIP[id] = src.Addr()
	return id, true
}

// resetFlow drops a flow and sends RESET{route lost} to its source.
func (g *fakeGW) resetFlow(t *testing.T, flow uint64) {
	t.Helper()
	ok := false
	if err := g.ep.Call(testCtx(t), func(now time.Duration, _ *metaroce.Endpoint) {
		if f := g.flows[flow]; f != nil {
			ok = true
			g.send(now, f.up, &flowctl.Msg{Type: flowctl.Reset, Flow: flow, Code: flowctl.CodeRouteLost, Reason: "test"})
			g.drop(f)
		}
	}); err != nil || !ok {
		t.Fatalf("resetFlow %x: ok=%v err=%v", flow, ok, err)
	}
}

// dropHost closes the gateway's connection to the host registered as
// name (REGION/NAME), the gateway living on: its flows from that host
// are dropped without a word downstream, as a gateway drops a flow whose
// upstream is lost.
func (g *fakeGW) dropHost(t *testing.T, name string) {
	t.Helper()
	ok := false
	if err := g.ep.Call(testCtx(t), func(now time.Duration, _ *metaroce.Endpoint) {
		if c := g.hosts[name]; c != nil {
			ok = true
			c.Close(now)
		}
	}); err != nil || !ok {
		t.Fatalf("dropHost %s: ok=%v err=%v", name, ok, err)
	}
}

// measures returns the largest bytes in flight of a flow and the largest
// excess over its credit.
func (g *fakeGW) measures(t *testing.T) (maxOut, maxOver, relayed uint64) {
	t.Helper()
	if err := g.ep.Call(testCtx(t), func(time.Duration, *metaroce.Endpoint) {
		maxOut, maxOver, relayed = g.maxOut, g.maxOver, g.relayed
	}); err != nil {
		t.Fatal(err)
	}
	return
}

func (g *fakeGW) send(now time.Duration, c *metaroce.Conn, m *flowctl.Msg) {
	if c == nil || !c.Established() { // closed, or closing (dropHost)
		return
	}
	b, err := flowctl.Append(nil, m)
	if err != nil {
		g.fail("encode %v: %v", m.Type, err)
		return
	}
	if _, err := c.Send(now, flowctl.ControlStream, 0, b); err != nil {
		g.fail("send %v: %v", m.Type, err)
	}
}

func (g *fakeGW) onEvent(now time.Duration, ev metaroce.Event) {
	switch ev.Kind {
	case metaroce.EventConnected:
		g.nextStream[ev.Conn] = 1
		g.mu.Lock()
		a, ok := g.hostAddr[g.peerIP[ev.Conn.Peer()]]
		g.mu.Unlock()
		if ok {
			_ = g.ep.AddPeer(netio.Peer{ID: ev.Conn.Peer(), Addr: a})
		}
	case metaroce.EventClosed:
		g.closed(now, ev.Conn)
	case metaroce.EventRecvComplete:
		if ev.Stream != flowctl.ControlStream {
			return
		}
		m := g.ctl[ev.Conn]
		b, ok := m[ev.Seq]
		delete(m, ev.Seq)
		if !ok || ev.Err != nil {
			return
		}
		msg, err := flowctl.Decode(b)
		if err != nil {
			g.fail("decode: %v", err)
			return
		}
		g.dispatch(now, ev.Conn, &msg)
	}
}

func (g *fakeGW) closed(now time.Duration, c *metaroce.Conn) {
	if n, ok := g.names[c]; ok && g.hosts[n] == c {
		delete(g.hosts, n)
	}
	delete(g.names, c)
	delete(g.ctl, c)
	delete(g.nextStream, c)
	for _, f := range g.flows {
		switch c {
		case f.down:
			g.send(now, f.up, &flowctl.Msg{Type: flowctl.Reset, Flow: f.id, Code: flowctl.CodeRouteLost, Reason: "destination lost"})
			g.drop(f)
		case f.up:
			g.drop(f)
		}
	}
}

func (g *fakeGW) drop(f *gwFlow) {
	for _, m := range f.msgs {
		m.rm.Fail(metaroce.ErrClosed)
	}
	delete(g.ups, streamKey{f.up, f.su})
	delete(g.flows, f.id)
}

func (g *fakeGW) dispatch(now time.Duration, c *metaroce.Conn, m *flowctl.Msg) {
	switch m.Type {
	case flowctl.Register:
		n := m.Region + "/" + m.Endpoint
		g.hosts[n] = c
		g.names[c] = n
		g.send(now, c, &flowctl.Msg{Type: flowctl.RegisterOK})
	case flowctl.Open:
		refuse := func(code flowctl.Code) {
			g.send(now, c, &flowctl.Msg{Type: flowctl.OpenErr, Flow: m.Flow, Code: code, Reason: "fake gateway"})
		}
		down := g.hosts[m.DstRegion+"/"+m.DstEndpoint]
		if down == nil {
			for n := range g.hosts {
				if len(n) > len(m.DstRegion) && n[:len(m.DstRegion)+1] == m.DstRegion+"/" {
					refuse(flowctl.CodeUnknownEndpoint)
					return
				}
			}
			refuse(flowctl.CodeUnknownRegion)
			return
		}
		if old := g.flows[m.Flow]; old != nil {
			g.drop(old)
		}
		if err := c.ResumeStream(m.Stream, m.Resume); err != nil {
			refuse(flowctl.CodeBadRequest)
			return
		}
		// Bound before OPEN_OK goes upstream: no chunk finds it unbound.
		c.BindSink(m.Stream, gwRelay{g})
		f := &gwFlow{id: m.Flow, up: c, su: m.Stream, down: down, sd: g.nextStream[down],
			msgs: map[uint64]*gwMsg{}, lens: map[uint64]uint64{}, doneBelow: m.Resume}
		g.nextStream[down]++
		g.flows[m.Flow] = f
		g.ups[streamKey{c, m.Stream}] = f
		fwd := *m
		fwd.Stream = f.sd
		g.send(now, down, &fwd)
	case flowctl.OpenOK:
		if f := g.flows[m.Flow]; f != nil && f.down == c {
			f.credit = min(m.Credit, g.credit)
			g.send(now, f.up, &flowctl.Msg{Type: flowctl.OpenOK, Flow: m.Flow, Credit: f.credit})
		}
	case flowctl.OpenErr, flowctl.Reset:
		if m.Type == flowctl.Reset {
			g.resets.Add(1)
		}
		if f := g.flows[m.Flow]; f != nil && f.down == c {
			g.send(now, f.up, m)
			g.drop(f)
		}
	case flowctl.Done:
		if f := g.flows[m.Flow]; f != nil && f.down == c {
			for seq, n := range f.lens {
				if seq < m.Below {
					f.out -= n
					delete(f.lens, seq)
				}
			}
			f.doneBelow = max(f.doneBelow, m.Below)
			if !g.dropDone.Load() {
				g.send(now, f.up, m)
			}
		}
	case flowctl.Close:
		if f := g.flows[m.Flow]; f != nil && f.up == c {
			g.send(now, f.down, m)
			g.drop(f)
		}
	case flowctl.Ping:
		g.send(now, c, &flowctl.Msg{Type: flowctl.Pong, Seq: m.Seq})
	}
}

type gwCtlSink struct{ g *fakeGW }

func (s gwCtlSink) Chunk(c *metaroce.Conn, h *metaroce.DataHeader, payload []byte) metaroce.ErrorCode {
	if h.Offset != 0 || uint64(len(payload)) != h.MsgLen {
		return metaroce.ErrCodeBufferTooSmall
	}
	m := s.g.ctl[c]
	if m == nil {
		m = map[uint64][]byte{}
		s.g.ctl[c] = m
	}
	m[h.MsgSeq] = append([]byte(nil), payload...)
	return 0
}

// gwRelay forwards each chunk of a flow's upstream stream to its
// downstream stream, as it arrives.
type gwRelay struct{ g *fakeGW }

func (r gwRelay) Chunk(c *metaroce.Conn, h *metaroce.DataHeader, payload []byte) metaroce.ErrorCode {
	g := r.g
	f := g.ups[streamKey{c, h.Stream}]
	if f == nil {
		return metaroce.ErrCodeTooFarAhead // the flow is gone: refuse
	}
	if _, ok := f.lens[h.MsgSeq]; !ok && h.MsgSeq >= f.doneBelow {
		n := max(h.MsgLen, 1)
		f.lens[h.MsgSeq] = n
		f.out += n
		g.maxOut = max(g.maxOut, f.out)
		if f.out > f.credit {
			g.maxOver = max(g.maxOver, f.out-f.credit)
		}
	}
	m := f.msgs[h.MsgSeq]
	if m == nil {
		rm, err := f.down.WriteRelay(f.sd, h.MsgSeq, h.Op, h.Key, h.Addr, h.MsgLen, nil)
		if err != nil {
			g.fail("WriteRelay flow %x seq %d: %v", f.id, h.MsgSeq, err)
			return metaroce.ErrCodeTooFarAhead
		}
		mtu := uint64(c.MTU())
		m = &gwMsg{rm: rm, left: int(max((h.MsgLen+mtu-1)/mtu, 1))}
		f.msgs[h.MsgSeq] = m
		g.relayed++
	}
	if err := m.rm.Supply(h.Offset, append([]byte(nil), payload...)); err != nil {
		g.fail("Supply flow %x seq %d off %d: %v", f.id, h.MsgSeq, h.Offset, err)
		return metaroce.ErrCodeTooFarAhead
	}
	if m.left--; m.left == 0 {
		delete(f.msgs, h.MsgSeq)
	}
	return 0
}

// checkErrs fails the test if the gateway saw an internal error.
func (g *fakeGW) checkErrs(t *testing.T) {
	t.Helper()
	if n := g.errs.Load(); n > 0 {
		t.Errorf("fake gateway: %d errors, last: %v", n, g.lastErr.Load())
	}
}

// freeAddr reserves an ephemeral UDP port on ip and frees it, so that a
// host can be told its listening address before it starts.
func freeAddr(t *testing.T, ip string) netip.AddrPort {
	t.Helper()
	c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.MustParseAddrPort(ip+":0")))
	if err != nil {
		t.Fatal(err)
	}
	a := c.LocalAddr().(*net.UDPAddr).AddrPort()
	c.Close()
	return a
}

// testCtx bounds a test's waits: a failure deadline, not a performance
// threshold.
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}
