//go:build linux

package netio

import (
	"errors"
	"net"
	"net/netip"
	"time"

	"golang.org/x/sys/cpu"

	"github.com/mrgw/mrgw/internal/ecn"
	"github.com/mrgw/mrgw/metaroce"
	"github.com/mrgw/mrgw/netio/udp"
)

// sock is one UDP socket with its reader.
type sock struct {
	c       Socket
	listen  bool
	primary bool // the Config.Listen socket
	key     pathKey
	plane   int          // see planes.go; -1: none
	drops   dropCounters // plane listening sockets: datagrams dropped
	// Reader goroutine only: which sealed peer each source last opened
	// under, when several sealed peers share the source's IP, and a
	// scratch copy for trying their keys in turn (an in-place open that
	// fails may overwrite the datagram).
	opened  map[netip.AddrPort]PeerID
	scratch []byte
	// free holds the batches the reader may fill; the owner returns them.
	free chan *rxBatch
	stop chan struct{} // closed when the socket is retired

	// shard is the sender goroutine that writes this socket's datagrams
	// (see tx.go); out, outFrom and dirty belong to that sender.
	shard int

	// The sender's fields sit on cache lines of their own: it writes them
	// for every datagram of its batch while the owner reads shard and plane
	// for every datagram it polls, and on one line the two cores passed it
	// back and forth (the loads of shard and plane in queue and countTx
	// were 1% of the datapath tunnel's CPU at MTU 1400).
	_   cpu.CacheLinePad
	out []udp.Message // datagrams waiting for the next WriteBatch
	// outFrom is the path each datagram of out was sent on.
	outFrom []txFrom
	dirty   bool
	_       cpu.CacheLinePad

	// Owner goroutine only.
	refs      int           // (connection, path) pairs sending from it
	idleSince time.Duration // when refs last dropped to 0
}

type pathKey struct {
	peer    PeerID
	entropy uint16
}

// rxBatch is one ReadBatch worth of datagrams, passed from a reader to the
// owner and back.
type rxBatch struct {
	s    *sock
	msgs []udp.Message
	bufs [][]byte // the batch's own buffers, one per message
	ents []rxEnt  // the datagrams that passed the reader's checks
	n    int
}

type rxEnt struct {
	idx     int // into msgs
	off, n  int // plaintext within msgs[idx].Buf
	peer    PeerID
	src     netip.AddrPort
	ce      bool
	unknown bool // no known peer: ask Config.AcceptPeer
	// resolve: an unsealed datagram matched its peer by IP only, and
	// that IP is shared; the owner attributes it by connection id.
	resolve bool
}

// connPaths records which entropy each path of a connection last sent
// from, to count the users of each path socket.
type connPaths struct {
	peer PeerID
	ent  []uint16 // per path; 0 = none (metaroce entropy is never 0)
	// socks is the socket of each path's entropy (nil: none): a socket
	// named here has a reference, so it is not reaped.
	socks []*sock
}

// ownerState is touched only by the owner goroutine.
type ownerState struct {
	paths    map[pathKey]*sock
	conns    map[uint64]*connPaths
	replyIP  map[PeerID]map[uint16]replyDst
	admitted map[PeerID]bool // peers AcceptPeer admitted: their address is learned
	// Initiator side of admission cookies (cookie.go): the cookie each
	// unsealed peer last sent us in a RETRY, and the INIT last sent to it.
	cookies  map[PeerID][CookieLen]byte
	lastInit map[PeerID]sentInit
	tx       txState
	room     int // bytes Poll may write
	deadline time.Duration
	janitor  time.Duration
	planes   map[PeerID]*peerPlanes // cache of Endpoint.planeSet
	// graceFor is the overdue deadline whose timers wait until graceUntil
	// (see run); -1 when none.
	graceFor, graceUntil time.Duration
	shards               int // sockets opened so far, to spread them over the senders
	// txConn and txPaths cache the connection polled last and its
	// record: a bulk transfer polls datagram after datagram of one
	// connection, and pathSock then finds a path's socket without the two
	// map lookups (release clears it).
	txConn  *metaroce.Conn
	txPaths *connPaths
}

// sentInit is an INIT as it left: its bytes, socket and destination.
type sentInit struct {
	pkt [metaroce.InitLen]byte
	s   *sock
	dst netip.AddrPort
}

