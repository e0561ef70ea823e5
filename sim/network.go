package sim

import (
	"fmt"
	"time"
)

// Site is one end of the fabric.
type Site uint8

// The two sites.
const (
	SiteA Site = iota
	SiteB
)

func (s Site) String() string {
	switch s {
	case SiteA:
		return "A"
	case SiteB:
		return "B"
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

// Network is the topology: two sites joined by planes, and the hosts attached to them.
type Network struct {
	sim      *Sim
	overhead int
	planes   []*Plane
	hosts    []*Host // hosts[id-1]
	salt     uint64  // ECMP hash salt, from the seed
}

// Plane is one plane of the fabric: a directional link each way.
type Plane struct {
	index int
	ab    *Link
	ba    *Link
}

// NewNetwork builds the fabric on s. Planes are numbered from 0.
func NewNetwork(s *Sim, cfg NetworkConfig) *Network {
	if cfg.Planes < 1 {
		panic(fmt.Sprintf("sim: a network needs at least one plane, got %d", cfg.Planes))
	}
	if cfg.Overhead < 0 {
		panic(fmt.Sprintf("sim: negative Overhead %d", cfg.Overhead))
	}
	n := &Network{sim: s, overhead: cfg.Overhead, salt: mix64(s.cfg.Seed ^ 0x6563_6d70_7361_6c74)}
	for i := 0; i < cfg.Planes; i++ {
		p := &Plane{index: i}
		p.ab = newLink(s, fmt.Sprintf("plane%d:A>B", i), cfg.AtoB, cfg.Overhead, n.toHost)
		p.ba = newLink(s, fmt.Sprintf("plane%d:B>A", i), cfg.BtoA, cfg.Overhead, n.toHost)
		n.planes = append(n.planes, p)
	}
	return n
}

// Sim returns the simulation the network runs on.
func (n *Network) Sim() *Sim { return n.sim }

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

// toFabric sends a datagram leaving a host at site from onto the plane ECMP picks.
func (n *Network) toFabric(from Site, d *Datagram) {
	p := n.planes[n.PlaneOf(d.Src, d.Dst, d.SrcPort, d.DstPort)]
	if from == SiteA {
		p.ab.enqueue(d)
	} else {
		p.ba.enqueue(d)
	}
}

// toHost hands a datagram leaving a plane to its destination's downlink. Dst was checked when
// the datagram was sent.
func (n *Network) toHost(d *Datagram) { n.hosts[d.Dst-1].down.enqueue(d) }

// Index returns the plane's number.
func (p *Plane) Index() int { return p.index }

// AtoB returns the plane's A→B link.
func (p *Plane) AtoB() *Link { return p.ab }

// BtoA returns the plane's B→A link.
func (p *Plane) BtoA() *Link { return p.ba }

// From returns the plane's link leaving site s.
func (p *Plane) From(s Site) *Link {
	if s == SiteA {
		return p.ab
	}
	return p.ba
}

// SetDown takes both directions of the plane down (black) or brings them back.
func (p *Plane) SetDown(down bool) {
	p.ab.SetDown(down)
	p.ba.SetDown(down)
}

// SetLoss sets the loss probability of both directions.
func (p *Plane) SetLoss(prob float64) {
	p.ab.SetLoss(prob)
	p.ba.SetLoss(prob)
}

// SetRate sets the rate of both directions.
func (p *Plane) SetRate(bps int64) {
	p.ab.SetRate(bps)
	p.ba.SetRate(bps)
}

// ScheduleDown calls SetDown(down) at virtual time t.
func (p *Plane) ScheduleDown(t time.Duration, down bool) {
	p.ab.sim.At(t, func() { p.SetDown(down) })
}

// ScheduleOutage takes the plane down at from and brings it back at to.
func (p *Plane) ScheduleOutage(from, to time.Duration) {
	p.ScheduleDown(from, true)
	p.ScheduleDown(to, false)
}
