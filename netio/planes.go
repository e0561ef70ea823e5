//go:build linux

package netio

import (
	"errors"
	"sync"
	"sync/atomic"

	"github.com/mrgw/mrgw/netio/seal"
)

// Per-plane counters.
//
// A plane is an index: a listening socket of Config.ExtraListen is plane
// j for ExtraListen[j], and a path socket bound to Peer.Locals[i mod n]
// (or Config.PlaneAddrs[i mod n]) is plane i mod n. A gateway lists its
// planes in the same order in both, so the index names one plane. The
// primary listening socket and path sockets bound to Listen's address
// belong to no plane and are not counted here (Stats counts everything).

// MaxPlanes is the number of planes counted; sockets of larger indexes
// are counted in Stats only.
const MaxPlanes = 64

// PlaneStats are the datagrams exchanged with one peer over one plane.
type PlaneStats struct {
	Plane                int
	TxDatagrams, TxBytes uint64 // handed to a sender goroutine (plaintext bytes)
	RxDatagrams, RxBytes uint64 // delivered to the protocol (plaintext bytes)
}

// PlaneDrops are the datagrams a plane's listening socket dropped before
// the protocol saw them.
type PlaneDrops struct {
	Plane int
	// UnknownSource: from no known peer. OpenErrors: refused by a Sealer,
	// indexed by seal.Error (0: an error of another type).
	UnknownSource uint64
	OpenErrors    [seal.NumErrors]uint64
	// Kernel: dropped by the kernel, the socket's receive buffer full;
	// KernelErr says why Kernel could not be read (it is then 0).
	Kernel    uint64
	KernelErr error
}

type planeCounter struct{ tx, txBytes, rx, rxBytes atomic.Uint64 }

type peerPlanes [MaxPlanes]planeCounter

type dropCounters struct {
	unknown atomic.Uint64
	badInit atomic.Uint64 // INIT-typed, not a valid INIT (Stats.BadInits)
	open    [seal.NumErrors]atomic.Uint64
}

// planeSet holds the per-peer counters; the owner goroutine caches the
// pointers (ownerState.planes) so that counting takes no lock.
type planeSet struct {
	mu    sync.Mutex
	peers map[PeerID]*peerPlanes
}

// planeCounters returns peer's counters, creating them on first use; nil
// when MaxPeers peers already have counters. Owner goroutine only.
func (e *Endpoint) planeCounters(peer PeerID) *peerPlanes {
	o := &e.owner
	if c := o.planes[peer]; c != nil {
		return c
	}
	e.planeSet.mu.Lock()
	defer e.planeSet.mu.Unlock()
	if e.planeSet.peers == nil {
		e.planeSet.peers = map[PeerID]*peerPlanes{}
	}
	c := e.planeSet.peers[peer]
	if c == nil {
		if len(e.planeSet.peers) >= e.cfg.MaxPeers {
			return nil
		}
		c = new(peerPlanes)
		e.planeSet.peers[peer] = c
	}
	o.planes[peer] = c
	return c
}

// planeTally adds up a run of datagrams of one peer on one plane, so
// that the plane's counters (a map lookup and two atomic adds) are
// updated once per run and not per datagram: a batch's datagrams come in
// long runs of one peer and plane. Owner goroutine only.
type planeTally struct {
	peer     PeerID
	plane    int
	n, bytes uint64
	rx       bool
}

// add counts one datagram of bytes, flushing the run before it when the
// peer or plane changes.
func (t *planeTally) add(e *Endpoint, peer PeerID, plane, bytes int) {
	if t.n > 0 && (t.peer != peer || t.plane != plane) {
		t.flush(e)
	}
	t.peer, t.plane = peer, plane
	t.n++
	t.bytes += uint64(bytes)
}

