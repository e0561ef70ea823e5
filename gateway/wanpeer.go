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

	"github.com/mrgw/mrgw/config"
	"github.com/mrgw/mrgw/internal/sleep"
	"github.com/mrgw/mrgw/metaroce"
	"github.com/mrgw/mrgw/metrics"
	"github.com/mrgw/mrgw/region"
	"github.com/mrgw/mrgw/tunnel"
	"github.com/mrgw/mrgw/tunnel/control"
)

// wanPeer is one gateway of a remote region, from the moment gossip
// announces it (peers.go) until it is removed: its control session, its
// sealed registration on the endpoint (the tunnel attachment), its key
// rotations, and its WAN connection with that connection's PINGs and
// silence watch. This file is its life on its own goroutine (run: dial
// or accept, attach, hold, end the session, again); wanconn.go is the
// part that runs on the endpoint's owner goroutine (open, up, PING,
// silence, drop).
//
// Of two gateways, the one whose name sorts first dials the control
// session and opens the WAN connection; the other accepts both. One
// session and one connection per pair, whoever starts first.
type wanPeer struct {
	g            *Gateway
	name, region string
	id           metaroce.PeerID
	rttHint      time.Duration
	dialer       bool
	sessions     chan *control.Session // accepted sessions, handed over by acceptLoop (offer)
	metrics      *metrics.PeerMetrics
	// ctx ends the peer's loop (stop, or the gateway stopping); done is
	// closed when the loop has returned.
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}

	rotating atomic.Bool // a key rotation is in flight

	// conn is the WAN connection to the peer, nil while there is none
	// (wanconn.go). Read and written on the endpoint's owner goroutine
	// only; the relay's wan set lists the peers whose conn is set.
	conn *connInfo

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

// newWANPeer makes the peer of gateway gw, reached at ctl and dests, with
// endpoint peer id id. Nothing runs until start.
func newWANPeer(g *Gateway, cfg *config.Config, gw region.Gateway, id metaroce.PeerID, ctl string, dests []netip.AddrPort, rtt time.Duration) *wanPeer {
	p := &wanPeer{g: g, name: gw.Name, region: gw.Meta.Region, id: id, rttHint: rtt,
		dialer: cfg.Node.Name < gw.Name, sessions: make(chan *control.Session, 1), done: make(chan struct{})}
	p.control, p.dests = ctl, dests
	p.metrics = g.metrics.Peer(p.name, p.region)
	p.ctx, p.cancel = context.WithCancel(g.ctx)
	return p
}

// start runs the peer's loop on a goroutine the gateway waits for.
func (p *wanPeer) start() {
	p.g.goTrack(func() {
		defer close(p.done)
		p.run()
	})
}

// stop tears the peer down once it has left the peer table: its loop
// stops, its session and WAN connection close (the flows it carried are
// RESET upstream). Its metric series stay (a peer that comes back
// continues them).
func (p *wanPeer) stop(reason string) {
	g := p.g
	p.cancel()
	p.closeAll()
	_ = g.ep.Do(g.ctx, func(now time.Duration, _ *metaroce.Endpoint) { p.drop(now, reason) })
	p.metrics.SetConnected(false)
	g.log.Info("peer gateway removed", "peer", p.name, "region", p.region, "reason", reason)
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
		p.offer(s)
	}
}

// offer hands an accepted session to the peer's loop; a newer session
// replaces one not yet taken.
func (p *wanPeer) offer(s *control.Session) {
	for {
		select {
		case p.sessions <- s:
		default:
			select {
			case old := <-p.sessions:
				old.Close()
			default:
			}
			continue
		}
		return
	}
}

