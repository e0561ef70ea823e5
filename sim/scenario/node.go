// Package scenario runs the unchanged metaroce state machine on the
// deterministic simulator (package sim) and measures it: the reference
// scenarios behind `mrgw-lab sim` and docs/RESULTS.md.
//
// Everything here is deterministic: the same seed gives the same rows, bit
// for bit, so the targets are checked by ordinary tests.
//
// It drives metaroce, cc and pathmgr on sim; the daemon never imports it, and
// it imports no socket, tunnel, gateway or region package (internal/layering).
package scenario

import (
	"time"

	"github.com/mrgw/mrgw/metaroce"
	"github.com/mrgw/mrgw/sim"
)

// ListenPort is the UDP port every simulated endpoint listens on.
const ListenPort = 4791

// Node adapts a metaroce.Endpoint to sim.Endpoint: it maps peers to hosts
// and path entropy to UDP ports, and hands every protocol event to OnEvent.
type Node struct {
	EP      *metaroce.Endpoint
	OnEvent func(now time.Duration, ev metaroce.Event)
	Host    *sim.Host
}

// NewNode builds a node around a new endpoint.
func NewNode(cfg metaroce.Config) (*Node, error) {
	ep, err := metaroce.NewEndpoint(cfg, nil)
	if err != nil {
		return nil, err
	}
	return &Node{EP: ep}, nil
}

// Receive implements sim.Endpoint.
func (n *Node) Receive(now time.Duration, d *sim.Datagram) {
	n.EP.Receive(now, d.Data, metaroce.RecvMeta{Peer: metaroce.PeerID(d.Src), Entropy: d.SrcPort, CE: d.CE})
	n.events(now)
}

// Poll implements sim.Endpoint.
func (n *Node) Poll(now time.Duration, d *sim.Datagram) bool {
	tx, ok := n.EP.Poll(now, d.Data[:0])
	if !ok {
		n.events(now)
		return false
	}
	d.Data = d.Data[:tx.Len]
	d.Dst = sim.HostID(tx.Peer)
	if tx.Reply {
		d.SrcPort, d.DstPort = ListenPort, tx.Entropy
	} else {
		d.SrcPort, d.DstPort = tx.Entropy, ListenPort
	}
	d.ECT = tx.ECT
	return true
}

// NextTimeout implements sim.Endpoint.
func (n *Node) NextTimeout() time.Duration { return n.EP.NextTimeout() }

// HandleTimeout implements sim.Endpoint.
func (n *Node) HandleTimeout(now time.Duration) {
	n.EP.HandleTimeout(now)
	n.events(now)
}

func (n *Node) events(now time.Duration) {
	for {
		ev, ok := n.EP.PollEvent()
		if !ok {
			return
		}
		if n.OnEvent != nil {
			n.OnEvent(now, ev)
		}
	}
}
