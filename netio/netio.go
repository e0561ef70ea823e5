//go:build linux

// Package netio runs a metaroce.Endpoint over real UDP sockets: it is the
// driver that the sans-I/O protocol needs to leave the simulator. The WAN
// tunnel (package tunnel, with a Sealer), the LAN side of the gateway
// (hosts to gateway, no Sealer) and the conformance responder all use it.
//
// # Sockets and paths
//
// An Endpoint has a listening socket (Config.Listen, plus one per
// Config.ExtraListen address: a gateway's WAN planes), where peers send
// DATA, INIT and PROBE, and one socket per (peer, entropy) from which it
// sends them (the peers Config.SharePaths names send from a shared pool
// instead, the entropy picking the socket). A path's entropy in metaroce
// is a logical value; here it names a local socket bound to an ephemeral
// port, and that real port is what the fabric hashes (docs/PROTOCOL.md).
// When the state machine re-rolls a path's entropy the next Transmit
// names an entropy never seen before, so a new socket, a new port and a
// new ECMP route are created on demand. A socket no path uses any more
// lingers (answers to packets already sent still arrive there) and is
// then closed. Path i may be bound to the local address of plane i mod P
// (Config.PlaneAddrs, or the peer's Locals). Replies (acks, probe answers)
// leave from the listening socket the answered datagram arrived on, to the
// port it came from, so they follow the path they answer.
//
// The Endpoint uses its sockets through the Socket interface, opened by
// Config.Bind: real UDP sockets (BindUDP, package netio/udp) by default,
// or netio/netiotest's in-memory network, on which the driver's logic
// (peers, sealing, drops, admission) is tested without the kernel.
//
// # Goroutines
//
// One goroutine owns the Endpoint (the state machine is not thread-safe):
// it feeds received datagrams in, runs the timers from NextTimeout and
// polls datagrams out. It hands them in batches to a few sender goroutines
// (Config.TxSenders), which seal them and send them grouped per socket, so
// that runs to one destination leave as one GSO send; each socket has one
// sender, so a path's datagrams leave in order (see tx.go). Every other
// goroutine talks to the owner through a bounded command queue (Do, Call
// and the wrappers built on them). Events are handed to Config.OnEvent on
// the owner goroutine.
//
// Each socket has one reader goroutine blocked in recvmmsg (udp.Conn
// ReadBatch). That is the epoll-free design: Go's netpoller already parks a
// blocked reader on epoll, a parked goroutine costs a few KiB, and a
// reader per socket lets authentication (the AEAD open) run in parallel
// with the protocol on another core. A reader owns a fixed number of batch
// buffers; it hands a full batch to the owner over one bounded channel and
// reads again only when the owner returns a buffer. So a flood can fill
// the kernel's socket buffer (where the kernel drops, and counts), never
// this process's memory.
//
// # Sealing
//
// A peer may have a Sealer (the tunnel's AEAD envelope). Every datagram to
// that peer is sealed in place by a sender after Poll, and every datagram from it is
// opened by the reader before the owner sees it: a datagram that fails
// (authentication, replay, unknown epoch, too short) is dropped and counted
// per reason and never reaches the protocol. Datagrams from sources that
// are no known peer are dropped and counted too, unless Config.AcceptPeer
// admits the source.
//
// netio imports metaroce and the tunnel's socket and envelope packages;
// it must not import tunnel (the WAN tunnel builds on it) or gateway.
package netio

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/cpu"

	"github.com/mrgw/mrgw/metaroce"
	"github.com/mrgw/mrgw/netio/seal"
	"github.com/mrgw/mrgw/netio/udp"
)

// PeerID names a peer; it is the state machine's peer identity.
type PeerID = metaroce.PeerID

