//go:build linux

// Package host is the host side of mrgw (docs/GATEWAY.md): the library a
// process in one region uses to move bytes, through its region's
// gateways (1 to 16), into the memory of an endpoint in another region.
//
// A Host runs one netio endpoint (unsealed: the LAN hop is not tunnelled)
// with a MetaRoCE connection to every gateway of its region, registers its
// endpoint name on each (REGISTER on the control stream, stream 0) and
// reconnects, with bounded backoff, when one goes away.
//
// Sending: OpenFlow opens a flow to (region, endpoint) through one live
// gateway, the one carrying the fewest of the host's flows (ties by
// rendezvous hashing of the flow id), so flows spread evenly over the
// region's gateways and a gateway's failure moves only its own flows.
// Write and
// Send cut a message larger than half the flow's credit into segments, one
// flow sequence each, and return a Pending that completes only when the
// destination has reported every segment DONE end to end: the bytes are in
// the destination's memory. The bytes not yet DONE never exceed the credit
// the gateways granted (Write blocks, bounded by its context).
//
// Failover: a flow whose gateway connection closes, or that receives
// RESET, is re-opened through another live gateway (the same one if it is
// the only one) with resume = its oldest sequence not yet DONE, and every
// message from there is sent again, in order, with its original sequence
// (metaroce.Conn.WriteRelay lets the sender choose it). The source keeps
// every message referenced until it is DONE, so nothing is lost.
// A Pending completes once its segments are DONE and no hop stream can
// read their bytes again (acknowledged by the gateway, or the stream
// abandoned): a retransmission after DONE would otherwise place the
// caller's reused buffer at the destination. An abandoned stream's
// messages are failed (RelayMessage.Fail) so metaroce drops them.
//
// Receiving: an OPEN from a gateway binds (connection, stream) to a flow
// id; the stream is resumed at the flow's resume point before OPEN_OK is
// answered. WRITEs place into registered memory by themselves; each
// completed message is reported once per (flow, sequence) on Received,
// whichever gateway and connection it came through, and DONE{flow, below}
// goes back on the control stream, also for duplicates, so that the source
// learns about messages that completed before a failure. Nothing is
// delivered twice.
//
// Every piece of state lives on the netio owner goroutine; the exported
// methods reach it with netio's Call and wait on channels, so a Host is
// safe for concurrent use.
//
// It imports the protocol and the driver (metaroce, netio, flowctl, pathmgr)
// and never the tunnel, gossip, configuration or gateway packages
// (internal/layering checks it).
package host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mrgw/mrgw/flowctl"
	"github.com/mrgw/mrgw/metaroce"
	"github.com/mrgw/mrgw/netio"
	"github.com/mrgw/mrgw/netio/udp"
	"github.com/mrgw/mrgw/pathmgr"
)

// socketOptions are the host's socket options (Config.SocketBuffer).
func socketOptions(cfg Config) udp.Options {
	var o udp.Options
	if cfg.SocketBuffer > 0 {
		o.ReadBuffer, o.WriteBuffer = cfg.SocketBuffer, cfg.SocketBuffer
	}
	return o
}

