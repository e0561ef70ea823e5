//go:build linux

package stream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mrgw/mrgw/host"
	"github.com/mrgw/mrgw/internal/ratelog"
	"github.com/mrgw/mrgw/metaroce"
)

// Memory keys. Keys with the top bit set belong to the Mux (one per stream
// end, and listenKey); an application that registers memory of its own on
// the same host uses keys below keyBase, and receives their deliveries
// from Mux.Deliveries.
const (
	keyBase   uint32 = 1 << 31
	listenKey uint32 = 1<<32 - 1
	// listenRegion is the size of the listen key's region: a connection
	// request is an empty WRITE at the port's offset, so every port fits.
	listenRegion = 1 << 16
)

// dialKey is the region key a dialer uses for the stream whose first flow
// is flow: the listener derives it from the same flow id, so its reply
// needs no other addressing.
func dialKey(flow uint64) uint32 {
	k := keyBase | uint32(flow)
	if k == listenKey {
		k--
	}
	return k
}

// Config tunes a Mux. Zero values take the defaults in brackets.
type Config struct {
	// Window is each stream end's receive ring, in bytes [4 MiB]: at most
	// this much of one direction is in flight or unread, so one stream
	// carries at most Window per round trip. The sender keeps a copy of
	// the same size until the bytes are in the receiver's memory, so a
	// stream holds up to 2 × Window on each host.
	Window int
	// MaxMessage caps one WRITE of stream data [Window/4]: the receiver
	// reads a message only once all of it has arrived.
	MaxMessage int
	// Backlog bounds the streams a listener holds that Accept has not
	// taken [1024]; further connection requests are refused.
	Backlog int
	// MaxStreams bounds the stream ends open at once on this host [4096];
	// further dials fail and further connection requests are refused.
	MaxStreams int
	// Linger is how long a closed stream waits for its peer to finish
	// before it is torn down [60 s], and how long its key keeps answering
	// late control records afterwards.
	Linger time.Duration
	// KeepAlive is how often an idle stream sends its record [30 s;
	// negative: never]: a peer that has gone away (its host killed)
	// fails the flow to it (host.Config.FailAfter later), which resets
	// the stream instead of leaving its reader waiting forever.
	KeepAlive time.Duration
	// Class is the scheduling class of the streams' flows [none].
	Class string
	// Logger: nil discards.
	Logger *slog.Logger
}