// replyDst is where replies to one (peer, port) go: the IP the port was
// seen from and the listening socket the datagrams arrived on.
type replyDst struct {
	ip netip.Addr
	s  *sock
}

// maxReplyIPs bounds the remembered reply addresses per peer.
const maxReplyIPs = 4096

// lateAfter is how far past a deadline the owner must run before it
// counts as held up by the machine; maxGrace bounds the grace then given.
const (
	lateAfter = 5 * time.Millisecond
	maxGrace  = 20 * time.Millisecond
)

// janitorEvery is how often lingering path sockets are looked at; it is
// also the longest the owner sleeps.
const janitorEvery = 100 * time.Millisecond

func (o *ownerState) init(e *Endpoint) {
	o.paths = map[pathKey]*sock{}
	o.conns = map[uint64]*connPaths{}
	o.replyIP = map[PeerID]map[uint16]replyDst{}
	o.admitted = map[PeerID]bool{}
	o.cookies = map[PeerID][CookieLen]byte{}
	o.lastInit = map[PeerID]sentInit{}
	o.planes = map[PeerID]*peerPlanes{}
	o.room = e.ep.Config().MTU + metaroce.DataHeaderLen
	e.initTx(txBufLen(e.ep.Config()))
	o.deadline = -1
	o.graceFor = -1
}

// pathSockBatch is the most datagrams a path socket reads per system
// call (listening sockets read Config.UDP.BatchSize).
const pathSockBatch = 16

// openSock opens a socket and starts its reader.
func (e *Endpoint) openSock(local netip.AddrPort, listen, primary bool, peer PeerID, entropy uint16, plane int) (*sock, error) {
	uo := e.cfg.UDP
	batch := uo.BatchSize
	if batch <= 0 {
		batch = udp.DefaultBatchSize
	}
	if !listen {
		// A path socket is one of up to MaxPathSockets, opened on demand
		// and re-opened whenever a path re-rolls its entropy: with the
		// listening socket's 64-datagram batches and four 64 KiB GRO
		// buffers it cost ~0.8 MiB of fresh, zeroed memory each, and a
		// process with many connections (a gateway serving hundreds of
		// hosts, the load-test lab with 66 hosts in one process) spent
		// most of its CPU clearing it and gigabytes of heap holding it.
		// A path carries one connection's share: smaller receive batches
		// do (sends keep the socket's batch size, and GRO its buffers: with
		// a single GRO buffer, short tunnel runs under load moved nothing).
		batch = min(batch, pathSockBatch)
	}
	bind := e.cfg.Bind
	if bind == nil {
		bind = BindUDP
	}
	c, err := bind(local, uo)
	if err != nil {
		return nil, err
	}
	s := &sock{c: c, listen: listen, primary: primary, key: pathKey{peer, entropy}, plane: plane, stop: make(chan struct{}),
		shard: e.owner.shards % e.cfg.TxSenders}
	e.owner.shards++
	nb := e.cfg.RxBatches
	if listen {
		nb *= 2 // DATA arrives here: give it more room than the ack sockets
	}
	s.free = make(chan *rxBatch, nb)
	for range nb {
		b := &rxBatch{s: s, msgs: make([]udp.Message, batch), bufs: make([][]byte, batch), ents: make([]rxEnt, batch)}
		for i := range b.msgs {
			b.bufs[i] = make([]byte, e.rxBufLen)
			b.msgs[i].Buf = b.bufs[i]
		}
		s.free <- b
	}
	if !listen {
		e.ctr.pathSockets.Add(1)
		e.ctr.opened.Add(1)
	}
	e.wg.Add(1)
	go e.readLoop(s)
	return s, nil
}

// retire closes a socket; its reader stops.
func (e *Endpoint) retire(s *sock) {
	close(s.stop)
	s.c.Close()
	if !s.listen {
		e.ctr.pathSockets.Add(^uint64(0))
	}
}

