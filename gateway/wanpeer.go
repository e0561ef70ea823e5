//go:build linux

package gateway

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mrgw/mrgw/metaroce"
	"github.com/mrgw/mrgw/metrics"
	"github.com/mrgw/mrgw/tunnel"
	"github.com/mrgw/mrgw/tunnel/control"
)

// wanPeer is one gateway of a remote region: its control session, its
// sealed registration on the endpoint, and (on the owner goroutine, in
// the relay) its WAN connection.
//
// Of two gateways, the one whose name sorts first dials the control
// session and opens the WAN connection; the other accepts both. One
// session and one connection per pair, whoever starts first.
type wanPeer struct {
	name, region string
	id           metaroce.PeerID
	rttHint      time.Duration
	dialer       bool
	sessions     chan *control.Session // accepted sessions, handed over by acceptLoop
	metrics      *metrics.PeerMetrics
	// ctx ends the peer's loop (removePeer, or the gateway stopping);
	// done is closed when the loop has returned.
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}

	rotating atomic.Bool // a key rotation is in flight

	mu sync.Mutex
	// control and dests: where the peer is, from gossip (or the
	// configuration's overrides); they change when it announces others.
	control string
	dests   []netip.AddrPort
	keyAt   time.Time // when our sending key last changed (or the session began)
	sess    *control.Session
	att     *tunnel.Peer
	state   string // "down", "connecting", "session", "up"
	since   time.Time
	lastErr string
	rtt     time.Duration
}

// setAddrs takes the addresses the peer announces now; a session already
// up keeps the ones it was set up with until it ends.
func (p *wanPeer) setAddrs(ctl string, dests []netip.AddrPort) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.control = ctl
	if !slices.Equal(p.dests, dests) {
		p.dests = slices.Clone(dests)
	}
}

func (p *wanPeer) addrs() (string, []netip.AddrPort) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.control, p.dests
}

func (p *wanPeer) session() *control.Session {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.sess
}

func (p *wanPeer) attached() *tunnel.Peer {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.att
}

func (p *wanPeer) setState(s, errText string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.state != s {
		p.state, p.since = s, time.Now()
	}
	if errText != "" {
		p.lastErr = errText
	}
}

// closeAll closes the peer's session and any session waiting for it.
func (p *wanPeer) closeAll() {
	p.mu.Lock()
	s, a := p.sess, p.att
	p.mu.Unlock()
	if a != nil {
		a.Close()
	}
	if s != nil {
		s.Close()
	}
	for {
		select {
		case s := <-p.sessions:
			s.Close()
		default:
			return
		}
	}
}

// acceptLoop hands each authenticated session to its peer's loop.
func (g *Gateway) acceptLoop() {
	for {
		s, err := g.listener.Accept(g.ctx)
		if err != nil {
			if g.ctx.Err() == nil && !errors.Is(err, context.Canceled) {
				g.log.Debug("control accept ended", "err", err)
			}
			return
		}
		p := g.peer(s.Peer().Name)
		if p == nil {
			// Gossip announced it (acceptPeer checked) but the peer
			// table has not caught up yet: catch up once.
			g.syncPeers()
			p = g.peer(s.Peer().Name)
		}
		if p == nil {
			g.log.Debug("control session from a gateway that is no peer", "peer", s.Peer().Name)
			s.Close()
			continue
		}
		g.metrics.ControlSession(metrics.ResultEstablished)
		for {
			select {
			case p.sessions <- s:
			default:
				// A newer session replaces one not yet taken.
				select {
				case old := <-p.sessions:
					old.Close()
				default:
				}
				continue
			}
			break
		}
	}
}

