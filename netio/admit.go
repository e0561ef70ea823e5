//go:build linux

package netio

import (
	"net/netip"

	"github.com/mrgw/mrgw/metaroce"
)

// Sources: which peer a datagram comes from (resolve), who gets a peer slot
// on a listening socket (admit), and where replies to a peer go.

// replyDst is where replies to one (peer, port) go: the IP the port was
// seen from and the listening socket the datagrams arrived on.
type replyDst struct {
	ip netip.Addr
	s  *sock
}

// maxReplyIPs bounds the remembered reply addresses per peer.
const maxReplyIPs = 4096

// resolve attributes an unsealed datagram that matched a peer by IP only:
// to the peer of its connection if the state machine knows the connection,
// else, for an INIT that arrived on Listen, to a new peer if AcceptPeer
// admits the source, else to the peer that owns the IP (fallback: by its
// IP alone).
func (e *Endpoint) resolve(s *sock, src netip.AddrPort, pkt []byte, primary bool) (id PeerID, ok, fallback bool) {
	table := e.peers.Load()
	owner := table.byIP[src.Addr()]
	if owner != nil && owner.Sealer != nil {
		owner = nil
		for _, p := range table.shared[src.Addr()] {
			if p.Sealer == nil {
				owner = p
				break
			}
		}
	}
	_, t, conn, err := metaroce.Peek(pkt)
	if err == nil {
		if pid, ok := e.ep.ConnPeer(conn); ok {
			if p := table.byID[pid]; p != nil && p.Sealer == nil {
				return pid, true, false
			}
		}
		if t == metaroce.TypeInit && primary && e.cfg.AcceptPeer != nil && validInit(pkt) {
			if id, ok, _ := e.admit(s, src, pkt); ok {
				return id, true, false
			}
			// Answered with a RETRY, or refused: never the IP's other
			// peer's. An INIT from a new port is a new host (two host
			// processes on one machine); handed to the peer that owns
			// the IP, it replaced that host's connection: a refused
			// duplicate's retries took the live holder's name over
			// (gateway TestDuplicateEndpointRefused), and a neighbour's
			// restart stalled a transfer (loadtest/flood's shared-IP
			// repro).
			return 0, false, false
		}
	}
	if owner == nil {
		return 0, false, false
	}
	if e.owner.admitted[owner.ID] && owner.Addr != src {
		// An admitted peer (a host) is one address, not one IP: a
		// datagram of no connection it holds, from another port of its
		// IP, is another process's (a closed neighbour's late ACK).
		// Taken for this peer's, it cut a live host off (gateway
		// TestDuplicateEndpointRefused; loadtest/flood's shared-IP
		// repro).
		return 0, false, false
	}
	return owner.ID, true, true
}

// admit asks Config.AcceptPeer about an INIT from an unknown, unsealed
// source, after its cookie when cookies are on (cookie.go); pkt is the
// datagram. Anything but a valid INIT (validInit) is neither admitted nor
// answered: bad says the datagram had an INIT's type but is not one (a
// 12-byte "?? 03 ..." was taken for an INIT by its type byte alone, and
// answered with a 24-byte RETRY or admitted).
func (e *Endpoint) admit(s *sock, src netip.AddrPort, pkt []byte) (id PeerID, ok, bad bool) {
	if p := e.peers.Load().byAddr[src]; p != nil {
		// Registered meanwhile; if it seals, this datagram was not opened.
		return p.ID, p.Sealer == nil, false
	}
	_, t, conn, err := metaroce.Peek(pkt)
	if err != nil || t != metaroce.TypeInit {
		return 0, false, false
	}
	if !validInit(pkt) {
		return 0, false, true
	}
	if c := e.cfg.Cookies; c != nil {
		_, cookie := splitCookie(pkt)
		switch {
		case cookie != nil && c.valid(cookie, src.Addr(), conn):
		case cookie == nil && e.cfg.RequireCookie != nil && !e.cfg.RequireCookie():
		default:
			if cookie != nil {
				e.ctr.badCookies.Add(1)
			}
			// A valid INIT is at least RetryLen bytes: the answer
			// amplifies nothing (docs/PROTOCOL.md).
			var buf [RetryLen]byte
			if e.sendRaw(s, src, c.appendRetry(buf[:0], src.Addr(), conn)) {
				e.ctr.retriesSent.Add(1)
			}
			return 0, false, false
		}
	}
	id, ok = e.cfg.AcceptPeer(src)
	if !ok {
		return 0, false, false
	}
	if err := e.AddPeer(Peer{ID: id, Addr: src}); err != nil {
		e.log.Warn("netio: cannot admit peer", "src", src, "err", err)
		return 0, false, false
	}
	if len(e.owner.admitted) < e.cfg.MaxPeers {
		e.owner.admitted[id] = true
	}
	return id, true, false
}

// validInit reports whether pkt is an INIT the state machine would take
// (metaroce.DecodeHandshake: version, exact length, fields), with or
// without an admission cookie trailer (checked by admit). Never smaller
// than a RETRY.
func validInit(pkt []byte) bool {
	n, _ := splitCookie(pkt)
	var h metaroce.Handshake
	return metaroce.DecodeHandshake(pkt[:n], metaroce.TypeInit, &h) == nil
}

func (e *Endpoint) noteReplyIP(peer PeerID, src netip.AddrPort, s *sock) {
	if !s.listen {
		s = e.listen // replies leave from a listening socket
	}
	m := e.owner.replyIP[peer]
	if m == nil {
		m = map[uint16]replyDst{}
		e.owner.replyIP[peer] = m
	}
	if d, ok := m[src.Port()]; ok && d.ip == src.Addr() && d.s == s {
		return
	}
	if len(m) >= maxReplyIPs {
		clear(m)
	}
	m[src.Port()] = replyDst{ip: src.Addr(), s: s}
}

// replyAddr is where a reply to port of peer p goes, and from which
// socket: the IP that port was last seen from and the listening socket
// its datagrams arrived on, else the peer's listening IP from Listen.
func (e *Endpoint) replyAddr(p *Peer, port uint16) (*sock, netip.AddrPort) {
	if m := e.owner.replyIP[p.ID]; m != nil {
		if d, ok := m[port]; ok {
			return d.s, netip.AddrPortFrom(d.ip, port)
		}
	}
	return e.listen, netip.AddrPortFrom(p.Addr.Addr(), port)
}

// forgetRemoved drops the owner's records of peers no longer registered.
func (e *Endpoint) forgetRemoved() {
	table := e.peers.Load()
	for id := range e.owner.cookies {
		if table.byID[id] == nil {
			delete(e.owner.cookies, id)
		}
	}
	for id := range e.owner.lastInit {
		if table.byID[id] == nil {
			delete(e.owner.lastInit, id)
		}
	}
	for id := range e.owner.admitted {
		if table.byID[id] == nil {
			delete(e.owner.admitted, id)
		}
	}
	for id := range e.owner.replyIP {
		if table.byID[id] == nil {
			delete(e.owner.replyIP, id)
		}
	}
}