// Config configures a Host.
type Config struct {
	// Name is the endpoint name the host registers; Region its region.
	Name, Region string
	// Gateways are the LAN listening addresses of the region's gateways.
	// On one machine give every gateway its own IP (127.0.0.2, 127.0.0.3,
	// ...): netio tells peers apart by source IP for the datagrams they send
	// from their path sockets.
	Gateways []netip.AddrPort
	// Listen is the host's listening address (default 127.0.0.1:0).
	Listen netip.AddrPort
	// Protocol configures MetaRoCE (MTU default 4096, paths, controller).
	// A zero Path config gets the data-center defaults with a MinPTO of
	// 1 ms: a host is a user-space process whose scheduling jitter would
	// otherwise be read as loss.
	Protocol metaroce.Config
	// DeadAfter: a gateway that has answered nothing for this long while
	// the host waited for it (a PING or data in flight) is given up
	// (default 500 ms), which triggers failover (internal/liveness).
	// metaroce also closes a connection whose paths have all been down
	// this long.
	DeadAfter time.Duration
	// OpenTimeout bounds REGISTER, OPEN and New's wait for the gateways
	// (default 5 s).
	OpenTimeout time.Duration
	// FailAfter: a flow that has had no working route for this long fails
	// its pending messages with ErrNoRoute (default 30 s).
	FailAfter time.Duration
	// GoneAfter: a flow whose destination endpoint every gateway of its
	// region has answered unknown for this long fails with
	// ErrEndpointGone instead of waiting for FailAfter (default 3 s,
	// enough for a receiver whose gateway restarted to register again:
	// ReconnectMax and a handshake).
	GoneAfter time.Duration
	// ReconnectMin and ReconnectMax bound the backoff between attempts to
	// reconnect to a gateway or re-open a flow (defaults 50 ms and 2 s).
	ReconnectMin, ReconnectMax time.Duration
	// PingEvery is how often a gateway connection carries a PING (default
	// DeadAfter/8): failure detection needs something in flight, and a
	// gateway that dies while nothing is in flight to it is found only
	// DeadAfter after the next PING. At DeadAfter/4 that was up to 125 ms
	// more in the chaos scenario (a host whose flows waited for DONE); a
	// PING is one small packet each way.
	PingEvery time.Duration
	// ReceiveCredit is the credit this host grants to incoming flows
	// (default 64 MiB).
	ReceiveCredit uint64
	// MaxFlowMessages bounds the messages of one outgoing flow not yet DONE
	// (default 1024; at most metaroce's MaxMessagesAhead).
	MaxFlowMessages int
	// DeliveryQueue is the capacity of Received (default 4096). When the
	// application falls behind, completions wait inside the host and their
	// DONE is withheld, which holds the sources back through their credit.
	DeliveryQueue int
	// SocketBuffer is asked for as SO_RCVBUF and SO_SNDBUF of the host's
	// sockets (default 4 MiB; past net.core.rmem_max and wmem_max with
	// CAP_NET_ADMIN, else capped by them, which netio logs at warn;
	// negative keeps the kernel's default). Everything the
	// gateways relay to this host arrives on its listening socket: with
	// the kernel's 208 KiB (about 50 datagrams of 4 KiB), the receiving
	// host of an incast dropped the two gateways' bursts, its paths were
	// declared down and the gateways' controllers started over.
	SocketBuffer int
	// Takeover makes this host's registration replace a live host's that
	// holds the same Name (the other is told it was taken over). Without
	// it a duplicate name is refused (ErrRefused) unless the holder has
	// fallen silent (crashed) or is this same process.
	Takeover bool
	// Key is the host's credential when the gateways require one
	// (lan.host_keys): its REGISTER carries a MAC under it.
	Key *Key
	// TickEvery paces the housekeeping: reconnects, retries, PINGs and
	// the deadlines of gateways and flows are checked this often (default
	// 10 ms). A process that holds thousands of mostly idle hosts (a load
	// generator) sets it longer, trading how promptly those are noticed
	// for a wake-up per host every 10 ms.
	TickEvery time.Duration
	// Logger: nil discards.
	Logger *slog.Logger
}

// Key is a host credential: an entry of the gateways' lan.host_keys.
type Key struct {
	ID     string
	Secret []byte
}

// DefaultSocketBuffer is Config.SocketBuffer's default.
const DefaultSocketBuffer = 4 << 20

// DefaultDeadAfter is Config.DeadAfter's default: a host gives up a dead
// gateway 500 to 580 ms after it died (DeadAfter, up to a PING interval
// when nothing was in flight to it, and two 10 ms observations).
const DefaultDeadAfter = 500 * time.Millisecond

