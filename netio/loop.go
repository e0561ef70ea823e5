//go:build linux

package netio

import (
	"net/netip"
	"time"

	"github.com/mrgw/mrgw/metaroce"
)

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
	// txTally and rxTally count what flush sends and receiveBatch
	// receives per plane (planeTally).
	txTally, rxTally planeTally
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
	// spareRx replaces receive buffers a sink kept (rxbufs.go).
	spareRx [][]byte
}

// lateAfter is how far past a deadline the owner must run before it
// counts as held up by the machine; maxGrace bounds the grace then given.
const (
	lateAfter = 5 * time.Millisecond
	maxGrace  = 20 * time.Millisecond
)

// janitorEvery is how often lingering path sockets are looked at; it is
// also the longest the owner sleeps.
const janitorEvery = 100 * time.Millisecond

// starvedRecheck bounds the owner's sleep while it waits for a sender to
// return a batch with work due (a sender always returns its batch; this
// only bounds a wait on a machine that does not run it).
const starvedRecheck = time.Millisecond

func (o *ownerState) init(e *Endpoint) {
	o.paths = map[pathKey]*sock{}
	o.conns = map[uint64]*connPaths{}
	o.replyIP = map[PeerID]map[uint16]replyDst{}
	o.admitted = map[PeerID]bool{}
	o.cookies = map[PeerID][CookieLen]byte{}
	o.lastInit = map[PeerID]sentInit{}
	o.planes = map[PeerID]*peerPlanes{}
	o.rxTally.rx = true
	o.room = e.ep.Config().MTU + metaroce.DataHeaderLen
	e.initTx(txBufLen(e.ep.Config()))
	o.deadline = -1
	o.graceFor = -1
}

// run is the owner goroutine.
func (e *Endpoint) run() {
	defer e.wg.Done()
	defer close(e.done)
	o := &e.owner
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		e.ctr.ownerPasses.Add(1)
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
		if wait <= 0 && o.tx.starved {
			// The timers due have run (above) and what is still due is
			// sending (a paced connection behind its schedule, an ACK to
			// flush), which waits for a batch: sleep until a sender
			// returns one (or a datagram or command comes). Looping
			// instead ran the timers, the poll of due connections and
			// the clock about a million times a second while the
			// senders wrote, on the core they needed (a gateway relaying
			// at GOMAXPROCS 1 spent most of its CPU so).
			wait = starvedRecheck
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

// resolveCache remembers the last datagram resolve attributed within one
// received batch: a host sends from its path sockets, not the address it
// registered, so every datagram of a host's connection is resolved, and
// the datagrams of a batch come in runs of one source and connection. The
// answer depends on the source, the packet's type and connection (or
// version-2 tag), the peer table and the socket, so a datagram with the
// same source, type and connection under the same table gets the same
// answer without the lookups (by IP, the connection's peer, the peer by
// id: about 5% of a relaying gateway's CPU). Only DATA and ACK are
// cached: an INIT's answer is an admission, and the other types may end
// the connection, after which its datagrams resolve by IP.
type resolveCache struct {
	table    *peerTable
	src      netip.AddrPort
	typ      metaroce.PacketType
	conn     uint64
	id       PeerID
	fallback bool
	valid    bool
}

func (rc *resolveCache) resolve(e *Endpoint, s *sock, src netip.AddrPort, pkt []byte) (id PeerID, ok, fallback bool) {
	_, t, conn, err := metaroce.Peek(pkt)
	cacheable := err == nil && (t == metaroce.TypeData || t == metaroce.TypeAck)
	table := e.peers.Load()
	if cacheable && rc.valid && rc.table == table && rc.src == src && rc.typ == t && rc.conn == conn {
		return rc.id, true, rc.fallback
	}
	id, ok, fallback = e.resolve(s, src, pkt, s.primary)
	*rc = resolveCache{}
	if ok && cacheable {
		*rc = resolveCache{table: e.peers.Load(), src: src, typ: t, conn: conn, id: id, fallback: fallback, valid: true}
	}
	return id, ok, fallback
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
	var rc resolveCache
	var notedPeer PeerID
	var notedSrc netip.AddrPort
	tally := &e.owner.rxTally
	defer tally.flush(e)
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
			id, ok, fallback := rc.resolve(e, b.s, ent.src, m.Buf[ent.off:ent.off+ent.n])
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
		if a := ent.src.Addr(); (a != p.Addr.Addr() || (b.s.listen && !b.s.primary)) && (p.ID != notedPeer || ent.src != notedSrc) {
			// Once per run of one peer's source: the note is the same
			// for every datagram of the run (two map lookups each).
			e.noteReplyIP(p.ID, ent.src, b.s)
			notedPeer, notedSrc = p.ID, ent.src
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
		// The datagram lies in the batch's own buffer (check put it
		// there), which a relay may keep rather than copy from.
		if e.ep.ReceiveIn(now, pkt, m.Buf, metaroce.RecvMeta{Peer: ent.peer, Entropy: ent.src.Port(), CE: ent.ce}) {
			b.bufs[ent.idx] = e.owner.spareRxBuf(e.rxBufLen)
		}
		tally.add(e, ent.peer, b.s.plane, ent.n)
		rx++
		bytes += uint64(ent.n)
	}
	e.ctr.rxDatagrams.Add(rx)
	e.ctr.rxBytes.Add(bytes)
	b.n = 0
	b.s.free <- b // never blocks: free has room for every batch of the socket
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
