//go:build linux

// Package netiotest is an in-memory UDP network for testing netio's driver
// without the kernel, in the spirit of wireguard-go's conn/bindtest: a
// Network hands out Sockets (Network.Listen; netio.BindOf(n.Listen) is a
// netio.Config.Bind) that carry datagrams
// to each other through per-socket queues, in order, with their ECN
// codepoints, and lose nothing unless a Filter says so or a receive queue
// is full. Any IP address can be bound, so that one test can have many
// hosts; ports are given out in sequence from 40000.
//
// Delivery is synchronous: when WriteBatch returns, its datagrams are in
// their receivers' queues (or dropped). What is left timing-dependent is
// the goroutines of the code under test, not the network.
//
// It does not import netio (netio's own tests use it); *Socket satisfies
// netio.Socket.
package netiotest

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"syscall"

	"github.com/mrgw/mrgw/internal/ecn"
	"github.com/mrgw/mrgw/netio/udp"
)

// DefaultQueue is a socket's receive queue in datagrams.
const DefaultQueue = 4096

// firstPort is the first ephemeral port given out.
const firstPort = 40000

// Datagram is one datagram in flight, as a Filter sees it.
type Datagram struct {
	From, To netip.AddrPort
	Data     []byte // the filter may change the bytes (not their length)
	ECN      ecn.Codepoint
}

// Network is an in-memory network. The zero value is not usable: call
// NewNetwork.
type Network struct {
	mu    sync.Mutex
	socks map[netip.AddrPort]*Socket
	next  map[netip.Addr]uint16 // next ephemeral port per IP
	// filter, if set, sees every datagram sent to a bound socket, before
	// it is queued; returning false drops it. It may mark it (ECN).
	filter func(d *Datagram) bool
	// Lend makes sockets lend datagrams from their own memory on
	// ReadBatchBorrow (as udp.Conn does with GRO) instead of copying them
	// into the reader's buffers. Set it before binding.
	Lend bool
	// Queue is each socket's receive queue in datagrams [DefaultQueue].
	// Set it before binding.
	Queue int
	// Unroutable counts datagrams sent to an address nobody is bound to.
	unroutable uint64
	// sendLimit, if set, refuses larger datagrams with EMSGSIZE, as a
	// DF socket refuses what exceeds its interface's MTU.
	sendLimit int
}

// SetSendLimit makes WriteBatch refuse datagrams larger than n bytes
// with EMSGSIZE (0: no limit), stopping at the first, as sendmmsg does.
func (n *Network) SetSendLimit(limit int) {
	n.mu.Lock()
	n.sendLimit = limit
	n.mu.Unlock()
}

// NewNetwork returns an empty network.
func NewNetwork() *Network {
	return &Network{socks: map[netip.AddrPort]*Socket{}, next: map[netip.Addr]uint16{}}
}

// SetFilter installs f (nil: none); see Datagram.
func (n *Network) SetFilter(f func(d *Datagram) bool) {
	n.mu.Lock()
	n.filter = f
	n.mu.Unlock()
}

// Unroutable is the count of datagrams sent to addresses nobody is bound
// to (they are dropped, as UDP drops them).
func (n *Network) Unroutable() uint64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.unroutable
}

// ErrAddrInUse is returned when binding an address already bound.
var ErrAddrInUse = errors.New("netiotest: address already in use")

// Listen binds a socket on local (port 0: the next free port of that IP).
// IPv4-mapped addresses are unmapped. Options.ECN and NotECT set the
// default codepoint as on a udp.Conn; the other options are ignored.
func (n *Network) Listen(local netip.AddrPort, o udp.Options) (*Socket, error) {
	if !local.Addr().IsValid() {
		return nil, fmt.Errorf("netiotest: listen %v: invalid address", local)
	}
	local = netip.AddrPortFrom(local.Addr().Unmap(), local.Port())
	n.mu.Lock()
	defer n.mu.Unlock()
	if local.Port() == 0 {
		ip := local.Addr()
		p := n.next[ip]
		if p == 0 {
			p = firstPort
		}
		for n.socks[netip.AddrPortFrom(ip, p)] != nil {
			p++
			if p == 0 {
				return nil, fmt.Errorf("netiotest: listen %v: no free port", local)
			}
		}
		n.next[ip] = p + 1
		local = netip.AddrPortFrom(ip, p)
	}
	if n.socks[local] != nil {
		return nil, fmt.Errorf("netiotest: listen %v: %w", local, ErrAddrInUse)
	}
	def := o.ECN
	if def == ecn.NotECT {
		def = ecn.ECT0
	}
	if o.NotECT {
		def = ecn.NotECT
	}
	q := n.Queue
	if q <= 0 {
		q = DefaultQueue
	}
	s := &Socket{net: n, local: local, defECN: def, lend: n.Lend, limit: q}
	s.cond = sync.NewCond(&s.mu)
	n.socks[local] = s
	return s, nil
}

