// Package responder is mrgw's own implementation of the conformance suite's
// test contract (docs/CONFORMANCE.md §2): one metaroce.Endpoint on one UDP
// socket, driven by a single goroutine. The suite (package conformance) runs
// against it in CI; the suite itself never imports metaroce, so its
// judgement cannot borrow the codec or state machine it judges.
package responder

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/mrgw/mrgw/conformance"
	"github.com/mrgw/mrgw/internal/ecn"
	"github.com/mrgw/mrgw/metaroce"
	"github.com/mrgw/mrgw/pathmgr"
)

// Options configures the responder.
type Options struct {
	// Config is the endpoint configuration. The zero value selects the
	// responder's defaults (see DefaultConfig); Listen is always set.
	Config *metaroce.Config
	// OnListen, if set, is called once with the bound address before serving.
	OnListen func(netip.AddrPort)
	// Logf, if set, receives one line per notable event (send errors, bad
	// control requests).
	Logf func(format string, args ...any)

	// brk deliberately breaks the responder (tests only): it proves that
	// every case of the suite can fail.
	brk *breakage
}

// breakage is a datagram-level middleware around the endpoint.
type breakage struct {
	// in sees every received datagram before the endpoint; it returns the
	// datagrams to feed now (nil drops, several release held ones).
	in func(r *Responder, b []byte, m *metaroce.RecvMeta) [][]byte
	// after runs after the endpoint received a datagram, before its events.
	after func(r *Responder, b []byte)
	// out sees every datagram the endpoint sends; it may rewrite it and its
	// transmit (to re-address it), or return nil to drop it.
	out func(r *Responder, b []byte, tx *metaroce.Transmit) []byte
}

// DefaultConfig is the endpoint configuration of the responder: the
// protocol's defaults, with timers suited to a user-space loop over real
// sockets, and a receive capacity so that every ACK carries a rate hint.
func DefaultConfig() metaroce.Config {
	p := pathmgr.DefaultConfig()
	p.InitialRTT = 2 * time.Millisecond
	p.MinPTO = 20 * time.Millisecond
	p.MaxAckDelay = time.Millisecond
	p.ProbeInterval = 20 * time.Millisecond
	p.MaxProbeInterval = 500 * time.Millisecond
	return metaroce.Config{
		MTU:             4096,
		Paths:           8,
		Path:            p,
		MaxConns:        256,
		ReceiveCapacity: 10e9,
		Listen:          true,
		// Both wire versions, so that the suite's version-2 cases run.
		WireVersions: []uint8{metaroce.Version1, metaroce.Version2},
	}
}

// Responder is mrgw's own implementation of the test contract of
// docs/CONFORMANCE.md: a metaroce.Endpoint on one UDP socket, driven by a
// single goroutine. It is what the suite runs against in CI.
type Responder struct {
	pc   *net.UDPConn
	addr netip.AddrPort
	opts Options
	ep   *metaroce.Endpoint

	region []byte
	start  time.Time

	peers    map[netip.Addr]metaroce.PeerID
	peerAddr []netip.Addr
	homes    map[uint64]netip.AddrPort    // connection -> initiator's listening address
	bufs     map[uint64]map[uint64][]byte // connection -> tag -> posted buffer
	lastSrc  netip.AddrPort               // source of the datagram being processed
	pktBuf   []byte
	oob      []byte
	inFlight map[uint64]int // connection -> reports queued (bounded)
}

// maxReportsQueued bounds the reports a connection may have unacknowledged.
const maxReportsQueued = 4096