// readLoop reads, authenticates and hands batches to the owner until the
// socket closes.
func (e *Endpoint) readLoop(s *sock) {
	defer e.wg.Done()
	var errWait *time.Timer
	for {
		var b *rxBatch
		select {
		case b = <-s.free:
		case <-s.stop:
			return
		case <-e.quit:
			return
		}
		// A coalesced (GRO) datagram is left where the socket has it and
		// opened from there into the batch's buffer: the AEAD's pass over
		// it is the copy (see check).
		for i := range b.msgs {
			b.msgs[i].Buf = b.bufs[i]
		}
		n, err := s.c.ReadBatchBorrow(b.msgs)
		if err != nil {
			s.free <- b
			if errors.Is(err, net.ErrClosed) {
				return
			}
			e.ctr.readErr.Add(1)
			// Do not spin on a persistent error: wait a little, still
			// stopping at once when told to.
			if errWait == nil {
				errWait = time.NewTimer(time.Millisecond)
			} else {
				errWait.Reset(time.Millisecond)
			}
			select {
			case <-errWait.C:
			case <-s.stop:
				return
			case <-e.quit:
				return
			}
			continue
		}
		e.ctr.rxReads.Add(1)
		if k := e.check(b, n); k == 0 {
			s.free <- b
			continue
		}
		select {
		case e.rx <- b:
		case <-s.stop:
			return
		case <-e.quit:
			return
		}
	}
}

// check finds each datagram's peer and opens it if the peer seals, keeping
// only what may reach the protocol. It returns how many were kept.
func (e *Endpoint) check(b *rxBatch, n int) int {
	table := e.peers.Load()
	k := 0
	// A batch's datagrams mostly come from one source (GRO reads one
	// flow's run at a time): its peer is looked up once per run. A path
	// socket's datagrams miss byAddr and cost two more lookups by IP.
	var (
		last       netip.AddrPort
		lastP      *Peer
		lastExact  bool
		lastShared []*Peer
		looked     bool
	)
	for i := range n {
		m := &b.msgs[i]
		// lent is the datagram where the socket left it, if that is not
		// the batch's own buffer; own is where it must end up.
		own := b.bufs[i]
		var lent []byte
		if m.N > 0 && &m.Buf[0] != &own[0] {
			lent = m.Buf[:m.N]
		}
		m.Buf = own
		if !looked || m.Addr != last {
			lastP, lastExact = table.byAddr[m.Addr]
			lastShared = nil
			if !lastExact {
				lastP, lastShared = table.byIP[m.Addr.Addr()], table.shared[m.Addr.Addr()]
			}
			last, looked = m.Addr, true
		}
		p, exact, shared := lastP, lastExact, lastShared
		if lent != nil && (p == nil || p.Sealer == nil || len(shared) > 1 || len(lent) > len(own)) {
			// Only a datagram from one known sealed peer is opened from
			// where it lies (into own, past the prefix); every other one
			// is copied first.
			m.N = copy(own, lent)
			lent = nil
		}
		ent := rxEnt{idx: i, n: m.N, src: m.Addr, ce: m.ECN == ecn.CE}
		if !exact {
			if len(shared) > 1 {
				switch q, off, n, ok := e.openShared(b.s, shared, m); {
				case ok:
					ent.off, ent.n, ent.peer = off, n, q.ID
					b.ents[k] = ent
					k++
					continue
				case q == nil:
					continue // only sealed peers there, and none opened it
				default:
					p = q // an unsealed peer: the owner resolves it
					ent.resolve = true
				}
			} else if p != nil && p.Sealer == nil {
				// Another process on the peer's machine may send from
				// this IP too: the connection id decides (see resolve).
				ent.resolve = true
			}
		}
		switch {
		case p == nil && (e.cfg.AcceptPeer == nil || !b.s.primary):
			e.ctr.unknown.Add(1)
			b.s.drops.unknown.Add(1)
			continue
		case p == nil:
			ent.unknown = true
		case p.Sealer != nil:
			pre := p.Sealer.Prefix()
			d := m.Buf[:m.N]
			if lent != nil {
				d = lent // opened into own, past the prefix
			}
			pt, err := p.Sealer.Open(m.Buf[pre:pre], d)
			if err != nil {
				e.countOpenError(err)
				b.s.countOpenError(err)
				continue
			}
			ent.off, ent.n = pre, len(pt)
			ent.peer = p.ID
		default:
			ent.peer = p.ID
		}
		b.ents[k] = ent
		k++
	}
	b.n = k
	return k
}

