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
}

func (t *peerTable) clone() *peerTable {
	return &peerTable{
		byID:   maps.Clone(t.byID),
		byAddr: maps.Clone(t.byAddr),
		byIP:   maps.Clone(t.byIP),
	}
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
	pp := &p
	n.byID[p.ID] = pp
	n.byAddr[p.Addr] = pp
	// The first peer registered for an IP keeps it: two peers behind one
	// address are told apart by their exact listening address only.
	if _, ok := n.byIP[p.Addr.Addr()]; !ok {
		n.byIP[p.Addr.Addr()] = pp
	}
	for _, a := range p.Sources {
		if _, ok := n.byIP[a.Unmap()]; !ok {
			n.byIP[a.Unmap()] = pp
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
		for _, a := range append([]netip.Addr{p.Addr.Addr()}, p.Sources...) {
			if _, ok := n.byIP[a.Unmap()]; !ok {
				n.byIP[a.Unmap()] = p
			}
		}
	}
	return n
}

// lookup finds the peer a datagram from src belongs to.
func (t *peerTable) lookup(src netip.AddrPort) *Peer {
	if p, ok := t.byAddr[src]; ok {
		return p
	}
	return t.byIP[src.Addr()]
}