// New binds addr (for example "127.0.0.1:0") and prepares the endpoint;
// Run serves it.
func New(addr string, opts Options) (*Responder, error) {
	ua, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return nil, fmt.Errorf("conformance: %w", err)
	}
	pc, err := net.ListenUDP("udp", ua)
	if err != nil {
		return nil, fmt.Errorf("conformance: %w", err)
	}
	_ = pc.SetReadBuffer(4 << 20) // best effort: the suite sends bursts
	if err := ecn.EnableReceive(pc); err != nil {
		pc.Close()
		return nil, fmt.Errorf("conformance: %w", err)
	}
	cfg := DefaultConfig()
	if opts.Config != nil {
		cfg = *opts.Config
	}
	cfg.Listen = true
	if cfg.Seed == 0 {
		cfg.Seed = uint64(time.Now().UnixNano())
	}
	mem := metaroce.NewMemory()
	region := make([]byte, conformance.RegionSize)
	if err := mem.Register(conformance.RegionKey, region); err != nil {
		pc.Close()
		return nil, err
	}
	ep, err := metaroce.NewEndpoint(cfg, mem)
	if err != nil {
		pc.Close()
		return nil, fmt.Errorf("conformance: %w", err)
	}
	la := pc.LocalAddr().(*net.UDPAddr).AddrPort()
	return &Responder{
		pc: pc, addr: netip.AddrPortFrom(la.Addr().Unmap(), la.Port()), opts: opts, ep: ep,
		region: region, start: time.Now(),
		peers: make(map[netip.Addr]metaroce.PeerID), homes: make(map[uint64]netip.AddrPort),
		bufs: make(map[uint64]map[uint64][]byte), inFlight: make(map[uint64]int),
		pktBuf: make([]byte, metaroce.MaxPayload+metaroce.DataHeaderLen), oob: make([]byte, ecn.RecvSpace),
	}, nil
}

// Addr returns the address the responder listens on.
func (r *Responder) Addr() netip.AddrPort { return r.addr }

// Serve runs a responder on addr until ctx ends.
func Serve(ctx context.Context, addr string, opts Options) error {
	r, err := New(addr, opts)
	if err != nil {
		return err
	}
	return r.Run(ctx)
}

func (r *Responder) now() time.Duration { return time.Since(r.start) }

func (r *Responder) logf(format string, args ...any) {
	if r.opts.Logf != nil {
		r.opts.Logf(format, args...)
	}
}

// Run serves until ctx ends, then closes the socket. It returns nil when ctx
// ended and the error otherwise.
func (r *Responder) Run(ctx context.Context) error {
	defer r.pc.Close()
	if r.opts.OnListen != nil {
		r.opts.OnListen(r.addr)
	}
	buf := make([]byte, 1<<16)
	for ctx.Err() == nil {
		now := r.now()
		wait := 50 * time.Millisecond
		if t := r.ep.NextTimeout(); t >= 0 && t-now < wait {
			wait = max(t-now, 0)
		}
		if err := r.pc.SetReadDeadline(time.Now().Add(wait)); err != nil {
			return fmt.Errorf("conformance: %w", err)
		}
		n, oobn, _, src, err := r.pc.ReadMsgUDPAddrPort(buf, r.oob)
		now = r.now()
		switch {
		case err == nil:
			ctl, _ := ecn.ParseControl(r.oob[:oobn])
			src = netip.AddrPortFrom(src.Addr().Unmap(), src.Port())
			r.receive(now, buf[:n], src, ctl.HasECN && ctl.ECN == ecn.CE)
		case errors.Is(err, net.ErrClosed):
			return nil
		default:
			var ne net.Error
			if !errors.As(err, &ne) || !ne.Timeout() {
				r.logf("conformance responder: read: %v", err)
			}
		}
		if t := r.ep.NextTimeout(); t >= 0 && t <= now {
			r.ep.HandleTimeout(now)
		}
		r.drain(now)
	}
	return nil
}

func (r *Responder) peer(a netip.Addr) metaroce.PeerID {
	id, ok := r.peers[a]
	if !ok {
		if len(r.peerAddr) >= 1<<16 { // bound the table: reuse the last slot
			return metaroce.PeerID(len(r.peerAddr) - 1)
		}
		id = metaroce.PeerID(len(r.peerAddr))
		r.peers[a] = id
		r.peerAddr = append(r.peerAddr, a)
	}
	return id
}