// openShared attributes a datagram from an IP that several peers claim.
// Sealed peers are tried in turn (the one this source last opened under
// first), each on a fresh copy; ok reports the first that opened it, with
// the plaintext's place. If none does, the first unsealed peer is returned
// (without ok) for the owner to resolve by connection id, or nil.
func (e *Endpoint) openShared(s *sock, peers []*Peer, m *udp.Message) (q *Peer, off, n int, ok bool) {
	d := m.Buf[:m.N]
	var unsealed *Peer
	var lastErr error
	try := func(p *Peer) bool {
		if cap(s.scratch) < len(d) {
			s.scratch = make([]byte, len(m.Buf))
		}
		orig := s.scratch[:len(d)]
		copy(orig, d)
		pre := p.Sealer.Prefix()
		pt, err := p.Sealer.Open(d[pre:pre], d)
		if err != nil {
			copy(d, orig)
			lastErr = err
			return false
		}
		off, n = pre, len(pt)
		return true
	}
	if id, hit := s.opened[m.Addr]; hit {
		for _, p := range peers {
			if p.ID == id && p.Sealer != nil && try(p) {
				return p, off, n, true
			}
		}
	}
	for _, p := range peers {
		if p.Sealer == nil {
			if unsealed == nil {
				unsealed = p
			}
			continue
		}
		if id, hit := s.opened[m.Addr]; hit && id == p.ID {
			continue // tried above
		}
		if try(p) {
			if s.opened == nil || len(s.opened) >= maxReplyIPs {
				s.opened = map[netip.AddrPort]PeerID{}
			}
			s.opened[m.Addr] = p.ID
			return p, off, n, true
		}
	}
	if unsealed == nil && lastErr != nil {
		e.countOpenError(lastErr)
		s.countOpenError(lastErr)
	}
	return unsealed, 0, 0, false
}

// run is the owner goroutine.
func (e *Endpoint) run() {
	defer e.wg.Done()
	defer close(e.done)
	o := &e.owner
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		now := e.Now()
		due := o.deadline >= 0 && now >= o.deadline
		if due && e.holdTimers(now, o.deadline) > now {
			due = false
		}
		if due {
			// Acknowledgements that arrived while this goroutine was not
			// running (a busy machine, a GC pause) go in before the timers
			// run: a timer that fires only because its answer was not read
			// yet would declare a whole path's flight lost. So do the
			// batches the senders have written: when their datagrams left.
			e.reclaimAll()
			for range maxRxBurst {
				select {
				case b := <-e.rx:
					e.receive(b)
					continue
				default:
				}
				break
			}
			now = e.Now()
			e.ep.HandleTimeout(now)
			e.events(now)
		}
		more := false
		if !o.tx.starved {
			more = e.flush(now)
		}
		e.events(now)
		if now >= o.janitor {
			e.reap(now, false)
			e.forgetRemoved()
			o.janitor = now + janitorEvery
		}
		o.deadline = e.ep.NextTimeout()
		wait := janitorEvery
		if more {
			wait = 0
		} else if o.deadline >= 0 {
			d := o.deadline
			if o.graceFor == d {
				d = max(d, o.graceUntil)
			}
			wait = min(wait, d-now)
		}
		if wait <= 0 {
			// Work is due now: serve what is waiting without sleeping.
			select {
			case b := <-e.rx:
				e.receive(b)
			case c := <-e.cmds:
				e.command(c)
			case b := <-o.tx.done:
				e.returned(b)
			case <-e.quit:
				e.shutdown()
				return
			default:
			}
			continue
		}
		timer.Reset(wait)
		select {
		case b := <-e.rx:
			e.receive(b)
		case c := <-e.cmds:
			e.command(c)
		case b := <-o.tx.done:
			e.returned(b) // a starved owner sends again
		case <-timer.C:
		case <-e.quit:
			e.shutdown()
			return
		}
	}
}

// holdTimers returns until when the timers due at deadline d must wait;
// at or before now, they run now.
//
// This goroutine ran far past the deadline (the machine held it up, and on
// loopback the readers and the peer with it): what was in flight is given
// as long again (at most maxGrace) to arrive. A datagram still with a
// sender, or one that waited there, needs no hold here: the protocol's
// probe timeouts run from when each datagram left (returned, metaroce
// Config.DepartureWait), per path, so a stalled sender holds no other
// path's timers (it held every timer of the endpoint, up to 500 ms, before).
func (e *Endpoint) holdTimers(now, d time.Duration) time.Duration {
	o := &e.owner
	if now-d > lateAfter && o.graceFor != d {
		o.graceFor, o.graceUntil = d, now+min(now-d, maxGrace)
	}
	if o.graceFor == d {
		return o.graceUntil
	}
	return -1
}

