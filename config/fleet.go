package config

import (
	"fmt"
	"net/netip"
)

// Fleet checks configurations meant to run side by side (the files of one
// deployment) against each other: two gateways with one node.name take
// each other's control sessions at every peer, and two with one address
// cannot both bind it. It returns, for each configuration, the problems
// found against the ones before it (names[i] names cfgs[i] in the
// messages), each naming its key. Wildcard addresses (0.0.0.0:port) are
// compared by port only when both are on one host, which a file cannot
// say: they are left out. The gateways of one region must agree on
// wan.region_rate_bps, which each divides by the region's gossip view: a
// gateway told more takes more than its part.
func Fleet(names []string, cfgs []*Config) [][]error {
	out := make([][]error, len(cfgs))
	type owner struct {
		file, key string
	}
	byName := map[string]owner{}
	byAddr := map[netip.AddrPort]owner{}
	regionRate := map[string]int{} // region → the first of its files
	for i, c := range cfgs {
		if c == nil {
			continue
		}
		if j, ok := regionRate[c.Node.Region]; !ok {
			regionRate[c.Node.Region] = i
		} else if r := cfgs[j].WAN.RegionRateBps; r != c.WAN.RegionRateBps {
			out[i] = append(out[i], fieldErr("wan.region_rate_bps", "%d differs from %s's %d in region %q: the gateways of a region share one rate and must agree on it",
				c.WAN.RegionRateBps, names[j], r, c.Node.Region))
		}
		if o, ok := byName[c.Node.Name]; ok {
			out[i] = append(out[i], fieldErr("node.name", "%q is also the node.name of %s: every gateway needs a name of its own (a second one under a name in use is refused at start)", c.Node.Name, o.file))
		} else {
			byName[c.Node.Name] = owner{names[i], "node.name"}
		}
		for _, a := range addrKeys(c) {
			ap, err := netip.ParseAddrPort(a.addr)
			if err != nil || ap.Addr().IsUnspecified() || ap.Port() == 0 {
				continue
			}
			if o, ok := byAddr[ap]; ok {
				out[i] = append(out[i], fieldErr(a.key, "%s is also %s of %s: two gateways cannot share an address", ap, o.key, o.file))
				continue
			}
			byAddr[ap] = owner{names[i], a.key}
		}
	}
	return out
}

type addrKey struct{ key, addr string }

// addrKeys are the addresses a gateway binds or announces, by key. An
// address a file uses under two keys of its own (a TCP and a UDP socket
// on one port) is validation's business, not the fleet's.
func addrKeys(c *Config) []addrKey {
	var out []addrKey
	add := func(key, addr string) {
		if addr == "" {
			return
		}
		for _, o := range out {
			if o.addr == addr {
				return
			}
		}
		out = append(out, addrKey{key, addr})
	}
	add("lan.listen", c.LAN.Listen)
	add("control.listen", c.Control.Listen)
	add("gossip.bind", c.Gossip.Bind)
	add("gossip.advertise", c.Gossip.Advertise)
	add("admin.listen", c.Admin.Listen)
	for i, p := range c.WAN.Planes {
		add(fmt.Sprintf("wan.planes[%d].local", i), p.Local)
		add(fmt.Sprintf("wan.planes[%d].advertise", i), p.Advertise)
	}
	return out
}