func (c Config) withDefaults() (Config, error) {
	if c.Window == 0 {
		c.Window = 4 << 20
	}
	if c.Window < 4096 || c.Window > 1<<30 {
		return c, fmt.Errorf("stream: Window %d: want 4 KiB to 1 GiB", c.Window)
	}
	if c.MaxMessage == 0 {
		c.MaxMessage = c.Window / 4
	}
	if c.MaxMessage < 1 || c.MaxMessage > c.Window {
		return c, fmt.Errorf("stream: MaxMessage %d: want 1 to Window (%d)", c.MaxMessage, c.Window)
	}
	if c.Backlog <= 0 {
		c.Backlog = 1024
	}
	if c.MaxStreams <= 0 {
		c.MaxStreams = 4096
	}
	if c.Linger <= 0 {
		c.Linger = time.Minute
	}
	if c.KeepAlive == 0 {
		c.KeepAlive = 30 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c, nil
}

// Errors.
var (
	// ErrClosed: the Mux, its Host or the Listener is closed.
	ErrClosed = errors.New("stream: closed")
	// ErrRefused: nothing listens on the port, or its accept queue is full.
	ErrRefused = errors.New("stream: connection refused")
	// ErrReset: the stream was reset (by the peer, or locally after a
	// protocol error or a failed route); a *ResetError says why.
	ErrReset = errors.New("stream: connection reset")
	// ErrTooManyStreams: MaxStreams stream ends are open.
	ErrTooManyStreams = errors.New("stream: too many open streams")
	// ErrPortInUse: a listener holds the port already.
	ErrPortInUse = errors.New("stream: port in use")
)

// ResetError says why a stream was reset.
type ResetError struct {
	Code   uint32
	Remote bool  // the peer reset it
	Cause  error // a local cause (a failed flow), if any
}

func (e *ResetError) Error() string {
	who := "locally"
	if e.Remote {
		who = "by the peer"
	}
	s := fmt.Sprintf("stream: connection reset %s (%s)", who, codeName(e.Code))
	if e.Cause != nil {
		s += ": " + e.Cause.Error()
	}
	return s
}

// Is makes errors.Is(err, ErrReset) true, and ErrRefused for refusals.
func (e *ResetError) Is(target error) bool {
	return target == ErrReset || (target == ErrRefused && (e.Code == CodeRefused || e.Code == CodeBacklog))
}

func (e *ResetError) Unwrap() error { return e.Cause }

// IsResetCode reports whether err is a reset with code.
func IsResetCode(err error, code uint32) bool {
	var re *ResetError
	return errors.As(err, &re) && re.Code == code
}

func codeName(c uint32) string {
	switch c {
	case CodeAborted:
		return "aborted"
	case CodeRefused:
		return "nothing listens on the port"
	case CodeBacklog:
		return "accept queue full"
	case CodeProtocol:
		return "protocol error"
	case CodeClosed:
		return "data after close"
	case CodeUnreachable:
		return "peer unreachable"
	}
	if c >= CodeApplication {
		return fmt.Sprintf("application code %d", c)
	}
	return fmt.Sprintf("code %d", c)
}

// Stats count a Mux's work since New.
type Stats struct {
	Dials, Accepted, Open uint64
	// Refused counts connection requests this host refused, by reason:
	// nothing listening, backlog full, too many streams.
	RefusedNoListener, RefusedBacklog, RefusedLimit uint64
	// Resets counts streams reset, locally or by the peer.
	Resets uint64
	// Dropped counts deliveries that belong to no stream (late, unknown
	// or malformed) and were dropped.
	Dropped uint64
	// BytesSent and BytesReceived count stream payload.
	BytesSent, BytesReceived uint64
}

type counters struct {
	dials, accepted                                       atomic.Uint64
	refusedNoListener, refusedBacklog, refusedLimit       atomic.Uint64
	resets, dropped, bytesSent, bytesReceived, openStream atomic.Uint64
}

// Mux runs streams over one Host: it takes over the Host's deliveries
// (Host.Received), routes those of its streams and hands the others to
// Deliveries.
type Mux struct {
	h   *host.Host
	cfg Config
	log *slog.Logger
	ctr counters
	rl  *ratelog.Logger

	mu        sync.Mutex
	closed    bool
	byKey     map[uint32]*Conn
	byInFlow  map[uint64]*Conn
	listeners map[uint16]*Listener
	orphans   []host.Delivery // deliveries that came before their stream
	// gone holds the inbound flows of streams torn down (when), so that
	// their late records are dropped at once, not held as orphans.
	gone     map[uint64]time.Time
	refusing chan struct{} // bounds the refusals answered at once

	other chan host.Delivery
	// otherOn: an application reads Deliveries; else others are dropped.
	otherOn atomic.Bool
	done    chan struct{}
	wg      sync.WaitGroup
}

// maxOrphans bounds the deliveries kept for streams not yet known.
const maxOrphans = 1024

// New starts a Mux on h. Only one Mux may run on a Host, and the
// application must not read h.Received itself (use Deliveries).
func New(h *host.Host, cfg Config) (*Mux, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	m := &Mux{
		h: h, cfg: cfg, log: cfg.Logger,
		rl:        ratelog.New(cfg.Logger, 10*time.Second),
		byKey:     map[uint32]*Conn{},
		byInFlow:  map[uint64]*Conn{},
		gone:      map[uint64]time.Time{},
		listeners: map[uint16]*Listener{},
		refusing:  make(chan struct{}, 64),
		other:     make(chan host.Delivery, 1024),
		done:      make(chan struct{}),
	}
	if err := h.RegisterMemory(listenKey, make([]byte, listenRegion)); err != nil {
		return nil, fmt.Errorf("stream: register the listen key: %w", err)
	}
	m.wg.Add(1)
	go m.dispatch()
	return m, nil
}

// Host returns the Host the Mux runs on.
func (m *Mux) Host() *host.Host { return m.h }

// Deliveries returns the deliveries that belong to no stream: WRITEs to
// the application's own keys and SENDs. Once called, the application must
// read it, or the streams stall behind it.
func (m *Mux) Deliveries() <-chan host.Delivery {
	m.otherOn.Store(true)
	return m.other
}

// Stats returns a snapshot of the counters.
func (m *Mux) Stats() Stats {
	c := &m.ctr
	return Stats{
		Dials: c.dials.Load(), Accepted: c.accepted.Load(), Open: c.openStream.Load(),
		RefusedNoListener: c.refusedNoListener.Load(), RefusedBacklog: c.refusedBacklog.Load(), RefusedLimit: c.refusedLimit.Load(),
		Resets: c.resets.Load(), Dropped: c.dropped.Load(),
		BytesSent: c.bytesSent.Load(), BytesReceived: c.bytesReceived.Load(),
	}
}

// Close resets every open stream, closes the listeners and stops the Mux.
// The Host stays open.
func (m *Mux) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	conns := make([]*Conn, 0, len(m.byKey))
	for _, c := range m.byKey {
		conns = append(conns, c)
	}
	ls := make([]*Listener, 0, len(m.listeners))
	for _, l := range m.listeners {
		ls = append(ls, l)
	}
	m.mu.Unlock()
	for _, l := range ls {
		l.Close()
	}
	for _, c := range conns {
		c.abort(CodeAborted, ErrClosed, false)
	}
	close(m.done)
	m.wg.Wait()
	return nil
}

