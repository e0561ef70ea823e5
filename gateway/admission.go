//go:build linux

package gateway

import (
	"net/netip"
	"time"

	"github.com/mrgw/mrgw/internal/ratelog"
	"github.com/mrgw/mrgw/metaroce"
	"github.com/mrgw/mrgw/metrics"
)

// LAN admission: who gets a peer slot on the LAN port, and for
// how long. docs/GATEWAY.md, "LAN admission", says why.
//
//   - A host costs nothing until it has proved that it receives at the
//     address it sends from: while the gateway is under load (pending
//     peers at cookieAfterPending, or the peer table half full), an INIT
//     from a new source is answered with a stateless cookie (netio's
//     RETRY), and only an INIT that echoes it is admitted.
//   - A source IP is admitted at most admitRate times a second (burst
//     admitBurst) and holds at most maxPendingPerIP peers that have not
//     registered; all sources together at most maxPending.
//   - A peer that has not registered within Options.HostRegisterTimeout, or
//     whose connections have been silent (no control message: hosts PING
//     every DeadAfter/8, 62.5 ms by default) for Options.HostIdleTimeout, is closed and its
//     slot reclaimed: a bare INIT, or a host killed with kill -9, no longer
//     holds a slot until the gateway restarts.
//   - Every refusal is counted (mrgw_lan_admissions_refused_total{reason})
//     and logged at warn, one line per reason per interval; while the
//     table is full or the pending bound is hit, /readyz says "admission
//     saturated".
//
// Everything here runs on the endpoint's owner goroutine.

const (
	admitRate          = 20.0 // admissions per second per source IP
	admitBurst         = 64
	maxPendingPerIP    = 32
	maxPending         = 512
	cookieAfterPending = 16
	// maxSources bounds the per-IP state; idle full buckets are pruned.
	maxSources = 8192
	// saturationHold: /readyz says saturated this long after the last
	// refusal for want of room.
	saturationHold = 5 * time.Second

	defaultHostRegisterTimeout = 10 * time.Second
	defaultHostIdleTimeout     = 30 * time.Second
)

// Refusal reasons (mrgw_lan_admissions_refused_total's reason label).
const (
	admitRetry        = metrics.AdmitRetry
	admitBadCookie    = metrics.AdmitBadCookie
	admitRateLimited  = metrics.AdmitRateLimited
	admitPendingLimit = metrics.AdmitPendingLimit
	admitFull         = metrics.AdmitFull
)

// lanPeer is one admitted host peer (one source address).
type lanPeer struct {
	ip         netip.Addr
	admitted   time.Duration
	heard      time.Duration // last control message
	registered bool
}

type srcState struct {
	tokens  float64
	at      time.Duration
	pending int
}

type admission struct {
	g       *Gateway
	peers   map[metaroce.PeerID]*lanPeer
	sources map[netip.Addr]*srcState
	pending int
	next    metaroce.PeerID
	// saturatedUntil: a refusal for want of room holds /readyz until then.
	saturatedUntil time.Duration
	refused        map[string]uint64 // by reason, since start
	reclaimed      map[string]uint64 // unregistered, idle
	cookies        cookieCounts
	noSocket       uint64 // netio's NoSocket as last synced
	log            *ratelog.Logger
}

func newAdmission(g *Gateway) *admission {
	return &admission{g: g, peers: map[metaroce.PeerID]*lanPeer{}, sources: map[netip.Addr]*srcState{},
		next: hostPeerBase, refused: map[string]uint64{}, reclaimed: map[string]uint64{},
		log: ratelog.New(g.log.With("part", "admission"), 10*time.Second)}
}

// limit is the most host peers admitted at once: lan.max_hosts.
func (a *admission) limit() int {
	if n := a.g.opts.MaxHostPeers; n > 0 {
		return n
	}
	return a.g.Config().LAN.MaxHosts
}

// requireCookie: the gateway is under load, so a new source must echo a
// cookie before it gets a slot (netio.Config.RequireCookie).
func (a *admission) requireCookie() bool {
	return a.pending >= cookieAfterPending || len(a.peers) >= a.limit()/2
}

