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
// healthRefresh so the report does not expire while it holds. A plane is
// published down only when none of its paths can carry data.
//
// Receiving: every report another gateway publishes about a gateway this
// one has a WAN connection to, or by such a gateway (its side of the
// plane failed, towards whomever), goes into a pathmgr.Reports. A
// report that starts a down episode takes this gateway's usable paths
// over that plane to that peer down at once (never the last usable path);
// they are probed back like any failed path, so a wrong report costs a
// few round trips. A connection that comes up while a down report holds
// starts with that plane's paths down.

// healthQueue bounds the reports waiting to be published; when it is full
// a report is dropped and published at the next snapshot instead.
const healthQueue = 256

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
	// hearsay: planes this gateway took down on another's report; it
	// publishes nothing about them until its own paths speak again, so
	// that one gateway's report is not echoed as everyone's.
	hearsay map[healthKey]bool
	refresh time.Duration
	avoided uint64 // paths taken down on reports
}

func newHealthState(ttl time.Duration) healthState {
	return healthState{
		reports:   pathmgr.NewReports(pathmgr.ReportsConfig{TTL: ttl, Max: region.DefaultMaxHealthReports}),
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
// whose verdict changed, or all of them when refresh is true and their
// last report is older than the refresh period.
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
	if !r.health.reports.Add(now, pathmgr.PeerReport{From: from, Peer: peer.name, Plane: plane, State: st}) {
		return
	}
	ci := r.wan[peer]
	if ci == nil || ci.dead {
		return // a connection that comes up later consults the reports
	}
	n := r.avoidPlane(now, ci, plane, fmt.Sprintf("peer report: %s saw plane %s down", from, r.g.planeName(plane)))
	r.g.log.Info("path-health report: plane avoided", "from", from, "peer", peer.name, "plane", r.g.planeName(plane), "paths", n)
}

// avoidPlane takes ci's usable paths over plane down, keeping at least
// one usable path on the connection, and returns how many it took.
func (r *relay) avoidPlane(now time.Duration, ci *connInfo, plane int, reason string) int {
	set := ci.c.Paths()
	n := 0
	for _, i := range set.PathsOnPlane(nil, plane, r.g.planeOf) {
		if set.UsableCount() <= 1 {
			break
		}
		ci.c.MarkPathDown(now, i, reason)
		n++
	}
	r.health.avoided += uint64(n)
	if n > 0 {
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
			r.avoidPlane(now, ci, plane, "peer report on connect: plane "+r.g.planeName(plane)+" down")
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
			// the same plane), or by one (its side of the plane failed
			// towards someone: our paths to it cross that side too).
			from, st := h.From, h.State
			for _, name := range [2]string{h.Peer, h.From} {
				peer := g.byName[name]
				if peer == nil || name == self || from == self || (name == h.From && h.From == h.Peer) {
					continue
				}
				_ = g.ep.Do(g.ctx, func(now time.Duration, _ *metaroce.Endpoint) {
					g.relay.onReport(now, from, peer, plane, st)
				})
			}
		}
	}
}