// run keeps one control session (dialled or accepted) and one WAN
// connection to the peer, until the peer is stopped or the gateway stops.
// Every wait is bounded and ends with the peer's context.
func (p *wanPeer) run() {
	g := p.g
	backoff := 100 * time.Millisecond
	var next *control.Session
	ctx := p.ctx
	for ctx.Err() == nil {
		sess := next
		next = nil
		if sess == nil {
			s, stopped := p.connect(&backoff)
			if stopped {
				return
			}
			if s == nil {
				continue
			}
			sess = s
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
			if sleep.Ctx(ctx, time.Second) != nil {
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
		var reason string
		reason, next = p.hold(sess, att)
		if ctx.Err() != nil && g.ctx.Err() == nil {
			reason = "peer removed"
		}
		p.endSession(sess, att, reason)
	}
}

// connect waits for the peer's next control session: the dialer dials it
// (after *backoff, doubled up to 5 s, when a dial fails), the other side
// waits for acceptLoop to hand it one. It returns nil to try again, and
// stopped when the peer's context ended.
func (p *wanPeer) connect(backoff *time.Duration) (s *control.Session, stopped bool) {
	g, ctx := p.g, p.ctx
	p.setState("connecting", "")
	if !p.dialer {
		select {
		case s := <-p.sessions:
			return s, false
		case <-ctx.Done():
			return nil, true
		}
	}
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	ctl, _ := p.addrs()
	// From control.listen's socket: the peer's ACLs see the address it
	// knows (control.Dial would use a wildcard one).
	s, err := g.listener.Dial(dctx, ctl, p.name)
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return nil, true
		}
		if !errors.Is(err, control.ErrRefusedLocally) { // a refusal is counted by OnRefused
			g.metrics.ControlSession(metrics.ResultFailed)
		}
		p.setState("down", err.Error())
		g.log.Debug("control dial failed", "peer", p.name, "err", err)
		if sleep.Ctx(ctx, *backoff) != nil {
			return nil, true
		}
		*backoff = min(2**backoff, 5*time.Second)
		return nil, false
	}
	g.metrics.ControlSession(metrics.ResultEstablished)
	return s, false
}

// hold keeps the session up: every 200 ms it opens the WAN connection if
// this side dials and there is none (ensureConn) and rotates the keys when
// due; every wanPingEvery it PINGs the peer on the connection (keepalive).
// It returns why the session ends, and the session that replaces it if
// the peer opened a new one (it restarted).
func (p *wanPeer) hold(sess *control.Session, att *tunnel.Peer) (reason string, next *control.Session) {
	g, ctx := p.g, p.ctx
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	ping := time.NewTicker(max(g.wanPingEvery, time.Millisecond))
	defer ping.Stop()
	if g.wanPingEvery < 0 {
		ping.Stop()
	}
	for {
		if p.dialer && !att.Draining() {
			_ = g.ep.Do(ctx, func(now time.Duration, ep *metaroce.Endpoint) { p.ensureConn(now, ep) })
		}
		p.maybeRotate(sess)
		select {
		case <-ping.C:
			_ = g.ep.Do(g.ctx, func(time.Duration, *metaroce.Endpoint) { p.keepalive() })
			continue
		case <-sess.Done():
			reason = "control session ended"
			if err := sess.Err(); err != nil {
				reason += ": " + err.Error()
			}
			return reason, nil
		case s := <-p.sessions:
			return "replaced by a new control session", s
		case <-ctx.Done():
			return "gateway stopping", nil
		case <-tick.C:
		}
	}
}

// endSession takes down what hold kept up: the WAN connection, then the
// tunnel attachment and the session.
func (p *wanPeer) endSession(sess *control.Session, att *tunnel.Peer, reason string) {
	g := p.g
	g.metrics.ControlSessionsActive.WithLabelValues(p.region).Dec()
	p.setState("down", reason)
	g.log.Info("control session down", "peer", p.name, "reason", reason)
	// Forget the connection before the keys: nothing may be sealed for a
	// peer whose keys are gone.
	_ = g.ep.Call(context.Background(), func(now time.Duration, _ *metaroce.Endpoint) { p.drop(now, reason) })
	att.Close()
	sess.Close()
	p.mu.Lock()
	p.sess, p.att = nil, nil
	p.mu.Unlock()
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

// maybeRotate starts a rotation of our sending key to the peer when
// wan.key_rotation has passed since the last one. The gateway keeps this
// timer, not the control session (whose own timer is off), so that a
// reloaded wan.key_rotation applies to the sessions already up: it is read
// afresh at every tick of hold (200 ms).
func (p *wanPeer) maybeRotate(sess *control.Session) {
	g := p.g
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
