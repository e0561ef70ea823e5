package sim

import (
	"fmt"
	"time"
)

// Site is a place hosts attach to: one end of the two-site fabric of [NewNetwork], or one
// region of a [NewTopology].
type Site uint8

// The two sites of NewNetwork (also the first two of a topology).
const (
	SiteA Site = iota
	SiteB
)

// String names sites by letter: A, B, C, ...
func (s Site) String() string {
	if s < 26 {
		return string(rune('A' + s))
	}
	return fmt.Sprintf("Site(%d)", uint8(s))
}

// protoUDP is the protocol field of the ECMP 5-tuple: every datagram here is UDP.
const protoUDP = 17

// NetworkConfig describes the fabric between the two sites.
type NetworkConfig struct {
	Planes int        // number of planes, at least 1
	AtoB   LinkConfig // every plane's A→B link (change one plane later through Plane(i))
	BtoA   LinkConfig // every plane's B→A link
	// Overhead is added to len(Data) on every link, for serialization and queue accounting:
	// the headers below the protocol packet (e.g. 14+20+8 for Ethernet/IPv4/UDP). 0 by default.
	Overhead int
}

// Network is the topology: sites joined by planes, and the hosts attached to them. Each plane
// holds a route (a sequence of fabric links) from every site to every other site it serves;
// in the two-site network of NewNetwork a route is the plane's single link in that direction.
type Network struct {
	sim      *Sim
	overhead int
	sites    int
	planes   []*Plane
	routes   [][]*Link // routes[(from*sites+to)*planes+plane]
	hosts    []*Host   // hosts[id-1]
	salt     uint64    // ECMP hash salt, from the seed
}

// Plane is one plane of the fabric: the fabric links it owns and, through the Network, its
// routes between sites.
type Plane struct {
	index int
	links []*Link
	ab    *Link // NewNetwork only
	ba    *Link // NewNetwork only
}

// NewNetwork builds the two-site fabric on s: P planes, each a directional link A→B and one
// B→A. Planes are numbered from 0.
func NewNetwork(s *Sim, cfg NetworkConfig) *Network {
	n := NewTopology(s, TopologyConfig{Sites: 2, Planes: cfg.Planes, Overhead: cfg.Overhead})
	for i, p := range n.planes {
		p.ab = n.AddLink(i, fmt.Sprintf("plane%d:A>B", i), cfg.AtoB)
		p.ba = n.AddLink(i, fmt.Sprintf("plane%d:B>A", i), cfg.BtoA)
		n.SetRoute(SiteA, SiteB, i, p.ab)
		n.SetRoute(SiteB, SiteA, i, p.ba)
	}
	return n
}

// Sim returns the simulation the network runs on.
func (n *Network) Sim() *Sim { return n.sim }

// Sites returns the number of sites.
func (n *Network) Sites() int { return n.sites }

// Planes returns the number of planes.
func (n *Network) Planes() int { return len(n.planes) }

// Plane returns plane i, 0 <= i < Planes().
func (n *Network) Plane(i int) *Plane { return n.planes[i] }

// Hosts returns the hosts in order of their IDs. The slice must not be modified.
func (n *Network) Hosts() []*Host { return n.hosts }

// NextHostID returns the ID the next AddHost will give, for endpoints that must know their
// own address before they are attached.
func (n *Network) NextHostID() HostID { return HostID(len(n.hosts) + 1) }

// Host returns the host with the given ID, or nil.
func (n *Network) Host(id HostID) *Host {
	if id == 0 || int(id) > len(n.hosts) {
		return nil
	}
	return n.hosts[id-1]
}

// PlaneOf returns the plane ECMP picks for a datagram with this 5-tuple. It is a pure function
// of the tuple and the seed: a flow always takes one plane, and another source port takes an
// independent pick (the same plane with probability 1/P).
func (n *Network) PlaneOf(src, dst HostID, srcPort, dstPort uint16) int {
	h := mix64(n.salt ^ (uint64(src)<<32 | uint64(dst)))
	h = mix64(h ^ (uint64(srcPort)<<32 | uint64(dstPort)<<16 | protoUDP))
	// Lemire's multiply-shift reduction: unbiased enough for small P and cheaper than %.
	return int(((h >> 32) * uint64(len(n.planes))) >> 32)
}

// toFabric sends a datagram leaving a host at site from onto the first link of the route of
// the plane ECMP picks. Dst was checked when the datagram was sent.
func (n *Network) toFabric(from Site, d *Datagram) {
	to := n.hosts[d.Dst-1].site
	route := n.routes[n.routeIndex(from, to, n.PlaneOf(d.Src, d.Dst, d.SrcPort, d.DstPort))]
	if len(route) == 0 {
		n.sim.stats.Unroutable++
		n.sim.free(d)
		return
	}
	d.route, d.hop = route, 0
	route[0].enqueue(d)
}

// forward is the next hop of every fabric link: the next link of the datagram's route, or its
// destination's downlink at the end of it.
func (n *Network) forward(d *Datagram) {
	d.hop++
	if d.hop < len(d.route) {
		d.route[d.hop].enqueue(d)
		return
	}
	d.route = nil
	n.hosts[d.Dst-1].down.enqueue(d)
}

// Index returns the plane's number.
func (p *Plane) Index() int { return p.index }

// Links returns the fabric links of the plane in the order they were added. The slice must not
// be modified.
func (p *Plane) Links() []*Link { return p.links }

// AtoB returns the plane's A→B link in a network built by NewNetwork (nil in a topology).
func (p *Plane) AtoB() *Link { return p.ab }

// BtoA returns the plane's B→A link in a network built by NewNetwork (nil in a topology).
func (p *Plane) BtoA() *Link { return p.ba }

// From returns the plane's link leaving site s in a network built by NewNetwork.
func (p *Plane) From(s Site) *Link {
	if s == SiteA {
		return p.ab
	}
	return p.ba
}

// SetDown takes every link of the plane down (black) or brings them back.
func (p *Plane) SetDown(down bool) {
	for _, l := range p.links {
		l.SetDown(down)
	}
}

// SetLoss sets the loss probability of every link of the plane.
func (p *Plane) SetLoss(prob float64) {
	for _, l := range p.links {
		l.SetLoss(prob)
	}
}

// SetRate sets the rate of every link of the plane.
func (p *Plane) SetRate(bps int64) {
	for _, l := range p.links {
		l.SetRate(bps)
	}
}

// ScheduleDown calls SetDown(down) at virtual time t.
func (p *Plane) ScheduleDown(t time.Duration, down bool) {
	if len(p.links) == 0 {
		return
	}
	p.links[0].sim.At(t, func() { p.SetDown(down) })
}

// ScheduleOutage takes the plane down at from and brings it back at to.
func (p *Plane) ScheduleOutage(from, to time.Duration) {
	p.ScheduleDown(from, true)
	p.ScheduleDown(to, false)
}
