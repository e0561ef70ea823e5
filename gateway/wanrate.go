package gateway

import (
	"net/netip"

	"github.com/mrgw/mrgw/config"
	"github.com/mrgw/mrgw/metaroce"
	"github.com/mrgw/mrgw/netio/seal"
	"github.com/mrgw/mrgw/region"
	"github.com/mrgw/mrgw/units"
)

// IP and UDP header bytes of a WAN datagram: IPv4 20 + UDP 8, IPv6 40 + 8.
const (
	ipv4UDPHeaders = 28
	ipv6UDPHeaders = 48
)

// regionShare is this gateway's part of wan.region_rate_bps: its
// node.capacity (mine) over the sum over its region's live gateways in
// gossip, itself included (total). The zero value is a gateway alone in
// its region, which takes the whole rate.
type regionShare struct{ mine, total uint32 }

// shareOf reads this gateway's part of its region in a gossip view. Live
// gateways (alive or suspect, the ones flows are routed to) count unless
// silent says they stopped answering direct probes: a dead or departed
// one's part goes to the others.
func shareOf(cfg *config.Config, view region.View, silent func(name string) bool) regionShare {
	mine := region.Meta{Capacity: uint32(cfg.Node.Capacity)}.Weight()
	s := regionShare{mine: mine, total: mine}
	for _, gw := range view.Regions[cfg.Node.Region] {
		if gw.Name != cfg.Node.Name && gw.State.Live() && !silent(gw.Name) {
			s.total += gw.Meta.Weight()
		}
	}
	return s
}

// of is this share of a rate (the whole of it for the zero value).
func (s regionShare) of(r units.BitRate) units.BitRate {
	if s.total == 0 {
		return r
	}
	return units.BitRate(float64(r) * float64(s.mine) / float64(s.total))
}

// regionPart is this gateway's part of wan.region_rate_bps: the static
// share, and the demand-aware fraction of the rate (regiondemand.go) once
// the demand exchange has computed one (0: none, the static share holds).
type regionPart struct {
	share regionShare
	frac  float64
}

// of is this part of a rate.
func (p regionPart) of(r units.BitRate) units.BitRate {
	if p.frac > 0 {
		return units.BitRate(float64(r) * min(p.frac, 1))
	}
	return p.share.of(r)
}

// wanWire is the gateway's WAN capacity on the wire: wan.max_rate_bps, its
// part of wan.region_rate_bps, or the smaller when both are set (0: none).
func wanWire(cfg *config.Config, part regionPart) units.BitRate {
	r := cfg.WAN.MaxRate()
	if rr := cfg.WAN.RegionRate(); rr > 0 {
		p := part.of(rr)
		if r <= 0 || p < r {
			r = p
		}
	}
	return r
}

// wanRate is wanWire in the bytes the WAN connections' controllers, egress
// share and receive capacity count: a DATA datagram's header and payload.
// The link also carries each datagram's AEAD envelope and its IP and UDP
// headers; senders paced at the link's own rate would overdrive it by that
// share (56 of 1,484 bytes at wan.mtu 1400, 3.9%) and keep its queue full.
func wanRate(cfg *config.Config, part regionPart) units.BitRate {
	r := wanWire(cfg, part)
	if r <= 0 {
		return r
	}
	data, wire := datagramBytes(cfg)
	return units.BitRate(float64(r) * float64(data) / float64(wire))
}

// wireFactor is the wire bytes per byte of a full DATA datagram's content
// (header and payload): its AEAD envelope and IP and UDP headers added.
func wireFactor(cfg *config.Config) float64 {
	data, wire := datagramBytes(cfg)
	return float64(wire) / float64(data)
}

// datagramBytes are a full DATA datagram's content (header and payload)
// and its size on the wire.
func datagramBytes(cfg *config.Config) (data, wire int) {
	hdr := ipv4UDPHeaders
	if len(cfg.WAN.Planes) > 0 {
		if a, err := netip.ParseAddrPort(cfg.WAN.Planes[0].Local); err == nil && a.Addr().Is6() && !a.Addr().Is4In6() {
			hdr = ipv6UDPHeaders
		}
	}
	data = cfg.WAN.MTU + metaroce.DataHeaderLenV2
	return data, data + seal.Overhead + hdr
}

func packShare(s regionShare) uint64 { return uint64(s.mine)<<32 | uint64(s.total) }

func unpackShare(v uint64) regionShare { return regionShare{mine: uint32(v >> 32), total: uint32(v)} }
