//go:build linux

package netio

import (
	"errors"
	"net"
	"net/netip"
	"time"

	"github.com/mrgw/mrgw/internal/ecn"
	"github.com/mrgw/mrgw/netio/udp"
)

// The reader goroutines: one per socket, reading batches and opening them
// before the owner sees them.

// rxBatch is one ReadBatch worth of datagrams, passed from a reader to the
// owner and back.
type rxBatch struct {
	s    *sock
	msgs []udp.Message
	bufs [][]byte // the batch's own buffers, one per message
	ents []rxEnt  // the datagrams that passed the reader's checks
	n    int
	// max is the most datagrams one read takes. A batch starts with room
	// for one and grows (grow) when a read fills it, and shrinks again
	// (shrink) once rxShrinkAfter reads in a row have used at most half
	// of their batch: a socket that gets a datagram at a time (an idle
	// host's PINGs and ACKs) holds a buffer per batch, a busy one reaches
	// max within a few reads, and one that was only behind for a while (a
	// starved process) does not keep what the backlog made.
	max int
}

// rxShrinkAfter is how many reads in a row that used at most half of
// their batch make the reader shrink the batches it takes.
const rxShrinkAfter = 16

// grow doubles the batch's room for datagrams, up to max.
func (b *rxBatch) grow(bufLen int) {
	for n := min(max(2*len(b.bufs), 1), b.max); len(b.bufs) < n; {
		b.bufs = append(b.bufs, make([]byte, bufLen))
	}
	b.msgs = append(b.msgs, make([]udp.Message, len(b.bufs)-len(b.msgs))...)
	b.ents = append(b.ents, make([]rxEnt, len(b.bufs)-len(b.ents))...)
}

// shrink halves the batch's room, dropping the buffers beyond it.
func (b *rxBatch) shrink() {
	k := max(len(b.bufs)/2, 1)
	clear(b.bufs[k:])
	clear(b.msgs[k:])
	clear(b.ents[k:])
	b.bufs, b.msgs, b.ents = b.bufs[:k], b.msgs[:k], b.ents[:k]
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
		if s.quietReads >= rxShrinkAfter && len(b.bufs) > 1 {
			b.shrink()
		}
		for i := range b.msgs {
			b.msgs[i].Buf = b.bufs[i]
		}
		n, err := s.c.ReadBatchBorrow(b.msgs)
		if err == nil {
			switch {
			case n == len(b.bufs) && n < b.max:
				b.grow(e.rxBufLen)
				s.quietReads = 0
			case 2*n <= len(b.bufs):
				s.quietReads++
			default:
				s.quietReads = 0
			}
		}
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