// Sealer protects the datagrams exchanged with one peer. Seal and Open
// follow netio/seal's in-place contract: Seal(buf[:0], buf[Prefix():Prefix()+n])
// turns the plaintext at buf[Prefix():] into a sealed datagram at buf[0:],
// and Open(d[Prefix():Prefix()], d) leaves the plaintext at d[Prefix():].
// Seal runs on the senders and Open on the readers, both concurrently.
type Sealer interface {
	// Prefix is the number of bytes in front of the plaintext.
	Prefix() int
	// Overhead is the total number of bytes Seal adds.
	Overhead() int
	Seal(dst, plaintext []byte) ([]byte, error)
	Open(dst, datagram []byte) ([]byte, error)
}

// RunSealer is a Sealer that can also hand a sender goroutine a run of
// counters at once. A sender then seals its batch for the peer from the
// run (seal.Run.Seal, the same datagrams Seal makes) with one atomic
// operation per batch instead of one per datagram on a counter that every
// sender writes (see tx.go). Reserve replaces what r held; it returns how
// many counters r got, fewer than n only when the key is exhausted.
type RunSealer interface {
	Sealer
	Reserve(r *seal.Run, n int) int
}

// Peer is a remote endpoint.
type Peer struct {
	ID PeerID
	// Addr is the peer's listening address: where DATA, INIT and PROBE go.
	Addr netip.AddrPort
	// An admitted peer (Config.AcceptPeer) is first reached at the source
	// of its INIT; its address then follows the source of its replies,
	// which leave from its listening socket.
	//
	// Dests, if set, are the peer's listening addresses per plane: path i
	// sends to Dests[i mod len(Dests)] instead of Addr (a peer gateway
	// that receives on one address per plane). Datagrams from any of them
	// are the peer's.
	Dests []netip.AddrPort
	// Locals, if set, binds this peer's path i sockets to Locals[i mod
	// len(Locals)], overriding Config.PlaneAddrs: one Endpoint can then
	// send to hosts from its LAN address and to peer gateways from its
	// plane addresses.
	Locals []netip.Addr
	// Sources are further addresses the peer sends from (for example its
	// per-plane addresses). Datagrams from Addr's IP or one of these, from
	// any port, are this peer's.
	Sources []netip.Addr
	// Sealer, if set, seals and opens every datagram of this peer.
	Sealer Sealer
}

// Config configures an Endpoint.
type Config struct {
	// Protocol configures the metaroce.Endpoint.
	Protocol metaroce.Config
	// Memory is the registry WRITEs place into (nil: a new one). Touch it
	// only from Call, since the owner goroutine places into it.
	Memory *metaroce.Memory
	// Listen is the listening address (port 0: an ephemeral port).
	Listen netip.AddrPort
	// ExtraListen are further listening sockets (a gateway's WAN plane
	// addresses next to its LAN address). Peers may send to any of them;
	// a reply (ack, probe answer) leaves from the socket the datagram it
	// answers arrived on, so that it retraces that datagram's route.
	// AcceptPeer is consulted only for datagrams that arrive on Listen.
	ExtraListen []netip.AddrPort
	// PlaneAddrs, if set, binds path i's sockets to PlaneAddrs[i mod len]:
	// one local address per plane. Empty: path sockets bind to Listen's
	// address.
	PlaneAddrs []netip.Addr
	// UDP configures every socket (ECN default, GSO/GRO switches, batch
	// size, socket buffers).
	UDP udp.Options
	// Bind opens every socket [BindUDP: real UDP sockets]. Tests of the
	// driver's logic use netio/netiotest's in-memory network.
	Bind Bind
	// Peers are registered at start; more can be added with AddPeer.
	Peers []Peer
	// AcceptPeer, if set, is asked (on the owner goroutine) about a
	// datagram from an unknown source that arrived on Listen; returning
	// true registers the source as a new peer with that id. Unsealed only.
	// An INIT from a new connection whose source IP belongs to a known
	// unsealed peer but not its exact address (a second process on that
	// host) is asked about too: unsealed peers that share an IP are told
	// apart by their connection ids.
	AcceptPeer func(src netip.AddrPort) (PeerID, bool)
	// Only an INIT from an unknown source is offered to AcceptPeer; any
	// other datagram from one is dropped (UnknownSource).
	//
	// Cookies, if set with AcceptPeer, guards admission with stateless
	// cookies (cookie.go): while RequireCookie returns true (nil: always),
	// an INIT from an unknown source that does not carry a valid cookie is
	// answered with a RETRY and not offered to AcceptPeer. RequireCookie
	// runs on the owner goroutine.
	Cookies       *Cookies
	RequireCookie func() bool
	// OnEvent receives every protocol event, on the owner goroutine: it
	// must not block and must not wait for Call.
	OnEvent func(now time.Duration, ev metaroce.Event)
	// Logger: nil discards.
	Logger *slog.Logger

	// Limits (0: the defaults below).
	Commands       int           // command queue length
	MaxPathSockets int           // path sockets open at once
	MaxPeers       int           // peers registered at once
	Linger         time.Duration // how long an unused path socket stays open
	RxBatches      int           // receive batches per socket
	// TxSenders is the number of sender goroutines that seal and write
	// (0: DefaultTxSenders).
	TxSenders int
	// SharePaths, when set with SharedPathSockets > 0, names the peers
	// whose paths send from a pool of SharedPathSockets sockets shared by
	// all of them (a path's entropy picks its socket) instead of sockets
	// of their own: a gateway's hosts, which each cost a socket, a reader
	// and ~0.4 MiB per path otherwise. A path keeps a source port of its
	// own as long as the pool has more sockets than the connection paths;
	// replies are matched to peers by source address, whichever socket
	// they reach. Called on the owner goroutine.
	SharePaths        func(PeerID) bool
	SharedPathSockets int
}