// accept is netio's AcceptPeer: an INIT from src, which passed the cookie
// check if one was required.
func (a *admission) accept(src netip.AddrPort) (metaroce.PeerID, bool) {
	now := a.g.ep.Now()
	ip := src.Addr()
	switch {
	case len(a.peers) >= a.limit():
		return a.refuse(now, admitFull, src, true)
	case a.pending >= maxPending:
		return a.refuse(now, admitPendingLimit, src, true)
	}
	s := a.sources[ip]
	if s == nil {
		if len(a.sources) >= maxSources {
			a.prune(now)
		}
		if len(a.sources) >= maxSources {
			return a.refuse(now, admitRateLimited, src, false)
		}
		s = &srcState{tokens: admitBurst, at: now}
		a.sources[ip] = s
	}
	s.tokens = min(admitBurst, s.tokens+admitRate*(now-s.at).Seconds())
	s.at = now
	switch {
	case s.pending >= maxPendingPerIP:
		return a.refuse(now, admitPendingLimit, src, false)
	case s.tokens < 1:
		return a.refuse(now, admitRateLimited, src, false)
	}
	s.tokens--
	s.pending++
	a.pending++
	a.next++
	a.peers[a.next] = &lanPeer{ip: ip, admitted: now, heard: now}
	a.g.relay.hostPeers++
	return a.next, true
}

func (a *admission) refuse(now time.Duration, reason string, src netip.AddrPort, saturated bool) (metaroce.PeerID, bool) {
	a.refused[reason]++
	a.g.metrics.AdmissionRefused(reason)
	if saturated {
		a.saturatedUntil = now + saturationHold
	}
	a.log.Warn(reason, "LAN admission refused", "src", src, "admitted", len(a.peers), "limit", a.limit(), "pending", a.pending)
	return 0, false
}

// silentAfter is how long a host peer may go without a control message
// while the table is full before it is reclaimed to make room: hosts PING
// every DeadAfter/8 (62.5 ms by default), so a host silent this long is
// dead or cut off. Without it, hosts killed in numbers held their slots
// for HostIdleTimeout (30 s) while live hosts were refused.
const silentAfter = 3 * time.Second

// prune forgets the sources with a full bucket and nothing pending.
func (a *admission) prune(now time.Duration) {
	for ip, s := range a.sources {
		if s.pending == 0 && s.tokens+admitRate*(now-s.at).Seconds() >= admitBurst {
			delete(a.sources, ip)
		}
	}
}

// heard notes a control message from a host peer.
func (a *admission) heard(peer metaroce.PeerID, now time.Duration) {
	if p := a.peers[peer]; p != nil {
		p.heard = now
	}
}

// lastHeard is when a host peer last sent a control message (0 if unknown).
func (a *admission) lastHeard(peer metaroce.PeerID) time.Duration {
	if p := a.peers[peer]; p != nil {
		return p.heard
	}
	return 0
}

// registered notes that a host peer registered an endpoint: it no longer
// counts as pending.
func (a *admission) registered(peer metaroce.PeerID) {
	p := a.peers[peer]
	if p == nil || p.registered {
		return
	}
	p.registered = true
	a.unpend(p)
}

func (a *admission) unpend(p *lanPeer) {
	a.pending--
	if s := a.sources[p.ip]; s != nil && s.pending > 0 {
		s.pending--
	}
}

// forget drops a host peer whose last connection went.
func (a *admission) forget(peer metaroce.PeerID) {
	p := a.peers[peer]
	if p == nil {
		return
	}
	if !p.registered {
		a.unpend(p)
	}
	delete(a.peers, peer)
	a.g.relay.hostPeers--
}

// saturated: the gateway refuses hosts for want of room now.
func (a *admission) saturated(now time.Duration) bool {
	return now < a.saturatedUntil || len(a.peers) >= a.limit()
}

