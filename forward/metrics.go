//go:build linux

package forward

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/mrgw/mrgw/stream"
)

// collector exports a Forwarder's and its Mux's counters.
type collector struct {
	f                                     *Forwarder
	m                                     *stream.Mux
	conns, active, refused, resets, bytes *prometheus.Desc
	streams, streamRefused, dropped       *prometheus.Desc
}

// Collector returns the Prometheus collector of f and the Mux under it:
// mrgw_forward_connections_total{side}, mrgw_forward_active,
// mrgw_forward_refused_total{reason}, mrgw_forward_resets_total,
// mrgw_forward_bytes_total{direction}, mrgw_stream_open,
// mrgw_stream_refused_total{reason}, mrgw_stream_dropped_total.
func Collector(f *Forwarder, m *stream.Mux) prometheus.Collector {
	return &collector{f: f, m: m,
		conns:         prometheus.NewDesc("mrgw_forward_connections_total", "Connections accepted: side=local (TCP clients) or expose (streams).", []string{"side"}, nil),
		active:        prometheus.NewDesc("mrgw_forward_active", "Connections being forwarded now.", nil, nil),
		refused:       prometheus.NewDesc("mrgw_forward_refused_total", "Connections reset before forwarding, by reason.", []string{"reason"}, nil),
		resets:        prometheus.NewDesc("mrgw_forward_resets_total", "Forwarded connections that ended in a reset.", nil, nil),
		bytes:         prometheus.NewDesc("mrgw_forward_bytes_total", "Bytes forwarded: out (local clients to streams), in (streams to targets), back (answers).", []string{"direction"}, nil),
		streams:       prometheus.NewDesc("mrgw_stream_open", "Stream ends open on this host.", nil, nil),
		streamRefused: prometheus.NewDesc("mrgw_stream_refused_total", "Connection requests this host refused, by reason.", []string{"reason"}, nil),
		dropped:       prometheus.NewDesc("mrgw_stream_dropped_total", "Deliveries that belonged to no stream and were dropped.", nil, nil),
	}
}

// MetricNames lists the metric names Collector exports (the forwarder's,
// not the gateway daemon's catalogue).
func MetricNames() []string {
	return []string{"mrgw_forward_connections_total", "mrgw_forward_active", "mrgw_forward_refused_total",
		"mrgw_forward_resets_total", "mrgw_forward_bytes_total", "mrgw_stream_open", "mrgw_stream_refused_total",
		"mrgw_stream_dropped_total"}
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.conns, c.active, c.refused, c.resets, c.bytes, c.streams, c.streamRefused, c.dropped} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	s := c.f.Stats()
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	counter(c.conns, s.Accepted, "local")
	counter(c.conns, s.Exposed, "expose")
	ch <- prometheus.MustNewConstMetric(c.active, prometheus.GaugeValue, float64(s.Active))
	for _, r := range Reasons {
		counter(c.refused, s.Refused[r], r)
	}
	counter(c.resets, s.Resets)
	counter(c.bytes, s.BytesOut, "out")
	counter(c.bytes, s.BytesIn, "in")
	counter(c.bytes, s.BytesBack, "back")
	ms := c.m.Stats()
	ch <- prometheus.MustNewConstMetric(c.streams, prometheus.GaugeValue, float64(ms.Open))
	counter(c.streamRefused, ms.RefusedNoListener, "no_listener")
	counter(c.streamRefused, ms.RefusedBacklog, "backlog")
	counter(c.streamRefused, ms.RefusedLimit, "limit")
	counter(c.dropped, ms.Dropped)
}
