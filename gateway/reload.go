//go:build linux

package gateway

import (
	"context"
	"encoding/base64"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/mrgw/mrgw/cc"
	"github.com/mrgw/mrgw/config"
	"github.com/mrgw/mrgw/metaroce"
	"github.com/mrgw/mrgw/metrics"
	"github.com/mrgw/mrgw/units"
)

// Reload applies a new configuration if config.Reloadable accepts it:
// log.level, limits.*, scheduler.*, the pacing ceilings (to the
// connections already open too), lan.host_keys (the REGISTERs that follow
// are checked against them), wan.key_rotation (to the sessions already
// up too), gossip.keyring and control.deny (sessions with gateways it now
// denies end). Anything else is refused
// (ErrReload wrapping the keys that need a restart) and nothing changes.
func (g *Gateway) Reload(next *config.Config) error {
	running := g.Config()
	changed, err := config.Reloadable(running, next)
	if err != nil {
		g.metrics.ConfigReload(metrics.ResultRefused)
		return fmt.Errorf("%w: %w", ErrReload, err)
	}
	if len(changed) == 0 {
		g.metrics.ConfigReload(metrics.ResultOK)
		return nil
	}
	if slices.ContainsFunc(changed, func(k string) bool { return k == "gossip.keyring" }) {
		var keys [][]byte
		for _, k := range next.Gossip.Keyring {
			b, derr := base64.StdEncoding.DecodeString(k)
			if derr != nil {
				g.metrics.ConfigReload(metrics.ResultInvalid)
				return fmt.Errorf("%w: gossip.keyring: %w", ErrReload, derr)
			}
			keys = append(keys, b)
		}
		if kerr := g.cluster.SetKeyring(keys); kerr != nil {
			g.metrics.ConfigReload(metrics.ResultFailed)
			return fmt.Errorf("%w: gossip.keyring: %w", ErrReload, kerr)
		}
	}
	g.level.Set(parseLevel(next.Log.Level))
	if err := g.ep.Call(context.Background(), func(now time.Duration, ep *metaroce.Endpoint) {
		g.relay.apply(next)
		g.applyRates(ep, next, "reload")
	}); err != nil {
		return err
	}
	g.metrics.MemoryLimitBytes.Set(float64(next.Limits.MemoryBytes))
	g.metrics.HostFlowsLimit.Set(float64(next.Limits.MaxFlows))
	g.cfgv.Store(next)
	if slices.Contains(changed, "control.deny") {
		// Revocation: sessions with gateways now denied end, and they
		// are no peers any more (a new session is refused).
		g.closeDenied(next)
	}
	g.metrics.ConfigReload(metrics.ResultOK)
	g.log.Info("configuration reloaded", "changed", changed)
	return nil
}

// lineRater is a controller whose ceiling can change while it runs: the
// cc.AIMD family (dc-aimd, longrtt-htcp, longrtt-scalable) and the
// registry's "fixed" controller. The others keep the ceiling they were
// built with; only new connections get the reloaded one.
type lineRater interface{ SetLineRate(rate units.ByteRate) }

// applyRates applies the pacing ceilings of cfg and the region share
// (wanRate, lan.max_rate_bps) to the connections already open, to the
// receiver's capacity (its rate hints) and to the controllers of new
// connections, when they differ from the ones applied last. It runs on the
// endpoint's goroutine, after a reload and when the region's membership
// changed this gateway's part of wan.region_rate_bps.
func (g *Gateway) applyRates(ep *metaroce.Endpoint, cfg *config.Config, why string) {
	g.rateCfg = cfg
	part := g.regionPart()
	wan, lan := wanRate(cfg, part), cfg.LAN.MaxRate()
	if wan == g.appliedWAN && lan == g.appliedLAN {
		return
	}
	g.appliedWAN, g.appliedLAN = wan, lan
	g.metrics.WANRateBps.Set(float64(wanWire(cfg, part)))
	g.reloadEgress(wan)
	if f, err := controller(cfg.WAN.CongestionControl, wanParams(cfg, wan, g.egress)); err == nil {
		g.wanCC = f
	}
	if f, err := controller(cfg.LAN.CongestionControl, cc.Params{LineRate: lan}); err == nil {
		g.lanCC = f
	}
	ep.SetReceiveCapacity(wan)
	n, missed := 0, 0
	for _, c := range ep.Conns() {
		bps := lan
		if c.Peer() < hostPeerBase {
			bps = wan
		}
		if lr, ok := c.Controller().(lineRater); ok {
			lr.SetLineRate(bps.Bytes())
			n++
		} else {
			missed++
		}
	}
	attrs := []any{"why", why, "wan_rate_bps", wanWire(cfg, part), "lan_max_rate_bps", lan, "connections", n, "new_connections_only", missed}
	if cfg.WAN.RegionRateBps > 0 {
		attrs = append(attrs, "region_share", fmt.Sprintf("%d/%d", part.share.mine, part.share.total),
			"region_fair_bps", part.share.of(cfg.WAN.RegionRate()))
	}
	// A change of demand re-applies the ceilings up to 4 times a second:
	// at debug; a reload or a change of the region's members at info.
	level := slog.LevelInfo
	if why == whyDemand {
		level = slog.LevelDebug
	}
	g.log.Log(context.Background(), level, "pacing ceilings applied", attrs...)
}
