package metrics

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mrgw/mrgw/metaroce"
	"github.com/mrgw/mrgw/pathmgr"

	"github.com/mrgw/mrgw/units"
)

// DatagramDropped counts one WAN datagram dropped on plane; a reason outside
// [DropReasons] is counted as "other".
func (m *Metrics) DatagramDropped(plane string, r DropReason) {
	m.WANDatagramsDropped.WithLabelValues(plane, oneOf(string(r), DropReasons)).Inc()
}

// FlowRefused counts one host flow refused at admission; a reason outside
// [RefuseReasons] is counted as "other".
func (m *Metrics) FlowRefused(reason string) {
	m.HostFlowsRefused.WithLabelValues(oneOf(reason, RefuseReasons)).Inc()
}

// ControlSession counts one control session attempt by its result
// ([SessionResults]).
func (m *Metrics) ControlSession(result string) {
	m.ControlSessions.WithLabelValues(oneOf(result, SessionResults)).Inc()
}

// ControlRefused counts one control handshake this gateway refused, as a
// refused session and under its reason ([ControlRefusalReasons]).
func (m *Metrics) ControlRefused(reason string) {
	m.ControlSession(ResultRefused)
	m.ControlRefusals.WithLabelValues(oneOf(reason, ControlRefusalReasons)).Inc()
}

// AdmissionRefused counts one LAN INIT not admitted ([AdmitReasons]).
func (m *Metrics) AdmissionRefused(reason string) { m.AdmissionRefusedN(reason, 1) }

// AdmissionRefusedN counts n LAN INITs not admitted for one reason.
func (m *Metrics) AdmissionRefusedN(reason string, n float64) {
	if n > 0 {
		m.LANAdmissionRefused.WithLabelValues(oneOf(reason, AdmitReasons)).Add(n)
	}
}

// RegistrationRefused counts one refused REGISTER ([RegisterReasons]).
func (m *Metrics) RegistrationRefused(reason string) {
	m.RegistrationsRefused.WithLabelValues(oneOf(reason, RegisterReasons)).Inc()
}

// HostPeerReclaimed counts one LAN peer reclaimed ([ReclaimReasons]).
func (m *Metrics) HostPeerReclaimed(reason string) {
	m.LANPeersReclaimed.WithLabelValues(oneOf(reason, ReclaimReasons)).Inc()
}

// AdminRefused counts one admin HTTP connection closed at accept
// ([AdminRefuseReasons]).
func (m *Metrics) AdminRefused(reason string) {
	m.AdminConnsRefused.WithLabelValues(oneOf(reason, AdminRefuseReasons)).Inc()
}

// ConfigReload counts one reload by its result ([ReloadResults]).
func (m *Metrics) ConfigReload(result string) {
	m.ConfigReloads.WithLabelValues(oneOf(result, ReloadResults)).Inc()
}

// SetRegionReachable sets mrgw_region_reachable for a remote region.
func (m *Metrics) SetRegionReachable(region string, reachable bool) {
	m.RegionReachable.WithLabelValues(region).Set(b2f(reachable))
}

// MessageCompleted counts a completed host message towards (direction=out)
// or from (direction=in) region; for direction=out, took is observed in
// mrgw_message_completion_seconds.
func (m *Metrics) MessageCompleted(region, direction string, took time.Duration) {
	direction = oneOf(direction, Directions)
	m.MessagesCompleted.WithLabelValues(region, direction).Inc()
	if direction == DirOut {
		m.MessageCompletion.WithLabelValues(region).Observe(took.Seconds())
	}
}

// PathsAvoided counts n paths to peer over plane taken down on another
// gateway's report.
func (m *Metrics) PathsAvoided(peer, region, plane string, n int) {
	m.PathsAvoidedTotal.WithLabelValues(peer, region, plane).Add(float64(n))
}

