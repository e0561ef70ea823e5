//go:build linux

package gateway

import (
	"fmt"
	"time"

	"github.com/mrgw/mrgw/metaroce"
	"github.com/mrgw/mrgw/pathmgr"
	"github.com/mrgw/mrgw/region"
)

// Path-health gossip (docs/GATEWAY.md, "Path-health gossip").
//
// Publishing: the relay summarises its WAN connection to every peer
// gateway per plane (path i crosses plane i mod len(wan.planes)) and
// publishes each plane's verdict through region.Cluster.PublishHealth: at
// once when the verdict changes (a path transition), and again every
// health TTL / 3 (healthState.refresh) so the report does not expire
// while it holds. A plane is
// published down only when none of its paths can carry data.
//
// Receiving: every report another gateway publishes about a gateway this
// one has a WAN connection to, and that gateway's reports about this one
// (the same plane between the two, the other direction), go into a
// pathmgr.Reports. A report that starts a down episode (at most one action
// per peer and plane every hold-down, 10 s) takes this gateway's usable
// paths over that plane to that peer down at once, unless that would
// leave the connection no usable path on another plane: a report never
// takes a connection's last plane (with one configured plane, reports are
// never acted on; the plane cannot be told apart from the peer). The paths
// are probed back like any failed path, so a wrong report costs a few
// round trips. A connection that comes up while a down report holds
// starts with that plane's paths down.

// healthQueue bounds the reports waiting to be published; when it is full
// a report is dropped and published at the next snapshot instead.
const healthQueue = 256

// healthHoldDown: after a report took a peer's plane down, no report on
// that peer and plane acts again for this long (pathmgr.ReportsConfig).
const healthHoldDown = 10 * time.Second

// healthKey names one (peer, plane) summary this gateway publishes.
type healthKey struct {
	peer  string
	plane int
}

// healthPub is what was last published on one (peer, plane).
type healthPub struct {
	state                     pathmgr.State
	at                        time.Time
	sent, acked, lost, marked uint64
}

// healthState is the relay's gossip state (owner goroutine).
type healthState struct {
	reports   *pathmgr.Reports
	published map[healthKey]*healthPub
	// hearsay: planes this gateway took down on a third gateway's report
	// (not the peer's own); it publishes nothing about them until its own
	// paths speak again, so that one gateway's report is not echoed as
	// everyone's.
	hearsay map[healthKey]bool
	refresh time.Duration
	avoided uint64 // paths taken down on reports
}

// newHealthState: bound, when set, is the gossip's health-table bound
// (2·G·P, region.Cluster.HealthBound), which Reports follows above its
// 4096 floor (docs/GATEWAY.md); it is asked only when Reports is full by
// the floor, i.e. once gossip delivers reports, after the cluster exists.
func newHealthState(ttl time.Duration, bound func() int) healthState {
	return healthState{
		reports: pathmgr.NewReports(pathmgr.ReportsConfig{TTL: ttl, Max: region.DefaultMaxHealthReports,
			Bound: bound, HoldDown: healthHoldDown}),
		published: map[healthKey]*healthPub{},
		hearsay:   map[healthKey]bool{},
		refresh:   ttl / 3,
	}
}

// planeOf places path i on plane i mod len(wan.planes).
func (g *Gateway) planeOf(path int, _ uint16) int {
	if len(g.planes) == 0 {
		return 0
	}
	return path % len(g.planes)
}

// publishPlanes publishes the verdict of every plane of ci's connection
// whose verdict changed and, when all is true, of every plane whose last
// report is older than the refresh period.
func (r *relay) publishPlanes(ci *connInfo, wall time.Time, all bool) {
	p := ci.wan
	if p == nil || !ci.up || ci.dead {
		return
	}
	set := ci.c.Paths()
	for plane := range max(len(r.g.planes), 1) {
		ps := set.PlaneSummary(plane, r.g.planeOf)
		k := healthKey{p.name, plane}
		last := r.health.published[k]
		st := ps.State()
		if r.health.hearsay[k] {
			if st == pathmgr.Down || st == pathmgr.Probing {
				continue
			}
			delete(r.health.hearsay, k)
		}
		if last != nil && last.state == st && (!all || wall.Sub(last.at) < r.health.refresh) {
			continue
		}
		if last == nil {
			last = &healthPub{}
		}
		h := region.HealthReport{Peer: p.name, Plane: r.g.planeName(plane), State: st, RTT: ps.SRTT, At: wall}
		// Loss and ECN over the interval since the last report; counters
		// start again from zero on a new connection.
		ds, dl := delta(ps.Sent, last.sent), delta(ps.Lost, last.lost)
		da, dm := delta(ps.Acked, last.acked), delta(ps.Marked, last.marked)
		if ds > 0 {
			h.Loss = min(float64(dl)/float64(ds), 1)
		}
		if da > 0 {
			h.ECNFraction = min(float64(dm)/float64(da), 1)
		}
		select {
		case r.g.healthOut <- h:
		default:
			continue // full: the next snapshot publishes it
		}
		*last = healthPub{state: st, at: wall, sent: ps.Sent, acked: ps.Acked, lost: ps.Lost, marked: ps.Marked}
		r.health.published[k] = last
	}
}

