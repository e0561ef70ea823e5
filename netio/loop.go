//go:build linux

package netio

import (
	"errors"
	"net"
	"net/netip"
	"time"

	"github.com/mrgw/mrgw/internal/ecn"
	"github.com/mrgw/mrgw/metaroce"
	"github.com/mrgw/mrgw/tunnel/udp"
)

// sock is one UDP socket with its reader.
type sock struct {
	c      *udp.Conn
	listen bool
	key    pathKey
	// free holds the batches the reader may fill; the owner returns them.
	free chan *rxBatch
	stop chan struct{} // closed when the socket is retired

	// Owner goroutine only.
	refs      int           // (connection, path) pairs sending from it
	idleSince time.Duration // when refs last dropped to 0
	out       []udp.Message // datagrams waiting for the next WriteBatch
	dirty     bool
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
	ents []rxEnt // the datagrams that passed the reader's checks
	n    int
}

type rxEnt struct {
	idx      int // into msgs
	off, n   int // plaintext within msgs[idx].Buf
	peer     PeerID
	src      netip.AddrPort
	ce       bool
	unknown  bool // no known peer: ask Config.AcceptPeer
	admitted bool
}

// connPaths records which entropy each path of a connection last sent
// from, to count the users of each path socket.
type connPaths struct {
	peer PeerID
	ent  []uint16 // per path; 0 = none (metaroce entropy is never 0)
}

// ownerState is touched only by the owner goroutine.
type ownerState struct {
	paths    map[pathKey]*sock
	conns    map[uint64]*connPaths
	replyIP  map[PeerID]map[uint16]netip.Addr
	txBufs   [][]byte
	room     int // bytes Poll may write
	dirty    []*sock
	deadline time.Duration
	janitor  time.Duration
}

// maxReplyIPs bounds the remembered reply addresses per peer.
const maxReplyIPs = 4096

// janitorEvery is how often lingering path sockets are looked at; it is
// also the longest the owner sleeps.
const janitorEvery = 100 * time.Millisecond

func (o *ownerState) init(e *Endpoint) {
	o.paths = map[pathKey]*sock{}
	o.conns = map[uint64]*connPaths{}
	o.replyIP = map[PeerID]map[uint16]netip.Addr{}
	o.room = e.ep.Config().MTU + metaroce.DataHeaderLen
	o.txBufs = make([][]byte, txBatch)
	for i := range o.txBufs {
		o.txBufs[i] = make([]byte, maxOverhead+o.room+maxOverhead)
	}
	o.deadline = -1
}

