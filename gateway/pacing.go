//go:build linux

package gateway

import (
	"time"

	"github.com/mrgw/mrgw/cc"
	"github.com/mrgw/mrgw/config"
	"github.com/mrgw/mrgw/metaroce"
	"github.com/mrgw/mrgw/units"
)

// controller looks a congestion controller up by name (package cc's
// registry; cc/longrtt registers the long-RTT ones).
func controller(name string, p cc.Params) (cc.Factory, error) {
	return cc.Lookup(name, p)
}

// wanParams are the parameters of the controllers of the connections to
// other gateways: the gateway's WAN capacity (wanRate) as each one's
// ceiling, the slowest region's RTT hint as the base RTT, the gateway's
// egress share, and wan.classic_fallback.
func wanParams(cfg *config.Config, rate units.BitRate, egress *cc.Egress) cc.Params {
	return cc.Params{LineRate: rate, BaseRTT: slowestHint(cfg), Egress: egress, ClassicFallback: cfg.WAN.ClassicFallback}
}

// newEgress returns the egress share of a WAN capacity, measured over two
// of the slowest region's round trips (cc.NewEgress). An unlimited rate (0)
// gets one too, with no capacity: it hands out no level, but it counts the
// connections, so that a limit reloaded later is shared among the ones
// already open.
func newEgress(capacity units.BitRate, rtt time.Duration) *cc.Egress {
	return cc.NewEgress(capacity, 2*rtt)
}

// reloadEgress applies a new WAN capacity to the egress share:
// the gateway keeps one Egress for its life, which every WAN connection's
// controller holds, and sets the new capacity on it (0: unlimited, no
// level). It used to drop the Egress on a reload to 0 and make a new one
// when a limit came back, which only the connections opened after that
// shared: the open ones kept the dropped Egress, at capacity 0, and each
// paced at its receiver's hint, up to the whole capacity each
// (TestReloadEgressZeroAndBack).
func (g *Gateway) reloadEgress(capacity units.BitRate) {
	g.egress.SetCapacity(capacity)
}

// leaveEgress takes a closed connection out of the egress share at once
// (cc.AIMD.LeaveEgress): the others' shares rise now rather than after it
// idled for 50 windows. Only the cc.AIMD family has the method, and it
// does nothing for a controller built without an egress share (a host
// connection's); the other controllers (the registry's "fixed" one among
// them) never join the share and have nothing to leave.
func leaveEgress(c *metaroce.Conn) {
	if l, ok := c.Controller().(interface{ LeaveEgress() }); ok {
		l.LeaveEgress()
	}
}

// slowestHint is the longest regions[].rtt_hint: it seeds the path timers
// before the first RTT sample.
func slowestHint(cfg *config.Config) time.Duration {
	var h time.Duration
	for _, r := range cfg.Regions {
		h = max(h, r.RTTHint)
	}
	return h
}