func delta(cur, prev uint64) uint64 {
	if cur < prev {
		return cur
	}
	return cur - prev
}

// onReport takes in another gateway's verdict on plane towards peer.
func (r *relay) onReport(now time.Duration, from string, peer *wanPeer, plane int, st pathmgr.State) {
	ev := r.health.reports.Evicted()
	if r.health.reports.Add(now, pathmgr.PeerReport{From: from, Peer: peer.name, Plane: plane, State: st}) {
		r.actOnReport(now, from, peer, plane)
	}
	if n := r.health.reports.Evicted(); n > ev {
		r.g.metrics.HealthReportsEvicted.Add(float64(n - ev))
		// 2·G·P cannot overflow unless more reporters speak of a peer's
		// plane than the bound allows for: say so, it is not expected.
		r.g.log.Warn("path-health reports table full: an unexpired report gave way",
			"bound", r.health.reports.Bound(), "evicted_total", n)
	}
}

// actOnReports acts on the reports the hold-down held back, now due.
func (r *relay) actOnReports(now time.Duration) {
	for _, d := range r.health.reports.Due(nil, now) {
		if p := r.g.peer(d.Peer); p != nil {
			r.actOnReport(now, d.From, p, d.Plane)
		}
	}
}

// actOnReport takes peer's plane down on from's report.
func (r *relay) actOnReport(now time.Duration, from string, peer *wanPeer, plane int) {
	ci := peer.conn
	if ci == nil || ci.dead {
		return // a connection that comes up later consults the reports
	}
	// The peer's own report on us is about this very link: this gateway
	// may repeat it (others connected to the peer learn of the plane
	// from it). A third gateway's report it does not echo.
	n := r.avoidPlane(now, ci, plane, from != peer.name, fmt.Sprintf("peer report: %s saw plane %s down", from, r.g.planeName(plane)))
	if n > 0 {
		r.g.log.Info("path-health report: plane avoided", "from", from, "peer", peer.name, "plane", r.g.planeName(plane), "paths", n)
	}
}

// avoidPlane takes ci's usable paths over plane down and returns how many
// it took: none unless the connection has a usable path on another plane.
// hearsay marks the plane as taken down on a third gateway's word (not
// published; see healthState.hearsay).
func (r *relay) avoidPlane(now time.Duration, ci *connInfo, plane int, hearsay bool, reason string) int {
	set := ci.c.Paths()
	other := false
	for i := range set.Paths {
		if set.Paths[i].State.Usable() && r.g.planeOf(i, set.Paths[i].Entropy) != plane {
			other = true
			break
		}
	}
	if !other {
		return 0
	}
	n := 0
	for _, i := range set.PathsOnPlane(nil, plane, r.g.planeOf) {
		ci.c.MarkPathDown(now, i, reason)
		n++
	}
	r.health.avoided += uint64(n)
	if n > 0 && hearsay {
		r.health.hearsay[healthKey{ci.wan.name, plane}] = true
		r.g.metrics.PathsAvoided(ci.wan.name, ci.wan.region, r.g.planeName(plane), n)
	}
	return n
}

// applyReports avoids, on a connection that just came up, the planes some
// gateway currently reports down towards its peer.
func (r *relay) applyReports(now time.Duration, ci *connInfo) {
	for plane := range max(len(r.g.planes), 1) {
		if r.health.reports.Down(now, ci.wan.name, plane) {
			r.avoidPlane(now, ci, plane, true, "peer report on connect: plane "+r.g.planeName(plane)+" down")
		}
	}
}

// publishLoop hands the relay's reports to gossip.
func (g *Gateway) publishLoop() {
	for {
		select {
		case <-g.ctx.Done():
			return
		case h := <-g.healthOut:
			if err := g.cluster.PublishHealth(h); err != nil {
				g.log.Debug("cannot publish path health", "peer", h.Peer, "plane", h.Plane, "err", err)
			}
		}
	}
}

// watchHealth feeds the reports of other gateways to the relay.
func (g *Gateway) watchHealth() {
	ch, stop := g.cluster.WatchHealth(healthQueue)
	defer stop()
	self := g.Config().Node.Name
	for {
		select {
		case <-g.ctx.Done():
			return
		case h, ok := <-ch:
			if !ok {
				return
			}
			plane, known := g.planeIndex[h.Plane]
			if !known {
				continue // a plane this gateway does not have
			}
			// A report on a gateway we connect to (our paths to it cross
			// the same plane), or that gateway's report on us (the same
			// plane between us, the other direction).
			peer := g.peer(h.Peer)
			if h.Peer == self {
				peer = g.peer(h.From)
			}
			if peer == nil || h.From == self {
				continue
			}
			from, st := h.From, h.State
			_ = g.ep.Do(g.ctx, func(now time.Duration, _ *metaroce.Endpoint) {
				g.relay.onReport(now, from, peer, plane, st)
			})
		}
	}
}