// Listen listens for streams to port (a number, "7000") of this host.
func (m *Mux) Listen(port string) (*Listener, error) {
	p, err := ParsePort(port)
	if err != nil {
		return nil, fmt.Errorf("stream: listen: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, ErrClosed
	}
	if m.listeners[p] != nil {
		return nil, fmt.Errorf("%w: %d", ErrPortInUse, p)
	}
	l := &Listener{m: m, addr: Addr{Region: m.h.Region(), Endpoint: m.h.Name(), Port: p},
		queue: make(chan *Conn, m.cfg.Backlog), done: make(chan struct{})}
	m.listeners[p] = l
	return l, nil
}

// Dial opens a stream to REGION/ENDPOINT:PORT and waits until the peer
// accepts it (or refuses it: ErrRefused), or ctx ends.
func (m *Mux) Dial(ctx context.Context, address string) (*Conn, error) {
	to, err := ParseAddr(address)
	if err != nil {
		return nil, err
	}
	return m.DialAddr(ctx, to)
}

// DialAddr is Dial with a parsed address.
func (m *Mux) DialAddr(ctx context.Context, to Addr) (*Conn, error) {
	m.ctr.dials.Add(1)
	var f *host.Flow
	var key uint32
	for try := 0; ; try++ {
		var err error
		f, err = m.h.OpenFlow(ctx, to.Region, to.Endpoint, host.FlowOptions{Class: m.cfg.Class})
		if err != nil {
			return nil, fmt.Errorf("stream: dial %v: %w", to, err)
		}
		key = dialKey(f.ID())
		m.mu.Lock()
		taken := m.byKey[key] != nil
		m.mu.Unlock()
		if !taken {
			break
		}
		// Another stream of this host holds the key the flow id maps
		// to: a new flow gets a new id.
		f.Close()
		if try == 8 {
			return nil, fmt.Errorf("stream: dial %v: no free key", to)
		}
	}
	c, err := m.newConn(key, f, Addr{Region: m.h.Region(), Endpoint: m.h.Name()}, to)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("stream: dial %v: %w", to, err)
	}
	c.answers = f.ID()
	// The connection request: an empty WRITE at the port's offset of the
	// peer's listen key.
	if _, err := f.Write(ctx, listenKey, uint64(to.Port), nil); err != nil {
		c.abort(CodeUnreachable, err, false)
		return nil, fmt.Errorf("stream: dial %v: %w", to, err)
	}
	select {
	case <-c.established:
	case <-ctx.Done():
		c.abort(CodeAborted, ctx.Err(), true)
		return nil, fmt.Errorf("stream: dial %v: %w", to, ctx.Err())
	}
	c.mu.Lock()
	err = c.err
	c.mu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("stream: dial %v: %w", to, err)
	}
	return c, nil
}

