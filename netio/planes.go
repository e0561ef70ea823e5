//go:build linux

package netio

import (
	"errors"
	"math/bits"
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

// planeTally adds up a flush's or a received batch's datagrams per plane
// for one peer, so that the planes' counters (a map lookup and two atomic
// adds) are updated once per plane at the end, not per datagram: a
// gateway sprays its paths round robin over its planes, so consecutive
// datagrams alternate between planes, and a tally of runs of one plane
// paid the lookup and the adds for every datagram. A change of peer
// flushes. Owner goroutine only; the owner keeps one for sending and one
// for receiving (ownerState), so that its arrays are not zeroed per call.
type planeTally struct {
	peer    PeerID
	touched uint64 // bit i: n[i] > 0 (MaxPlanes is 64)
	n       [MaxPlanes]uint64
	bytes   [MaxPlanes]uint64
	rx      bool
}

// touched has a bit per plane.
var _ [64 - MaxPlanes]struct{}

// add counts one datagram of bytes on plane (one of no plane, or of an
// index past MaxPlanes, is counted in Stats only).
func (t *planeTally) add(e *Endpoint, peer PeerID, plane, bytes int) {
	if uint(plane) >= MaxPlanes {
		return
	}
	if t.touched != 0 && t.peer != peer {
		t.flush(e)
	}
	t.peer = peer
	t.touched |= 1 << uint(plane)
	t.n[plane]++
	t.bytes[plane] += uint64(bytes)
}

// flush adds what was tallied to the planes' counters and starts over.
func (t *planeTally) flush(e *Endpoint) {
	if t.touched == 0 {
		return
	}
	c := e.planeCounters(t.peer)
	for m := t.touched; m != 0; m &= m - 1 {
		i := bits.TrailingZeros64(m)
		if c != nil {
			if t.rx {
				c[i].rx.Add(t.n[i])
				c[i].rxBytes.Add(t.bytes[i])
			} else {
				c[i].tx.Add(t.n[i])
				c[i].txBytes.Add(t.bytes[i])
			}
		}
		t.n[i], t.bytes[i] = 0, 0
	}
	t.touched = 0
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