// reclaim closes the host peers that never registered in time and those
// that have gone silent, and syncs the cookie counters.
func (a *admission) reclaim(now time.Duration) {
	r := a.g.relay
	regTimeout, idle := a.g.opts.HostRegisterTimeout, a.g.opts.HostIdleTimeout
	if a.saturated(now) {
		// Hosts are being refused for want of room: the silent go first.
		idle = min(idle, silentAfter)
	}
	var conns map[metaroce.PeerID][]*connInfo
	for id, p := range a.peers {
		var why string
		switch {
		case !p.registered && now-p.admitted >= regTimeout:
			why = metrics.ReclaimUnregistered
		case now-p.heard >= idle:
			why = metrics.ReclaimIdle
		default:
			continue
		}
		if conns == nil {
			conns = map[metaroce.PeerID][]*connInfo{}
			for c, ci := range r.conns {
				if c.Peer() >= hostPeerBase && !ci.dead {
					conns[c.Peer()] = append(conns[c.Peer()], ci)
				}
			}
		}
		a.reclaimed[why]++
		a.g.metrics.HostPeerReclaimed(why)
		a.log.Warn("reclaim_"+why, "LAN peer reclaimed", "peer", id, "ip", p.ip, "why", why,
			"registered", p.registered, "silent", (now - p.heard).Round(time.Millisecond))
		cs := conns[id]
		for _, ci := range cs {
			reason := "reclaimed: " + why
			if ci.endpoint != "" {
				r.g.log.Info("host reclaimed", "endpoint", ci.endpoint, "why", why)
			}
			r.dropConn(now, ci, reason)
			ci.c.Close(now)
		}
		if len(cs) == 0 {
			// Admitted, but the state machine never took its INIT (or its
			// connection is gone): the peer entry is all there is.
			r.g.ep.RemovePeer(id)
			a.forget(id)
		}
	}
	st := r.g.ep.Stats()
	if retry, bad := a.cookies.sync(st.RetriesSent, st.BadCookies); retry+bad > 0 {
		a.g.metrics.AdmissionRefusedN(admitRetry, float64(retry))
		a.g.metrics.AdmissionRefusedN(admitBadCookie, float64(bad))
		a.refused[admitRetry] += retry
		a.refused[admitBadCookie] += bad
		a.log.Warn(admitRetry, "LAN admission under load: INITs from new sources answered with a cookie challenge",
			"count", retry+bad, "bad_cookies", bad, "pending", a.pending, "admitted", len(a.peers))
	}
	if d := st.NoSocket - a.noSocket; d > 0 && st.NoSocket > a.noSocket {
		a.g.metrics.PathSocketsExhausted.Add(float64(d))
		a.log.Warn("no_socket", "datagrams not sent: every path socket is in use", "count", d,
			"hosts", len(a.peers), "limit", a.limit())
		a.noSocket = st.NoSocket
	}
	a.g.metrics.LANPeersLimit.Set(float64(a.limit()))
	a.g.metrics.LANPeers.Set(float64(len(a.peers)))
	a.g.metrics.LANPeersPending.Set(float64(a.pending))
	sat := 0.0
	if a.saturated(now) {
		sat = 1
	}
	a.g.metrics.AdmissionSaturated.Set(sat)
}

// cookieCounts turns netio's cookie counters into the two refusal
// reasons: retry (an INIT without a cookie answered with a challenge) and
// bad_cookie (an INIT whose cookie did not check). netio counts every
// challenge in RetriesSent and the bad cookies again in BadCookies, but
// the two are separate atomics read one after the other, and a challenge
// that could not be sent counts a bad cookie and no retry: BadCookies may
// run ahead of RetriesSent. The retry count is therefore
// RetriesSent-BadCookies clamped at zero and never allowed to go back, so
// that neither delta can wrap around (an unsigned difference that went
// negative showed as 1.2e21 refusals).
type cookieCounts struct {
	retry, bad uint64 // as synced into the metrics
}

// sync takes netio's running totals and returns what each reason grew by
// since the last call.
func (c *cookieCounts) sync(retriesSent, badCookies uint64) (retry, bad uint64) {
	if badCookies > c.bad {
		bad = badCookies - c.bad
		c.bad = badCookies
	}
	if retriesSent > badCookies && retriesSent-badCookies > c.retry {
		retry = retriesSent - badCookies - c.retry
		c.retry += retry
	}
	return retry, bad
}

// AdmissionStatus is the LAN admission state in /status.
type AdmissionStatus struct {
	Peers     int               `json:"peers"`
	Pending   int               `json:"pending"`
	Limit     int               `json:"limit"`
	Saturated bool              `json:"saturated"`
	Refused   map[string]uint64 `json:"refused,omitempty"`
	Reclaimed map[string]uint64 `json:"reclaimed,omitempty"`
}

func (a *admission) status(now time.Duration) AdmissionStatus {
	st := AdmissionStatus{Peers: len(a.peers), Pending: a.pending, Limit: a.limit(), Saturated: a.saturated(now),
		Refused: map[string]uint64{}, Reclaimed: map[string]uint64{}}
	for k, v := range a.refused {
		st.Refused[k] = v
	}
	for k, v := range a.reclaimed {
		st.Reclaimed[k] = v
	}
	return st
}