// openSock opens a socket and starts its reader.
func (e *Endpoint) openSock(local netip.AddrPort, listen bool, peer PeerID, entropy uint16) (*sock, error) {
	c, err := udp.Listen(local, e.cfg.UDP)
	if err != nil {
		return nil, err
	}
	s := &sock{c: c, listen: listen, key: pathKey{peer, entropy}, stop: make(chan struct{})}
	nb := e.cfg.RxBatches
	if listen {
		nb *= 2 // DATA arrives here: give it more room than the ack sockets
	}
	batch := e.cfg.UDP.BatchSize
	if batch <= 0 {
		batch = udp.DefaultBatchSize
	}
	s.free = make(chan *rxBatch, nb)
	for range nb {
		b := &rxBatch{s: s, msgs: make([]udp.Message, batch), ents: make([]rxEnt, batch)}
		for i := range b.msgs {
			b.msgs[i].Buf = make([]byte, e.rxBufLen)
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
		n, err := s.c.ReadBatch(b.msgs)
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
	for i := range n {
		m := &b.msgs[i]
		ent := rxEnt{idx: i, n: m.N, src: m.Addr, ce: m.ECN == ecn.CE}
		p := table.lookup(m.Addr)
		switch {
		case p == nil && e.cfg.AcceptPeer == nil:
			e.ctr.unknown.Add(1)
			continue
		case p == nil:
			ent.unknown = true
		case p.Sealer != nil:
			pre := p.Sealer.Prefix()
			d := m.Buf[:m.N]
			pt, err := p.Sealer.Open(d[pre:pre], d)
			if err != nil {
				e.countOpenError(err)
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

// run is the owner goroutine.
func (e *Endpoint) run() {
	defer e.wg.Done()
	defer close(e.done)
	o := &e.owner
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		now := e.Now()
		if o.deadline >= 0 && now >= o.deadline {
			e.ep.HandleTimeout(now)
			e.events(now)
		}
		more := e.flush(now)
		e.events(now)
		if now >= o.janitor {
			e.reap(now, false)
			o.janitor = now + janitorEvery
		}
		o.deadline = e.ep.NextTimeout()
		wait := janitorEvery
		if more {
			wait = 0
		} else if o.deadline >= 0 {
			wait = min(wait, o.deadline-now)
		}
		if wait <= 0 {
			// Work is due now: serve what is waiting without sleeping.
			select {
			case b := <-e.rx:
				e.receive(b)
			case c := <-e.cmds:
				e.command(c)
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
		case <-timer.C:
		case <-e.quit:
			e.shutdown()
			return
		}
	}
}

func (e *Endpoint) shutdown() {
	e.retire(e.listen)
	for k, s := range e.owner.paths {
		e.retire(s)
		delete(e.owner.paths, k)
	}
}

func (e *Endpoint) command(c command) {
	c.fn(e.Now(), e.ep)
	if c.done != nil {
		close(c.done)
	}
	e.events(e.Now())
	// Serve a burst of queued commands in one turn, bounded so that
	// receiving and sending are not starved.
	for range 64 {
		select {
		case c := <-e.cmds:
			c.fn(e.Now(), e.ep)
			if c.done != nil {
				close(c.done)
			}
		default:
			e.events(e.Now())
			return
		}
	}
	e.events(e.Now())
}

// receive feeds one batch (and whatever else is waiting, bounded) to the
// state machine.
func (e *Endpoint) receive(b *rxBatch) {
	now := e.Now()
	for range 16 {
		e.receiveBatch(now, b)
		select {
		case b = <-e.rx:
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
	for i := range b.ents[:b.n] {
		ent := &b.ents[i]
		if ent.unknown {
			id, ok := e.admit(ent.src)
			if !ok {
				e.ctr.unknown.Add(1)
				continue
			}
			ent.peer = id
			table = e.peers.Load()
		}
		p := table.byID[ent.peer]
		if p == nil {
			e.ctr.unknown.Add(1) // removed while in flight
			continue
		}
		if a := ent.src.Addr(); a != p.Addr.Addr() {
			e.noteReplyIP(p.ID, ent.src)
		}
		m := &b.msgs[ent.idx]
		e.ep.Receive(now, m.Buf[ent.off:ent.off+ent.n], metaroce.RecvMeta{Peer: ent.peer, Entropy: ent.src.Port(), CE: ent.ce})
		rx++
		bytes += uint64(ent.n)
	}
	e.ctr.rxDatagrams.Add(rx)
	e.ctr.rxBytes.Add(bytes)
	b.n = 0
	b.s.free <- b // never blocks: free has room for every batch of the socket
}

// admit asks Config.AcceptPeer about an unknown, unsealed source.
func (e *Endpoint) admit(src netip.AddrPort) (PeerID, bool) {
	if p := e.peers.Load().lookup(src); p != nil {
		// Registered meanwhile; if it seals, this datagram was not opened.
		return p.ID, p.Sealer == nil
	}
	id, ok := e.cfg.AcceptPeer(src)
	if !ok {
		return 0, false
	}
	if err := e.AddPeer(Peer{ID: id, Addr: src}); err != nil {
		e.log.Warn("netio: cannot admit peer", "src", src, "err", err)
		return 0, false
	}
	return id, true
}

func (e *Endpoint) noteReplyIP(peer PeerID, src netip.AddrPort) {
	m := e.owner.replyIP[peer]
	if m == nil {
		m = map[uint16]netip.Addr{}
		e.owner.replyIP[peer] = m
	}
	if ip, ok := m[src.Port()]; ok && ip == src.Addr() {
		return
	}
	if len(m) >= maxReplyIPs {
		clear(m)
	}
	m[src.Port()] = src.Addr()
}

// replyAddr is where a reply to port of peer p goes: the IP that port was
// last seen from, else the peer's listening IP.
func (e *Endpoint) replyAddr(p *Peer, port uint16) netip.AddrPort {
	if m := e.owner.replyIP[p.ID]; m != nil {
		if ip, ok := m[port]; ok {
			return netip.AddrPortFrom(ip, port)
		}
	}
	return netip.AddrPortFrom(p.Addr.Addr(), port)
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

// flush polls the state machine and sends, in batches. It returns true if
// it stopped with more to send.
func (e *Endpoint) flush(now time.Duration) bool {
	o := &e.owner
	table := e.peers.Load()
	for range txRounds {
		n := 0
		// tries bounds the loop even if every datagram were dropped.
		for tries := 0; n < txBatch && tries < 4*txBatch; tries++ {
			buf := o.txBufs[n]
			tx, ok := e.ep.Poll(now, buf[maxOverhead:maxOverhead:maxOverhead+o.room])
			if !ok {
				break
			}
			p := table.byID[tx.Peer]
			if p == nil {
				e.ctr.noSocket.Add(1)
				continue
			}
			wire := buf[maxOverhead : maxOverhead+tx.Len]
			if p.Sealer != nil {
				start := maxOverhead - p.Sealer.Prefix()
				out, err := p.Sealer.Seal(buf[start:start], wire)
				if err != nil {
					e.ctr.sealErr.Add(1)
					continue
				}
				wire = out
			}
			var s *sock
			var dst netip.AddrPort
			if tx.Reply {
				s, dst = e.listen, e.replyAddr(p, tx.Entropy)
			} else {
				s, dst = e.pathSock(now, p, &tx), p.Addr
				if s == nil {
					e.ctr.noSocket.Add(1)
					continue
				}
			}
			s.out = append(s.out, udp.Message{Buf: wire, N: len(wire), Addr: dst})
			if !s.dirty {
				s.dirty = true
				o.dirty = append(o.dirty, s)
			}
			n++
		}
		e.send()
		if n < txBatch {
			return false
		}
	}
	return true
}

// send writes every socket's pending datagrams.
func (e *Endpoint) send() {
	o := &e.owner
	for _, s := range o.dirty {
		sent, err := s.c.WriteBatch(s.out)
		var bytes uint64
		for _, m := range s.out[:sent] {
			bytes += uint64(m.N)
		}
		e.ctr.txDatagrams.Add(uint64(sent))
		e.ctr.txBytes.Add(bytes)
		if err != nil {
			// The protocol treats these as lost and recovers; a socket
			// error is no reason to stop the others.
			e.ctr.txErr.Add(uint64(len(s.out) - sent))
			e.log.Debug("netio: send failed", "local", s.c.LocalAddr(), "err", err)
		}
		clear(s.out) // drop the references to the buffers
		s.out = s.out[:0]
		s.dirty = false
	}
	o.dirty = o.dirty[:0]
}

// pathSock returns the socket a non-reply Transmit leaves from, opening it
// on first use, and counts the (connection, path) as its user.
func (e *Endpoint) pathSock(now time.Duration, p *Peer, tx *metaroce.Transmit) *sock {
	o := &e.owner
	k := pathKey{p.ID, tx.Entropy}
	s := o.paths[k]
	if s == nil {
		if len(o.paths) >= e.cfg.MaxPathSockets {
			e.reap(now, true)
			if len(o.paths) >= e.cfg.MaxPathSockets {
				return nil
			}
		}
		local := e.cfg.Listen.Addr()
		if n := len(e.cfg.PlaneAddrs); n > 0 {
			local = e.cfg.PlaneAddrs[tx.Path%n]
		}
		var err error
		s, err = e.openSock(netip.AddrPortFrom(local, 0), false, p.ID, tx.Entropy)
		if err != nil {
			e.log.Warn("netio: cannot open path socket", "local", local, "err", err)
			return nil
		}
		s.idleSince = now
		o.paths[k] = s
	}
	if tx.Conn != nil {
		e.ref(now, tx.Conn.ID(), p.ID, tx.Path, tx.Entropy, s)
	}
	return s
}

// ref records that path of conn now sends with entropy from s.
func (e *Endpoint) ref(now time.Duration, conn uint64, peer PeerID, path int, entropy uint16, s *sock) {
	o := &e.owner
	cp := o.conns[conn]
	if cp == nil {
		cp = &connPaths{peer: peer}
		o.conns[conn] = cp
	}
	if path >= len(cp.ent) {
		if path >= 1<<16 {
			return
		}
		cp.ent = append(cp.ent, make([]uint16, path+1-len(cp.ent))...)
	}
	old := cp.ent[path]
	if old == entropy {
		return
	}
	if old != 0 {
		e.unref(now, pathKey{peer, old})
	}
	cp.ent[path] = entropy
	s.refs++
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
