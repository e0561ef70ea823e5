//go:build linux

package gateway

import (
	"errors"
	"math"
	"slices"
	"time"

	"github.com/mrgw/mrgw/config"
	"github.com/mrgw/mrgw/flowctl"
	"github.com/mrgw/mrgw/internal/hrw"
	"github.com/mrgw/mrgw/region"
)

// route picks the next gateway of a flow: a live gateway of the region
// (gossip) that has an established WAN connection, alive ones before
// suspect ones, the one whose connection carries the fewest of this
// gateway's flows for its weight (the capacities the gateways announce,
// or regions[].gateways[].weight), ties going to the first in weighted
// rendezvous order of the flow id (pickRoute). Hashing alone is even only
// over many flows; the fabric shares capacity per WAN connection, so a
// lumpy placement is an unfair one. A flow is routed only when it opens
// or re-opens, so a gateway leaving moves only its own flows, and one
// joining takes new and re-opened flows until it carries its share.
// Errors are immediate, never a wait.
func (r *relay) route(flowID uint64, dst string) (*connInfo, flowctl.Code, string) {
	return r.routeExcept(flowID, dst, nil)
}

// routeCand is a connection that could carry a flow, as routing sees it.
type routeCand struct {
	ci      *connInfo
	weight  float64 // the peer's rendezvous weight
	suspect bool    // gossip holds the peer suspect
}

// load is the flows c's connection carries from this gateway per unit of
// weight; a peer of weight 0 or less is the last choice.
func (c routeCand) load() float64 {
	if c.weight <= 0 {
		return math.Inf(1)
	}
	return float64(len(c.ci.out)) / c.weight
}

// lightest returns the candidate of cands, in rendezvous order, with the
// least load, the first of equals; nil if cands is empty.
func lightest(cands []routeCand) *connInfo {
	var best *routeCand
	for i := range cands {
		if best == nil || cands[i].load() < best.load() {
			best = &cands[i]
		}
	}
	if best == nil {
		return nil
	}
	return best.ci
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
	all := make([]routeCand, 0, len(order))
	cands := make([]routeCand, 0, len(order))
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
		c := routeCand{ci: ci, weight: peerWeight(cfg, gws[k]), suspect: gws[k].State != region.Alive}
		all = append(all, c)
		if !slices.Contains(skip, ci) {
			cands = append(cands, c)
		}
	}
	if ci := pickRoute(cands, r.g.ep.Now(), r.g.suspectAfter()); ci != nil {
		// The rule's choice among every connection that could carry
		// the flow, skip and health aside: a choice other than it is a
		// detour.
		if ci != lightest(all) {
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

// pickRoute chooses among cands (established connections to live,
// attached gateways, in the flow's rendezvous order, alive peers first)
// in two passes. The first passes over a connection none of whose paths
// can carry data, or whose peer has answered nothing for suspect while
// waited on. Its peer is dying, or cut off: the connection closes after
// DeadAfter unless it answers. A flow sent there stalls until then and is
// RESET, and its source's re-open came here precisely because another
// gateway of our region had just lost that peer (chaos scenario: 1.7 to
// 2 s stalls, two DeadAfters in series). Of those left, it takes the
// least loaded (lightest) among the alive peers, or among the suspect
// ones if no alive peer is left. The second pass takes the first of cands
// anyway rather than refuse. Nil if cands is empty.
//
// Least loaded of all rather than of the two ranked first ("two
// choices"): the gateway knows what each of its connections carries and
// routes one flow at a time, so there is no stale load to herd on, and
// only the full comparison keeps its flows within one of each other over
// any number of peers (of equal weight). With two peers the rules
// coincide.
func pickRoute(cands []routeCand, now, suspect time.Duration) *connInfo {
	var ok []routeCand
	for _, c := range cands {
		if c.ci.c.Paths().UsableCount() > 0 && c.ci.live.Silent(now) < suspect {
			if len(ok) > 0 && c.suspect && !ok[0].suspect {
				break // alive peers come first: the rest are suspect
			}
			ok = append(ok, c)
		}
	}
	if ci := lightest(ok); ci != nil {
		return ci
	}
	if len(cands) > 0 {
		return cands[0].ci
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
