package gateway

import (
	"net"

	"github.com/mrgw/mrgw/config"
	"github.com/mrgw/mrgw/metaroce"
	"github.com/mrgw/mrgw/metrics"
	"github.com/mrgw/mrgw/netio/udp"
	"github.com/mrgw/mrgw/tunnel/control"
	"github.com/mrgw/mrgw/tunnel/pki"
)

// newMetrics builds the gateway's metric catalogue with every series the
// configuration makes known (regions, peers, planes, paths, and the fixed
// reasons and results) created at zero: a healthy gateway serves every
// family the dashboard and the alerts read before the first event, and
// increase() sees that event.
func newMetrics(cfg *config.Config) *metrics.Metrics {
	m := metrics.New(metrics.WithIdentity(cfg.Node.Name, cfg.Node.Region), metrics.WithMaxPaths(cfg.WAN.PathsPerPeer))
	var planes []string
	for _, p := range cfg.WAN.Planes {
		planes = append(planes, p.Name)
	}
	t := metrics.Topology{Region: cfg.Node.Region, Planes: planes, Paths: cfg.WAN.PathsPerPeer,
		PlaneOfPath: func(i int) string { return planeNameOf(planes, i) }}
	for _, r := range cfg.Regions {
		for _, gw := range r.Gateways {
			t.Peers = append(t.Peers, metrics.PeerName{Name: gw.Name, Region: r.Name})
		}
	}
	m.Init(t)
	return m
}

// planeNameOf names the plane path id i is sent from (paths are spread
// over the planes in turn).
func planeNameOf(planes []string, i int) string {
	if len(planes) == 0 {
		return "default"
	}
	return planes[i%len(planes)]
}

// setCertMetrics shows when the control channel's certificates expire:
// this gateway's own, and the earliest of the CA bundle.
func setCertMetrics(m *metrics.Metrics, creds *pki.Credentials) {
	if creds.Identity != nil && creds.Identity.Cert != nil {
		m.SetCertExpiry(metrics.CertGateway, creds.Identity.Cert.NotAfter)
	}
	for i, ca := range creds.CAs {
		if i == 0 || ca.NotAfter.Before(creds.CAs[0].NotAfter) {
			m.SetCertExpiry(metrics.CertCA, ca.NotAfter)
		}
	}
}

// syncLANDrops folds the LAN socket's drop counters into
// mrgw_lan_datagrams_dropped_total.
func (g *Gateway) syncLANDrops() {
	d := g.ep.ListenDrops()
	g.metrics.SyncLANDropped(metrics.LANDropUnknownSource, d.UnknownSource)
	g.metrics.SyncLANDropped(metrics.LANDropTruncated, d.Truncated)
	g.metrics.SyncLANDropped(metrics.LANDropMalformed, d.Malformed)
	if d.KernelErr == nil {
		g.metrics.SyncLANDropped(metrics.LANDropBuffer, d.Kernel)
	}
}

// syncProtocolDrops folds the MetaRoCE state machine's drop counters
// (metaroce.EndpointStats: datagrams netio attributed to a host or peer
// gateway that no connection took) into
// mrgw_protocol_datagrams_dropped_total. Called on the endpoint's owner
// goroutine (ep is not safe for concurrent use).
func (g *Gateway) syncProtocolDrops(ep *metaroce.Endpoint) {
	s := ep.Stats
	g.metrics.SyncProtocolDropped(map[string]uint64{
		"truncated": s.Truncated, "bad_version": s.BadVersion, "bad_type": s.BadType,
		"malformed": s.Malformed, "unknown_conn": s.UnknownConn, "refused": s.Refused,
	})
}

// syncControlDrops folds the control listener's counters (what reached
// control.listen and got no connection, handshakes in progress and timed
// out) and its socket's kernel drops into the mrgw_control_* families.
func (g *Gateway) syncControlDrops() {
	if g.listener == nil {
		return
	}
	st := g.listener.Stats()
	if rc, err := g.listener.SyscallConn(); err == nil {
		a, _ := g.listener.Addr().(*net.UDPAddr)
		v6 := a != nil && a.IP.To4() == nil
		if n, err := udp.KernelDropsOf(rc, v6); err == nil {
			st.Dropped[control.DropBuffer] = n
		}
	}
	g.metrics.SyncControl(metrics.ControlListener{Dropped: st.Dropped,
		HandshakesInProgress: st.HandshakesInProgress, HandshakeTimeouts: st.HandshakeTimeouts})
}