// maxSenderWait bounds how long a datagram polled but not yet written by
// its sender holds its path's probe timeout (metaroce Config.DepartureWait).
const maxSenderWait = 500 * time.Millisecond

func (e *Endpoint) shutdown() {
	for _, s := range e.listens {
		e.retire(s)
	}
	for k, s := range e.owner.paths {
		e.retire(s)
		delete(e.owner.paths, k)
	}
}

func (e *Endpoint) command(c command) {
	c.run(e.Now(), e.ep)
	e.events(e.Now())
	// Serve a burst of queued commands in one turn, bounded so that
	// receiving and sending are not starved.
	for range 64 {
		select {
		case c := <-e.cmds:
			c.run(e.Now(), e.ep)
		default:
			e.events(e.Now())
			return
		}
	}
	e.events(e.Now())
}

// maxRxBurst bounds the batches one receive serves, so that timers,
// commands and sending are not starved by a flood.
const maxRxBurst = 16

// receive feeds one batch (and whatever else is waiting, bounded) to the
// state machine. Every batch taken from e.rx is served: receiveBatch is
// what returns a batch to its socket's free list, and a socket whose
// batches are all lost can never read again.
func (e *Endpoint) receive(b *rxBatch) {
	now := e.Now()
	e.receiveBatch(now, b)
	for range maxRxBurst - 1 {
		select {
		case b = <-e.rx:
			e.receiveBatch(now, b)
			continue
		default:
		}
		break
	}
	e.events(now)
}

func (e *Endpoint) receiveBatch(now time.Duration, b *rxBatch) {
	table := e.peers.Load()
	var rx, bytes uint64
	// A batch's datagrams mostly come from one peer: look it up once.
	var lastTable *peerTable
	var lastID PeerID
	var lastPeer *Peer
	for i := range b.ents[:b.n] {
		ent := &b.ents[i]
		m := &b.msgs[ent.idx]
		if ent.unknown {
			id, ok, bad := e.admit(b.s, ent.src, m.Buf[ent.off:ent.off+ent.n])
			if !ok {
				if bad {
					e.ctr.badInit.Add(1)
					b.s.drops.badInit.Add(1)
					continue
				}
				e.ctr.unknown.Add(1)
				b.s.drops.unknown.Add(1)
				continue
			}
			ent.peer = id
			table = e.peers.Load()
		}
		byIPOnly := false
		if ent.resolve {
			id, ok, fallback := e.resolve(b.s, ent.src, m.Buf[ent.off:ent.off+ent.n], b.s.primary)
			byIPOnly = fallback
			if !ok {
				e.ctr.unknown.Add(1)
				b.s.drops.unknown.Add(1)
				continue
			}
			ent.peer = id
			table = e.peers.Load()
		}
		p := lastPeer
		if table != lastTable || ent.peer != lastID {
			p = table.byID[ent.peer]
			lastTable, lastID, lastPeer = table, ent.peer, p
		}
		if p == nil {
			e.ctr.unknown.Add(1) // removed while in flight
			b.s.drops.unknown.Add(1)
			continue
		}
		if a := ent.src.Addr(); a != p.Addr.Addr() || (b.s.listen && !b.s.primary) {
			e.noteReplyIP(p.ID, ent.src, b.s)
		}
		if !b.s.listen && !byIPOnly && ent.src != p.Addr && e.owner.admitted[p.ID] {
			// What reaches a path socket are replies, and replies leave
			// from the peer's listening socket: that, not the source of
			// its first INIT (one of its path sockets, which it may
			// re-roll and close), is where an admitted peer is reached.
			// Only a datagram of one of its connections says so: one
			// given to it by its IP alone (resolve's fallback) may be
			// another process's on that machine. A host that registered
			// and closed next to another on one IP sent a last reply
			// after its peer was gone; the reply, given to the other
			// host by IP, moved that host's address to the closed
			// socket, and its transfer stalled until it reconnected
			// (about 3 s, one time in three: TestReproSharedIPHostClose).
			np := *p
			np.Addr = ent.src
			if e.AddPeer(np) == nil {
				table = e.peers.Load()
			}
		}
		pkt := m.Buf[ent.off : ent.off+ent.n]
		if p.Sealer == nil {
			if isRetry(pkt) {
				e.onRetry(p, pkt)
				continue
			}
			// An admission cookie is netio's, not the protocol's.
			n, _ := splitCookie(pkt)
			pkt = pkt[:n]
		}
		e.ep.Receive(now, pkt, metaroce.RecvMeta{Peer: ent.peer, Entropy: ent.src.Port(), CE: ent.ce})
		e.countRx(ent.peer, b.s.plane, ent.n)
		rx++
		bytes += uint64(ent.n)
	}
	e.ctr.rxDatagrams.Add(rx)
	e.ctr.rxBytes.Add(bytes)
	b.n = 0
	b.s.free <- b // never blocks: free has room for every batch of the socket
}