// MessageFailed counts a failed host message.
func (m *Metrics) MessageFailed(region, direction string) {
	m.MessagesFailed.WithLabelValues(region, oneOf(direction, Directions)).Inc()
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// counterSync turns a cumulative count read from the datapath into counter
// increments. When the source restarts from a smaller value (the WAN
// connection was re-established), the whole new value is added: Prometheus
// counters only grow.
type counterSync struct {
	c    prometheus.Counter
	last uint64
}

func (s *counterSync) set(v uint64) {
	switch {
	case v > s.last:
		s.c.Add(float64(v - s.last))
	case v < s.last:
		s.c.Add(float64(v))
	}
	s.last = v
}

// reset forgets the last value, for a source that starts again from zero.
func (s *counterSync) reset() { s.last = 0 }

type peerKey struct{ peer, region string }

// PeerMetrics are the series of one peer gateway's WAN connection.
type PeerMetrics struct {
	m                          *Metrics
	peer, region               string
	connected                  prometheus.Gauge
	rateHint, pacing           prometheus.Gauge
	goodputOut                 prometheus.Counter
	goodputIn                  counterSync
	payloadSent, dataSent      counterSync
	retransmits, lost          counterSync
	retxGap, retxTimeout       counterSync
	spurious                   counterSync
	timeouts, duplicates       counterSync
	rotationsOK, rotationsFail prometheus.Counter
	silenceDrops               prometheus.Counter
}

// Peer returns the series of the WAN connection to peer, a gateway of
// region. Calls with the same names return the same *PeerMetrics. It is safe
// for concurrent use; the returned value is not: one goroutine (the
// connection's owner) syncs it.
func (m *Metrics) Peer(peer, region string) *PeerMetrics {
	m.pathMu.Lock()
	defer m.pathMu.Unlock()
	k := peerKey{peer, region}
	if p := m.peers[k]; p != nil {
		return p
	}
	p := &PeerMetrics{
		m: m, peer: peer, region: region,
		connected:     m.PeerConnected.WithLabelValues(peer, region),
		rateHint:      m.PeerRateHint.WithLabelValues(peer, region),
		pacing:        m.PeerPacingRate.WithLabelValues(peer, region),
		goodputOut:    m.PeerGoodputBytes.WithLabelValues(peer, region, DirOut),
		goodputIn:     counterSync{c: m.PeerGoodputBytes.WithLabelValues(peer, region, DirIn)},
		payloadSent:   counterSync{c: m.PeerPayloadSentBytes.WithLabelValues(peer, region)},
		dataSent:      counterSync{c: m.PeerDataPacketsSent.WithLabelValues(peer, region)},
		retransmits:   counterSync{c: m.PeerRetransmits.WithLabelValues(peer, region)},
		lost:          counterSync{c: m.PeerPacketsLost.WithLabelValues(peer, region)},
		retxGap:       counterSync{c: m.PeerRetransmitsCause.WithLabelValues(peer, region, RetxGap)},
		retxTimeout:   counterSync{c: m.PeerRetransmitsCause.WithLabelValues(peer, region, RetxTimeout)},
		spurious:      counterSync{c: m.PeerSpurious.WithLabelValues(peer, region)},
		timeouts:      counterSync{c: m.PeerTimeouts.WithLabelValues(peer, region)},
		duplicates:    counterSync{c: m.PeerDuplicates.WithLabelValues(peer, region)},
		rotationsOK:   m.KeyRotations.WithLabelValues(peer, region, ResultOK),
		rotationsFail: m.KeyRotations.WithLabelValues(peer, region, ResultFailed),
		silenceDrops:  m.PeerSilenceDrops.WithLabelValues(peer, region),
	}
	m.peers[k] = p
	return p
}

// SetConnected sets mrgw_peer_connected. A new connection (connected after
// being disconnected) restarts the cumulative counters of [PeerMetrics.Sync]
// from zero.
func (p *PeerMetrics) SetConnected(up bool) {
	p.connected.Set(b2f(up))
	if !up {
		for _, s := range []*counterSync{&p.goodputIn, &p.payloadSent, &p.dataSent, &p.retransmits, &p.lost, &p.timeouts, &p.duplicates, &p.retxGap, &p.retxTimeout, &p.spurious} {
			s.reset()
		}
	}
}

// Sync folds the connection's cumulative counters into the peer's series.
func (p *PeerMetrics) Sync(s metaroce.ConnStats) {
	p.goodputIn.set(s.PayloadBytesPlaced)
	p.payloadSent.set(s.PayloadBytesSent)
	p.dataSent.set(s.DataSent)
	p.retransmits.set(s.Retransmits)
	p.retxGap.set(s.RetransmitsGap)
	p.retxTimeout.set(s.RetransmitsTimeout)
	p.spurious.set(s.RetransmitsSpurious)
	p.lost.set(s.PacketsLost)
	p.timeouts.set(s.Timeouts)
	p.duplicates.set(s.Duplicates)
}

// SetRates sets the latest receiver rate hint and the controller's pacing
// rate, both in bytes per second.
func (p *PeerMetrics) SetRates(hint, pacing units.ByteRate) {
	p.rateHint.Set(float64(hint))
	p.pacing.Set(float64(pacing))
}

// SilenceDrop counts one WAN connection to the peer dropped on the
// liveness verdict (the peer silent for wan.dead_after while waited on).
func (p *PeerMetrics) SilenceDrop() { p.silenceDrops.Inc() }

// KeyRotation counts one key rotation with the peer.
func (p *PeerMetrics) KeyRotation(ok bool) {
	if ok {
		p.rotationsOK.Inc()
	} else {
		p.rotationsFail.Inc()
	}
}

type pathKey struct {
	peer, region, plane string
	path                int
}

// PathMetrics are the series of one path to a peer gateway.
type PathMetrics struct {
	peer    *PeerMetrics
	state   [4]prometheus.Gauge // indexed by pathmgr.State
	entered [4]prometheus.Counter
	current pathmgr.State
	known   bool // current is set
	// rtt and minRT exist only while the path has a measurement: a path
	// never measured has no RTT series rather than a 0 (see Sync).
	rtt, minRT rttGauge
	cwnd, infl prometheus.Gauge
	sent       counterSync
	acked      counterSync
	lost       counterSync
	marked     counterSync
	timeouts   counterSync
	goodput    counterSync
}

// PathLabel is the path label of id: the id in decimal when it is in
// 0..max-1 (max as set by [WithMaxPaths]), else "overflow".
func (m *Metrics) PathLabel(id int) string {
	if id < 0 || id >= m.maxPaths {
		return OverflowPath
	}
	return strconv.Itoa(id)
}

// Path returns the series of path id (sent from plane) to peer, a gateway
// of region. Calls with the same arguments return the same *PathMetrics.
// Like [Metrics.Peer], it is safe for concurrent use and the result is
// owned by one goroutine.
func (m *Metrics) Path(peer, region, plane string, id int) *PathMetrics {
	pm := m.Peer(peer, region)
	m.pathMu.Lock()
	defer m.pathMu.Unlock()
	k := pathKey{peer, region, plane, id}
	if id < 0 || id >= m.maxPaths {
		k.path = -1
	}
	if p := m.paths[k]; p != nil {
		return p
	}
	lv := []string{peer, region, plane, m.PathLabel(id)}
	p := &PathMetrics{peer: pm}
	for s, name := range PathStates {
		p.state[s] = m.PathState.WithLabelValues(append(lv, name)...)
		p.entered[s] = m.PathTransitions.WithLabelValues(append(lv, name)...)
	}
	p.rtt = rttGauge{vec: m.PathRTT, lv: lv}
	p.minRT = rttGauge{vec: m.PathMinRTT, lv: lv}
	p.cwnd = m.PathCwnd.WithLabelValues(lv...)
	p.infl = m.PathInflight.WithLabelValues(lv...)
	p.sent = counterSync{c: m.PathPacketsSent.WithLabelValues(lv...)}
	p.acked = counterSync{c: m.PathPacketsAcked.WithLabelValues(lv...)}
	p.lost = counterSync{c: m.PathPacketsLost.WithLabelValues(lv...)}
	p.marked = counterSync{c: m.PathECNMarked.WithLabelValues(lv...)}
	p.timeouts = counterSync{c: m.PathTimeouts.WithLabelValues(lv...)}
	p.goodput = counterSync{c: m.PathGoodputBytes.WithLabelValues(lv...)}
	m.paths[k] = p
	return p
}

// PathSnapshot is what the datapath knows about one path at one instant.
// Counters are cumulative since the path's connection opened.
type PathSnapshot struct {
	State                      pathmgr.State
	SRTT, MinRTT               time.Duration
	WindowBytes, InflightBytes int
	Sent, Acked, Lost, Marked  uint64 // packets
	Timeouts                   uint64
	AckedBytes                 uint64 // payload bytes acknowledged
}

// SnapshotOf reads a pathmgr path; window is the controller's window for it
// and ackedBytes the payload bytes acknowledged on it so far (the sum of the
// cc.AckSample.AckedBytes the connection reported for the path).
func SnapshotOf(p *pathmgr.Path, window int, ackedBytes uint64) PathSnapshot {
	return PathSnapshot{
		State: p.State, SRTT: p.SRTT, MinRTT: p.MinRTT,
		WindowBytes: window, InflightBytes: p.InflightBytes,
		Sent: p.SentPackets, Acked: p.AckedPackets, Lost: p.LostPackets, Marked: p.MarkedPackets,
		Timeouts: p.Timeouts, AckedBytes: ackedBytes,
	}
}

// Sync sets the path's gauges and folds its counters into the series. A
// change of state counts one transition into the new state (a path first
// seen counts none). The path's acknowledged bytes are added to its peer's
// goodput (direction=out) too.
func (p *PathMetrics) Sync(s PathSnapshot) {
	p.SetState(s.State)
	p.rtt.set(s.SRTT)
	p.minRT.set(s.MinRTT)
	p.cwnd.Set(float64(s.WindowBytes))
	p.infl.Set(float64(s.InflightBytes))
	p.sent.set(s.Sent)
	p.acked.set(s.Acked)
	p.lost.set(s.Lost)
	p.marked.set(s.Marked)
	p.timeouts.set(s.Timeouts)
	before := p.goodput.last
	p.goodput.set(s.AckedBytes)
	switch {
	case s.AckedBytes > before:
		p.peer.goodputOut.Add(float64(s.AckedBytes - before))
	case s.AckedBytes < before:
		p.peer.goodputOut.Add(float64(s.AckedBytes))
	}
}

// rttGauge is one path's series of an RTT family, created at its first
// measurement and deleted when the path has none (a new connection): an
// unknown RTT is an absent series, as Prometheus users expect, not a 0
// that min() and avg() would take for a measurement.
type rttGauge struct {
	vec *prometheus.GaugeVec
	lv  []string
	g   prometheus.Gauge
}

// set exports d, or no series when d is 0 (not measured).
func (r *rttGauge) set(d time.Duration) {
	if d <= 0 {
		if r.g != nil {
			r.vec.DeleteLabelValues(r.lv...)
			r.g = nil
		}
		return
	}
	if r.g == nil {
		r.g = r.vec.WithLabelValues(r.lv...)
	}
	r.g.Set(d.Seconds())
}

// SetState sets mrgw_path_state: 1 for st, 0 for the other states; a change
// counts one transition into st.
func (p *PathMetrics) SetState(st pathmgr.State) {
	if int(st) >= len(p.state) {
		return
	}
	if p.known && p.current == st {
		return
	}
	if p.known {
		p.entered[st].Inc()
	}
	for i, g := range p.state {
		g.Set(b2f(i == int(st)))
	}
	p.current, p.known = st, true
}

// Transition counts a transition the path set reported (pathmgr.Set
// DrainTransitions) and sets the state gauge; use it or Sync, the state
// change is counted once either way.
func (p *PathMetrics) Transition(t pathmgr.Transition) { p.SetState(t.To) }

// ForgetPeer deletes every series labelled with peer (after the gateway is
// removed from the configuration), so stale series do not linger.
func (m *Metrics) ForgetPeer(peer string) {
	m.pathMu.Lock()
	defer m.pathMu.Unlock()
	for _, v := range m.vecs {
		v.DeletePartialMatch(prometheus.Labels{LabelPeer: peer})
	}
	for k := range m.paths {
		if k.peer == peer {
			delete(m.paths, k)
		}
	}
	for k := range m.peers {
		if k.peer == peer {
			delete(m.peers, k)
		}
	}
	for k := range m.wan {
		if k.peer == peer {
			delete(m.wan, k)
		}
	}
}

// WANCounters are the cumulative datagram counters of one peer over one
// plane, as the datapath counts them (netio.PlaneStats).
type WANCounters struct {
	SentDatagrams, SentBytes         uint64
	ReceivedDatagrams, ReceivedBytes uint64
}

type wanKey struct{ peer, region, plane string }

type wanSync struct{ sent, sentBytes, recv, recvBytes counterSync }

type dropKey struct {
	plane  string
	reason DropReason
}

// SyncWAN folds the cumulative datagram counters of peer (a gateway of
// region) over plane into mrgw_wan_datagrams_sent_total,
// mrgw_wan_datagrams_received_total and the byte counters. Safe for
// concurrent use.
func (m *Metrics) SyncWAN(peer, region, plane string, c WANCounters) {
	m.pathMu.Lock()
	defer m.pathMu.Unlock()
	k := wanKey{peer, region, plane}
	s := m.wan[k]
	if s == nil {
		s = &wanSync{
			sent:      counterSync{c: m.WANDatagramsSent.WithLabelValues(peer, region, plane)},
			sentBytes: counterSync{c: m.WANSentBytes.WithLabelValues(peer, region, plane)},
			recv:      counterSync{c: m.WANDatagramsReceived.WithLabelValues(peer, region, plane)},
			recvBytes: counterSync{c: m.WANReceivedBytes.WithLabelValues(peer, region, plane)},
		}
		m.wan[k] = s
	}
	s.sent.set(c.SentDatagrams)
	s.sentBytes.set(c.SentBytes)
	s.recv.set(c.ReceivedDatagrams)
	s.recvBytes.set(c.ReceivedBytes)
}

// SyncDropped folds a cumulative count of datagrams dropped on plane for
// reason into mrgw_wan_datagrams_dropped_total. Safe for concurrent use.
func (m *Metrics) SyncDropped(plane string, r DropReason, total uint64) {
	r = DropReason(oneOf(string(r), DropReasons))
	m.pathMu.Lock()
	defer m.pathMu.Unlock()
	k := dropKey{plane, r}
	s := m.drops[k]
	if s == nil {
		s = &counterSync{c: m.WANDatagramsDropped.WithLabelValues(plane, string(r))}
		m.drops[k] = s
	}
	s.set(total)
}

type gossipKey struct {
	refused bool
	reason  string
}

// SyncGossip sets mrgw_gossip_datagrams_dropped_total and
// mrgw_gossip_refused_total from the cumulative counts by reason of
// region.Stats (DatagramsDropped, Refused); a reason outside
// [GossipDropReasons] or [GossipRefuseReasons] is counted as "other".
func (m *Metrics) SyncGossip(dropped, refused map[string]uint64) {
	m.pathMu.Lock()
	defer m.pathMu.Unlock()
	sync := func(refused bool, counts map[string]uint64, allowed []string, vec *prometheus.CounterVec) {
		other := uint64(0)
		for r, n := range counts {
			if oneOf(r, allowed) == Other {
				other += n
				continue
			}
			m.gossipSyncLocked(gossipKey{refused, r}, vec).set(n)
		}
		if other > 0 {
			m.gossipSyncLocked(gossipKey{refused, Other}, vec).set(other)
		}
	}
	sync(false, dropped, GossipDropReasons, m.GossipDatagramsDropped)
	sync(true, refused, GossipRefuseReasons, m.GossipRefused)
}

func (m *Metrics) gossipSyncLocked(k gossipKey, vec *prometheus.CounterVec) *counterSync {
	s := m.gossip[k]
	if s == nil {
		s = &counterSync{c: vec.WithLabelValues(k.reason)}
		m.gossip[k] = s
	}
	return s
}

// GossipHealth are path-health gossip's cumulative counters of flap
// damping and of its table's bound (region.Stats).
type GossipHealth struct {
	Held, Released, Absorbed, DownEvicted uint64
}

// SyncDetoured sets mrgw_host_flows_detoured_total to the relay's running
// count of detoured routes (gateway Status.Flows.Detoured).
func (m *Metrics) SyncDetoured(n uint64) {
	m.pathMu.Lock()
	defer m.pathMu.Unlock()
	if m.detoured.c == nil {
		m.detoured.c = m.HostFlowsDetoured
	}
	m.detoured.set(n)
}

// SyncGossipHealth folds gossip's cumulative path-health counters into
// mrgw_gossip_health_held_total, _released_total, _absorbed_total and
// _down_evicted_total. Safe for concurrent use.
func (m *Metrics) SyncGossipHealth(h GossipHealth) {
	m.pathMu.Lock()
	defer m.pathMu.Unlock()
	if m.gossipHealth == nil {
		m.gossipHealth = &[4]counterSync{{c: m.GossipHealthHeld}, {c: m.GossipHealthReleased},
			{c: m.GossipHealthAbsorbed}, {c: m.GossipHealthDownEvicted}}
	}
	for i, v := range [4]uint64{h.Held, h.Released, h.Absorbed, h.DownEvicted} {
		m.gossipHealth[i].set(v)
	}
}