func (c Config) withDefaults() Config {
	if !c.Listen.IsValid() {
		c.Listen = netip.MustParseAddrPort("127.0.0.1:0")
	}
	if c.Protocol.MTU == 0 {
		c.Protocol.MTU = 4096
	}
	if c.Protocol.Path == (pathmgr.Config{}) {
		c.Protocol.Path = pathmgr.DefaultConfig()
		c.Protocol.Path.MinPTO = time.Millisecond
	}
	if c.DeadAfter <= 0 {
		c.DeadAfter = DefaultDeadAfter
	}
	if c.SocketBuffer == 0 {
		c.SocketBuffer = DefaultSocketBuffer
	}
	c.Protocol.DeadAfter = c.DeadAfter
	if c.Protocol.Seed == 0 {
		// metaroce draws connection ids from Seed: two hosts with the same
		// seed would open connections with the same id, and a gateway
		// refuses an INIT whose id it already holds (from any peer).
		c.Protocol.Seed = rand.Uint64() | 1
	}
	// The host initiates every connection; it accepts none.
	c.Protocol.Listen = false
	if c.OpenTimeout <= 0 {
		c.OpenTimeout = 5 * time.Second
	}
	if c.Protocol.HandshakeRetries == 0 {
		c.Protocol.HandshakeRetries = handshakeRetries(c.Protocol.Path, c.OpenTimeout)
	}
	if c.FailAfter <= 0 {
		c.FailAfter = 30 * time.Second
	}
	if c.ReconnectMin <= 0 {
		c.ReconnectMin = 50 * time.Millisecond
	}
	if c.ReconnectMax < c.ReconnectMin {
		c.ReconnectMax = max(2*time.Second, c.ReconnectMin)
	}
	if c.GoneAfter <= 0 {
		c.GoneAfter = 3 * time.Second
	}
	if c.PingEvery <= 0 {
		c.PingEvery = c.DeadAfter / 8
	}
	if c.ReceiveCredit == 0 {
		c.ReceiveCredit = 64 << 20
	}
	if c.MaxFlowMessages <= 0 {
		c.MaxFlowMessages = 1024
	}
	if c.DeliveryQueue <= 0 {
		c.DeliveryQueue = 4096
	}
	if c.TickEvery <= 0 {
		c.TickEvery = tickEvery
	}
	return c
}

// handshakeRetries is how many INITs a gateway connection sends before
// metaroce gives it up: enough that the schedule (3×InitialRTT, doubling
// after each INIT) spans OpenTimeout; the host's tick closes a connection
// still connecting at OpenTimeout (gwConnecting), so the last and longest
// interval is cut there.
//
// metaroce's default of 8 INITs gives up after 255×3×InitialRTT: 76.5 ms at
// the data-center default InitialRTT of 100 µs. Under CPU starvation that
// is not a time but a count: the host's owner counts one try per turn it
// gets, so an attempt lasted eight scheduling turns, 1.1 to 7 s at a load
// average of 19 under the race detector, while the gateways, starved as
// much, took 0.8 to 3.3 s to answer an INIT. Each abandoned attempt threw
// away the gateway's ACCEPT on its way and started over with a new
// connection id: one host failed six handshakes in a row and registered
// after 21.7 s (docs/GATEWAY.md, "Registration under load"). Retransmitting
// sooner gains a starved gateway nothing; only the patience matters.
func handshakeRetries(p pathmgr.Config, openTimeout time.Duration) int {
	rto := 3 * p.InitialRTT
	if rto <= 0 {
		return 0 // metaroce's default
	}
	n := 0
	for sum := time.Duration(0); sum < openTimeout && n < 62; n++ {
		sum += rto
		rto *= 2
	}
	return max(n, 8)
}

func (c *Config) validate() error {
	switch {
	case c.Name == "" || len(c.Name) > 255:
		return fmt.Errorf("host: Name must be 1..255 bytes")
	case c.Region == "" || len(c.Region) > 255:
		return fmt.Errorf("host: Region must be 1..255 bytes")
	case len(c.Gateways) == 0:
		return fmt.Errorf("host: at least one gateway address is required")
	case c.MaxFlowMessages > 4096:
		return fmt.Errorf("host: MaxFlowMessages %d above metaroce's message window (4096)", c.MaxFlowMessages)
	}
	for i, g := range c.Gateways {
		if !g.IsValid() || g.Port() == 0 {
			return fmt.Errorf("host: gateway %d: invalid address %v", i, g)
		}
	}
	return nil
}