// resolve attributes an unsealed datagram that matched a peer by IP only:
// to the peer of its connection if the state machine knows the connection,
// else, for an INIT that arrived on Listen, to a new peer if AcceptPeer
// admits the source, else to the peer that owns the IP (fallback: by its
// IP alone).
func (e *Endpoint) resolve(s *sock, src netip.AddrPort, pkt []byte, primary bool) (id PeerID, ok, fallback bool) {
	table := e.peers.Load()
	owner := table.byIP[src.Addr()]
	if owner != nil && owner.Sealer != nil {
		owner = nil
		for _, p := range table.shared[src.Addr()] {
			if p.Sealer == nil {
				owner = p
				break
			}
		}
	}
	_, t, conn, err := metaroce.Peek(pkt)
	if err == nil {
		if pid, ok := e.ep.ConnPeer(conn); ok {
			if p := table.byID[pid]; p != nil && p.Sealer == nil {
				return pid, true, false
			}
		}
		if t == metaroce.TypeInit && primary && e.cfg.AcceptPeer != nil && validInit(pkt) {
			if id, ok, _ := e.admit(s, src, pkt); ok {
				return id, true, false
			}
			// Answered with a RETRY, or refused: never the IP's other
			// peer's. An INIT from a new port is a new host (two host
			// processes on one machine); handed to the peer that owns
			// the IP, it replaced that host's connection: a refused
			// duplicate's retries took the live holder's name over
			// (gateway TestDuplicateEndpointRefused), and a neighbour's
			// restart stalled a transfer (loadtest/flood's shared-IP
			// repro).
			return 0, false, false
		}
	}
	if owner == nil {
		return 0, false, false
	}
	if e.owner.admitted[owner.ID] && owner.Addr != src {
		// An admitted peer (a host) is one address, not one IP: a
		// datagram of no connection it holds, from another port of its
		// IP, is another process's (a closed neighbour's late ACK).
		// Taken for this peer's, it cut a live host off (gateway
		// TestDuplicateEndpointRefused; loadtest/flood's shared-IP
		// repro).
		return 0, false, false
	}
	return owner.ID, true, true
}

// admit asks Config.AcceptPeer about an INIT from an unknown, unsealed
// source, after its cookie when cookies are on (cookie.go); pkt is the
// datagram. Anything but a valid INIT (validInit) is neither admitted nor
// answered: bad says the datagram had an INIT's type but is not one (a
// 12-byte "?? 03 ..." was taken for an INIT by its type byte alone, and
// answered with a 24-byte RETRY or admitted).
func (e *Endpoint) admit(s *sock, src netip.AddrPort, pkt []byte) (id PeerID, ok, bad bool) {
	if p := e.peers.Load().byAddr[src]; p != nil {
		// Registered meanwhile; if it seals, this datagram was not opened.
		return p.ID, p.Sealer == nil, false
	}
	_, t, conn, err := metaroce.Peek(pkt)
	if err != nil || t != metaroce.TypeInit {
		return 0, false, false
	}
	if !validInit(pkt) {
		return 0, false, true
	}
	if c := e.cfg.Cookies; c != nil {
		_, cookie := splitCookie(pkt)
		switch {
		case cookie != nil && c.valid(cookie, src.Addr(), conn):
		case cookie == nil && e.cfg.RequireCookie != nil && !e.cfg.RequireCookie():
		default:
			if cookie != nil {
				e.ctr.badCookies.Add(1)
			}
			// A valid INIT is at least RetryLen bytes: the answer
			// amplifies nothing (docs/PROTOCOL.md).
			var buf [RetryLen]byte
			if e.sendRaw(s, src, c.appendRetry(buf[:0], src.Addr(), conn)) {
				e.ctr.retriesSent.Add(1)
			}
			return 0, false, false
		}
	}
	id, ok = e.cfg.AcceptPeer(src)
	if !ok {
		return 0, false, false
	}
	if err := e.AddPeer(Peer{ID: id, Addr: src}); err != nil {
		e.log.Warn("netio: cannot admit peer", "src", src, "err", err)
		return 0, false, false
	}
	if len(e.owner.admitted) < e.cfg.MaxPeers {
		e.owner.admitted[id] = true
	}
	return id, true, false
}