// Socket is one bound socket of a Network. It is safe for concurrent use.
type Socket struct {
	net    *Network
	local  netip.AddrPort
	defECN ecn.Codepoint
	lend   bool
	limit  int

	mu     sync.Mutex
	cond   *sync.Cond
	queue  []packet
	closed bool
	stats  udp.Stats
	// QueueDrops: datagrams dropped because the queue was full.
	queueDrops uint64
}

type packet struct {
	data []byte
	from netip.AddrPort
	cp   ecn.Codepoint
}

// LocalAddr returns the bound address.
func (s *Socket) LocalAddr() netip.AddrPort { return s.local }

// Close unbinds the socket; blocked and later reads and writes return
// net.ErrClosed.
func (s *Socket) Close() error {
	s.net.mu.Lock()
	if s.net.socks[s.local] == s {
		delete(s.net.socks, s.local)
	}
	s.net.mu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return net.ErrClosed
	}
	s.closed = true
	s.queue = nil
	s.cond.Broadcast()
	return nil
}

// Stats returns the socket's counters (GSO and GRO are never on).
func (s *Socket) Stats() udp.Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}

// QueueDrops is the count of datagrams dropped because the receive queue
// was full.
func (s *Socket) QueueDrops() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.queueDrops
}

// ReadBatchBorrow blocks until at least one datagram is queued and fills
// msgs[:n]. Without Network.Lend each datagram is copied into its
// Message's Buf (longer ones are truncated and counted); with it, Buf is
// pointed at the socket's copy (capacity ending with the datagram; the
// socket never reuses it).
func (s *Socket) ReadBatchBorrow(msgs []udp.Message) (int, error) {
	if len(msgs) == 0 {
		return 0, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.queue) == 0 && !s.closed {
		s.cond.Wait()
	}
	if s.closed {
		return 0, fmt.Errorf("netiotest: read %v: %w", s.local, net.ErrClosed)
	}
	n := min(len(msgs), len(s.queue))
	for i, p := range s.queue[:n] {
		m := &msgs[i]
		if s.lend {
			m.Buf = p.data[:len(p.data):len(p.data)]
			m.N = len(p.data)
		} else {
			m.N = copy(m.Buf, p.data)
			if m.N < len(p.data) {
				s.stats.Truncated++
			}
		}
		m.Addr, m.ECN = p.from, p.cp
		s.stats.DatagramsIn++
		s.stats.BytesIn += uint64(m.N)
		if p.cp == ecn.CE {
			s.stats.CEIn++
		}
	}
	clear(s.queue[:n])
	s.queue = s.queue[n:]
	return n, nil
}

// WriteBatch delivers msgs in order and returns how many were sent (all,
// unless the socket is closed). Datagrams to unbound addresses, dropped by
// the filter or by a full queue count as sent, as UDP's do.
func (s *Socket) WriteBatch(msgs []udp.Message) (int, error) {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return 0, fmt.Errorf("netiotest: write from %v: %w", s.local, net.ErrClosed)
	}
	var bytes uint64
	s.net.mu.Lock()
	limit := s.net.sendLimit
	s.net.mu.Unlock()
	for i := range msgs {
		m := &msgs[i]
		if limit > 0 && m.N > limit {
			s.mu.Lock()
			s.stats.DatagramsOut += uint64(i)
			s.stats.BytesOut += bytes
			s.mu.Unlock()
			return i, fmt.Errorf("netiotest: write from %v: %w", s.local, syscall.EMSGSIZE)
		}
		cp := m.ECN
		if cp == ecn.NotECT {
			cp = s.defECN
		}
		s.net.deliver(s.local, m.Addr, m.Buf[:m.N], cp)
		bytes += uint64(m.N)
	}
	s.mu.Lock()
	s.stats.DatagramsOut += uint64(len(msgs))
	s.stats.BytesOut += bytes
	s.mu.Unlock()
	return len(msgs), nil
}

// deliver queues a copy of b at to.
func (n *Network) deliver(from, to netip.AddrPort, b []byte, cp ecn.Codepoint) {
	to = netip.AddrPortFrom(to.Addr().Unmap(), to.Port())
	n.mu.Lock()
	dst, filter := n.socks[to], n.filter
	if dst == nil {
		n.unroutable++
	}
	n.mu.Unlock()
	if dst == nil {
		return
	}
	d := Datagram{From: from, To: to, Data: append([]byte(nil), b...), ECN: cp}
	if filter != nil && !filter(&d) {
		return
	}
	dst.mu.Lock()
	defer dst.mu.Unlock()
	if dst.closed {
		return
	}
	if len(dst.queue) >= dst.limit {
		dst.queueDrops++
		return
	}
	dst.queue = append(dst.queue, packet{data: d.Data, from: from, cp: d.ECN})
	dst.cond.Signal()
}

// Inject queues b at to as if sent from from (which need not be bound):
// a test's stand-in for a stranger on the network.
func (n *Network) Inject(from, to netip.AddrPort, b []byte, cp ecn.Codepoint) {
	n.deliver(from, to, b, cp)
}