// Errors.
var (
	// ErrClosed: the Host (or netio endpoint under it) is closed.
	ErrClosed = errors.New("host: closed")
	// ErrNoGateway: no gateway of the region registered the host in time.
	ErrNoGateway = errors.New("host: no gateway available")
	// ErrRefused: a gateway refused the registration (a duplicate name, a
	// missing or wrong credential) or another host took the name over;
	// the error says which and what to do.
	ErrRefused = errors.New("host: registration refused")
	// ErrNoRoute: a flow had no working route for Config.FailAfter; it
	// wraps the last cause (a *flowctl.Error or a connection error).
	ErrNoRoute = errors.New("host: flow has no route")
	// ErrEndpointGone: the destination endpoint is registered at no
	// gateway of its region (the receiver exited or never started); an
	// open flow gets it once that has lasted Config.GoneAfter. It wraps
	// the *flowctl.Error of the refusal.
	ErrEndpointGone = errors.New("host: destination not registered")
	// ErrMessageRefused: the destination refused a message for a reason
	// that sending it again cannot change (its memory key unknown, the
	// write outside the region) and reset the flow: the flow fails at
	// once. It wraps the *flowctl.Error of the RESET (bad request).
	ErrMessageRefused = errors.New("host: destination refused a message")
	// ErrOpenTimeout: OPEN got no answer within OpenTimeout.
	ErrOpenTimeout = errors.New("host: OPEN timed out")
	// ErrFlowClosed: the flow was closed before the message completed.
	ErrFlowClosed = errors.New("host: flow closed")
	// ErrSendTooLarge: a SEND cannot be segmented (it lands in one posted
	// buffer), so it must fit in one segment: half the flow's credit.
	ErrSendTooLarge = errors.New("host: SEND larger than the flow's segment size")
	// ErrGatewayLost: the gateway connection carrying a flow closed.
	ErrGatewayLost = errors.New("host: gateway connection lost")
	// ErrGatewaySilent: a gateway answered nothing for DeadAfter while
	// the host waited for it; its connection is given up as lost.
	ErrGatewaySilent = errors.New("host: gateway silent")
)

// Delivery reports one message of an incoming flow that completed in this
// host's memory. Each (Flow, Seq) is reported once.
type Delivery struct {
	Flow                   uint64
	SrcRegion, SrcEndpoint string
	Seq                    uint64
	Op                     metaroce.Op
	Key                    uint32 // WRITE: memory key
	Addr                   uint64 // WRITE: offset in the region; SEND: the tag
	Len                    uint64
}

// Stats count a Host's work since New.
type Stats struct {
	// Source side. ResumedReopens counts the Reopens that had messages
	// not yet DONE to send again (the others re-opened a finished flow,
	// which keeps a route while it lives).
	FlowsOpened, Reopens, ResumedReopens, SegmentsDone, BytesDone uint64
	// Destination side.
	Delivered, DeliveredBytes, Duplicates, DoneSent uint64
	// Gateway connections established, attempts that failed before
	// establishing, and registrations accepted.
	Connects, ConnectFailures, Registrations uint64
	// SilentGateways counts gateway connections given up because the
	// gateway answered nothing for DeadAfter (ErrGatewaySilent).
	SilentGateways uint64
}

type counters struct {
	flowsOpened, reopens, segsDone, bytesDone      atomic.Uint64
	delivered, deliveredBytes, duplicates, doneSnt atomic.Uint64
	connects, connFails, registrations             atomic.Uint64
	silent, resumedReopens                         atomic.Uint64
}

// Host is one endpoint of a region, connected to its region's gateways.
type Host struct {
	cfg  Config
	log  *slog.Logger
	ep   *netio.Endpoint
	mem  *metaroce.Memory // touched only on the owner goroutine
	recv chan Delivery
	quit chan struct{}
	wg   sync.WaitGroup
	ctr  counters

	closeOnce sync.Once
	// instance identifies this host process in its REGISTERs: a gateway
	// lets a registration of the same instance replace its own.
	instance uint64

	o owner // owner goroutine only
}

// owner is the state touched only on the netio owner goroutine.
type owner struct {
	mep    *metaroce.Endpoint
	now    time.Duration
	closed bool
	gws    []*gateway
	byConn map[*metaroce.Conn]*gateway
	ctl    map[*metaroce.Conn]map[uint64][]byte // control payloads awaiting in-order completion
	regSig signal                               // fires when a registration changes
	// started: New has returned. Before, a refusal is not logged: New
	// returns it (or, registered elsewhere, logs it once as it returns).
	started bool
	flows   map[uint64]*Flow
	txByStr map[streamKey]*Flow
	rx      rxState
	// timers: the outgoing flows' timers (flowTimers); blocked: open
	// flows whose last pump found the send queue full; dueBuf is reused
	// by runTimers.
	timers  flowTimers
	blocked map[*Flow]struct{}
	dueBuf  []*Flow
}

// streamKey names a stream of one connection.
type streamKey struct {
	c      *metaroce.Conn
	stream uint32
}

