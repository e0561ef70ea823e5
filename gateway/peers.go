//go:build linux

package gateway

import (
	"context"
	"fmt"
	"hash/fnv"
	"math/big"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/mrgw/mrgw/config"
	"github.com/mrgw/mrgw/metaroce"
	"github.com/mrgw/mrgw/metrics"
	"github.com/mrgw/mrgw/region"
	"github.com/mrgw/mrgw/tunnel/control"
	"github.com/mrgw/mrgw/tunnel/pki"
)

// Peer gateways come from the gossip view, not from the configuration: a
// gateway of another region that gossip announces alive becomes a peer
// (a control session, a WAN connection, metrics), with the addresses it
// announces unless regions[].gateways[] overrides them. A peer whose
// gateway has been dead or gone for peerLinger is torn down; one that is
// denied (control.deny, control.peer_names) is never made, and is torn
// down when a reload denies it.
const (
	// maxWANPeers bounds the peer gateways: 16 gateways in each of 16
	// other regions. Beyond it gateways are not connected, and a warning
	// says so.
	maxWANPeers = 256
	// peerLinger: a peer dead or gone this long is torn down (its WAN
	// connection went when gossip declared it dead). A gateway that
	// restarts within it keeps its peer id and metrics.
	peerLinger = 30 * time.Second
	// peerSyncEvery is how often the view is read again, whatever the
	// change notifications said (they can be dropped, and metadata
	// updates are not changes).
	peerSyncEvery = 500 * time.Millisecond
	// unseenAfter: a gateway the configuration lists (regions[].gateways)
	// that gossip has not shown for this long after start is reported.
	unseenAfter = 30 * time.Second
)

// peerTable indexes the peer gateways. Its lock is taken for lookups by
// every goroutine (the endpoint's owner included), never held across a
// call out.
type peerTable struct {
	mu     sync.RWMutex
	byName map[string]*wanPeer
	byID   map[metaroce.PeerID]*wanPeer
	// full: the last refusal for want of room was logged (once per
	// crossing of the bound).
	full bool
}

// peer returns the peer gateway called name, or nil.
func (g *Gateway) peer(name string) *wanPeer {
	g.pt.mu.RLock()
	defer g.pt.mu.RUnlock()
	return g.pt.byName[name]
}

// peerByID returns the peer gateway with endpoint peer id id, or nil.
func (g *Gateway) peerByID(id metaroce.PeerID) *wanPeer {
	g.pt.mu.RLock()
	defer g.pt.mu.RUnlock()
	return g.pt.byID[id]
}

// peerList returns the peer gateways sorted by name.
func (g *Gateway) peerList() []*wanPeer {
	g.pt.mu.RLock()
	ps := make([]*wanPeer, 0, len(g.pt.byName))
	for _, p := range g.pt.byName {
		ps = append(ps, p)
	}
	g.pt.mu.RUnlock()
	slices.SortFunc(ps, func(a, b *wanPeer) int { return strings.Compare(a.name, b.name) })
	return ps
}

// peerIDOf is the endpoint peer id of the gateway called name: a hash of
// the name in 1..hostPeerBase-1, so that a gateway keeps its id when it
// comes back; taken ids are probed past (caller holds pt.mu).
func (g *Gateway) peerIDOf(name string) metaroce.PeerID {
	h := fnv.New64a()
	h.Write([]byte(name))
	id := metaroce.PeerID(h.Sum64()%(hostPeerBase-1) + 1)
	for g.pt.byID[id] != nil {
		id = id%(hostPeerBase-1) + 1
	}
	return id
}

// gatewayPin is what regions[].gateways[] says of a gateway, if anything.
func gatewayPin(cfg *config.Config, region, name string) (config.Region, *config.RemoteGateway) {
	for _, r := range cfg.Regions {
		if r.Name != region {
			continue
		}
		for i := range r.Gateways {
			if r.Gateways[i].Name == name {
				return r, &r.Gateways[i]
			}
		}
		return r, nil
	}
	return config.Region{}, nil
}