// validInit reports whether pkt is an INIT the state machine would take
// (metaroce.DecodeHandshake: version, exact length, fields), with or
// without an admission cookie trailer (checked by admit). Never smaller
// than a RETRY.
func validInit(pkt []byte) bool {
	n, _ := splitCookie(pkt)
	var h metaroce.Handshake
	return metaroce.DecodeHandshake(pkt[:n], metaroce.TypeInit, &h) == nil
}

func (e *Endpoint) noteReplyIP(peer PeerID, src netip.AddrPort, s *sock) {
	if !s.listen {
		s = e.listen // replies leave from a listening socket
	}
	m := e.owner.replyIP[peer]
	if m == nil {
		m = map[uint16]replyDst{}
		e.owner.replyIP[peer] = m
	}
	if d, ok := m[src.Port()]; ok && d.ip == src.Addr() && d.s == s {
		return
	}
	if len(m) >= maxReplyIPs {
		clear(m)
	}
	m[src.Port()] = replyDst{ip: src.Addr(), s: s}
}

// replyAddr is where a reply to port of peer p goes, and from which
// socket: the IP that port was last seen from and the listening socket
// its datagrams arrived on, else the peer's listening IP from Listen.
func (e *Endpoint) replyAddr(p *Peer, port uint16) (*sock, netip.AddrPort) {
	if m := e.owner.replyIP[p.ID]; m != nil {
		if d, ok := m[port]; ok {
			return d.s, netip.AddrPortFrom(d.ip, port)
		}
	}
	return e.listen, netip.AddrPortFrom(p.Addr.Addr(), port)
}

// events hands the state machine's events to the application, after
// releasing the path sockets of closed connections.
func (e *Endpoint) events(now time.Duration) {
	for range 1 << 20 { // bounded; the queue is bounded by the work done
		ev, ok := e.ep.PollEvent()
		if !ok {
			return
		}
		if ev.Kind == metaroce.EventClosed && ev.Conn != nil {
			e.release(now, ev.Conn.ID())
		}
		if e.cfg.OnEvent != nil {
			e.cfg.OnEvent(now, ev)
		}
	}
}

// pathSock returns the socket a non-reply Transmit leaves from, opening it
// on first use, and counts the (connection, path) as its user.
func (e *Endpoint) pathSock(now time.Duration, p *Peer, tx *metaroce.Transmit) *sock {
	o := &e.owner
	if c := tx.Conn; c != nil && c == o.txConn {
		if cp := o.txPaths; cp.peer == p.ID && tx.Path < len(cp.ent) && cp.ent[tx.Path] == tx.Entropy {
			if s := cp.socks[tx.Path]; s != nil {
				return s
			}
		}
	}
	k := pathKey{p.ID, tx.Entropy}
	s := o.paths[k]
	if s == nil {
		if len(o.paths) >= e.cfg.MaxPathSockets {
			e.reap(now, true)
			if len(o.paths) >= e.cfg.MaxPathSockets {
				return nil
			}
		}
		local, plane := e.cfg.Listen.Addr(), -1
		if n := len(p.Locals); n > 0 {
			local, plane = p.Locals[tx.Path%n], tx.Path%n
		} else if n := len(e.cfg.PlaneAddrs); n > 0 {
			local, plane = e.cfg.PlaneAddrs[tx.Path%n], tx.Path%n
		}
		var err error
		s, err = e.openSock(netip.AddrPortFrom(local, 0), false, false, p.ID, tx.Entropy, plane)
		if err != nil {
			e.log.Warn("netio: cannot open path socket", "local", local, "err", err)
			return nil
		}
		s.idleSince = now
		o.paths[k] = s
	}
	if tx.Conn != nil {
		if cp := e.ref(now, tx.Conn.ID(), p.ID, tx.Path, tx.Entropy, s); cp != nil {
			o.txConn, o.txPaths = tx.Conn, cp
		}
	}
	return s
}