// Defaults for Config's zero values.
const (
	DefaultPacingSlack    = 2 * time.Millisecond
	DefaultPacingBurst    = 64 << 10 // bytes a paced connection may run ahead (metaroce Config.PacingBurst)
	DefaultCommands       = 1024
	DefaultMaxPathSockets = 1024
	DefaultMaxPeers       = 4096
	DefaultLinger         = 2 * time.Second
	DefaultRxBatches      = 2
	// DefaultTxSenders: sealing runs beside the protocol's goroutine, in
	// parallel on machines with the cores for it.
	DefaultTxSenders = 2
	// txBatch is how many datagrams one flush polls before sending.
	txBatch = 128
	// txRounds bounds the flushes of one loop turn, so that received
	// datagrams and commands are served between them.
	txRounds = 8
)

// ErrClosed is returned by calls on a closed Endpoint.
var ErrClosed = errors.New("netio: endpoint closed")

// Stats are an Endpoint's counters since it started.
type Stats struct {
	RxDatagrams, RxBytes uint64 // delivered to the protocol (plaintext bytes)
	TxDatagrams, TxBytes uint64 // handed to the kernel (wire bytes)
	// UnknownSource: datagrams from no known peer.
	UnknownSource uint64
	// BadInits: datagrams from no known peer with an INIT's type byte
	// that are not a valid INIT (version, length, fields): neither
	// answered nor admitted. Not in UnknownSource.
	BadInits uint64
	// OpenErrors counts datagrams refused by a Sealer, indexed by
	// seal.Error (index 0: an error of another type).
	OpenErrors [seal.NumErrors]uint64
	// SealErrors: datagrams that could not be sealed (key exhausted).
	SealErrors uint64
	// TxErrors: datagrams the kernel refused; NoSocket: datagrams dropped
	// because no path socket could be opened; NoPeer: datagrams for a peer
	// removed meanwhile (a connection's last packets after RemovePeer).
	TxErrors, NoSocket, NoPeer uint64
	// TooBig: of TxErrors, datagrams refused for their size (EMSGSIZE),
	// told to the path MTU discovery of their connection.
	TooBig uint64
	// ReadErrors: failed receive calls.
	ReadErrors uint64
	// RetriesSent: INITs from unknown sources answered with a RETRY (no
	// cookie, or an invalid one; BadCookies counts the latter);
	// RetriesReceived: RETRYs this endpoint received and answered by
	// sending its INIT again with the cookie.
	RetriesSent, BadCookies, RetriesReceived uint64
	// PathSockets is the number of path sockets open now; SocketsOpened
	// the number ever opened.
	PathSockets, SocketsOpened uint64
	// GSO, GRO: whether the listening socket uses the offloads.
	GSO, GRO bool
	// TxWrites counts the batched writes (sendmmsg calls) that sent
	// TxDatagrams; RxReads the batched reads (recvmmsg calls) that
	// delivered datagrams: datagrams per call say how well the system
	// calls are shared.
	TxWrites, RxReads uint64
	// OwnerPasses counts the owner goroutine's passes through its loop
	// (each runs the due timers and polls): per datagram, how much of its
	// work is paid per wake-up rather than per datagram.
	OwnerPasses uint64
}

