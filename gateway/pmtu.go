//go:build linux

package gateway

import (
	"net/netip"

	"github.com/mrgw/mrgw/config"
	"github.com/mrgw/mrgw/metaroce"
	"github.com/mrgw/mrgw/netio/seal"
)

// Path MTU discovery on the WAN (metaroce.PMTUSearch): every WAN
// connection searches each plane's usable datagram size, from the base
// (1200 bytes, which every path carries) up to the datagram of a full DATA
// packet at wan.mtu; a plane carries data only once it has validated that
// size. The WAN sockets send with DF set and are never fragmented
// (udpOptions). Status shows each plane's search per peer, and
// mrgw_path_mtu_bytes its result.

// wanPMTU is the discovery configuration of WAN connections: the planes
// are the groups (path i uses plane i mod planes), the envelope is the
// overhead; Options.PMTU may tune the timings.
func (g *Gateway) wanPMTU(cfg *config.Config) metaroce.PMTUConfig {
	p := g.opts.PMTU
	p.Groups = max(len(cfg.WAN.Planes), 1)
	p.Overhead = seal.Overhead
	p.Max = 0 // the datagram of a full DATA packet at wan.mtu
	return p
}

// PlaneMTUStatus is one plane's path MTU discovery towards a peer.
type PlaneMTUStatus struct {
	Plane string `json:"plane"`
	// State is "searching" or "complete".
	State string `json:"state"`
	// PMTU is the validated path MTU: the largest IP packet known to
	// cross (Datagram plus the IP and UDP headers).
	PMTU     int `json:"pmtu_bytes"`
	Datagram int `json:"datagram_bytes"`
	// Data reports whether the plane carries data: it validated a full
	// data datagram (DataDatagram bytes, set by wan.mtu).
	Data         bool   `json:"carries_data"`
	DataDatagram int    `json:"data_datagram_bytes"`
	ProbesSent   uint64 `json:"probes_sent"`
	ProbesLost   uint64 `json:"probes_lost"`
	BlackHoles   uint64 `json:"black_holes"`
	TooBig       uint64 `json:"too_big"`
}

// ipHeaders is what IP and UDP add to a datagram on plane i.
func ipHeaders(cfg *config.Config, plane int) int {
	if plane < len(cfg.WAN.Planes) {
		if a, err := netip.ParseAddrPort(cfg.WAN.Planes[plane].Local); err == nil && a.Addr().Unmap().Is6() {
			return 48
		}
	}
	return 28
}

// pmtuStatus is c's discovery per plane; it sets mrgw_path_mtu_bytes.
// Owner goroutine.
func (g *Gateway) pmtuStatus(p *wanPeer, c *metaroce.Conn) []PlaneMTUStatus {
	groups := c.PMTU()
	if len(groups) == 0 {
		return nil
	}
	cfg := g.Config()
	out := make([]PlaneMTUStatus, 0, len(groups))
	data := c.MaxDataLen() + seal.Overhead
	for _, gr := range groups {
		name := g.planeName(gr.Group)
		s := PlaneMTUStatus{Plane: name, State: gr.State.String(), Datagram: gr.Size,
			PMTU: gr.Size + ipHeaders(cfg, gr.Group), Data: gr.Data, DataDatagram: data,
			ProbesSent: gr.Stats.ProbesSent, ProbesLost: gr.Stats.ProbesLost,
			BlackHoles: gr.Stats.BlackHoles, TooBig: gr.Stats.TooBig}
		out = append(out, s)
		g.metrics.SetPathMTU(p.name, p.region, name, s.PMTU)
	}
	return out
}