func (r *Responder) receive(now time.Duration, b []byte, src netip.AddrPort, ce bool) {
	m := metaroce.RecvMeta{Peer: r.peer(src.Addr()), Entropy: src.Port(), CE: ce}
	r.lastSrc = src
	if brk := r.opts.brk; brk != nil {
		feed := [][]byte{b}
		if brk.in != nil {
			feed = brk.in(r, b, &m)
		}
		for _, p := range feed {
			r.ep.Receive(now, p, m)
			if brk.after != nil {
				brk.after(r, p)
			}
			r.events(now)
		}
		return
	}
	r.ep.Receive(now, b, m)
	r.events(now)
}

// drain sends everything the endpoint has to send, handling the events that
// sending produces. It is bounded: what is left waits for the next turn.
func (r *Responder) drain(now time.Duration) {
	for i := 0; i < 4096; i++ {
		r.events(now)
		tx, ok := r.ep.Poll(now, r.pktBuf[:0])
		if !ok {
			r.events(now)
			return
		}
		r.send(tx, r.pktBuf[:tx.Len])
	}
}

func (r *Responder) send(tx metaroce.Transmit, b []byte) {
	if r.opts.brk != nil && r.opts.brk.out != nil {
		if b = r.opts.brk.out(r, b, &tx); b == nil {
			return
		}
	}
	var dst netip.AddrPort
	if tx.Reply || tx.Conn == nil {
		if int(tx.Peer) >= len(r.peerAddr) {
			return
		}
		dst = netip.AddrPortFrom(r.peerAddr[tx.Peer], tx.Entropy)
	} else {
		h, ok := r.homes[tx.Conn.ID()]
		if !ok {
			return
		}
		dst = h
	}
	var oob []byte
	if tx.ECT {
		oob = ecn.AppendECN(r.oob[:0:len(r.oob)], dst.Addr().Is6(), ecn.ECT0)
	}
	if _, _, err := r.pc.WriteMsgUDPAddrPort(b, oob, dst); err != nil {
		r.logf("conformance responder: send to %v: %v", dst, err)
	}
}

func (r *Responder) events(now time.Duration) {
	for i := 0; i < 1<<16; i++ {
		ev, ok := r.ep.PollEvent()
		if !ok {
			return
		}
		switch ev.Kind {
		case metaroce.EventConnected:
			r.connected(ev.Conn)
		case metaroce.EventRecvComplete:
			r.completed(now, ev)
		case metaroce.EventSendComplete:
			if ev.Stream == conformance.CtlStream && r.inFlight[ev.Conn.ID()] > 0 {
				r.inFlight[ev.Conn.ID()]--
			}
		case metaroce.EventClosed:
			delete(r.homes, ev.Conn.ID())
			delete(r.bufs, ev.Conn.ID())
			delete(r.inFlight, ev.Conn.ID())
		}
	}
}

// connected applies the contract to a new connection: remember where the
// initiator listens and post the receive buffers.
func (r *Responder) connected(c *metaroce.Conn) {
	r.homes[c.ID()] = r.lastSrc
	bufs := make(map[uint64][]byte, conformance.LastTag-conformance.FirstTag+2)
	for tag := conformance.FirstTag; tag <= conformance.LastTag; tag++ {
		b := make([]byte, conformance.TagBufSize)
		if c.PostRecv(tag, b) == nil {
			bufs[tag] = b
		}
	}
	r.bufs[c.ID()] = bufs
	r.postCtl(c)
}

func (r *Responder) postCtl(c *metaroce.Conn) {
	b := make([]byte, conformance.CtlBufSize)
	if c.PostRecv(conformance.CtlTag, b) == nil {
		r.bufs[c.ID()][conformance.CtlTag] = b
	}
}

