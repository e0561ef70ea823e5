package sim

import "fmt"

// TopologyConfig describes a multi-site network before its links are added: how many sites
// (regions) and how many planes. Links and routes are added with [Network.AddLink] and
// [Network.SetRoute].
type TopologyConfig struct {
	Sites  int // at least 2, at most 256
	Planes int // at least 1
	// Overhead is added to len(Data) on every link, as in NetworkConfig.
	Overhead int
}

// NewTopology returns a network of cfg.Sites sites and cfg.Planes planes with no fabric links
// yet. Build it with AddLink and SetRoute before the first datagram is sent: a datagram whose
// plane has no route between its sites is dropped and counted in Stats.Unroutable.
//
// A route is a sequence of fabric links, crossed in order (each store-and-forward, as in the
// package documentation); the same link may appear in the routes of several site pairs, which
// is how several region pairs share a long-haul segment and its queue. ECMP picks the plane
// per datagram exactly as in the two-site network.
func NewTopology(s *Sim, cfg TopologyConfig) *Network {
	if cfg.Sites < 2 || cfg.Sites > 256 {
		panic(fmt.Sprintf("sim: a topology needs 2 to 256 sites, got %d", cfg.Sites))
	}
	if cfg.Planes < 1 {
		panic(fmt.Sprintf("sim: a network needs at least one plane, got %d", cfg.Planes))
	}
	if cfg.Overhead < 0 {
		panic(fmt.Sprintf("sim: negative Overhead %d", cfg.Overhead))
	}
	n := &Network{sim: s, overhead: cfg.Overhead, sites: cfg.Sites, salt: mix64(s.cfg.Seed ^ 0x6563_6d70_7361_6c74)}
	for i := 0; i < cfg.Planes; i++ {
		n.planes = append(n.planes, &Plane{index: i})
	}
	n.routes = make([][]*Link, cfg.Sites*cfg.Sites*cfg.Planes)
	return n
}

// AddLink adds a directional fabric link to plane and returns it. Its loss stream is the next
// of the Sim's, so adding links in the same order gives the same run.
func (n *Network) AddLink(plane int, name string, cfg LinkConfig) *Link {
	p := n.planes[plane]
	l := newLink(n.sim, name, cfg, n.overhead, n.forward)
	p.links = append(p.links, l)
	return l
}

// SetRoute sets the fabric links a datagram from site from to site to crosses on plane, in
// order. It panics on an unknown site, a route from a site to itself, an empty route or a link
// of another network.
func (n *Network) SetRoute(from, to Site, plane int, links ...*Link) {
	if int(from) >= n.sites || int(to) >= n.sites || from == to {
		panic(fmt.Sprintf("sim: no route from %v to %v in a network of %d sites", from, to, n.sites))
	}
	if plane < 0 || plane >= len(n.planes) {
		panic(fmt.Sprintf("sim: no plane %d", plane))
	}
	if len(links) == 0 {
		panic("sim: an empty route")
	}
	for _, l := range links {
		if l == nil || l.sim != n.sim {
			panic("sim: a route through a link of another network")
		}
	}
	n.routes[n.routeIndex(from, to, plane)] = append([]*Link(nil), links...)
}

// Route returns the links from site from to site to on plane (nil if none). The slice must not
// be modified.
func (n *Network) Route(from, to Site, plane int) []*Link {
	return n.routes[n.routeIndex(from, to, plane)]
}

func (n *Network) routeIndex(from, to Site, plane int) int {
	return (int(from)*n.sites+int(to))*len(n.planes) + plane
}
