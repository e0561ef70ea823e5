//go:build linux

// Package tunnel is the WAN datapath between two mrgw gateways: one
// MetaRoCE endpoint (netio) whose every datagram is sealed with keys that
// the authenticated control channel (tunnel/control) derives, sprayed over
// per-path UDP sockets (netio/udp) with ECN and GSO/GRO.
//
// A Tunnel is built on an established control.Session:
//
//   - Keys: the session's epoch keys, one per direction, become a
//     seal.Sealer (what we send) and a seal.Opener (what the peer sends).
//     A datagram that fails to open is dropped and counted by netio before
//     the protocol sees it.
//   - Rotation: when the peer announces a new epoch (control.EventRecvKey)
//     its key is installed at once, next to the previous one; our sending
//     key switches only when the peer has acknowledged ours
//     (control.EventSendKey), so nothing is sealed under a key the peer
//     cannot open. A rotation is started before the sealer reaches its
//     counter limit (Config.RekeyAfter), besides the session's own timer.
//   - Planes: path sockets may be bound to per-plane local addresses, and
//     a peer gateway's report that a plane failed (gossip) takes the paths
//     known to use that plane out of service at once (OnPeerReport).
//   - Drain: Drain lets messages in flight complete, closes the
//     connections, then drains the control session.
//
// Control events reach a Tunnel through a Router set as the control
// config's OnEvent, or through HandleControlEvent.
//
// This package must not import region/, gateway/ or config/.
package tunnel

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mrgw/mrgw/metaroce"
	"github.com/mrgw/mrgw/netio"
	"github.com/mrgw/mrgw/netio/seal"
	"github.com/mrgw/mrgw/netio/udp"
	"github.com/mrgw/mrgw/tunnel/control"
)

// PeerID is the id the tunnel's endpoint gives its peer gateway.
const PeerID metaroce.PeerID = 1

// Defaults for Config's zero values.
const (
	// DefaultRekeyAfter is the number of datagrams sealed under one key
	// before a rotation starts: far below AES-GCM's usage bound.
	DefaultRekeyAfter = 1 << 30
)

// Config configures a Tunnel.
type Config struct {
	// Protocol configures the MetaRoCE endpoint (paths, MTU, controller,
	// path timings for the WAN round trip).
	Protocol metaroce.Config
	// Listen is the data-plane listening address.
	Listen netip.AddrPort
	// PlaneAddrs binds path i to PlaneAddrs[i mod P] (optional).
	PlaneAddrs []netip.Addr
	// PeerAddr is the peer's data-plane address. Zero: the first plane
	// address the peer announced in its Hello; if it announced none, the
	// tunnel sends nothing until SetPeerAddr.
	PeerAddr netip.AddrPort
	// Suite is the AEAD (default AES-128-GCM).
	Suite seal.Suite
	// RekeyAfter starts a key rotation after this many datagrams under one
	// key (default DefaultRekeyAfter). The sealer refuses to go past twice
	// that, so a rotation that cannot finish stops traffic rather than
	// reusing a nonce.
	RekeyAfter uint64
	// UDP configures the sockets (GSO/GRO switches, ECN, buffers).
	UDP udp.Options
	// TxSenders is the number of goroutines that seal and send (0: netio's
	// default).
	TxSenders int
	// PlaneOf tells which plane a path socket's datagrams take, when the
	// fabric lets us know (for example the emulator's hash); nil: path i is
	// on plane i mod len(PlaneAddrs), or unknown without PlaneAddrs.
	PlaneOf func(path int, local netip.AddrPort) int
	// OnEvent receives every protocol event on the endpoint's goroutine.
	OnEvent func(now time.Duration, ev metaroce.Event)
	// Router, if set, delivers the session's control events to the Tunnel.
	Router *Router
	// Logger: nil discards.
	Logger *slog.Logger
}

// ErrDraining is returned by Connect once a drain has started on either side.
var ErrDraining = errors.New("tunnel: draining")

