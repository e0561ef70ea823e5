//go:build linux

package netio

import (
	"net/netip"
	"time"

	"golang.org/x/sys/cpu"

	"github.com/mrgw/mrgw/metaroce"
	"github.com/mrgw/mrgw/netio/udp"
)

// Path sockets: opened per (peer, entropy), shared by the connections that
// use them, reference-counted and reaped when idle.

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
	// quietReads counts the reads in a row that used at most half of
	// their batch (see rxBatch.max).
	quietReads int
	// free holds the batches the reader may fill; the owner returns them.
	free chan *rxBatch
	stop chan struct{} // closed when the socket is retired

	// shard is the sender goroutine that writes this socket's datagrams
	// (see tx.go); out and dirty belong to that sender.
	shard int

	// The sender's fields sit on cache lines of their own: it writes them
	// for every datagram of its batch while the owner reads shard and plane
	// for every datagram it polls, and on one line the two cores passed it
	// back and forth (the loads of shard and plane in add, queued and the
	// tx tally were 1% of the datapath tunnel's CPU at MTU 1400).
	_     cpu.CacheLinePad
	out   []udp.Message // datagrams waiting for the next WriteBatch
	dirty bool
	_     cpu.CacheLinePad

	// Owner goroutine only.
	refs      int           // (connection, path) pairs sending from it
	idleSince time.Duration // when refs last dropped to 0
}

type pathKey struct {
	peer    PeerID
	entropy uint16
}

// sharedPeer is the peer of the pool's keys (Config.SharePaths): no peer
// has this id (peer ids of hosts and gateways are small).
const sharedPeer = ^PeerID(0)

// keyOf is the path socket key of (peer, entropy): its own socket, or
// for a peer that shares them the pool's socket its entropy picks.
func (e *Endpoint) keyOf(peer PeerID, entropy uint16) pathKey {
	if n := e.cfg.SharedPathSockets; n > 0 && e.cfg.SharePaths != nil && e.cfg.SharePaths(peer) {
		return pathKey{sharedPeer, 1 + entropy%uint16(min(n, 1<<16-1))}
	}
	return pathKey{peer, entropy}
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
		b := &rxBatch{s: s, max: batch}
		b.grow(e.rxBufLen)
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
	k := e.keyOf(p.ID, tx.Entropy)
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
		s, err = e.openSock(netip.AddrPortFrom(local, 0), false, false, k.peer, k.entropy, plane)
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
		e.unref(now, e.keyOf(peer, old))
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
			e.unref(now, e.keyOf(cp.peer, ent))
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
	if s := e.owner.paths[e.keyOf(peer, entropy)]; s != nil {
		return s.c.LocalAddr(), true
	}
	return netip.AddrPort{}, false
}
