//go:build linux

package tunnel

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/mrgw/mrgw/metaroce"
	"github.com/mrgw/mrgw/netio"
	"github.com/mrgw/mrgw/tunnel/control"
	"github.com/mrgw/mrgw/tunnel/seal"
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
	cfg  AttachConfig
	log  *slog.Logger
	sess *control.Session
	ep   *netio.Endpoint
	keys *keyring
	gate keyGate // delivers key events to keys

	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
	ctx    context.Context
	cancel context.CancelFunc

	draining atomic.Bool
}

// Attach registers the peer of sess on ep as a sealed peer with id
// cfg.ID, replacing any peer with that id. Close removes it.
func Attach(sess *control.Session, ep *netio.Endpoint, cfg AttachConfig) (*Peer, error) {
	if cfg.Suite == 0 {
		cfg.Suite = seal.AES128GCM
	}
	if cfg.RekeyAfter == 0 {
		cfg.RekeyAfter = DefaultRekeyAfter
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	info := sess.Peer()
	dests := cfg.Dests
	if len(dests) == 0 {
		dests = info.Planes
	}
	if len(dests) == 0 {
		return nil, fmt.Errorf("tunnel: peer %s announced no data-plane address and none was given", info.Name)
	}
	p := &Peer{cfg: cfg, log: log.With("peer", info.Name), sess: sess, ep: ep}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	if cfg.Router != nil {
		cfg.Router.add(sess, p)
	}
	k, err := newKeyring(p, sess, cfg.Suite, cfg.RekeyAfter)
	if err != nil {
		p.abort()
		return nil, err
	}
	p.keys = k
	p.gate.set(k)
	np := netio.Peer{ID: cfg.ID, Addr: dests[0], Dests: dests, Locals: cfg.Locals, Sealer: k}
	if err := ep.AddPeer(np); err != nil {
		p.abort()
		return nil, err
	}
	return p, nil
}

func (p *Peer) abort() {
	p.cancel()
	if p.cfg.Router != nil {
		p.cfg.Router.remove(p.sess)
	}
}

func (p *Peer) logger() *slog.Logger      { return p.log }
func (p *Peer) session() *control.Session { return p.sess }

func (p *Peer) goTracked(f func(ctx context.Context)) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		f(p.ctx)
	}()
	return true
}

// ID returns the peer's id on the endpoint.
func (p *Peer) ID() metaroce.PeerID { return p.cfg.ID }

// Session returns the control session.
func (p *Peer) Session() *control.Session { return p.sess }

// Draining reports whether either side has asked to drain.
func (p *Peer) Draining() bool { return p.draining.Load() || p.sess.Draining() }

// SendEpoch is the epoch our datagrams are sealed under; Rotations counts
// switches of the sending key.
func (p *Peer) SendEpoch() (epoch uint32, rotations uint64) {
	return p.keys.sendEpoch.Load(), p.keys.rotations.Load()
}

// HandleControlEvent feeds one event of the peer's session in; use it when
// no Router is configured.
func (p *Peer) HandleControlEvent(ev control.Event) {
	switch ev.Kind {
	case control.EventRecvKey, control.EventSendKey:
		p.gate.handle(ev)
	case control.EventDrainRequested:
		p.draining.Store(true)
		p.log.Info("tunnel: peer requested drain")
	case control.EventClosed:
		p.log.Info("tunnel: control session ended", "err", ev.Err)
	}
}

// Close removes the peer from the endpoint (its datagrams are unknown from
// then on) and stops a rotation in progress. The session is the caller's.
func (p *Peer) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.mu.Unlock()
	p.cancel()
	p.wg.Wait()
	if p.cfg.Router != nil {
		p.cfg.Router.remove(p.sess)
	}
	p.ep.RemovePeer(p.cfg.ID)
	return nil
}
