//go:build linux

package gateway

import (
	"errors"
	"slices"
	"time"

	"github.com/mrgw/mrgw/config"
	"github.com/mrgw/mrgw/flowctl"
	"github.com/mrgw/mrgw/internal/hrw"
	"github.com/mrgw/mrgw/region"
)

// route picks the next gateway of a flow: a live gateway of the region
// (gossip) that has an established WAN connection, in the order of
// weighted rendezvous hashing of the flow id (weights: the capacities the
// gateways announce, or regions[].gateways[].weight), alive ones before
// suspect ones. Every gateway of this region ranks a flow alike, a
// gateway joining the destination region takes only its share of the
// flows, and one leaving moves only its own. Errors are immediate, never
// a wait.
func (r *relay) route(flowID uint64, dst string) (*connInfo, flowctl.Code, string) {
	return r.routeExcept(flowID, dst, nil)
}

// routeExcept is route passing over the connections in skip.
func (r *relay) routeExcept(flowID uint64, dst string, skip []*connInfo) (*connInfo, flowctl.Code, string) {
	gws, err := r.g.cluster.Route(dst)
	if err != nil {
		if errors.Is(err, region.ErrUnknownRegion) {
			return nil, flowctl.CodeUnknownRegion, err.Error()
		}
		return nil, flowctl.CodeRegionUnreachable, err.Error()
	}
	cfg := r.g.Config()
	order := rankGateways(cfg, flowID, gws)
	cands := make([]*connInfo, 0, len(order))
	// first is the connection rendezvous hashing alone ranks first among
	// those that could carry the flow (skip and gossip's suspect state
	// aside): a choice other than it is a detour.
	var first *connInfo
	firstScore := 0.0
	for _, k := range order {
		p := r.g.peer(gws[k].Name)
		if p == nil {
			continue
		}
		ci := p.conn
		if ci == nil || !ci.up || ci.dead {
			continue
		}
		if a := p.attached(); a == nil || a.Draining() {
			continue
		}
		if sc := hrw.Score(flowID, gws[k].Name, peerWeight(cfg, gws[k])); first == nil || sc > firstScore {
			first, firstScore = ci, sc
		}
		if slices.Contains(skip, ci) {
			continue
		}
		cands = append(cands, ci)
	}
	if ci := pickRoute(cands, r.g.ep.Now(), r.g.suspectAfter()); ci != nil {
		if ci != first {
			r.detoured++
		}
		return ci, 0, ""
	}
	return nil, flowctl.CodeRegionUnreachable, "no WAN connection to a live gateway of " + dst
}

// suspectAfter is how long a WAN peer may be silent while waited on before
// routing passes over it (pickRoute): two PING intervals (DeadAfter/4 at
// the default PING interval of DeadAfter/8); without PINGs, DeadAfter/4.
func (g *Gateway) suspectAfter() time.Duration {
	if g.wanPingEvery > 0 {
		return 2 * g.wanPingEvery
	}
	return g.deadAfter / 4
}

// pickRoute takes the first of cands (established connections to live,
// attached gateways, in the flow's rendezvous order) in two passes: the
// first passes over a connection none of whose paths can carry data, or
// whose peer has answered nothing for suspect while waited on. Its peer
// is dying, or cut off: the connection closes after DeadAfter unless it
// answers. A flow sent there stalls until then and is RESET, and its
// source's re-open came here precisely because another gateway of our
// region had just lost that peer (chaos scenario: 1.7 to 2 s stalls, two
// DeadAfters in series). The second pass takes the first anyway rather
// than refuse. Nil if cands is empty.
func pickRoute(cands []*connInfo, now, suspect time.Duration) *connInfo {
	for _, ci := range cands {
		if ci.c.Paths().UsableCount() > 0 && ci.live.Silent(now) < suspect {
			return ci
		}
	}
	if len(cands) > 0 {
		return cands[0]
	}
	return nil
}

// rankGateways orders gws (live gateways of one region) for a flow:
// alive before suspect, each by descending weighted rendezvous score.
func rankGateways(cfg *config.Config, flowID uint64, gws []region.Gateway) []int {
	order := hrw.Rank(flowID, len(gws), func(i int) string { return gws[i].Name },
		func(i int) float64 { return peerWeight(cfg, gws[i]) })
	alive := func(i int) int {
		if gws[i].State == region.Alive {
			return 0
		}
		return 1
	}
	slices.SortStableFunc(order, func(a, b int) int { return alive(a) - alive(b) })
	return order
}