// Dropped returns the datagrams refused before the protocol saw them.
func (s *Stats) Dropped() uint64 {
	n := s.UnknownSource + s.BadInits
	for _, v := range s.OpenErrors {
		n += v
	}
	return n
}

// counters are the endpoint's (Stats). Those written on the datapath are
// grouped by the goroutine that writes them, each group on cache lines of
// its own: packed together, the owner's add per received batch, a
// sender's per write and a reader's per read each waited for the line to
// come back from another core (one atomic add of the owner's was 2% of a
// relaying gateway's CPU).
type counters struct {
	_ cpu.CacheLinePad
	// The owner goroutine: per pass and per received batch.
	rxDatagrams, rxBytes, ownerPasses atomic.Uint64
	_                                 cpu.CacheLinePad
	// The sender goroutines: per write.
	txDatagrams, txBytes, txWrites atomic.Uint64
	_                              cpu.CacheLinePad
	// The reader goroutines: per read.
	rxReads atomic.Uint64
	_       cpu.CacheLinePad
	// The rest count what is rare: errors, drops, sockets.
	unknown, badInit                         atomic.Uint64
	open                                     [seal.NumErrors]atomic.Uint64
	sealErr, txErr, noSocket, readErr        atomic.Uint64
	noPeer                                   atomic.Uint64
	retriesSent, badCookies, retriesReceived atomic.Uint64
	tooBig                                   atomic.Uint64
	pathSockets, opened                      atomic.Uint64
}

// Endpoint is a metaroce.Endpoint running over UDP. Its methods are safe
// for concurrent use.
type Endpoint struct {
	cfg   Config
	log   *slog.Logger
	ep    *metaroce.Endpoint
	start time.Time

	listen  *sock   // Listen: the primary listening socket
	listens []*sock // Listen, then ExtraListen
	peers   atomic.Pointer[peerTable]
	pmu     sync.Mutex // serializes peer table updates

	cmds chan command
	rx   chan *rxBatch
	quit chan struct{}
	done chan struct{} // closed when the owner goroutine has returned
	wg   sync.WaitGroup

	closeOnce sync.Once
	ctr       counters
	planeSet  planeSet

	// Owned by the owner goroutine.
	owner    ownerState
	rxBufLen int
}

type command struct {
	fn   func(now time.Duration, ep *metaroce.Endpoint)
	call *callState // Call's, nil for Do
}

// callState lets a Call that gives up (its context ended, or the Endpoint
// closed) withdraw its function, unless the owner has already started it.
type callState struct {
	state atomic.Int32 // callPending, then callRunning or callWithdrawn
	done  chan struct{}
}

const (
	callPending int32 = iota
	callRunning
	callWithdrawn
)

// run runs c on the owner goroutine, unless its Call withdrew it.
func (c command) run(now time.Duration, ep *metaroce.Endpoint) {
	if c.call != nil && !c.call.state.CompareAndSwap(callPending, callRunning) {
		return
	}
	c.fn(now, ep)
	if c.call != nil {
		close(c.call.done)
	}
}

