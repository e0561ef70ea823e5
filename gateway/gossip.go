//go:build linux

package gateway

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/mrgw/mrgw/config"
	"github.com/mrgw/mrgw/internal/sleep"
	"github.com/mrgw/mrgw/metaroce"
	"github.com/mrgw/mrgw/region"
)

// joinLoop joins the gossip cluster, retrying while the seeds are not up
// yet (gateways of a deployment start in any order).
func (g *Gateway) joinLoop() {
	seeds := g.Config().Gossip.Seeds
	if len(seeds) == 0 {
		g.joined.Store(true)
		return
	}
	wait := 200 * time.Millisecond
	for g.ctx.Err() == nil {
		n, err := g.cluster.Join(g.ctx, seeds)
		// A member that claimed this gateway's name before its first
		// join is the holder: this one stops before it serves anything
		// (no peer was connected: syncPeers waits for joined), and says
		// no goodbye, which the others would apply to the holder.
		if holder, ok := g.cluster.NameHeldBy(); ok {
			g.nameInUse(holder)
			return
		}
		if err == nil && n > 0 {
			g.joined.Store(true)
			g.log.Info("joined gossip", "members", n)
			g.syncPeers()
			g.reconnectLoop(seeds)
			return
		}
		if errors.Is(err, region.ErrClosed) {
			return
		}
		g.log.Debug("gossip join failed; retrying", "err", err)
		if sleep.Ctx(g.ctx, wait) != nil {
			return
		}
		wait = min(2*wait, 5*time.Second)
	}
}

// nameInUse stops a gateway whose name another gateway holds: Run returns
// ErrNameInUse naming the holder.
func (g *Gateway) nameInUse(holder string) {
	name := g.Config().Node.Name
	err := fmt.Errorf("%w: node.name %q is held by the gateway at %s (its gossip address); this one stops without serving: give each gateway a name of its own",
		ErrNameInUse, name, holder)
	g.log.Error("gateway name in use: stopping", "name", name, "holder", holder)
	g.runMu.Lock()
	g.runErr = err
	g.runMu.Unlock()
	go g.Close() // from a tracked goroutine: Close waits for them
}

// reconnectInterval is how often a gateway tries to rejoin gateways that
// gossip declared dead.
const reconnectInterval = 2 * time.Second

// reconnectLoop rejoins, every reconnectInterval, the gossip address of
// every gateway the view holds dead, and the seeds while any is: memberlist
// never probes a member it declared dead, so after a partition between
// regions heals the two sides would stay apart (each routing nothing to
// the other) until a gateway restarted. Serf's reconnector does the same
// for failed members. A dead gateway that is really gone costs one failed
// dial per interval.
func (g *Gateway) reconnectLoop(seeds []string) {
	g.ticking(reconnectInterval, func() bool {
		var addrs []string
		for _, gws := range g.cluster.View().Regions {
			for _, gw := range gws {
				if gw.State == region.Dead && gw.Gossip.IsValid() {
					addrs = append(addrs, gw.Gossip.String())
				}
			}
		}
		if len(addrs) == 0 {
			return true
		}
		n, err := g.cluster.Join(g.ctx, append(addrs, seeds...))
		if errors.Is(err, region.ErrClosed) {
			return false
		}
		g.log.Debug("gossip: rejoin of dead gateways", "addrs", len(addrs), "reached", n, "err", err)
		return true
	})
}

// watchGossip acts on membership changes at once: a gateway of another
// region that gossip announces becomes a peer (syncPeers), and a peer
// gateway that gossip declares dead loses its WAN connection now (its
// flows are RESET upstream so the sources move to another gateway of the
// region), without waiting for the connection's own timers. The view is
// also read every peerSyncEvery: notifications can be dropped, and a
// gateway's new addresses are no change of state.
func (g *Gateway) watchGossip() {
	ch, stop := g.cluster.WatchChanges(64)
	defer stop()
	t := time.NewTicker(peerSyncEvery)
	defer t.Stop()
	g.syncPeers()
	for {
		select {
		case <-g.ctx.Done():
			return
		case <-t.C:
			g.syncPeers()
		case c, ok := <-ch:
			if !ok {
				return
			}
			// region logs the change at info ("gateway state"): once is enough.
			g.log.Debug("gossip: gateway state", "name", c.Name, "region", c.Region, "from", c.From.String(), "to", c.To.String())
			if p := g.peer(c.Name); p != nil && !c.To.Live() {
				_ = g.ep.Do(g.ctx, func(now time.Duration, _ *metaroce.Endpoint) {
					p.drop(now, "gossip: "+c.To.String())
				})
			}
			g.syncPeers()
		}
	}
}

// syncShare re-reads this gateway's part of wan.region_rate_bps from the
// gossip view: its static share, and its part by demand from the reports
// of the region's other live gateways (demandSplit). When either changed
// it applies them on the endpoint's goroutine (applyRates, which reads the
// configuration it last applied: a reload racing with this one is applied
// in order there). The share is kept up to date without the key too, so
// that a reload that sets it starts from the region's current membership.
// Callers hold syncMu.
func (g *Gateway) syncShare(cfg *config.Config, view region.View) {
	s := packShare(shareOf(cfg, view, g.probe.silent))
	f := math.Float64bits(g.demandSplit(cfg, view, time.Now()))
	shareChanged := g.share.Swap(s) != s
	fracChanged := g.demandFrac.Swap(f) != f
	if !shareChanged && !fracChanged {
		return
	}
	why := whyDemand
	if shareChanged {
		why = "region membership"
	}
	_ = g.ep.Do(g.ctx, func(_ time.Duration, ep *metaroce.Endpoint) {
		g.applyRates(ep, g.rateCfg, why)
	})
}

// whyDemand is applyRates's reason when the demand of the region's
// gateways moved this gateway's part.
const whyDemand = "region demand"
