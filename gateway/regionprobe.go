//go:build linux

package gateway

import (
	"sync"
	"time"

	"github.com/mrgw/mrgw/region"
)

// While wan.region_rate_bps is set, a gateway probes its region's other
// gateways directly: gossip declares a dead gateway dead only after its
// suspicion timeout (about 39 s with the wan profile), and until then its
// part of the region's rate is held for nobody while its flows, moved to
// the survivors, share the survivors' parts. A gateway that misses
// regionProbeMisses probes in a row gets no part (shareOf) until it
// answers one again. Two misses, not one: a single probe lost on a busy
// host would hand its part to the others for a moment, overcommitting
// the link.
const (
	regionProbeEvery  = 250 * time.Millisecond
	regionProbeMisses = 2
)

// regionProbe counts the probes each gateway of the region missed in a
// row. It keeps state only for gateways the view shows live in the
// region (prune), and at most one probe in flight for each.
type regionProbe struct {
	mu       sync.Mutex
	misses   map[string]int  // by gateway name: probes missed in a row
	inFlight map[string]bool // by gateway name: a probe is waiting for its ack
}

func newRegionProbe() *regionProbe {
	return &regionProbe{misses: map[string]int{}, inFlight: map[string]bool{}}
}

// start marks a probe of name as sent; false if one is in flight already.
func (p *regionProbe) start(name string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.inFlight[name] {
		return false
	}
	p.inFlight[name] = true
	return true
}

// observe records a probe's result and reports whether the gateway's
// standing (silent or not) changed.
func (p *regionProbe) observe(name string, answered bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.inFlight, name)
	before := p.misses[name] >= regionProbeMisses
	if answered {
		delete(p.misses, name)
	} else {
		p.misses[name]++
	}
	return before != (p.misses[name] >= regionProbeMisses)
}

// silent reports whether name missed regionProbeMisses probes in a row.
func (p *regionProbe) silent(name string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.misses[name] >= regionProbeMisses
}

// prune forgets the gateways not in keep (left the region or no longer
// live); a probe still in flight for one keeps its mark until it ends.
func (p *regionProbe) prune(keep map[string]bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for name := range p.misses {
		if !keep[name] {
			delete(p.misses, name)
		}
	}
}

// probeRegion probes the region's other live gateways every
// regionProbeEvery while wan.region_rate_bps is set, and re-reads the
// region share when one falls silent or answers again.
func (g *Gateway) probeRegion() {
	g.ticking(regionProbeEvery, func() bool {
		cfg := g.Config()
		if cfg.WAN.RegionRateBps == 0 || !g.joined.Load() {
			g.probe.prune(nil)
			return true
		}
		keep := map[string]bool{}
		for _, gw := range g.cluster.View().Regions[cfg.Node.Region] {
			if gw.Name == cfg.Node.Name || !gw.State.Live() || !gw.Gossip.IsValid() {
				continue
			}
			keep[gw.Name] = true
			if g.probe.start(gw.Name) {
				// Not tracked: a probe waits up to the probe timeout (3 s
				// with the wan profile), which a stop need not wait for;
				// it acts on nothing once the gateway's context ended.
				go g.probeOne(gw)
			}
		}
		g.probe.prune(keep)
		return true
	})
}

// probeOne sends one probe and acts on a change of standing.
func (g *Gateway) probeOne(gw region.Gateway) {
	err := g.cluster.Ping(gw.Name, gw.Gossip)
	if g.probe.observe(gw.Name, err == nil) && g.ctx.Err() == nil {
		if err != nil {
			g.log.Warn("region gateway misses direct probes: its part of wan.region_rate_bps goes to the others", "peer", gw.Name, "misses", regionProbeMisses)
		} else {
			g.log.Info("region gateway answers direct probes again: it takes its part of wan.region_rate_bps back", "peer", gw.Name)
		}
		g.syncMu.Lock()
		g.syncShare(g.Config(), g.cluster.View())
		g.syncMu.Unlock()
	}
}