// Stats are a Tunnel's counters.
type Stats struct {
	netio.Stats
	// SendEpoch is the epoch our datagrams are sealed under; Rotations
	// counts switches of the sending key, RecvKeys keys installed for the
	// peer's direction.
	SendEpoch           uint32
	Rotations, RecvKeys uint64
	// PeerReports counts paths taken down because of peer reports.
	PeerReports uint64
}

// Tunnel is the data plane to one peer gateway.
type Tunnel struct {
	link // session, keys, drain flag; its mu also guards the fields below
	cfg  Config
	ep   *netio.Endpoint

	peerAddr netip.AddrPort
	avoid    map[int]bool // planes peers reported down

	peerReports atomic.Uint64
}

// New starts a tunnel over sess.
func New(sess *control.Session, cfg Config) (*Tunnel, error) {
	peer := sess.Peer()
	addr := cfg.PeerAddr
	if !addr.IsValid() && len(peer.Planes) > 0 {
		addr = peer.Planes[0]
	}
	t := &Tunnel{cfg: cfg, peerAddr: addr, avoid: map[int]bool{}}
	if err := t.open(sess, cfg.Router, cfg.Logger, cfg.Suite, cfg.RekeyAfter); err != nil {
		return nil, err
	}
	var peers []netio.Peer
	if addr.IsValid() {
		peers = append(peers, t.peer())
	}
	ep, err := netio.New(netio.Config{
		Protocol:   cfg.Protocol,
		Listen:     cfg.Listen,
		PlaneAddrs: cfg.PlaneAddrs,
		UDP:        cfg.UDP,
		Peers:      peers,
		OnEvent:    t.onEvent,
		Logger:     cfg.Logger,
		TxSenders:  cfg.TxSenders,
	})
	if err != nil {
		t.abort()
		return nil, err
	}
	t.ep = ep
	return t, nil
}

func (t *Tunnel) peer() netio.Peer {
	var srcs []netip.Addr
	for _, a := range t.sess.Peer().Planes {
		srcs = append(srcs, a.Addr())
	}
	return netio.Peer{ID: PeerID, Addr: t.peerAddr, Sources: srcs, Sealer: t.keys}
}

// SetPeerAddr changes where the peer's data plane is reached (for example
// an emulator's stand-in for it).
func (t *Tunnel) SetPeerAddr(a netip.AddrPort) error {
	t.mu.Lock()
	t.peerAddr = a
	p := t.peer()
	t.mu.Unlock()
	return t.ep.AddPeer(p)
}

// Endpoint returns the tunnel's MetaRoCE endpoint (to connect, write,
// send, and to run code on its goroutine with Call).
func (t *Tunnel) Endpoint() *netio.Endpoint { return t.ep }

// LocalAddr returns the data-plane listening address.
func (t *Tunnel) LocalAddr() netip.AddrPort { return t.ep.LocalAddr() }

// Connect opens a MetaRoCE connection to the peer gateway, unless the
// tunnel is draining.
func (t *Tunnel) Connect(ctx context.Context) (*metaroce.Conn, error) {
	if t.Draining() {
		return nil, ErrDraining
	}
	return t.ep.Connect(ctx, PeerID)
}

// Stats returns the tunnel's counters.
func (t *Tunnel) Stats() Stats {
	return Stats{
		Stats:       t.ep.Stats(),
		SendEpoch:   t.keys.sendEpoch.Load(),
		Rotations:   t.keys.rotations.Load(),
		RecvKeys:    t.keys.recvKeys.Load(),
		PeerReports: t.peerReports.Load(),
	}
}

func (t *Tunnel) onEvent(now time.Duration, ev metaroce.Event) {
	if ev.Kind == metaroce.EventPath {
		tr := ev.Transition
		t.log.Debug("tunnel: path", "conn", ev.Conn.ID(), "path", tr.Path, "from", tr.From, "to", tr.To,
			"reason", tr.Reason, "entropy", tr.Entropy)
	}
	if t.cfg.OnEvent != nil {
		t.cfg.OnEvent(now, ev)
	}
}

// planeOf is the pathmgr.PlaneMap of this tunnel; it must run on the
// endpoint's goroutine (it looks up path sockets).
func (t *Tunnel) planeOf(path int, entropy uint16) int {
	if t.cfg.PlaneOf != nil {
		local, ok := t.ep.PathAddr(PeerID, entropy)
		if !ok {
			return -1
		}
		return t.cfg.PlaneOf(path, local)
	}
	if n := len(t.cfg.PlaneAddrs); n > 0 {
		return path % n
	}
	return -1
}