// signal is a broadcast: waiters take ch (on the owner goroutine) and
// fire closes it and makes a new one.
type signal struct{ ch chan struct{} }

func (s *signal) wait() <-chan struct{} {
	if s.ch == nil {
		s.ch = make(chan struct{})
	}
	return s.ch
}

func (s *signal) fire() {
	if s.ch != nil {
		close(s.ch)
		s.ch = nil
	}
}

// tickEvery is Config.TickEvery's default.
const tickEvery = 10 * time.Millisecond

// New starts a Host: it connects to every gateway and returns once all of
// them have registered it, or once OpenTimeout has passed with at least
// one (ErrNoGateway if none; its error says whether the host was
// registered and lost it again, or never got an answer).
func New(cfg Config) (*Host, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	h := &Host{
		cfg:      cfg,
		log:      cfg.Logger,
		mem:      metaroce.NewMemory(),
		recv:     make(chan Delivery, cfg.DeliveryQueue),
		quit:     make(chan struct{}),
		instance: rand.Uint64() | 1,
	}
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	h.initOwner()
	peers := make([]netio.Peer, len(cfg.Gateways))
	for i, g := range h.o.gws {
		peers[i] = netio.Peer{ID: g.peer, Addr: g.addr}
	}
	ep, err := netio.New(netio.Config{
		Protocol: cfg.Protocol,
		UDP:      socketOptions(cfg),
		Memory:   h.mem,
		Listen:   cfg.Listen,
		Peers:    peers,
		OnEvent:  h.onEvent,
		Logger:   h.log,
	})
	if err != nil {
		return nil, fmt.Errorf("host: %w", err)
	}
	h.ep = ep
	ctx, cancel := context.WithTimeout(context.Background(), cfg.OpenTimeout)
	defer cancel()
	// The control sink is bound before the first connection exists, so no
	// control message can arrive on an unbound stream 0.
	err = ep.Call(ctx, func(now time.Duration, mep *metaroce.Endpoint) {
		h.o.now = now
		h.o.mep = mep
		mep.BindSinkAll(flowctl.ControlStream, ctlSink{h})
		for _, g := range h.o.gws {
			h.connect(now, g)
		}
	})
	if err != nil {
		ep.Close()
		return nil, fmt.Errorf("host: start: %w", err)
	}
	h.wg.Add(1)
	go h.ticker()
	if err := h.waitRegistered(ctx); err != nil {
		h.Close()
		return nil, err
	}
	_ = h.call(context.Background(), func(now time.Duration) {
		h.o.started = true
		for _, g := range h.o.gws {
			if g.refusal != nil {
				h.log.Error(g.refusal.Error())
				g.refusalLogged, g.repeats = now, 0
			}
		}
	})
	return h, nil
}

// refusalErr is the registration refusal of the gateways that refused
// the host, in one error: the gateways that gave the same reason are
// named together.
func (h *Host) refusalErr() error {
	var order []string
	by := map[string][]string{}
	for _, g := range h.o.gws {
		if g.refusal == nil {
			continue
		}
		if by[g.refusedWhy] == nil {
			order = append(order, g.refusedWhy)
		}
		by[g.refusedWhy] = append(by[g.refusedWhy], g.addr.String())
	}
	if len(order) == 0 {
		return nil
	}
	who := h.cfg.Region + "/" + h.cfg.Name
	var parts []string
	for _, why := range order {
		gw := "gateway " + by[why][0]
		if n := len(by[why]); n > 1 {
			gw = "gateways " + strings.Join(by[why], ", ")
		}
		parts = append(parts, fmt.Sprintf("%s refused %s: %s", gw, who, why))
	}
	return fmt.Errorf("%w: %s", ErrRefused, strings.Join(parts, "; and "))
}

// initOwner makes the owner goroutine's state, before the endpoint
// exists: gateway i of the configuration is peer i+1.
func (h *Host) initOwner() {
	h.o.byConn = map[*metaroce.Conn]*gateway{}
	h.o.ctl = map[*metaroce.Conn]map[uint64][]byte{}
	h.o.flows = map[uint64]*Flow{}
	h.o.txByStr = map[streamKey]*Flow{}
	h.o.blocked = map[*Flow]struct{}{}
	h.o.rx.init()
	for i, a := range h.cfg.Gateways {
		h.o.gws = append(h.o.gws, &gateway{idx: i, addr: a, peer: metaroce.PeerID(i + 1), backoff: h.cfg.ReconnectMin})
	}
}

