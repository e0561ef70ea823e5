package gateway

import (
	"net/netip"

	"github.com/mrgw/mrgw/config"
	"github.com/mrgw/mrgw/metaroce"
	"github.com/mrgw/mrgw/netio/seal"
	"github.com/mrgw/mrgw/units"
)

// IP and UDP header bytes of a WAN datagram: IPv4 20 + UDP 8, IPv6 40 + 8.
const (
	ipv4UDPHeaders = 28
	ipv6UDPHeaders = 48
)

// wanRate is wan.max_rate_bps, a rate on the wire, in the bytes the WAN
// connections' controllers, egress share and receive capacity count: a
// DATA datagram's header and payload. The link also carries each
// datagram's AEAD envelope and its IP and UDP headers; senders paced at
// the link's own rate would overdrive it by that share (56 of 1,484 bytes
// at wan.mtu 1400, 3.9%) and keep its queue full.
func wanRate(cfg *config.Config) units.BitRate {
	r := cfg.WAN.MaxRate()
	if r <= 0 {
		return r
	}
	hdr := ipv4UDPHeaders
	if len(cfg.WAN.Planes) > 0 {
		if a, err := netip.ParseAddrPort(cfg.WAN.Planes[0].Local); err == nil && a.Addr().Is6() && !a.Addr().Is4In6() {
			hdr = ipv6UDPHeaders
		}
	}
	data := cfg.WAN.MTU + metaroce.DataHeaderLenV2
	return units.BitRate(float64(r) * float64(data) / float64(data+seal.Overhead+hdr))
}