// ref records that path of conn now sends with entropy from s, and
// returns the connection's record (nil for an impossible path).
func (e *Endpoint) ref(now time.Duration, conn uint64, peer PeerID, path int, entropy uint16, s *sock) *connPaths {
	o := &e.owner
	cp := o.conns[conn]
	if cp == nil {
		cp = &connPaths{peer: peer}
		o.conns[conn] = cp
	}
	if path >= len(cp.ent) {
		if path >= 1<<16 {
			return nil
		}
		cp.ent = append(cp.ent, make([]uint16, path+1-len(cp.ent))...)
		cp.socks = append(cp.socks, make([]*sock, path+1-len(cp.socks))...)
	}
	old := cp.ent[path]
	cp.socks[path] = s
	if old == entropy {
		return cp
	}
	if old != 0 {
		e.unref(now, pathKey{peer, old})
	}
	cp.ent[path] = entropy
	s.refs++
	return cp
}

func (e *Endpoint) unref(now time.Duration, k pathKey) {
	if s := e.owner.paths[k]; s != nil && s.refs > 0 {
		s.refs--
		if s.refs == 0 {
			s.idleSince = now
		}
	}
}

// release drops a closed connection's claims on its path sockets.
func (e *Endpoint) release(now time.Duration, conn uint64) {
	o := &e.owner
	cp := o.conns[conn]
	if cp == nil {
		return
	}
	for _, ent := range cp.ent {
		if ent != 0 {
			e.unref(now, pathKey{cp.peer, ent})
		}
	}
	delete(o.conns, conn)
	if o.txPaths == cp {
		o.txConn, o.txPaths = nil, nil
	}
}

// reap closes path sockets nobody has used for Linger (or, when force is
// set because the table is full, every unused one).
func (e *Endpoint) reap(now time.Duration, force bool) {
	for k, s := range e.owner.paths {
		if s.refs == 0 && (force || now-s.idleSince >= e.cfg.Linger) {
			e.retire(s)
			delete(e.owner.paths, k)
		}
	}
}

// PathAddr returns the local address of the socket that sends for peer
// with entropy, if it is open. Call it only on the owner goroutine (inside
// Call or OnEvent).
func (e *Endpoint) PathAddr(peer PeerID, entropy uint16) (netip.AddrPort, bool) {
	if s := e.owner.paths[pathKey{peer, entropy}]; s != nil {
		return s.c.LocalAddr(), true
	}
	return netip.AddrPort{}, false
}

// forgetRemoved drops the owner's records of peers no longer registered.
func (e *Endpoint) forgetRemoved() {
	table := e.peers.Load()
	for id := range e.owner.cookies {
		if table.byID[id] == nil {
			delete(e.owner.cookies, id)
		}
	}
	for id := range e.owner.lastInit {
		if table.byID[id] == nil {
			delete(e.owner.lastInit, id)
		}
	}
	for id := range e.owner.admitted {
		if table.byID[id] == nil {
			delete(e.owner.admitted, id)
		}
	}
	for id := range e.owner.replyIP {
		if table.byID[id] == nil {
			delete(e.owner.replyIP, id)
		}
	}
}

// onRetry takes a peer's RETRY: its cookie goes on every INIT to the peer
// from now on, and the last INIT is sent again with it at once (else it
// would wait for the handshake's retransmission timer).
func (e *Endpoint) onRetry(p *Peer, pkt []byte) {
	e.ctr.retriesReceived.Add(1)
	ck := cookieOf(pkt)
	e.owner.cookies[p.ID] = ck
	in, ok := e.owner.lastInit[p.ID]
	if !ok {
		return
	}
	select {
	case <-in.s.stop:
		return // its socket is gone; the retransmission carries the cookie
	default:
	}
	var d [initWithCookie]byte
	copy(d[:], in.pkt[:])
	copy(d[metaroce.InitLen:], ck[:])
	e.sendRaw(in.s, in.dst, d[:])
}

// sendRaw queues a datagram that is not the state machine's (a RETRY, an
// INIT sent again with its cookie) on socket s to dst, unsealed. It
// reports false, and drops it, when no send buffer is free.
func (e *Endpoint) sendRaw(s *sock, dst netip.AddrPort, pkt []byte) bool {
	if !e.room() {
		return false
	}
	t := &e.owner.tx
	buf := t.spare[len(t.spare)-1]
	t.spare = t.spare[:len(t.spare)-1]
	n := copy(buf[maxOverhead:], pkt)
	e.queue(txItem{buf: buf, n: n, s: s, dst: dst})
	return true
}
