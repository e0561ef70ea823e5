package gateway

import (
	"github.com/mrgw/mrgw/config"
	"github.com/mrgw/mrgw/metrics"
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
	if d.KernelErr == nil {
		g.metrics.SyncLANDropped(metrics.LANDropBuffer, d.Kernel)
	}
}
