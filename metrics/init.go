package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Topology is what the configuration says a gateway will talk to: every
// label set of the peer, region, plane and path families is known from it
// at start.
type Topology struct {
	// Region is this gateway's region (node.region).
	Region string
	// Peers are the remote gateways (regions[].gateways[]) with their
	// regions.
	Peers []PeerName
	// Planes are the wan.planes names, in order.
	Planes []string
	// Paths is wan.paths_per_peer; PlaneOfPath names the plane path id i
	// is sent from.
	Paths       int
	PlaneOfPath func(i int) string
}

// PeerName names a remote gateway and its region.
type PeerName struct{ Name, Region string }

// Init creates, at zero, every series the topology makes known: per remote
// region the message counters, the completion histogram, reachability
// (0 until a connection is up) and gateways alive; per plane the drop
// reasons; per peer its connection, key rotation, datagram and path-avoided
// counters and every path. A healthy gateway then serves every family a
// dashboard or an alert reads before the first event happens, and
// increase() counts that first event. Init may be called again after a
// reload; existing series keep their values.
func (m *Metrics) Init(t Topology) {
	var regions []string
	seen := map[string]bool{}
	for _, p := range t.Peers {
		if !seen[p.Region] {
			seen[p.Region] = true
			regions = append(regions, p.Region)
		}
	}
	for _, r := range regions {
		for _, d := range Directions {
			m.MessagesCompleted.WithLabelValues(r, d)
			m.MessagesFailed.WithLabelValues(r, d)
		}
		m.MessageCompletion.WithLabelValues(r)
		m.RegionReachable.WithLabelValues(r)
	}
	for _, r := range append([]string{t.Region}, regions...) {
		if r == "" {
			continue
		}
		m.PeersAlive.WithLabelValues(r)
		m.ControlSessionsActive.WithLabelValues(r)
	}
	for _, pl := range t.Planes {
		for _, r := range DropReasons {
			m.WANDatagramsDropped.WithLabelValues(pl, r)
		}
	}
	for _, p := range t.Peers {
		m.Peer(p.Name, p.Region)
		for _, pl := range t.Planes {
			m.PathsAvoidedTotal.WithLabelValues(p.Name, p.Region, pl)
			m.SyncWAN(p.Name, p.Region, pl, WANCounters{})
		}
		if t.PlaneOfPath == nil {
			continue
		}
		for i := range min(t.Paths, m.maxPaths) {
			m.Path(p.Name, p.Region, t.PlaneOfPath(i), i)
		}
	}
}

// SetCertExpiry sets mrgw_certificate_expiry_timestamp_seconds of cert
// ([CertGateway] or [CertCA]).
func (m *Metrics) SetCertExpiry(cert string, notAfter time.Time) {
	m.CertExpiry.WithLabelValues(oneOf(cert, Certs)).Set(float64(notAfter.Unix()))
}

// SyncLANDropped folds a cumulative count of LAN datagrams dropped for
// reason into mrgw_lan_datagrams_dropped_total. Safe for concurrent use.
func (m *Metrics) SyncLANDropped(r LANDropReason, total uint64) {
	r = LANDropReason(oneOf(string(r), LANDropReasons))
	m.pathMu.Lock()
	defer m.pathMu.Unlock()
	s := m.lan[r]
	if s == nil {
		s = &counterSync{c: m.LANDatagramsDropped.WithLabelValues(string(r))}
		m.lan[r] = s
	}
	s.set(total)
}

type syncKey struct{ family, reason string }

func (m *Metrics) syncLocked(family, reason string, vec *prometheus.CounterVec) *counterSync {
	k := syncKey{family, reason}
	s := m.synced[k]
	if s == nil {
		s = &counterSync{c: vec.WithLabelValues(reason)}
		m.synced[k] = s
	}
	return s
}

// SyncProtocolDropped sets mrgw_protocol_datagrams_dropped_total from the
// MetaRoCE state machine's cumulative drop counts by reason
// ([ProtocolDropReasons]; others are counted as "other"). Safe for
// concurrent use.
func (m *Metrics) SyncProtocolDropped(byReason map[string]uint64) {
	m.syncByReason("protocol", byReason, ProtocolDropReasons, m.ProtocolDatagramsDropped)
}

// ControlListener is what the control listener counts
// (control.ListenerStats, and its socket's kernel drops under "buffer").
type ControlListener struct {
	Dropped              map[string]uint64 // by [ControlDropReasons]
	HandshakesInProgress int
	HandshakeTimeouts    uint64
}

// SyncControl sets mrgw_control_packets_dropped_total,
// mrgw_control_handshakes_in_progress and
// mrgw_control_handshake_timeouts_total from the control listener's
// cumulative counts. Safe for concurrent use.
func (m *Metrics) SyncControl(c ControlListener) {
	m.syncByReason("control", c.Dropped, ControlDropReasons, m.ControlDropped)
	m.ControlHandshakes.Set(float64(c.HandshakesInProgress))
	m.pathMu.Lock()
	defer m.pathMu.Unlock()
	s := m.synced[syncKey{"control_timeouts", ""}]
	if s == nil {
		s = &counterSync{c: m.ControlTimeouts}
		m.synced[syncKey{"control_timeouts", ""}] = s
	}
	s.set(c.HandshakeTimeouts)
}

func (m *Metrics) syncByReason(family string, byReason map[string]uint64, allowed []string, vec *prometheus.CounterVec) {
	m.pathMu.Lock()
	defer m.pathMu.Unlock()
	other, haveOther := uint64(0), false
	for r, n := range byReason {
		if r == Other || oneOf(r, allowed) == Other {
			other += n
			haveOther = true
			continue
		}
		m.syncLocked(family, r, vec).set(n)
	}
	if haveOther {
		m.syncLocked(family, Other, vec).set(other)
	}
}