// newConn registers a stream end under key, with out as its flow to the
// peer.
func (m *Mux) newConn(key uint32, out *host.Flow, local, remote Addr) (*Conn, error) {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil, ErrClosed
	}
	if len(m.byKey) >= m.cfg.MaxStreams {
		m.mu.Unlock()
		return nil, ErrTooManyStreams
	}
	c := newConn(m, key, out, local, remote)
	m.byKey[key] = c
	m.mu.Unlock()
	if err := m.h.RegisterMemory(key, c.region); err != nil {
		m.mu.Lock()
		delete(m.byKey, key)
		m.mu.Unlock()
		return nil, err
	}
	m.ctr.openStream.Add(1)
	return c, nil
}

// forget removes c from the routing tables; its key keeps a tombstone (the
// control slot alone) for Linger, so that the peer's last control records
// land instead of failing its flow.
func (m *Mux) forget(c *Conn) {
	m.mu.Lock()
	if m.byKey[c.key] == c {
		delete(m.byKey, c.key)
	}
	if c.inFlow != 0 && m.byInFlow[c.inFlow] == c {
		delete(m.byInFlow, c.inFlow)
		now := time.Now()
		m.gone[c.inFlow] = now
		if len(m.gone) > 2*m.cfg.MaxStreams {
			for f, at := range m.gone {
				if now.Sub(at) > m.cfg.Linger {
					delete(m.gone, f)
				}
			}
			if len(m.gone) > 4*m.cfg.MaxStreams {
				// Streams end faster than Linger passes: forget them all;
				// their late records then wait, bounded, as orphans.
				clear(m.gone)
			}
		}
	}
	m.mu.Unlock()
	m.ctr.openStream.Add(^uint64(0))
	if err := m.h.ReplaceMemory(c.key, make([]byte, ringBase)); err != nil {
		return
	}
	time.AfterFunc(m.cfg.Linger, func() {
		m.mu.Lock()
		reused := m.byKey[c.key] != nil
		m.mu.Unlock()
		if !reused {
			_ = m.h.DeregisterMemory(c.key)
		}
	})
}

// dispatch routes the Host's deliveries until the Host or the Mux closes.
func (m *Mux) dispatch() {
	defer m.wg.Done()
	in := m.h.Received()
	for {
		select {
		case <-m.done:
			return
		case d, ok := <-in:
			if !ok {
				m.hostClosed()
				return
			}
			m.route(d)
		}
	}
}

// hostClosed fails every stream: the Host under them is gone.
func (m *Mux) hostClosed() {
	m.mu.Lock()
	conns := make([]*Conn, 0, len(m.byKey))
	for _, c := range m.byKey {
		conns = append(conns, c)
	}
	m.closed = true
	ls := make([]*Listener, 0, len(m.listeners))
	for _, l := range m.listeners {
		ls = append(ls, l)
	}
	m.mu.Unlock()
	for _, c := range conns {
		c.fail(&ResetError{Code: CodeUnreachable, Cause: ErrClosed})
	}
	for _, l := range ls {
		l.Close()
	}
}