// flush adds the run to its plane's counters.
func (t *planeTally) flush(e *Endpoint) {
	n, bytes := t.n, t.bytes
	t.n, t.bytes = 0, 0
	if n == 0 || t.plane < 0 || t.plane >= MaxPlanes {
		return
	}
	if c := e.planeCounters(t.peer); c != nil {
		if t.rx {
			c[t.plane].rx.Add(n)
			c[t.plane].rxBytes.Add(bytes)
		} else {
			c[t.plane].tx.Add(n)
			c[t.plane].txBytes.Add(bytes)
		}
	}
}

// PlaneStats returns the per-plane counters of peer, for the planes that
// carried something, in plane order. Safe for concurrent use.
func (e *Endpoint) PlaneStats(peer PeerID) []PlaneStats {
	e.planeSet.mu.Lock()
	c := e.planeSet.peers[peer]
	e.planeSet.mu.Unlock()
	if c == nil {
		return nil
	}
	var out []PlaneStats
	for i := range c {
		s := PlaneStats{Plane: i, TxDatagrams: c[i].tx.Load(), TxBytes: c[i].txBytes.Load(),
			RxDatagrams: c[i].rx.Load(), RxBytes: c[i].rxBytes.Load()}
		if s.TxDatagrams != 0 || s.RxDatagrams != 0 {
			out = append(out, s)
		}
	}
	return out
}

// PlaneDrops returns the drop counters of every plane listening socket
// (Config.ExtraListen), in plane order. It reads /proc (for the kernel's
// counts): call it about once a second, not per datagram. Safe for
// concurrent use.
func (e *Endpoint) PlaneDrops() []PlaneDrops {
	out := make([]PlaneDrops, 0, len(e.listens)-1)
	for _, s := range e.listens[1:] {
		d := PlaneDrops{Plane: s.plane, UnknownSource: s.drops.unknown.Load()}
		for i := range d.OpenErrors {
			d.OpenErrors[i] = s.drops.open[i].Load()
		}
		if k, ok := s.c.(kernelDropper); ok {
			d.Kernel, d.KernelErr = k.KernelDrops()
		} else {
			d.KernelErr = errNoKernelDrops
		}
		out = append(out, d)
	}
	return out
}

// countOpenError counts a Sealer's refusal on s's plane too.
func (s *sock) countOpenError(err error) {
	s.drops.open[openErrorIndex(err)].Add(1)
}

// ListenDrops are the datagrams the primary listening socket (Config.Listen:
// a gateway's LAN socket) dropped before the protocol saw them.
type ListenDrops struct {
	// UnknownSource: from no known peer, and not admitted by AcceptPeer.
	UnknownSource uint64
	// Truncated: longer than the receive buffer.
	Truncated uint64
	// Malformed: from no known peer, an INIT's type byte but not a valid
	// INIT (Stats.BadInits): neither answered nor admitted.
	Malformed uint64
	// Kernel: dropped by the kernel because the socket's receive buffer
	// was full; KernelErr says why Kernel could not be read (it is then 0).
	Kernel    uint64
	KernelErr error
}

// ListenDrops returns the drop counters of the primary listening socket.
// It reads /proc (for the kernel's count): call it about once a second,
// not per datagram. Safe for concurrent use.
func (e *Endpoint) ListenDrops() ListenDrops {
	d := ListenDrops{UnknownSource: e.listen.drops.unknown.Load(), Truncated: e.listen.c.Stats().Truncated,
		Malformed: e.listen.drops.badInit.Load()}
	if k, ok := e.listen.c.(kernelDropper); ok {
		d.Kernel, d.KernelErr = k.KernelDrops()
	} else {
		d.KernelErr = errNoKernelDrops
	}
	return d
}

// kernelDropper is the optional Socket method that reads the kernel's drop
// count (udp.Conn has it; in-memory test sockets do not).
type kernelDropper interface {
	KernelDrops() (uint64, error)
}

var errNoKernelDrops = errors.New("netio: this socket has no kernel drop count")