// peerLoop keeps one control session (dialled or accepted) and one WAN
// connection to p, until the gateway stops. Every wait is bounded and ends
// with the gateway's context.
func (g *Gateway) peerLoop(p *wanPeer) {
	backoff := 100 * time.Millisecond
	var next *control.Session
	ctx := p.ctx
	for ctx.Err() == nil {
		sess := next
		next = nil
		if sess == nil {
			p.setState("connecting", "")
			if p.dialer {
				dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				ctl, _ := p.addrs()
				// From control.listen's socket: the peer's ACLs see the
				// address it knows (control.Dial would use a wildcard one).
				s, err := g.listener.Dial(dctx, ctl, p.name)
				cancel()
				if err != nil {
					if ctx.Err() != nil {
						return
					}
					if !errors.Is(err, control.ErrRefusedLocally) { // a refusal is counted by OnRefused
						g.metrics.ControlSession(metrics.ResultFailed)
					}
					p.setState("down", err.Error())
					g.log.Debug("control dial failed", "peer", p.name, "err", err)
					if !sleepCtx(ctx, backoff) {
						return
					}
					backoff = min(2*backoff, 5*time.Second)
					continue
				}
				g.metrics.ControlSession(metrics.ResultEstablished)
				sess = s
			} else {
				select {
				case sess = <-p.sessions:
				case <-ctx.Done():
					return
				}
			}
		}
		backoff = 100 * time.Millisecond
		_, dests := p.addrs()
		att, err := tunnel.Attach(sess, g.ep, tunnel.AttachConfig{
			ID: p.id, Dests: dests, Locals: g.planeIPs, Suite: g.suite, Router: g.router, Logger: g.log,
		})
		if err != nil {
			g.log.Warn("cannot attach peer", "peer", p.name, "err", err)
			sess.Close()
			p.setState("down", err.Error())
			if !sleepCtx(ctx, time.Second) {
				return
			}
			continue
		}
		p.mu.Lock()
		p.sess, p.att, p.keyAt = sess, att, time.Now()
		p.mu.Unlock()
		p.setState("session", "")
		g.log.Info("control session up", "peer", p.name, "region", p.region, "dialer", p.dialer)
		g.metrics.ControlSessionsActive.WithLabelValues(p.region).Inc()
		tick := time.NewTicker(200 * time.Millisecond)
		ping := time.NewTicker(max(g.wanPingEvery, time.Millisecond))
		if g.wanPingEvery < 0 {
			ping.Stop()
		}
		reason := "gateway stopping"
	hold:
		for {
			if p.dialer && !att.Draining() {
				_ = g.ep.Do(ctx, func(now time.Duration, ep *metaroce.Endpoint) { g.relay.ensureConn(now, ep, p) })
			}
			g.maybeRotate(p, sess)
			select {
			case <-ping.C:
				_ = g.ep.Do(g.ctx, func(time.Duration, *metaroce.Endpoint) { g.relay.keepalive(p) })
				continue
			case <-sess.Done():
				reason = "control session ended"
				if err := sess.Err(); err != nil {
					reason += ": " + err.Error()
				}
				break hold
			case s := <-p.sessions:
				// The peer restarted: its new session replaces the old.
				next = s
				reason = "replaced by a new control session"
				break hold
			case <-ctx.Done():
				break hold
			case <-tick.C:
			}
		}
		tick.Stop()
		if ctx.Err() != nil && g.ctx.Err() == nil {
			reason = "peer removed"
		}
		ping.Stop()
		g.metrics.ControlSessionsActive.WithLabelValues(p.region).Dec()
		p.setState("down", reason)
		g.log.Info("control session down", "peer", p.name, "reason", reason)
		// Forget the connection before the keys: nothing may be sealed for
		// a peer whose keys are gone.
		_ = g.ep.Call(context.Background(), func(now time.Duration, _ *metaroce.Endpoint) { g.relay.dropPeer(now, p, reason) })
		att.Close()
		sess.Close()
		p.mu.Lock()
		p.sess, p.att = nil, nil
		p.mu.Unlock()
	}
}

// onControlEvent turns control events into metrics and RTT samples; the
// router delivers the keys.
func (g *Gateway) onControlEvent(ev control.Event) {
	g.router.OnEvent(ev)
	p := g.peer(ev.Session.Peer().Name)
	if p == nil {
		return
	}
	switch ev.Kind {
	case control.EventRTT:
		p.mu.Lock()
		p.rtt = ev.RTT
		p.mu.Unlock()
	case control.EventSendKey:
		p.mu.Lock()
		p.keyAt = time.Now()
		p.mu.Unlock()
		p.metrics.KeyRotation(true)
	}
}

// maybeRotate starts a rotation of our sending key to p when
// wan.key_rotation has passed since the last one. The gateway keeps this
// timer, not the control session (whose own timer is off), so that a
// reloaded wan.key_rotation applies to the sessions already up: it is read
// afresh at every tick of the peer loop (200 ms).
func (g *Gateway) maybeRotate(p *wanPeer, sess *control.Session) {
	life := g.Config().WAN.KeyRotation
	p.mu.Lock()
	due := life > 0 && time.Since(p.keyAt) >= life
	p.mu.Unlock()
	if !due || !p.rotating.CompareAndSwap(false, true) {
		return
	}
	// Tracked: the peer loop that calls this is, so the wait group
	// cannot be at zero here.
	g.goTrack(func() {
		defer p.rotating.Store(false)
		ctx, cancel := context.WithTimeout(g.ctx, 10*time.Second)
		defer cancel()
		if _, err := sess.RotateKeys(ctx); err != nil {
			if g.ctx.Err() != nil {
				return
			}
			p.metrics.KeyRotation(false)
			g.log.Warn("key rotation failed", "peer", p.name, "err", err)
			// Try again after a tenth of the lifetime, not at every tick.
			p.mu.Lock()
			p.keyAt = time.Now().Add(-life + life/10)
			p.mu.Unlock()
		}
	})
}