// route hands one delivery to its stream, to the listener it asks for,
// or to Deliveries.
func (m *Mux) route(d host.Delivery) {
	if d.Op != metaroce.OpWrite || d.Key < keyBase {
		if m.otherOn.Load() {
			select {
			case m.other <- d:
			case <-m.done:
			}
			return
		}
		m.drop(d, "no application reads deliveries to its own keys")
		return
	}
	m.mu.Lock()
	c := m.byInFlow[d.Flow]
	if _, gone := m.gone[d.Flow]; gone && c == nil {
		m.mu.Unlock()
		m.ctr.dropped.Add(1) // a late record of a stream torn down
		return
	}
	if c == nil && d.Key != listenKey {
		// The first delivery of a dialer's reverse flow: the key names
		// the stream, and binds the flow to it.
		if k := m.byKey[d.Key]; k != nil && k.bindIn(d.Flow) {
			m.byInFlow[d.Flow] = k
			c = k
		}
	}
	m.mu.Unlock()
	switch {
	case c != nil:
		c.deliver(d)
	case d.Key == listenKey:
		m.request(d)
	default:
		m.keepOrphan(d)
	}
}

// keepOrphan holds a delivery of a flow no stream knows yet: after a
// failover a flow's messages may complete out of order, and the request
// that creates the stream may come after its first record.
func (m *Mux) keepOrphan(d host.Delivery) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.orphans) >= maxOrphans {
		m.orphans = m.orphans[1:]
		m.ctr.dropped.Add(1)
	}
	m.orphans = append(m.orphans, d)
}

// adoptOrphans hands c the held deliveries of its inbound flow.
func (m *Mux) adoptOrphans(c *Conn) {
	m.mu.Lock()
	var mine []host.Delivery
	kept := m.orphans[:0]
	for _, d := range m.orphans {
		if d.Flow == c.inFlow {
			mine = append(mine, d)
		} else {
			kept = append(kept, d)
		}
	}
	m.orphans = kept
	m.mu.Unlock()
	for _, d := range mine {
		c.deliver(d)
	}
}

func (m *Mux) drop(d host.Delivery, why string) {
	m.ctr.dropped.Add(1)
	m.rl.Warn("drop:"+why, "stream: delivery dropped", "why", why, "flow", fmt.Sprintf("%016x", d.Flow), "from", d.SrcRegion+"/"+d.SrcEndpoint, "key", d.Key)
}

// request answers a connection request: an empty WRITE at a port's offset
// of the listen key.
func (m *Mux) request(d host.Delivery) {
	if d.Len != 0 || d.Addr == 0 || d.Addr > 65535 || d.Seq != 0 {
		m.drop(d, "malformed connection request")
		return
	}
	port := uint16(d.Addr)
	src := Addr{Region: d.SrcRegion, Endpoint: d.SrcEndpoint}
	m.mu.Lock()
	l := m.listeners[port]
	full := len(m.byKey) >= m.cfg.MaxStreams
	m.mu.Unlock()
	switch {
	case l == nil:
		m.ctr.refusedNoListener.Add(1)
		m.refuse(d, CodeRefused)
		return
	case full:
		m.ctr.refusedLimit.Add(1)
		m.refuse(d, CodeBacklog)
		return
	case !l.reserve():
		m.ctr.refusedBacklog.Add(1)
		m.refuse(d, CodeBacklog)
		return
	}
	// The stream end exists from now on (its deliveries route to it);
	// its reverse flow opens in the background, a WAN round trip.
	key, ok := m.freeKey()
	if !ok {
		m.ctr.refusedLimit.Add(1)
		m.refuse(d, CodeBacklog)
		return
	}
	c, err := m.newConn(key, nil, l.addr, src)
	if err != nil {
		m.ctr.refusedLimit.Add(1)
		m.refuse(d, CodeBacklog)
		return
	}
	c.answers = d.Flow
	c.inFlow = d.Flow
	c.nextSeq = 1 // the request was sequence 0
	m.mu.Lock()
	m.byInFlow[d.Flow] = c
	m.mu.Unlock()
	m.adoptOrphans(c)
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		f, err := m.h.OpenFlow(ctx, src.Region, src.Endpoint, host.FlowOptions{Class: m.cfg.Class})
		if err != nil {
			c.fail(&ResetError{Code: CodeUnreachable, Cause: err})
			m.rl.Warn("answer", "stream: cannot answer a connection request", "from", src.String(), "err", err)
			return
		}
		if !c.attachOut(f, dialKey(d.Flow)) {
			f.Close()
			return
		}
		if !l.deliver(c) {
			m.ctr.refusedBacklog.Add(1)
			m.rl.Warn("refuse:backlog", "stream: connection refused", "port", l.addr.Port, "from", src.String(), "reason", codeName(CodeBacklog))
			c.abort(CodeBacklog, ErrRefused, true)
			return
		}
		m.ctr.accepted.Add(1)
	}()
}