// New opens the listening socket and starts the Endpoint.
func New(cfg Config) (*Endpoint, error) {
	if cfg.Commands <= 0 {
		cfg.Commands = DefaultCommands
	}
	if cfg.MaxPathSockets <= 0 {
		cfg.MaxPathSockets = DefaultMaxPathSockets
	}
	if cfg.MaxPeers <= 0 {
		cfg.MaxPeers = DefaultMaxPeers
	}
	if cfg.Linger <= 0 {
		cfg.Linger = DefaultLinger
	}
	if cfg.RxBatches <= 0 {
		cfg.RxBatches = DefaultRxBatches
	}
	if cfg.TxSenders <= 0 {
		cfg.TxSenders = DefaultTxSenders
	}
	if cfg.TxSenders > maxTxSenders {
		cfg.TxSenders = maxTxSenders
	}
	if cfg.Protocol.PacingBurst == 0 {
		// A paced connection polled at each of its slots handed the
		// senders one datagram per wake-up, each its own sendmmsg and
		// hand-offs: 3 times the CPU per datagram at 2 Gbit/s. In bursts
		// (at most a millisecond of the rate), a wake-up fills a GSO send.
		cfg.Protocol.PacingBurst = DefaultPacingBurst
	}
	if cfg.Protocol.PacingSlack == 0 {
		// The owner goroutine sleeps on an OS timer that wakes up to about a
		// millisecond late; let the pacer send what fell due meanwhile.
		cfg.Protocol.PacingSlack = DefaultPacingSlack
	}
	// A datagram leaves when its sender writes it, not when the owner
	// polls it: the senders' returned batches say when (tx.go returned),
	// and a datagram still with a sender does not start its path's probe
	// timeout (metaroce Config.DepartureWait).
	cfg.Protocol.DepartureWait = maxSenderWait
	if !cfg.Listen.Addr().IsValid() {
		return nil, fmt.Errorf("netio: Listen address is required")
	}
	for _, a := range cfg.PlaneAddrs {
		if !a.IsValid() {
			return nil, fmt.Errorf("netio: invalid plane address")
		}
	}
	for _, a := range cfg.ExtraListen {
		if !a.Addr().IsValid() {
			return nil, fmt.Errorf("netio: invalid extra listening address")
		}
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ep, err := metaroce.NewEndpoint(cfg.Protocol, cfg.Memory)
	if err != nil {
		return nil, err
	}
	// DATA payloads stay where they lie until a sender copies them behind
	// their header (writeBatch): that copy leaves the owner goroutine.
	ep.LendPayloads()
	e := &Endpoint{
		cfg:   cfg,
		log:   log,
		ep:    ep,
		start: time.Now(),
		cmds:  make(chan command, cfg.Commands),
		quit:  make(chan struct{}),
		done:  make(chan struct{}),
	}
	// A received datagram is at most a DATA packet of the largest MTU plus
	// the largest envelope; a little more so that a too-long datagram is
	// seen as such (and refused) rather than silently cut to a valid size.
	e.rxBufLen = ep.Config().MTU + metaroce.DataHeaderLen + maxOverhead + 64
	e.peers.Store(&peerTable{})
	for _, p := range cfg.Peers {
		if err := e.AddPeer(p); err != nil {
			return nil, err
		}
	}
	// The receive channel holds every batch that can exist, so a reader
	// never blocks on it for long: readers block on their free lists.
	e.rx = make(chan *rxBatch, cfg.RxBatches*(cfg.MaxPathSockets+1+len(cfg.ExtraListen)))
	e.owner.init(e)
	for i, a := range append([]netip.AddrPort{cfg.Listen}, cfg.ExtraListen...) {
		ls, err := e.openSock(a, true, i == 0, 0, 0, i-1) // ExtraListen[j] is plane j
		if err != nil {
			// Stop the readers of the sockets already open.
			for _, s := range e.listens {
				e.retire(s)
			}
			e.closeOnce.Do(func() { close(e.quit) })
			e.wg.Wait()
			return nil, err
		}
		e.listens = append(e.listens, ls)
	}
	e.listen = e.listens[0]
	e.warnSmallBuffers()
	e.startSenders()
	e.wg.Add(1)
	go e.run()
	return e, nil
}

// maxTxSenders bounds Config.TxSenders.
const maxTxSenders = 64

// maxOverhead bounds the envelope a Sealer may add.
const maxOverhead = 64

// LocalAddr returns the listening address (with the real port).
func (e *Endpoint) LocalAddr() netip.AddrPort { return e.listen.c.LocalAddr() }

// LocalAddrs returns every listening address: Listen, then ExtraListen,
// with their real ports.
func (e *Endpoint) LocalAddrs() []netip.AddrPort {
	out := make([]netip.AddrPort, len(e.listens))
	for i, s := range e.listens {
		out[i] = s.c.LocalAddr()
	}
	return out
}

// ProtocolConfig returns the state machine's configuration with defaults.
func (e *Endpoint) ProtocolConfig() metaroce.Config { return e.ep.Config() }

// Now returns the Endpoint's clock: the time the state machine sees.
func (e *Endpoint) Now() time.Duration { return time.Since(e.start) }

// Done is closed when the Endpoint has stopped.
func (e *Endpoint) Done() <-chan struct{} { return e.done }

// AddPeer registers a peer (or replaces the one with the same ID).
func (e *Endpoint) AddPeer(p Peer) error {
	if !p.Addr.IsValid() {
		return fmt.Errorf("netio: peer %d: invalid address", p.ID)
	}
	for _, d := range p.Dests {
		if !d.IsValid() {
			return fmt.Errorf("netio: peer %d: invalid destination address", p.ID)
		}
	}
	if p.Sealer != nil && (p.Sealer.Overhead() > maxOverhead || p.Sealer.Prefix() > p.Sealer.Overhead()) {
		return fmt.Errorf("netio: peer %d: sealer overhead %d exceeds %d", p.ID, p.Sealer.Overhead(), maxOverhead)
	}
	e.pmu.Lock()
	defer e.pmu.Unlock()
	old := e.peers.Load()
	if _, ok := old.byID[p.ID]; !ok && len(old.byID) >= e.cfg.MaxPeers {
		return fmt.Errorf("netio: peer table full (%d)", e.cfg.MaxPeers)
	}
	e.peers.Store(old.with(p))
	return nil
}

// RemovePeer forgets a peer; its datagrams are unknown from then on.
func (e *Endpoint) RemovePeer(id PeerID) {
	e.pmu.Lock()
	defer e.pmu.Unlock()
	e.peers.Store(e.peers.Load().without(id))
}

// Do queues fn to run on the owner goroutine and returns without waiting
// for it. It blocks while the queue is full, until ctx is done or the
// Endpoint closes.
func (e *Endpoint) Do(ctx context.Context, fn func(now time.Duration, ep *metaroce.Endpoint)) error {
	return e.enqueue(ctx, command{fn: fn})
}

// Call runs fn on the owner goroutine and waits until it has run. fn may
// use the metaroce.Endpoint and its connections freely. Call must not be
// used from OnEvent (it would wait for itself).
//
// Call returns nil exactly when fn ran, to its end. If ctx ends or the
// Endpoint closes before the owner has started fn, fn never runs and Call
// returns the error; if the owner has started it, Call waits for it. So
// the caller may share variables with fn without further synchronization,
// whatever Call returns.
func (e *Endpoint) Call(ctx context.Context, fn func(now time.Duration, ep *metaroce.Endpoint)) error {
	cs := &callState{done: make(chan struct{})}
	if err := e.enqueue(ctx, command{fn: fn, call: cs}); err != nil {
		return err
	}
	var err error
	select {
	case <-cs.done:
		return nil
	case <-e.done:
		err = ErrClosed
	case <-ctx.Done():
		err = ctx.Err()
	}
	if cs.state.CompareAndSwap(callPending, callWithdrawn) {
		return err
	}
	<-cs.done // started: the owner finishes it before anything else
	return nil
}

func (e *Endpoint) enqueue(ctx context.Context, c command) error {
	select {
	case <-e.quit:
		return ErrClosed
	default:
	}
	select {
	case e.cmds <- c:
		return nil
	case <-e.quit:
		return ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Connect opens a connection to peer; EventConnected reports when it is
// established. The returned Conn must be used only on the owner goroutine
// (inside Call or OnEvent) or through the wrappers below.
func (e *Endpoint) Connect(ctx context.Context, peer PeerID) (*metaroce.Conn, error) {
	var c *metaroce.Conn
	var err error
	if cerr := e.Call(ctx, func(now time.Duration, ep *metaroce.Endpoint) { c, err = ep.Connect(now, peer) }); cerr != nil {
		return nil, cerr
	}
	return c, err
}

// Write queues a WRITE on c (see metaroce.Conn.Write); data must stay
// untouched until its EventSendComplete.
func (e *Endpoint) Write(ctx context.Context, c *metaroce.Conn, stream, key uint32, addr uint64, data []byte) (uint64, error) {
	var seq uint64
	var err error
	if cerr := e.Call(ctx, func(now time.Duration, _ *metaroce.Endpoint) { seq, err = c.Write(now, stream, key, addr, data) }); cerr != nil {
		return 0, cerr
	}
	return seq, err
}

// Send queues a SEND on c (see metaroce.Conn.Send).
func (e *Endpoint) Send(ctx context.Context, c *metaroce.Conn, stream uint32, tag uint64, data []byte) (uint64, error) {
	var seq uint64
	var err error
	if cerr := e.Call(ctx, func(now time.Duration, _ *metaroce.Endpoint) { seq, err = c.Send(now, stream, tag, data) }); cerr != nil {
		return 0, cerr
	}
	return seq, err
}

// PostRecv posts buf for the SEND tagged tag on c.
func (e *Endpoint) PostRecv(ctx context.Context, c *metaroce.Conn, tag uint64, buf []byte) error {
	var err error
	if cerr := e.Call(ctx, func(time.Duration, *metaroce.Endpoint) { err = c.PostRecv(tag, buf) }); cerr != nil {
		return cerr
	}
	return err
}

// CloseConn starts a graceful close of c.
func (e *Endpoint) CloseConn(ctx context.Context, c *metaroce.Conn) error {
	return e.Call(ctx, func(now time.Duration, _ *metaroce.Endpoint) { c.Close(now) })
}

// Stats returns a snapshot of the counters.
func (e *Endpoint) Stats() Stats {
	c := &e.ctr
	s := Stats{
		RxDatagrams: c.rxDatagrams.Load(), RxBytes: c.rxBytes.Load(),
		TxDatagrams: c.txDatagrams.Load(), TxBytes: c.txBytes.Load(),
		TxWrites: c.txWrites.Load(), RxReads: c.rxReads.Load(),
		UnknownSource: c.unknown.Load(), BadInits: c.badInit.Load(),
		SealErrors: c.sealErr.Load(), TxErrors: c.txErr.Load(), NoSocket: c.noSocket.Load(), NoPeer: c.noPeer.Load(),
		ReadErrors: c.readErr.Load(), TooBig: c.tooBig.Load(),
		RetriesSent: c.retriesSent.Load(), BadCookies: c.badCookies.Load(), RetriesReceived: c.retriesReceived.Load(),
		PathSockets: c.pathSockets.Load(), SocketsOpened: c.opened.Load(),
		OwnerPasses: c.ownerPasses.Load(),
	}
	for i := range c.open {
		s.OpenErrors[i] = c.open[i].Load()
	}
	us := e.listen.c.Stats()
	s.GSO, s.GRO = us.GSO, us.GRO
	return s
}

// Close stops the Endpoint at once: connections are not closed gracefully
// (close them first with CloseConn for that). It waits for every goroutine.
func (e *Endpoint) Close() error {
	e.closeOnce.Do(func() { close(e.quit) })
	e.wg.Wait()
	return nil
}

func (e *Endpoint) countOpenError(err error) {
	e.ctr.open[openErrorIndex(err)].Add(1)
}

// openErrorIndex is the counter slot of a Sealer's refusal: its seal.Error,
// or 0 for an error of another type. A type assertion, not errors.As: this
// runs per refused datagram and must not allocate.
func openErrorIndex(err error) int {
	if se, ok := err.(seal.Error); ok && se < seal.NumErrors {
		return int(se)
	}
	return 0
}
