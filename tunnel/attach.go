//go:build linux

package tunnel

import (
	"fmt"
	"log/slog"
	"net/netip"

	"github.com/mrgw/mrgw/metaroce"
	"github.com/mrgw/mrgw/netio"
	"github.com/mrgw/mrgw/netio/seal"
	"github.com/mrgw/mrgw/tunnel/control"
)

// AttachConfig configures Attach.
type AttachConfig struct {
	// ID is the peer's id on the shared endpoint.
	ID metaroce.PeerID
	// Dests are the peer's data-plane addresses, one per plane (path i
	// sends to Dests[i mod n]). Empty: the planes it announced in Hello.
	Dests []netip.AddrPort
	// Locals binds path i's sockets to Locals[i mod n] (our plane IPs).
	Locals []netip.Addr
	// Suite is the AEAD (default AES-128-GCM); both sides must agree.
	Suite seal.Suite
	// RekeyAfter: see Config.RekeyAfter.
	RekeyAfter uint64
	// Router, if set, delivers the session's control events to the Peer.
	Router *Router
	// Logger: nil discards.
	Logger *slog.Logger
}

// Peer is a peer gateway attached, sealed, to an endpoint the caller owns
// and shares with other peers (a gateway runs one endpoint for its hosts
// and all its peer gateways, so that relaying between them never leaves
// the endpoint's goroutine). The session's keys seal and open every
// datagram exchanged with the peer and rotate with the session, exactly as
// for a Tunnel; the endpoint, its connections and their lifetime stay the
// caller's.
type Peer struct {
	link
	id metaroce.PeerID
	ep *netio.Endpoint
}

// Attach registers the peer of sess on ep as a sealed peer with id
// cfg.ID, replacing any peer with that id. Close removes it.
func Attach(sess *control.Session, ep *netio.Endpoint, cfg AttachConfig) (*Peer, error) {
	info := sess.Peer()
	dests := cfg.Dests
	if len(dests) == 0 {
		dests = info.Planes
	}
	if len(dests) == 0 {
		return nil, fmt.Errorf("tunnel: peer %s announced no data-plane address and none was given", info.Name)
	}
	p := &Peer{id: cfg.ID, ep: ep}
	if err := p.open(sess, cfg.Router, cfg.Logger, cfg.Suite, cfg.RekeyAfter); err != nil {
		return nil, err
	}
	np := netio.Peer{ID: cfg.ID, Addr: dests[0], Dests: dests, Locals: cfg.Locals, Sealer: p.keys}
	if err := ep.AddPeer(np); err != nil {
		p.abort()
		return nil, err
	}
	return p, nil
}

// ID returns the peer's id on the endpoint.
func (p *Peer) ID() metaroce.PeerID { return p.id }

// SendEpoch is the epoch our datagrams are sealed under; Rotations counts
// switches of the sending key.
func (p *Peer) SendEpoch() (epoch uint32, rotations uint64) {
	return p.keys.sendEpoch.Load(), p.keys.rotations.Load()
}

// Close removes the peer from the endpoint (its datagrams are unknown from
// then on) and stops a rotation in progress. The session is the caller's.
func (p *Peer) Close() error {
	if p.shut() {
		p.ep.RemovePeer(p.id)
	}
	return nil
}