// peerWeight is the placement weight of gateway gw of another region: its
// regions[].gateways[].weight override, else its announced capacity.
func peerWeight(cfg *config.Config, gw region.Gateway) float64 {
	if _, pin := gatewayPin(cfg, gw.Meta.Region, gw.Name); pin != nil && pin.Weight > 0 {
		return float64(pin.Weight)
	}
	return float64(gw.Meta.Weight())
}

// peerAddrs are the addresses to reach gw at: what it announces, or the
// configuration's overrides.
func peerAddrs(cfg *config.Config, gw region.Gateway) (ctl string, dests []netip.AddrPort, rtt time.Duration, err error) {
	r, pin := gatewayPin(cfg, gw.Meta.Region, gw.Name)
	rtt = r.RTTHint
	if gw.Meta.Control.IsValid() {
		ctl = gw.Meta.Control.String()
	}
	for _, p := range gw.Meta.Planes {
		dests = append(dests, p.WAN)
	}
	if pin != nil && pin.Control != "" {
		ctl = pin.Control
	}
	if pin != nil && len(pin.WAN) > 0 {
		dests = dests[:0]
		for _, w := range pin.WAN {
			a, rerr := resolveUDP(w)
			if rerr != nil {
				return "", nil, 0, fmt.Errorf("regions %s gateway %s wan %q: %w", r.Name, gw.Name, w, rerr)
			}
			dests = append(dests, a)
		}
	}
	switch {
	case ctl == "":
		return "", nil, 0, fmt.Errorf("gateway %s announces no control address", gw.Name)
	case len(dests) == 0:
		return "", nil, 0, fmt.Errorf("gateway %s announces no WAN plane", gw.Name)
	}
	return ctl, dests, rtt, nil
}

// wireCompatible: gw speaks a wire version this gateway offers (or did not
// say which: metadata version 1).
func wireCompatible(gw region.Gateway) bool {
	if len(gw.Meta.Wire) == 0 {
		return true
	}
	for _, v := range gw.Meta.Wire {
		if v == metaroce.Version1 || v == metaroce.Version2 {
			return true
		}
	}
	return false
}

// denied says why the configuration refuses gateway name of region ("" if
// it does not): control.deny (by name, REGION/NAME, REGION/* or the
// certificate's serial, when serial is known) or control.peer_names.
func denied(cfg *config.Config, region, name string, serial *big.Int) string {
	for _, d := range cfg.Control.Deny {
		if h, ok := strings.CutPrefix(d, "serial:"); ok {
			if serial != nil {
				want, ok := new(big.Int).SetString(strings.ReplaceAll(h, ":", ""), 16)
				if ok && want.Cmp(serial) == 0 {
					return "control.deny: " + d
				}
			}
			continue
		}
		if d == name || d == region+"/"+name || d == region+"/*" {
			return "control.deny: " + d
		}
	}
	if len(cfg.Control.PeerNames) > 0 && !slices.Contains(cfg.Control.PeerNames, name) {
		return "not in control.peer_names"
	}
	return ""
}

// acceptPeer is the control channel's check of a peer whose certificate
// chains to the CA (control.Config.AcceptPeer), on both sides: the
// gateway must not be denied, gossip must know it, and its certificate's
// identity (name, mrgw://REGION/NAME) must be what it announces there. A
// certificate without a region (minted before regions) is accepted only
// when control.peer_names or regions[].gateways[] lists the gateway: an
// operator vouches for it (configurations before fleets keep working).
func (g *Gateway) acceptPeer(id pki.PeerIdentity) error {
	cfg := g.Config()
	gw, seen := g.cluster.View().Gateway(id.Name)
	region := id.Region
	if region == "" && seen {
		region = gw.Meta.Region
	}
	if why := denied(cfg, region, id.Name, id.Serial); why != "" {
		return fmt.Errorf("%w: %s (%s)", control.ErrPeerDenied, id.Name, why)
	}
	switch {
	case !seen:
		return fmt.Errorf("%w: gossip has not announced %q", control.ErrUnknownPeer, id.Name)
	case gw.Meta.Region == cfg.Node.Region:
		return fmt.Errorf("%w: %q is a gateway of this gateway's own region", control.ErrUnknownPeer, id.Name)
	case id.Region == "" && !vouched(cfg, gw.Meta.Region, id.Name):
		return fmt.Errorf("%w: the certificate of %q names no region (no %s://REGION/NAME URI): reissue it with mrgw cert REGION/NAME, or list the gateway in control.peer_names or under regions",
			control.ErrIdentityMismatch, id.Name, pki.IdentityScheme)
	case id.Region != "" && id.Region != gw.Meta.Region:
		return fmt.Errorf("%w: certificate %s, but gossip announces %q in region %q",
			control.ErrIdentityMismatch, pki.IdentityURI(id.Region, id.Name), id.Name, gw.Meta.Region)
	}
	return nil
}