// waitRegistered waits until every gateway has registered the host, or
// ctx ends with at least one.
func (h *Host) waitRegistered(ctx context.Context) error {
	for {
		var ready, refused int
		var refusal error
		var ch <-chan struct{}
		if err := h.call(ctx, func(time.Duration) {
			ready = h.readyCount()
			refusal = h.refusalErr()
			for _, g := range h.o.gws {
				if g.refusal != nil && g.final {
					refused++
				}
			}
			ch = h.o.regSig.wait()
		}); err != nil {
			if ready > 0 {
				return nil
			}
			return fmt.Errorf("%w: %v", ErrNoGateway, err)
		}
		if ready == len(h.o.gws) {
			return nil
		}
		if ready == 0 && refused == len(h.o.gws) {
			return refusal
		}
		select {
		case <-ch:
		case <-ctx.Done():
			if h.readyNow() > 0 {
				return nil
			}
			if refusal != nil {
				return refusal
			}
			st := h.Stats()
			if st.Registrations > 0 {
				// Registered, then lost again: a gateway silent for
				// DeadAfter (on a starved machine, a live one).
				return fmt.Errorf("%w: %s/%s was registered %d times within %v but no gateway of %v holds it now (%d given up as silent for DeadAfter %v): the gateways are unreachable or too busy to answer",
					ErrNoGateway, h.cfg.Region, h.cfg.Name, st.Registrations, h.cfg.OpenTimeout, h.cfg.Gateways, st.SilentGateways, h.cfg.DeadAfter)
			}
			return fmt.Errorf("%w: none of %v registered %s/%s within %v (%d connections established, %d handshakes unanswered): check that the gateways run (mrgw status --admin ...) and that their lan.listen is reachable from here",
				ErrNoGateway, h.cfg.Gateways, h.cfg.Region, h.cfg.Name, h.cfg.OpenTimeout, st.Connects, st.ConnectFailures)
		}
	}
}

// readyNow counts registered gateways from outside the owner goroutine.
func (h *Host) readyNow() int {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	n := 0
	if h.call(ctx, func(time.Duration) { n = h.readyCount() }) != nil {
		return 0
	}
	return n
}

// call runs fn on the owner goroutine with the owner's clock recorded.
func (h *Host) call(ctx context.Context, fn func(now time.Duration)) error {
	err := h.ep.Call(ctx, func(now time.Duration, _ *metaroce.Endpoint) {
		h.o.now = now
		fn(now)
	})
	if errors.Is(err, netio.ErrClosed) {
		return ErrClosed
	}
	return err
}

// ticker runs the housekeeping on the owner goroutine until Close.
func (h *Host) ticker() {
	defer h.wg.Done()
	t := time.NewTicker(h.cfg.TickEvery)
	defer t.Stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-h.quit
		cancel()
	}()
	for {
		select {
		case <-h.quit:
			return
		case <-t.C:
		}
		// Do, not Call: the tick needs no answer, and a full command
		// queue must not stall shutdown (ctx ends with quit).
		if err := h.ep.Do(ctx, func(now time.Duration, _ *metaroce.Endpoint) { h.tick(now) }); err != nil {
			return
		}
	}
}

// LocalAddr returns the host's listening address.
func (h *Host) LocalAddr() netip.AddrPort { return h.ep.LocalAddr() }

// Name returns the endpoint name; Region its region.
func (h *Host) Name() string   { return h.cfg.Name }
func (h *Host) Region() string { return h.cfg.Region }

// Received returns the deliveries of incoming flows; it is closed by Close.
func (h *Host) Received() <-chan Delivery { return h.recv }

// Stats returns a snapshot of the counters.
func (h *Host) Stats() Stats {
	c := &h.ctr
	return Stats{
		FlowsOpened: c.flowsOpened.Load(), Reopens: c.reopens.Load(), ResumedReopens: c.resumedReopens.Load(),
		SegmentsDone: c.segsDone.Load(), BytesDone: c.bytesDone.Load(),
		Delivered: c.delivered.Load(), DeliveredBytes: c.deliveredBytes.Load(),
		Duplicates: c.duplicates.Load(), DoneSent: c.doneSnt.Load(),
		Connects: c.connects.Load(), ConnectFailures: c.connFails.Load(), Registrations: c.registrations.Load(),
		SilentGateways: c.silent.Load(),
	}
}