// freeKey picks an unused key for an accepted stream. At most MaxStreams
// of the 2^31 keys are in use, so a few random draws find one.
func (m *Mux) freeKey() (uint32, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for range 64 {
		k := keyBase | rand.Uint32()
		if k != listenKey && m.byKey[k] == nil {
			return k, true
		}
	}
	return 0, false
}

// refuse answers a connection request with a reset, over a flow opened
// for it: the dialer learns at once instead of waiting out its context.
// At most cap(refusing) refusals are answered at once; beyond that the
// request is dropped and the dialer's context ends it.
func (m *Mux) refuse(d host.Delivery, code uint32) {
	m.rl.Warn("refuse:"+codeName(code), "stream: connection refused", "port", d.Addr, "from", d.SrcRegion+"/"+d.SrcEndpoint, "reason", codeName(code))
	select {
	case m.refusing <- struct{}{}:
	default:
		m.ctr.dropped.Add(1)
		return
	}
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		defer func() { <-m.refusing }()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		f, err := m.h.OpenFlow(ctx, d.SrcRegion, d.SrcEndpoint, host.FlowOptions{Class: m.cfg.Class})
		if err != nil {
			return
		}
		defer f.Close()
		rec := appendRecord(nil, record{Flags: flagReset, Code: code, Answers: d.Flow})
		p, err := f.Write(ctx, dialKey(d.Flow), 0, rec)
		if err == nil {
			_ = p.Wait(ctx)
		}
	}()
}

// Listener accepts streams to one port.
type Listener struct {
	m      *Mux
	addr   Addr
	queue  chan *Conn
	mu     sync.Mutex
	closed bool
	done   chan struct{}
}

// reserve admits a connection request while its stream is set up (its
// reverse flow opens): only MaxStreams bounds those, as a SYN queue.
func (l *Listener) reserve() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return !l.closed
}

// deliver queues an established stream for Accept; false when the
// listener is closed or its accept queue (Backlog) is full.
func (l *Listener) deliver(c *Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	select {
	case l.queue <- c:
		return true
	default:
		return false
	}
}

// Accept waits for the next stream.
func (l *Listener) Accept() (net.Conn, error) {
	c, err := l.AcceptStream(context.Background())
	if err != nil {
		return nil, err
	}
	return c, nil
}

// AcceptStream waits for the next stream or ctx's end.
func (l *Listener) AcceptStream(ctx context.Context) (*Conn, error) {
	select {
	case c := <-l.queue:
		return c, nil
	case <-l.done:
		return nil, ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Close stops listening; streams not yet accepted are refused.
func (l *Listener) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	close(l.done)
	l.mu.Unlock()
	l.m.mu.Lock()
	if l.m.listeners[l.addr.Port] == l {
		delete(l.m.listeners, l.addr.Port)
	}
	l.m.mu.Unlock()
	for {
		select {
		case c := <-l.queue:
			c.abort(CodeRefused, ErrClosed, true)
		default:
			return nil
		}
	}
}

// Addr returns the address streams dial to reach the listener.
func (l *Listener) Addr() net.Addr { return l.addr }