func statusOf(err error) uint16 {
	switch {
	case err == nil:
		return conformance.StatusOK
	case errors.Is(err, metaroce.ErrUnknownKey):
		return uint16(metaroce.ErrCodeUnknownKey)
	case errors.Is(err, metaroce.ErrOutOfBounds):
		return uint16(metaroce.ErrCodeOutOfBounds)
	case errors.Is(err, metaroce.ErrNoPostedBuffer):
		return uint16(metaroce.ErrCodeNoBuffer)
	case errors.Is(err, metaroce.ErrBufferTooSmall):
		return uint16(metaroce.ErrCodeBufferTooSmall)
	case errors.Is(err, metaroce.ErrTooFarAhead):
		return uint16(metaroce.ErrCodeTooFarAhead)
	case errors.Is(err, metaroce.ErrNotRelayed):
		return uint16(metaroce.ErrCodeNotRelayed)
	}
	return conformance.StatusOtherErr
}

// completed answers a control request, or reports a data message.
func (r *Responder) completed(now time.Duration, ev metaroce.Event) {
	c := ev.Conn
	bufs := r.bufs[c.ID()]
	if bufs == nil {
		return
	}
	if ev.Stream == conformance.CtlStream && ev.Op == metaroce.OpSend && ev.Addr == conformance.CtlTag {
		req := bufs[conformance.CtlTag]
		delete(bufs, conformance.CtlTag)
		r.postCtl(c)
		if ev.Err != nil || uint64(len(req)) < ev.Len {
			return
		}
		r.answer(now, c, req[:ev.Len])
		return
	}
	rep := conformance.Report{Kind: conformance.RepComplete, Op: uint8(ev.Op), Status: statusOf(ev.Err), Stream: ev.Stream, MsgSeq: ev.Seq,
		Key: ev.Key, Addr: ev.Addr, Len: ev.Len}
	if ev.Err == nil {
		switch ev.Op {
		case metaroce.OpWrite:
			if reg, ok := r.ep.Memory().Region(ev.Key); ok && ev.Addr <= uint64(len(reg)) && ev.Len <= uint64(len(reg))-ev.Addr {
				rep.Digest = conformance.Digest(reg[ev.Addr : ev.Addr+ev.Len])
			}
		case metaroce.OpSend:
			if b, ok := bufs[ev.Addr]; ok && ev.Len <= uint64(len(b)) {
				rep.Digest = conformance.Digest(b[:ev.Len])
			}
		}
	}
	r.reply(now, c, &rep)
}

// answer serves one control request.
func (r *Responder) answer(now time.Duration, c *metaroce.Conn, b []byte) {
	req, err := conformance.DecodeRequest(b)
	if err != nil {
		r.logf("conformance responder: conn %x: %v", c.ID(), err)
		return
	}
	rep := conformance.Report{Kind: conformance.RepRead, Op: req.Space, Stream: req.ID, Key: req.Key, Addr: req.Addr, Status: conformance.StatusBadReq}
	if req.Kind == conformance.ReqRead && req.Len <= conformance.MaxRead {
		var src []byte
		switch req.Space {
		case conformance.SpaceRegion:
			if reg, ok := r.ep.Memory().Region(req.Key); ok && req.Addr <= uint64(len(reg)) && uint64(req.Len) <= uint64(len(reg))-req.Addr {
				src = reg[req.Addr : req.Addr+uint64(req.Len)]
			}
		case conformance.SpaceTag:
			if buf, ok := r.bufs[c.ID()][req.Addr]; ok && req.Addr != conformance.CtlTag && uint64(req.BufOff)+uint64(req.Len) <= uint64(len(buf)) {
				src = buf[req.BufOff : req.BufOff+req.Len]
			}
		}
		if src != nil {
			rep.Status, rep.Data, rep.Len = conformance.StatusOK, append([]byte(nil), src...), uint64(len(src))
		}
	}
	r.reply(now, c, &rep)
}

func (r *Responder) reply(now time.Duration, c *metaroce.Conn, rep *conformance.Report) {
	if r.inFlight[c.ID()] >= maxReportsQueued {
		r.logf("conformance responder: conn %x: report dropped, %d unacknowledged", c.ID(), maxReportsQueued)
		return
	}
	if _, err := c.Send(now, conformance.CtlStream, conformance.CtlTag, rep.Encode()); err != nil {
		r.logf("conformance responder: conn %x: report: %v", c.ID(), err)
		return
	}
	r.inFlight[c.ID()]++
}
