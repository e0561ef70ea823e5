//go:build linux

package chaos

import (
	"errors"
	"io"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
)

// gossipRelay stands in front of one gateway's gossip socket: the gateway
// advertises the relay's address (gossip.advertise) and every other
// gateway's seeds point at relays, so all gossip to the gateway, UDP and
// TCP, crosses this process and can be cut.
//
// A partition drops the UDP datagrams that come from a gateway of another
// region (memberlist sends UDP from its bound socket, so the source IP
// names the sender: each gateway has its own IP) and refuses, while it
// lasts, every TCP connection and closes those open (memberlist dials TCP
// from an unbound socket, so on loopback every connection comes from
// 127.0.0.1 and its region cannot be told; TCP carries the push/pull state
// exchange and the fallback pings). Gossip within a region therefore keeps
// its UDP probes during a partition, not its TCP push/pull: a gateway pair
// still sees each other alive, and the regions see each other die.
type gossipRelay struct {
	region   string         // region of the gateway behind the relay
	target   netip.AddrPort // the gateway's gossip.bind
	addr     netip.AddrPort // the relay's address (UDP and TCP)
	cut      *atomic.Bool   // the partition switch shared by all relays
	regionOf func(netip.Addr) string

	udp *net.UDPConn
	out *net.UDPConn
	tcp *net.TCPListener

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	done  bool

	forwarded, dropped, refused atomic.Uint64
	wg                          sync.WaitGroup
}

// newGossipRelay listens on ip (a free port for both UDP and TCP) and
// forwards to target.
func newGossipRelay(ip netip.Addr, region string, target netip.AddrPort, cut *atomic.Bool, regionOf func(netip.Addr) string) (*gossipRelay, error) {
	r := &gossipRelay{region: region, target: target, cut: cut, regionOf: regionOf, conns: map[net.Conn]struct{}{}}
	var err error
	for range 64 {
		r.udp, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(ip, 0)))
		if err != nil {
			return nil, err
		}
		a := r.udp.LocalAddr().(*net.UDPAddr).AddrPort()
		r.tcp, err = net.ListenTCP("tcp", net.TCPAddrFromAddrPort(a))
		if err == nil {
			r.addr = a
			break
		}
		r.udp.Close()
	}
	if r.tcp == nil {
		return nil, errors.New("chaos: no free port for a gossip relay")
	}
	if r.out, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(ip, 0))); err != nil {
		r.udp.Close()
		r.tcp.Close()
		return nil, err
	}
	r.wg.Add(3)
	go r.serveUDP()
	go r.drainOut()
	go r.serveTCP()
	return r, nil
}

// serveUDP forwards datagrams to the gateway unless the partition is on
// and the sender is in another region.
func (r *gossipRelay) serveUDP() {
	defer r.wg.Done()
	buf := make([]byte, 65536)
	for {
		n, from, err := r.udp.ReadFromUDPAddrPort(buf)
		if err != nil {
			return
		}
		if r.cut.Load() && r.regionOf(from.Addr().Unmap()) != r.region {
			r.dropped.Add(1)
			continue
		}
		if _, err := r.out.WriteToUDPAddrPort(buf[:n], r.target); err == nil {
			r.forwarded.Add(1)
		}
	}
}

// drainOut reads whatever the gateway sends back to the forwarding socket
// (memberlist answers to the addresses members advertise, not to sources,
// so this is nothing in practice) and drops it.
func (r *gossipRelay) drainOut() {
	defer r.wg.Done()
	buf := make([]byte, 65536)
	for {
		if _, _, err := r.out.ReadFromUDPAddrPort(buf); err != nil {
			return
		}
	}
}

func (r *gossipRelay) serveTCP() {
	defer r.wg.Done()
	for {
		c, err := r.tcp.Accept()
		if err != nil {
			return
		}
		if r.cut.Load() {
			r.refused.Add(1)
			c.Close()
			continue
		}
		up, err := net.Dial("tcp", r.target.String())
		if err != nil {
			c.Close()
			continue
		}
		if !r.track(c, up) {
			c.Close()
			up.Close()
			return
		}
		r.wg.Add(2)
		go r.pipe(c, up)
		go r.pipe(up, c)
	}
}

func (r *gossipRelay) track(cs ...net.Conn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done {
		return false
	}
	for _, c := range cs {
		r.conns[c] = struct{}{}
	}
	return true
}

func (r *gossipRelay) pipe(dst, src net.Conn) {
	defer r.wg.Done()
	_, _ = io.Copy(dst, src)
	dst.Close()
	src.Close()
	r.mu.Lock()
	delete(r.conns, dst)
	delete(r.conns, src)
	r.mu.Unlock()
}

// cutTCP closes the TCP connections open through the relay (a partition
// starts).
func (r *gossipRelay) cutTCP() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for c := range r.conns {
		c.Close()
	}
}

func (r *gossipRelay) Close() {
	r.mu.Lock()
	r.done = true
	r.mu.Unlock()
	r.udp.Close()
	r.out.Close()
	r.tcp.Close()
	r.cutTCP()
	r.wg.Wait()
}