// syncPeers makes the peer table follow the gossip view: a peer for every
// live gateway of another region (addresses refreshed when they change),
// none for denied ones, and teardown of those dead or gone for
// peerLinger. Called by watchGossip on every change and every
// peerSyncEvery.
func (g *Gateway) syncPeers() {
	g.syncMu.Lock()
	defer g.syncMu.Unlock()
	// No peer before the first join: that is when the gateway learns
	// whether another holds its name, and a session under a name in use
	// replaces the holder's at every peer.
	if g.ctx.Err() != nil || !g.joined.Load() {
		return
	}
	cfg := g.Config()
	view := g.cluster.View()
	g.syncShare(cfg, view)
	now := time.Now()
	seen := map[string]bool{}
	for reg, gws := range view.Regions {
		if reg == cfg.Node.Region {
			continue
		}
		for _, gw := range gws {
			if gw.Name == cfg.Node.Name {
				continue
			}
			seen[gw.Name] = true
			p := g.peer(gw.Name)
			if p != nil && p.region != reg {
				g.removePeer(p, "moved to region "+reg)
				p = nil
			}
			if why := denied(cfg, reg, gw.Name, nil); why != "" {
				if p != nil {
					g.removePeer(p, why)
				}
				continue
			}
			if !gw.State.Live() {
				if p != nil && now.Sub(gw.Since) >= peerLinger {
					g.removePeer(p, fmt.Sprintf("gossip: %s for %s", gw.State, now.Sub(gw.Since).Round(time.Second)))
				}
				continue
			}
			if !wireCompatible(gw) {
				if p == nil {
					g.peerRefusals.Warn("wire", "peer gateway speaks no wire version this gateway does", "peer", gw.Name, "region", reg, "versions", gw.Meta.Wire)
				}
				continue
			}
			ctl, dests, rtt, err := peerAddrs(cfg, gw)
			if err != nil {
				g.peerRefusals.Warn("addrs", "peer gateway cannot be reached", "peer", gw.Name, "region", reg, "err", err)
				continue
			}
			if p == nil {
				g.addPeer(cfg, gw, ctl, dests, rtt)
			} else {
				p.setAddrs(ctl, dests)
			}
		}
	}
	for _, p := range g.peerList() {
		if !seen[p.name] {
			g.removePeer(p, "gone from gossip")
		}
	}
}

// addPeer makes a peer of gateway gw and starts its loop.
func (g *Gateway) addPeer(cfg *config.Config, gw region.Gateway, ctl string, dests []netip.AddrPort, rtt time.Duration) {
	g.pt.mu.Lock()
	if g.pt.byName[gw.Name] != nil {
		g.pt.mu.Unlock()
		return
	}
	if len(g.pt.byName) >= maxWANPeers {
		full := g.pt.full
		g.pt.full = true
		g.pt.mu.Unlock()
		if !full {
			g.log.Warn("peer gateways at their bound: gateways beyond it are not connected", "bound", maxWANPeers, "peer", gw.Name, "region", gw.Meta.Region)
		}
		return
	}
	g.pt.full = false
	p := newWANPeer(g, cfg, gw, g.peerIDOf(gw.Name), ctl, dests, rtt)
	g.pt.byName[p.name] = p
	g.pt.byID[p.id] = p
	g.pt.mu.Unlock()
	g.initPeerMetrics(p)
	g.log.Info("peer gateway discovered", "peer", p.name, "region", p.region, "control", ctl, "wan", dests, "id", p.id)
	p.start()
}