// OnPeerReport takes in another gateway's view of a plane (path-health
// gossip). A plane reported down takes every path known to use it out of
// service at once, on every connection, before our own timers would have
// noticed; those paths are re-rolled and probed back as usual. It returns
// how many paths it took down. A plane reported up is no longer avoided.
func (t *Tunnel) OnPeerReport(ctx context.Context, plane int, down bool) (int, error) {
	t.mu.Lock()
	if down {
		t.avoid[plane] = true
	} else {
		delete(t.avoid, plane)
	}
	t.mu.Unlock()
	if !down {
		return 0, nil
	}
	n := 0
	err := t.ep.Call(ctx, func(now time.Duration, ep *metaroce.Endpoint) {
		n = t.avoidPlane(now, ep, plane)
	})
	t.peerReports.Add(uint64(n))
	return n, err
}

func (t *Tunnel) avoidPlane(now time.Duration, ep *metaroce.Endpoint, plane int) int {
	n := 0
	var idx []int
	reason := fmt.Sprintf("peer report: plane %d down", plane)
	for _, c := range ep.Conns() {
		idx = c.Paths().PathsOnPlane(idx[:0], plane, t.planeOf)
		// Never take the last usable path: a report is a hint, and with no
		// path at all the connection could not even probe.
		for _, i := range idx {
			if c.Paths().UsableCount() <= 1 {
				break
			}
			c.MarkPathDown(now, i, reason)
			n++
		}
	}
	return n
}

// Drain ends the tunnel gracefully: no new connections; messages already
// queued are given until ctx is done to complete; then every connection is
// closed, the control session drained, and the tunnel closed.
func (t *Tunnel) Drain(ctx context.Context) error {
	t.draining.Store(true)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		queued := 0
		if err := t.ep.Call(ctx, func(_ time.Duration, ep *metaroce.Endpoint) {
			for _, c := range ep.Conns() {
				queued += c.Queued()
			}
		}); err != nil {
			return err
		}
		if queued == 0 {
			break
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if err := t.ep.Call(ctx, func(now time.Duration, ep *metaroce.Endpoint) {
		for _, c := range ep.Conns() {
			c.Close(now)
		}
	}); err != nil {
		return err
	}
	for {
		open := 0
		if err := t.ep.Call(ctx, func(_ time.Duration, ep *metaroce.Endpoint) { open = len(ep.Conns()) }); err != nil {
			return err
		}
		if open == 0 {
			break
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	err := t.sess.Drain(ctx)
	t.Close()
	return err
}

// Close stops the data plane at once (the control session is the
// caller's: close it too, or use Drain).
func (t *Tunnel) Close() error {
	if !t.shut() {
		return nil
	}
	return t.ep.Close()
}

// Router delivers control events to the tunnels built on their sessions.
// Set control.Config.OnEvent to Router.OnEvent.
type Router struct {
	mu sync.Mutex
	m  map[*control.Session]controlHandler
}

// controlHandler is a Tunnel or an attached Peer.
type controlHandler interface{ HandleControlEvent(control.Event) }

// NewRouter returns an empty Router.
func NewRouter() *Router { return &Router{m: map[*control.Session]controlHandler{}} }

// OnEvent is a control.Config.OnEvent. Events of sessions with no tunnel
// are dropped: a tunnel reads the session's current epochs when it starts.
func (r *Router) OnEvent(ev control.Event) {
	r.mu.Lock()
	t := r.m[ev.Session]
	r.mu.Unlock()
	if t != nil {
		t.HandleControlEvent(ev)
	}
}

func (r *Router) add(s *control.Session, t controlHandler) {
	r.mu.Lock()
	r.m[s] = t
	r.mu.Unlock()
}

func (r *Router) remove(s *control.Session) {
	r.mu.Lock()
	delete(r.m, s)
	r.mu.Unlock()
}

var _ netio.Sealer = (*keyring)(nil)
