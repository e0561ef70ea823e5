//go:build linux

package netio

import (
	"net/netip"

	"github.com/mrgw/mrgw/metaroce"
)

// Handshake retries: a peer's RETRY and the INIT sent again with its cookie.

// sentInit is an INIT as it left: its bytes, socket and destination.
type sentInit struct {
	pkt [metaroce.InitLen]byte
	s   *sock
	dst netip.AddrPort
}

// onRetry takes a peer's RETRY: its cookie goes on every INIT to the peer
// from now on, and the last INIT is sent again with it at once (else it
// would wait for the handshake's retransmission timer).
func (e *Endpoint) onRetry(p *Peer, pkt []byte) {
	e.ctr.retriesReceived.Add(1)
	ck := cookieOf(pkt)
	e.owner.cookies[p.ID] = ck
	in, ok := e.owner.lastInit[p.ID]
	if !ok {
		return
	}
	select {
	case <-in.s.stop:
		return // its socket is gone; the retransmission carries the cookie
	default:
	}
	var d [initWithCookie]byte
	copy(d[:], in.pkt[:])
	copy(d[metaroce.InitLen:], ck[:])
	e.sendRaw(in.s, in.dst, d[:])
}

// sendRaw queues a datagram that is not the state machine's (a RETRY, an
// INIT sent again with its cookie) on socket s to dst, unsealed. It
// reports false, and drops it, when no send buffer is free.
func (e *Endpoint) sendRaw(s *sock, dst netip.AddrPort, pkt []byte) bool {
	if !e.room() {
		return false
	}
	t := &e.owner.tx
	buf := t.spare[len(t.spare)-1]
	t.spare = t.spare[:len(t.spare)-1]
	n := copy(buf[maxOverhead:], pkt)
	e.queue(txItem{buf: buf, n: n, s: s, dst: dst})
	return true
}