// removePeer takes a peer out of the table and tears it down
// (wanPeer.stop).
func (g *Gateway) removePeer(p *wanPeer, reason string) {
	g.pt.mu.Lock()
	if g.pt.byName[p.name] != p {
		g.pt.mu.Unlock()
		return
	}
	delete(g.pt.byName, p.name)
	delete(g.pt.byID, p.id)
	g.pt.mu.Unlock()
	p.stop(reason)
}

// initPeerMetrics creates a newly discovered peer's series at zero, as
// metrics.Init does at start for the configuration's (existing series
// keep their values).
func (g *Gateway) initPeerMetrics(p *wanPeer) {
	cfg := g.Config()
	var planes []string
	for _, pl := range cfg.WAN.Planes {
		planes = append(planes, pl.Name)
	}
	g.metrics.Init(metrics.Topology{Region: cfg.Node.Region, Peers: []metrics.PeerName{{Name: p.name, Region: p.region}},
		Planes: planes, Paths: cfg.WAN.PathsPerPeer, PlaneOfPath: func(i int) string { return planeNameOf(planes, i) }})
}

// unseenGateways lists the gateways regions[].gateways[] names that gossip
// has never shown alive, once unseenAfter has passed since the start
// (before, they may be starting): "REGION/NAME".
func (g *Gateway) unseenGateways(view region.View) []string {
	if g.startedAt.IsZero() || time.Since(g.startedAt) < unseenAfter {
		return nil
	}
	var out []string
	for _, r := range g.Config().Regions {
		for _, pin := range r.Gateways {
			if gw, ok := view.Gateway(pin.Name); !ok || gw.Meta.Region != r.Name {
				out = append(out, r.Name+"/"+pin.Name)
			}
		}
	}
	return out
}

// closeDenied ends the sessions of peers a reloaded control.deny refuses.
func (g *Gateway) closeDenied(cfg *config.Config) {
	for _, p := range g.peerList() {
		var serial *big.Int
		if s := p.session(); s != nil {
			serial = s.Peer().Serial
		}
		if why := denied(cfg, p.region, p.name, serial); why != "" {
			g.removePeer(p, why)
		}
	}
}

// pinnedRegion: the configuration lists region under regions.
func (g *Gateway) pinnedRegion(region string) bool {
	return slices.ContainsFunc(g.Config().Regions, func(r config.Region) bool { return r.Name == region })
}

// vouched: the configuration names gateway name (of region) explicitly.
func vouched(cfg *config.Config, region, name string) bool {
	_, pin := gatewayPin(cfg, region, name)
	return pin != nil || slices.Contains(cfg.Control.PeerNames, name)
}

// PeerID returns the endpoint peer id of peer gateway name (a hash of the
// name, the same on every gateway unless two names collide), if it is a
// peer now.
func (g *Gateway) PeerID(name string) (metaroce.PeerID, bool) {
	if p := g.peer(name); p != nil {
		return p.id, true
	}
	return 0, false
}

// FlowRoutes returns, for every outbound flow open at this gateway (a
// local host's flow to another region), the gateway of the destination
// region it is relayed to.
func (g *Gateway) FlowRoutes() map[uint64]string {
	out := map[uint64]string{}
	_ = g.ep.Call(context.Background(), func(time.Duration, *metaroce.Endpoint) {
		for id, f := range g.relay.flows {
			if f.outbound && f.state == flowOpen && f.down != nil && f.down.wan != nil {
				out[id] = f.down.wan.name
			}
		}
	})
	return out
}

// Detoured returns, read on the owner goroutine (not a StatsEvery
// snapshot), how many routes took another gateway than the one the
// placement rule picks among those with an established WAN connection
// (Status.Flows.Detoured says when).
func (g *Gateway) Detoured() uint64 {
	var n uint64
	_ = g.ep.Call(context.Background(), func(time.Duration, *metaroce.Endpoint) { n = g.relay.detoured })
	return n
}

func resolveUDP(s string) (netip.AddrPort, error) {
	if a, err := netip.ParseAddrPort(s); err == nil {
		return a, nil
	}
	ua, err := net.ResolveUDPAddr("udp", s)
	if err != nil {
		return netip.AddrPort{}, err
	}
	return ua.AddrPort(), nil
}
