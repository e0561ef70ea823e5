//go:build linux

package netio

import (
	"maps"
	"net/netip"
	"slices"
)

// peerTable is an immutable snapshot of the peers: readers look sources up
// in it without a lock; updates replace it.
type peerTable struct {
	byID   map[PeerID]*Peer
	byAddr map[netip.AddrPort]*Peer // exact listening addresses
	byIP   map[netip.Addr]*Peer     // any port from these addresses
	// shared lists, for an IP claimed by more than one peer, every such
	// peer (several gateways behind one emulator or NAT address, several
	// host processes on one machine).
	shared map[netip.Addr][]*Peer
}

func (t *peerTable) clone() *peerTable {
	return &peerTable{
		byID:   maps.Clone(t.byID),
		byAddr: maps.Clone(t.byAddr),
		byIP:   maps.Clone(t.byIP),
		shared: maps.Clone(t.shared),
	}
}

// addShared records that p claims ip too.
func (t *peerTable) addShared(ip netip.Addr, p *Peer) {
	if t.shared == nil {
		t.shared = map[netip.Addr][]*Peer{}
	}
	l := t.shared[ip]
	if slices.Contains(l, p) {
		return
	}
	t.shared[ip] = append(slices.Clip(l), p)
}

// rebuildShared recomputes shared from byID.
func (t *peerTable) rebuildShared() {
	t.shared = nil
	count := map[netip.Addr][]*Peer{}
	for _, p := range t.byID {
		for _, a := range p.ips() {
			if !slices.Contains(count[a], p) {
				count[a] = append(count[a], p)
			}
		}
	}
	for a, l := range count {
		if len(l) > 1 {
			if t.shared == nil {
				t.shared = map[netip.Addr][]*Peer{}
			}
			t.shared[a] = l
		}
	}
}

// ips lists every IP a peer claims.
func (p *Peer) ips() []netip.Addr {
	out := []netip.Addr{p.Addr.Addr()}
	for _, d := range p.Dests {
		out = append(out, d.Addr())
	}
	for _, a := range p.Sources {
		out = append(out, a.Unmap())
	}
	return out
}

func (t *peerTable) with(p Peer) *peerTable {
	n := t.without(p.ID)
	if n.byID == nil {
		n.byID = map[PeerID]*Peer{}
		n.byAddr = map[netip.AddrPort]*Peer{}
		n.byIP = map[netip.Addr]*Peer{}
	}
	p.Addr = netip.AddrPortFrom(p.Addr.Addr().Unmap(), p.Addr.Port())
	p.Sources = slices.Clone(p.Sources)
	p.Dests = slices.Clone(p.Dests)
	for i, d := range p.Dests {
		p.Dests[i] = netip.AddrPortFrom(d.Addr().Unmap(), d.Port())
	}
	p.Locals = slices.Clone(p.Locals)
	pp := &p
	n.byID[p.ID] = pp
	n.byAddr[p.Addr] = pp
	for _, d := range p.Dests {
		if _, ok := n.byAddr[d]; !ok {
			n.byAddr[d] = pp
		}
	}
	// The first peer registered for an IP keeps byIP; the others are
	// listed in shared, and the reader tells them apart (see check).
	for _, a := range pp.ips() {
		if q, ok := n.byIP[a]; !ok {
			n.byIP[a] = pp
		} else if q != pp {
			n.addShared(a, q)
			n.addShared(a, pp)
		}
	}
	return n
}

func (t *peerTable) without(id PeerID) *peerTable {
	n := t.clone()
	old, ok := n.byID[id]
	if !ok {
		return n
	}
	delete(n.byID, id)
	for k, v := range n.byAddr {
		if v == old {
			delete(n.byAddr, k)
		}
	}
	for k, v := range n.byIP {
		if v == old {
			delete(n.byIP, k)
		}
	}
	// Give the freed IPs to any remaining peer that claims them.
	for _, p := range n.byID {
		for _, a := range p.ips() {
			if _, ok := n.byIP[a]; !ok {
				n.byIP[a] = p
			}
		}
	}
	if old != nil {
		n.rebuildShared()
	}
	return n
}

// dest is where path's non-reply datagrams to p go.
func (p *Peer) dest(path int) netip.AddrPort {
	if n := len(p.Dests); n > 0 {
		return p.Dests[path%n]
	}
	return p.Addr
}