// RegisterMemory makes buf writable by incoming WRITEs under key (not 0).
// buf belongs to the host until DeregisterMemory; read it with ReadMemory
// or after the Delivery of the message that wrote it.
func (h *Host) RegisterMemory(key uint32, buf []byte) error {
	var err error
	if cerr := h.ep.Call(context.Background(), func(time.Duration, *metaroce.Endpoint) {
		err = h.mem.Register(key, buf)
	}); cerr != nil {
		return ErrClosed
	}
	return err
}

// ReplaceMemory puts buf under key in place of the region registered
// there, in one step: no WRITE finds the key unregistered in between.
func (h *Host) ReplaceMemory(key uint32, buf []byte) error {
	var err error
	if cerr := h.ep.Call(context.Background(), func(time.Duration, *metaroce.Endpoint) {
		h.mem.Deregister(key)
		err = h.mem.Register(key, buf)
	}); cerr != nil {
		return ErrClosed
	}
	return err
}

// DeregisterMemory removes key; WRITEs naming it afterwards are refused.
func (h *Host) DeregisterMemory(key uint32) error {
	if err := h.ep.Call(context.Background(), func(time.Duration, *metaroce.Endpoint) {
		h.mem.Deregister(key)
	}); err != nil {
		return ErrClosed
	}
	return nil
}

// ReadMemory copies len(dst) bytes at offset off of region key into dst,
// on the owner goroutine, so that it never races with placement.
func (h *Host) ReadMemory(ctx context.Context, key uint32, off uint64, dst []byte) error {
	var err error
	if cerr := h.call(ctx, func(time.Duration) {
		buf, ok := h.mem.Region(key)
		switch {
		case !ok:
			err = metaroce.ErrUnknownKey
		case off > uint64(len(buf)) || uint64(len(dst)) > uint64(len(buf))-off:
			err = metaroce.ErrOutOfBounds
		default:
			copy(dst, buf[off:])
		}
	}); cerr != nil {
		return cerr
	}
	return err
}

// Kill stops the host at once, as kill -9 would as far as its gateways can
// tell: no CLOSE leaves, its connections just fall silent. Tests use it;
// applications use Close.
func (h *Host) Kill() {
	h.closeOnce.Do(func() {
		close(h.quit)
		h.wg.Wait()
		h.ep.Close()
		close(h.recv)
	})
}

// closeFlush bounds how long Close waits for the control messages already
// queued to be acknowledged by the gateways.
const closeFlush = 500 * time.Millisecond

// Close closes every flow (pending messages fail with ErrClosed), closes
// the gateway connections and stops the host. Received is closed.
func (h *Host) Close() error {
	h.closeOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = h.call(ctx, func(now time.Duration) {
			h.o.closed = true
			for _, f := range h.o.flows {
				f.closeLocked(now, ErrClosed, true)
			}
			h.o.regSig.fire()
		})
		// The control messages already queued (a DONE for a message that
		// just completed here, the flows' CLOSEs) reach the gateways
		// before their connections close: a source whose last message's
		// DONE is lost would re-send it elsewhere for FailAfter. Bounded:
		// a gateway that does not answer holds Close up to closeFlush.
		flushed := time.Now().Add(closeFlush)
		for time.Now().Before(flushed) {
			pending := false
			if h.call(ctx, func(time.Duration) {
				for _, g := range h.o.gws {
					if g.conn != nil && !g.conn.Closed() && g.conn.Queued() > 0 {
						pending = true
					}
				}
			}) != nil || !pending {
				break
			}
			time.Sleep(time.Millisecond)
		}
		_ = h.call(ctx, func(now time.Duration) {
			for _, g := range h.o.gws {
				if g.conn != nil {
					g.conn.Close(now)
				}
			}
		})
		// Give the owner one loop turn to put the CLOSE packets on the
		// wire; the peers would find out through DeadAfter otherwise.
		time.Sleep(2 * time.Millisecond)
		_ = h.call(ctx, func(time.Duration) {})
		close(h.quit)
		h.wg.Wait()
		h.ep.Close()
		close(h.recv)
	})
	return nil
}
