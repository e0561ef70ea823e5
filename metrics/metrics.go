// Package metrics is the mrgw daemon's metric catalogue: every Prometheus
// metric family the gateway exports, on a private registry, with its help
// text, its type and its labels.
//
// # Naming
//
// Every family starts with mrgw_. Counters end in _total; quantities carry
// their base unit (_bytes, _seconds, _bytes_per_second); gauges that are 0 or
// 1 say what 1 means (mrgw_region_reachable, mrgw_path_state{state="down"}).
//
// # Labels and cardinality
//
// Labels come only from bounded sets, so the number of series is fixed by
// the configuration, never by traffic:
//
//   - peer and peer_region: a remote gateway's node.name and its region, as
//     named under regions in the configuration (validated names);
//   - plane: a name from wan.planes (at most 64);
//   - path: a path id 0..wan.paths_per_peer-1 (at most 1024, see
//     [WithMaxPaths]); an id out of range is counted under path="overflow";
//   - state, reason, result, direction: small fixed sets listed with each
//     family ([PathStates], [DropReasons], ...); an unknown value is
//     counted as "other".
//
// Host identities (addresses, flow or connection ids) are never labels.
// The gateway's own identity is added to every series as the constant labels
// gateway and region by [WithIdentity].
//
// # Use
//
// [New] builds the collectors and registers them, plus the standard Go and
// process collectors, on a fresh [prometheus.Registry]; the admin server
// serves it with promhttp.HandlerFor(m.Registry, ...). The datapath feeds
// peers and paths through [Metrics.Peer] and [Metrics.Path], whose Sync
// methods turn the cumulative counters of metaroce.ConnStats and pathmgr.Path
// into Prometheus counter increments.
//
// It reads metaroce and pathmgr counters and never imports the gateway, the
// driver or the lab (internal/layering checks it).
package metrics

import (
	"fmt"
	"slices"
	"sort"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/mrgw/mrgw/internal/buildinfo"
)

// Namespace prefixes every family of the catalogue.
const Namespace = "mrgw"

// Label names.
const (
	LabelGateway    = "gateway"     // constant: this gateway's node.name
	LabelRegion     = "region"      // constant: this gateway's node.region
	LabelPeer       = "peer"        // a remote gateway's node.name
	LabelPeerRegion = "peer_region" // a remote region (or, for mrgw_peers_alive, any region)
	LabelPlane      = "plane"       // a wan.planes[].name
	LabelPath       = "path"        // a path id, 0..paths_per_peer-1
	LabelState      = "state"       // a path state
	LabelReason     = "reason"      // why something was dropped or refused
	LabelResult     = "result"      // how an attempt ended
	LabelDirection  = "direction"   // in (towards local hosts) or out (from local hosts)
	LabelVersion    = "version"
	LabelRevision   = "revision" // the VCS commit the binary was built from
	LabelGoVersion  = "goversion"
	LabelCert       = "certificate" // which certificate: gateway or ca
	LabelCause      = "cause"       // why a packet was sent again: RetxCauses
)

// DefaultMaxPaths is the largest wan.paths_per_peer the configuration
// accepts: path ids are labelled 0..DefaultMaxPaths-1 unless [WithMaxPaths]
// lowers the bound.
const DefaultMaxPaths = 1024

// OverflowPath is the path label of an id out of range.
const OverflowPath = "overflow"

// Other is the label value an unknown state, reason or result is counted as.
const Other = "other"

// Directions of traffic through the gateway.
const (
	DirIn  = "in"  // from a remote region towards hosts of this region
	DirOut = "out" // from hosts of this region towards a remote region
)

// Directions lists the values of the direction label.
var Directions = []string{DirIn, DirOut}

// Causes of a retransmission: the loss that queued it was a gap in a
// path's selective-ack bitmap, or a probe timeout (or the path taken
// down). They partition mrgw_peer_retransmits_total.
const (
	RetxGap     = "gap"
	RetxTimeout = "timeout"
)

// RetxCauses lists the values of the cause label.
var RetxCauses = []string{RetxGap, RetxTimeout}

// PathStates lists the values of mrgw_path_state's state label, pathmgr's
// states by their String names.
var PathStates = []string{"up", "suspect", "down", "probing"}

// DropReason says why a WAN datagram was dropped before it reached a
// connection.
type DropReason string

// Reasons for dropping a WAN datagram.
const (
	DropAuth        DropReason = "auth"         // AEAD authentication failed (wrong key, tampering)
	DropReplay      DropReason = "replay"       // sequence number seen before or too old for the replay window
	DropMalformed   DropReason = "malformed"    // too short, bad version or header
	DropQueue       DropReason = "queue"        // a bounded queue was full
	DropTruncated   DropReason = "truncated"    // longer than the receive buffer
	DropUnknownPeer DropReason = "unknown_peer" // no control session (no keys) for the sender
	// DropBuffer: the kernel dropped it, the plane socket's receive buffer
	// full (the gateway did not read fast enough; /proc/net/udp's drops).
	// The kernel counts a dropped buffer, which under GRO holds a
	// coalesced run of datagrams: the count is a floor on datagrams.
	DropBuffer DropReason = "buffer"
	DropOther  DropReason = Other
)

// DropReasons lists the values of mrgw_wan_datagrams_dropped_total's reason label.
var DropReasons = []string{string(DropAuth), string(DropReplay), string(DropMalformed),
	string(DropQueue), string(DropTruncated), string(DropUnknownPeer), string(DropBuffer), Other}

// LANDropReason says why a datagram that reached the LAN socket (from
// hosts) was dropped before the protocol saw it.
type LANDropReason string

// Reasons for dropping a LAN datagram.
const (
	// LANDropBuffer: the kernel dropped it because the socket's receive
	// buffer was full (the gateway did not read fast enough; the drops
	// column of /proc/net/udp for the socket).
	LANDropBuffer LANDropReason = "buffer"
	// LANDropTruncated: longer than the receive buffer (a host's MTU above
	// the gateway's).
	LANDropTruncated LANDropReason = "truncated"
	// LANDropUnknownSource: from a source that is not a registered host
	// and was not admitted as one (not an INIT, or the host table is full).
	LANDropUnknownSource LANDropReason = "unknown_source"
	// LANDropMalformed: from an unknown source, an INIT's type but not a
	// valid INIT (version, length, fields): neither answered nor admitted.
	LANDropMalformed LANDropReason = "malformed"
	LANDropOther     LANDropReason = Other
)

// LANDropReasons lists the values of mrgw_lan_datagrams_dropped_total's
// reason label.
var LANDropReasons = []string{string(LANDropBuffer), string(LANDropTruncated), string(LANDropUnknownSource), string(LANDropMalformed), Other}

// Certificates whose expiry mrgw_certificate_expiry_timestamp_seconds shows.
const (
	CertGateway = "gateway" // control.tls.cert_file, this gateway's own
	CertCA      = "ca"      // control.tls.ca_file (the earliest expiry of the bundle)
)

// Certs lists the values of the certificate label.
var Certs = []string{CertGateway, CertCA}

// Reasons a host flow is refused.
const (
	RefuseLimit      = "limit"       // limits.max_flows or limits.memory_bytes reached
	RefuseNoRoute    = "no_route"    // no reachable gateway of the destination region
	RefuseBadRequest = "bad_request" // the host named no or an unknown region
)

// RefuseReasons lists the values of mrgw_host_flows_refused_total's reason label.
var RefuseReasons = []string{RefuseLimit, RefuseNoRoute, RefuseBadRequest, Other}

// ControlRefusalReasons lists the values of mrgw_control_refusals_total's
// reason label (tunnel/control's RefusalReasons).
var ControlRefusalReasons = []string{"no_certificate", "expired", "unknown_ca", "bad_name", "unknown_peer", "denied", "identity_mismatch", "version", "protocol", Other}

// ProtocolDropReasons lists the values of
// mrgw_protocol_datagrams_dropped_total's reason label: the MetaRoCE state
// machine's drop counters (metaroce.EndpointStats).
var ProtocolDropReasons = []string{"truncated", "bad_version", "bad_type", "malformed", "unknown_conn", "refused", Other}

// ControlDropReasons lists the values of mrgw_control_packets_dropped_total's
// reason label (tunnel/control's DropReasons).
var ControlDropReasons = []string{"retry", "busy", "queue", "malformed", "unknown_connection", "version", "unexpected", "buffer", Other}

// Reasons a LAN peer is not admitted (mrgw_lan_admissions_refused_total).
const (
	AdmitRetry        = "retry"         // under load: answered with a cookie challenge (RETRY)
	AdmitBadCookie    = "bad_cookie"    // the INIT echoed an invalid or expired cookie
	AdmitRateLimited  = "rate_limited"  // its source IP exceeded its admission rate
	AdmitPendingLimit = "pending_limit" // too many peers not yet registered (its IP's or all)
	AdmitFull         = "full"          // the peer table is full
)

// AdmitReasons lists the values of mrgw_lan_admissions_refused_total's reason label.
var AdmitReasons = []string{AdmitRetry, AdmitBadCookie, AdmitRateLimited, AdmitPendingLimit, AdmitFull, Other}

// Why a LAN peer's slot was reclaimed (mrgw_lan_peers_reclaimed_total).
const (
	ReclaimUnregistered = "unregistered" // admitted but never registered in time
	ReclaimIdle         = "idle"         // no control message for the idle timeout
)

// ReclaimReasons lists the values of mrgw_lan_peers_reclaimed_total's reason label.
var ReclaimReasons = []string{ReclaimUnregistered, ReclaimIdle, Other}

// Reasons a host registration is refused (mrgw_host_registrations_refused_total).
const (
	RegisterDuplicate       = "duplicate"       // another live host holds the endpoint name
	RegisterUnauthenticated = "unauthenticated" // no credential while lan.host_keys is set
	RegisterBadMAC          = "bad_mac"         // a credential that does not verify (wrong secret, altered)
	RegisterUnknownKey      = "unknown_key"     // a key id not in lan.host_keys
	RegisterStale           = "stale"           // its time is outside the window (a replay, or a clock off)
	RegisterWrongRegion     = "wrong_region"    // the host names another region than the gateway's
)

// RegisterReasons lists the values of mrgw_host_registrations_refused_total's reason label.
var RegisterReasons = []string{RegisterDuplicate, RegisterUnauthenticated, RegisterBadMAC, RegisterUnknownKey, RegisterStale, RegisterWrongRegion, Other}

// GossipDropReasons lists the values of mrgw_gossip_datagrams_dropped_total's
// reason label: region.DropReasons, and other.
var GossipDropReasons = []string{"too_short", "too_long", "format", "decrypt", "rate", "queue_full", "socket_overflow", Other}

// Why a demand report from the region's gateways was dropped
// (mrgw_region_demand_reports_dropped_total).
const (
	DemandMalformed = "malformed" // it does not decode
	DemandForeign   = "foreign"   // of another region, or naming this gateway
	DemandFull      = "full"      // from a gateway beyond the ones tracked
)

// DemandDropReasons lists the values of
// mrgw_region_demand_reports_dropped_total's reason label.
var DemandDropReasons = []string{DemandMalformed, DemandForeign, DemandFull}

// GossipRefuseReasons lists the values of mrgw_gossip_refused_total's reason
// label: region.RefuseReasons, and other.
var GossipRefuseReasons = []string{"stream_limit", "stream_timeout", "stream_size", "keyring", "unencrypted",
	"not_gateway", "name_conflict", Other}

// Why an admin HTTP connection was closed at accept
// (mrgw_admin_connections_refused_total).
const (
	AdminPerSource = "per_source" // its source IP already holds the per-source cap
	AdminEvicted   = "evicted"    // an open connection waiting for a request, closed to make room for a new one at the total cap
	AdminBusy      = "busy"       // the total cap is reached and every open connection is serving a request
)

// AdminRefuseReasons lists the values of
// mrgw_admin_connections_refused_total's reason label.
var AdminRefuseReasons = []string{AdminPerSource, AdminEvicted, AdminBusy, Other}

// Results of control sessions, key rotations and reloads.
const (
	ResultOK          = "ok"          // key rotation or reload done
	ResultFailed      = "failed"      // the attempt failed (timeout, I/O, handshake)
	ResultEstablished = "established" // a control session authenticated and started
	ResultRefused     = "refused"     // a peer was refused (certificate, name) or a reload needs a restart
	ResultInvalid     = "invalid"     // a reloaded file did not load or validate
)

// SessionResults, RotationResults and ReloadResults list the values of the
// result label of their families.
var (
	SessionResults  = []string{ResultEstablished, ResultRefused, ResultFailed, Other}
	RotationResults = []string{ResultOK, ResultFailed, Other}
	ReloadResults   = []string{ResultOK, ResultRefused, ResultInvalid, ResultFailed, Other}
)

// Type is a family's Prometheus type.
type Type string

// Family types.
const (
	Counter   Type = "counter"
	Gauge     Type = "gauge"
	Histogram Type = "histogram"
)

// Family describes one metric family of the catalogue.
type Family struct {
	Name   string
	Type   Type
	Help   string
	Labels []string // variable labels, without the constant gateway and region
}

// MessageBuckets are the bucket bounds of mrgw_message_completion_seconds:
// 1 ms to about 65 s, doubling, which covers a small message within a region
// and a large one over a lossy 150 ms path.
var MessageBuckets = prometheus.ExponentialBuckets(0.001, 2, 17)

// Metrics holds every collector of the catalogue.
type Metrics struct {
	// Registry holds the catalogue and the standard Go and process
	// collectors. Serve it with promhttp.HandlerFor.
	Registry *prometheus.Registry

	maxPaths int
	families []Family
	vecs     []*prometheus.MetricVec // every vector with a peer label, for ForgetPeer

	// Gateway.
	BuildInfo            *prometheus.GaugeVec   // version, revision, goversion
	CertExpiry           *prometheus.GaugeVec   // certificate
	MemoryBufferedBytes  prometheus.Gauge       //
	MemoryLimitBytes     prometheus.Gauge       //
	HostFlowsActive      prometheus.Gauge       //
	HostFlowsLimit       prometheus.Gauge       //
	WANRateBps           prometheus.Gauge       //
	HostFlowsRefused     *prometheus.CounterVec // reason
	HostFlowsDetoured    prometheus.Counter     //
	LANAdmissionRefused  *prometheus.CounterVec // reason
	RegistrationsRefused *prometheus.CounterVec // reason
	LANPeersReclaimed    *prometheus.CounterVec // reason
	LANPeers             prometheus.Gauge       //
	LANPeersPending      prometheus.Gauge       //
	AdmissionSaturated   prometheus.Gauge       //
	LANPeersLimit        prometheus.Gauge       //
	PathSocketsExhausted prometheus.Counter     //
	DatagramsSendFailed  prometheus.Counter     //
	LANGoodputBytes      *prometheus.CounterVec // direction
	MessagesCompleted    *prometheus.CounterVec // peer_region, direction
	MessagesFailed       *prometheus.CounterVec // peer_region, direction
	MessageCompletion    *prometheus.HistogramVec
	ConfigReloads        *prometheus.CounterVec // result
	AdminConnsRefused    *prometheus.CounterVec // reason

	// Regions and gossip.
	RegionReachable        *prometheus.GaugeVec   // peer_region
	PeersAlive             *prometheus.GaugeVec   // peer_region
	GossipDatagramsDropped *prometheus.CounterVec // reason
	GossipRefused          *prometheus.CounterVec // reason
	DemandReportsDropped   *prometheus.CounterVec // reason
	// Path-health gossip's flap damping and bounds (region.Stats,
	// [Metrics.SyncGossipHealth]) and the relay's report table.
	GossipHealthHeld        prometheus.Counter
	GossipHealthReleased    prometheus.Counter
	GossipHealthAbsorbed    prometheus.Counter
	GossipHealthDownEvicted prometheus.Counter
	HealthReportsEvicted    prometheus.Counter

	// Control channel.
	ControlSessionsActive *prometheus.GaugeVec   // peer_region
	ControlSessions       *prometheus.CounterVec // result
	ControlRefusals       *prometheus.CounterVec // reason
	ControlDropped        *prometheus.CounterVec // reason
	ControlHandshakes     prometheus.Gauge       // in progress
	ControlTimeouts       prometheus.Counter     // handshakes timed out
	KeyRotations          *prometheus.CounterVec // peer, peer_region, result

	// WAN datagrams.
	WANDatagramsSent     *prometheus.CounterVec // peer, peer_region, plane
	WANDatagramsReceived *prometheus.CounterVec // peer, peer_region, plane
	WANSentBytes         *prometheus.CounterVec // peer, peer_region, plane
	WANReceivedBytes     *prometheus.CounterVec // peer, peer_region, plane
	WANDatagramsDropped  *prometheus.CounterVec // plane, reason

	// LAN datagrams.
	LANDatagramsDropped *prometheus.CounterVec // reason

	// The MetaRoCE state machine's drops (LAN and WAN).
	ProtocolDatagramsDropped *prometheus.CounterVec // reason

	// WAN connection to each peer gateway.
	PeerConnected        *prometheus.GaugeVec   // peer, peer_region
	PeerGoodputBytes     *prometheus.CounterVec // peer, peer_region, direction
	PeerPayloadSentBytes *prometheus.CounterVec // peer, peer_region
	PeerDataPacketsSent  *prometheus.CounterVec // peer, peer_region
	PeerRetransmits      *prometheus.CounterVec // peer, peer_region
	PeerRetransmitsCause *prometheus.CounterVec // peer, peer_region, cause
	PeerSpurious         *prometheus.CounterVec // peer, peer_region
	PeerPacketsLost      *prometheus.CounterVec // peer, peer_region
	PeerTimeouts         *prometheus.CounterVec // peer, peer_region
	PeerDuplicates       *prometheus.CounterVec // peer, peer_region
	PeerRateHint         *prometheus.GaugeVec   // peer, peer_region
	PeerPacingRate       *prometheus.GaugeVec   // peer, peer_region
	PeerSilenceDrops     *prometheus.CounterVec // peer, peer_region

	// Paths (peer, peer_region, plane, path).
	PathState        *prometheus.GaugeVec // + state
	PathTransitions  *prometheus.CounterVec
	PathRTT          *prometheus.GaugeVec
	PathMinRTT       *prometheus.GaugeVec
	PathCwnd         *prometheus.GaugeVec
	PathInflight     *prometheus.GaugeVec
	PathPacketsSent  *prometheus.CounterVec
	PathPacketsAcked *prometheus.CounterVec
	PathPacketsLost  *prometheus.CounterVec
	PathECNMarked    *prometheus.CounterVec
	PathTimeouts     *prometheus.CounterVec
	PathGoodputBytes *prometheus.CounterVec
	// PathsAvoidedTotal (peer, peer_region, plane): paths taken down on another
	// gateway's path-health report.
	PathsAvoidedTotal *prometheus.CounterVec

	// Path MTU discovery (pmtu.go).
	PathMTU *prometheus.GaugeVec // peer, peer_region, plane

	pathMu sync.Mutex // guards paths, peers, wan, drops and the syncs below
	paths  map[pathKey]*PathMetrics
	peers  map[peerKey]*PeerMetrics
	wan    map[wanKey]*wanSync
	drops  map[dropKey]*counterSync
	lan    map[LANDropReason]*counterSync
	gossip map[gossipKey]*counterSync
	synced map[syncKey]*counterSync // SyncProtocolDropped, SyncControl
	// gossipHealth: held, released, absorbed, down evicted (SyncGossipHealth).
	gossipHealth *[4]counterSync
	detoured     counterSync // HostFlowsDetoured, from the relay's running count
}

// Option changes what New builds.
type Option func(*options)

type options struct {
	gateway, region string
	maxPaths        int
	noStandard      bool
}

// WithIdentity adds the constant labels gateway (node.name) and region
// (node.region) to every series, so that series of different gateways stay
// apart without relabelling in Prometheus.
func WithIdentity(gateway, region string) Option {
	return func(o *options) { o.gateway, o.region = gateway, region }
}

// WithMaxPaths bounds the path label to ids 0..n-1 (normally
// wan.paths_per_peer); larger ids are counted under path="overflow".
// n outside 1..DefaultMaxPaths means DefaultMaxPaths.
func WithMaxPaths(n int) Option {
	return func(o *options) { o.maxPaths = n }
}

// WithoutStandardCollectors leaves out the Go runtime and process
// collectors (go_*, process_*), for tests that compare whole expositions.
func WithoutStandardCollectors() Option {
	return func(o *options) { o.noStandard = true }
}

var (
	peerLabels = []string{LabelPeer, LabelPeerRegion}
	wanLabels  = []string{LabelPeer, LabelPeerRegion, LabelPlane}
	pathLabels = []string{LabelPeer, LabelPeerRegion, LabelPlane, LabelPath}
)

func with(base []string, extra ...string) []string {
	return append(slices.Clip(base), extra...)
}

// New builds the catalogue on a new private registry.
func New(opts ...Option) *Metrics {
	var o options
	for _, f := range opts {
		f(&o)
	}
	if o.maxPaths < 1 || o.maxPaths > DefaultMaxPaths {
		o.maxPaths = DefaultMaxPaths
	}
	reg := prometheus.NewRegistry()
	var r prometheus.Registerer = reg
	if o.gateway != "" || o.region != "" {
		r = prometheus.WrapRegistererWith(prometheus.Labels{LabelGateway: o.gateway, LabelRegion: o.region}, reg)
	}
	m := &Metrics{
		Registry: reg,
		maxPaths: o.maxPaths,
		paths:    map[pathKey]*PathMetrics{},
		peers:    map[peerKey]*PeerMetrics{},
		wan:      map[wanKey]*wanSync{},
		drops:    map[dropKey]*counterSync{},
		lan:      map[LANDropReason]*counterSync{},
		gossip:   map[gossipKey]*counterSync{},
		synced:   map[syncKey]*counterSync{},
	}
	b := &builder{m: m, r: r}

	// Gateway.
	m.BuildInfo = b.gaugeVec("mrgw_build_info",
		"Always 1; the labels say which mrgw build this gateway runs: version, VCS revision (unknown if the binary was built without VCS information) and Go version, as `mrgw version` prints them.",
		LabelVersion, LabelRevision, LabelGoVersion)
	m.CertExpiry = b.gaugeVec("mrgw_certificate_expiry_timestamp_seconds",
		"When the control channel's certificates expire, in Unix seconds: certificate=gateway is this gateway's own (control.tls.cert_file), certificate=ca the earliest-expiring CA of control.tls.ca_file. Read at start (certificates are replaced with a restart).",
		LabelCert)
	m.MemoryBufferedBytes = b.gauge("mrgw_memory_buffered_bytes",
		"Bytes of host and tunnel data the gateway holds now (queued, in flight or awaiting acknowledgement), counted against limits.memory_bytes.")
	m.MemoryLimitBytes = b.gauge("mrgw_memory_limit_bytes",
		"The configured cap on buffered data, limits.memory_bytes (follows live reloads).")
	m.HostFlowsActive = b.gauge("mrgw_host_flows_active",
		"Host flows (LAN MetaRoCE connections relayed to a remote region) admitted now.")
	m.HostFlowsLimit = b.gauge("mrgw_host_flows_limit",
		"The configured cap on host flows, limits.max_flows (follows live reloads).")
	m.WANRateBps = b.gauge("mrgw_wan_rate_bps",
		"The WAN capacity in bit/s on the wire this gateway paces to and divides among its senders' rate hints: wan.max_rate_bps, or its part of wan.region_rate_bps among its region's live gateways by demand (the smaller when both are set); 0 means none. Follows reloads, the region's membership and its gateways' demand (every 250 ms).")
	m.HostFlowsRefused = b.counterVec("mrgw_host_flows_refused_total",
		"Host flows refused at admission, by reason: limit (max_flows or memory reached), no_route (no reachable gateway of the destination region), bad_request.",
		LabelReason)
	m.HostFlowsDetoured = b.counter("mrgw_host_flows_detoured_total",
		"Host flows (OPENs and re-opens) routed past the gateway the placement rule picks among those with a WAN connection (the least loaded, ties by rendezvous rank), because it was gossip-suspect, silent or refused the endpoint: steady growth means a remote gateway is flapping.")
	m.LANAdmissionRefused = b.counterVec("mrgw_lan_admissions_refused_total",
		"INITs from new LAN sources not admitted, by reason: retry (under load, answered with a cookie challenge), bad_cookie, rate_limited (per source IP), pending_limit (too many peers not yet registered), full (the LAN peer table is full).",
		LabelReason)
	m.RegistrationsRefused = b.counterVec("mrgw_host_registrations_refused_total",
		"Host registrations (REGISTER) refused, by reason: duplicate (another live host holds the name), unauthenticated (no credential while lan.host_keys is set), bad_mac, unknown_key, stale (time outside the window), wrong_region (the host names another region than the gateway's).",
		LabelReason)
	m.LANPeersReclaimed = b.counterVec("mrgw_lan_peers_reclaimed_total",
		"LAN peers closed and their slot reclaimed, by reason: unregistered (no REGISTER in time after the INIT), idle (no control message for the idle timeout: a host killed without closing).",
		LabelReason)
	m.AdminConnsRefused = b.counterVec("mrgw_admin_connections_refused_total",
		"Admin HTTP connections closed by the connection caps, by reason: per_source (closed at accept: its source IP already held the per-source cap of open admin connections, so that one client cannot take every one), evicted (an open connection waiting for a request, idle or still sending its headers, closed to make room for a new one at the total cap), busy (closed at accept: the total cap was reached and every open connection was serving a request).",
		LabelReason)
	m.LANPeers = b.gauge("mrgw_lan_peers",
		"LAN peers (host sockets) admitted now.")
	m.LANPeersPending = b.gauge("mrgw_lan_peers_pending",
		"LAN peers admitted that have not registered an endpoint yet.")
	m.LANPeersLimit = b.gauge("mrgw_lan_peers_limit",
		"LAN peers (hosts) admitted at most at once: lan.max_hosts. A host beyond it is refused at once (mrgw_lan_admissions_refused_total{reason=\"full\"}).")
	m.PathSocketsExhausted = b.counter("mrgw_path_sockets_exhausted_total",
		"Datagrams not sent because every path socket was in use (1,024 for the WAN, and the hosts' shared pool of 64): more WAN paths than 1,024.")
	m.DatagramsSendFailed = b.counter("mrgw_datagrams_send_failed_total",
		"Datagrams (WAN and LAN) the kernel refused to send: a socket error other than a full send buffer, which waits, or too big for the local stack. The protocol resends them as lost; the gateway logs them at warn.")
	m.AdmissionSaturated = b.gauge("mrgw_lan_admission_saturated",
		"1 while LAN admission refuses hosts for want of room (the peer table full or the pending bound hit in the last 5 s); /readyz then says \"admission saturated\".")
	m.LANGoodputBytes = b.counterVec("mrgw_lan_goodput_bytes_total",
		"Payload bytes relayed for hosts of this region, each byte once as it passes the gateway: direction=out received from hosts for remote regions, direction=in received from remote regions for hosts.",
		LabelDirection)
	m.MessagesCompleted = b.counterVec("mrgw_messages_completed_total",
		"Host messages relayed end to end and completed, by remote region and direction.",
		LabelPeerRegion, LabelDirection)
	m.MessagesFailed = b.counterVec("mrgw_messages_failed_total",
		"Host messages that failed (retry budget exhausted, connection closed, flow refused mid-way), by remote region and direction.",
		LabelPeerRegion, LabelDirection)
	m.MessageCompletion = b.histogramVec("mrgw_message_completion_seconds",
		"Time from a host message's first byte reaching this gateway to its end-to-end completion in the remote region, for messages sent out (direction=out).",
		MessageBuckets, LabelPeerRegion)
	m.ConfigReloads = b.counterVec("mrgw_config_reloads_total",
		"Configuration reloads (SIGHUP), by result: ok, refused (a restart-only key changed), invalid (the file did not load or validate), failed (a valid change could not be applied: the gossip keyring).",
		LabelResult)

	// Regions and gossip.
	m.RegionReachable = b.gaugeVec("mrgw_region_reachable",
		"1 when at least one gateway of the remote region is alive in gossip and has an established WAN connection with a usable path from this gateway, else 0.",
		LabelPeerRegion)
	m.PeersAlive = b.gaugeVec("mrgw_peers_alive",
		"Gateways gossip reports alive, per region (this gateway's own region included, this gateway excluded).",
		LabelPeerRegion)
	m.GossipDatagramsDropped = b.counterVec("mrgw_gossip_datagrams_dropped_total",
		"Datagrams at the gossip port dropped before gossip processed them, by reason: too_short, too_long, format (not a gossip packet), decrypt (no installed key authenticates it), rate (from an unknown address beyond its budget), queue_full, socket_overflow (dropped by the kernel: the reader fell behind).",
		LabelReason)
	m.GossipRefused = b.counterVec("mrgw_gossip_refused_total",
		"Gossip refused, by reason: stream_limit, stream_timeout, stream_size (streams beyond the bounds), keyring (a gateway with another keyring), unencrypted (a gateway without one), not_gateway, name_conflict.",
		LabelReason)

	m.DemandReportsDropped = b.counterVec("mrgw_region_demand_reports_dropped_total",
		"Demand reports from the region's gateways (wan.region_rate_bps split by demand) dropped, by reason: malformed (does not decode), foreign (of another region, or naming this gateway), full (from a gateway beyond the 64 this one tracks).",
		LabelReason)
	m.GossipHealthHeld = b.counter("mrgw_gossip_health_held_total",
		"Path-health verdicts of this gateway's own that flap damping held back: each up the relay reported while the plane's verdict was held after repeated downs (published once the penalty decays).")
	m.GossipHealthReleased = b.counter("mrgw_gossip_health_released_total",
		"Held path-health ups that went out once their flap-damping penalty decayed.")
	m.GossipHealthAbsorbed = b.counter("mrgw_gossip_health_absorbed_total",
		"Path-health downs that needed no gossip message because the last verdict on the wire still said down (flap damping had held the up).")
	m.GossipHealthDownEvicted = b.counter("mrgw_gossip_health_down_evicted_total",
		"Down path-health verdicts that gave way in the gossip's health table, full of down verdicts (each also logged at warn): more planes down than the table's bound allows for.")
	m.HealthReportsEvicted = b.counter("mrgw_path_health_reports_evicted_total",
		"Unexpired path-health reports of other gateways that gave way in this gateway's report table, full (each also logged at warn): more reporters on a peer's plane than its bound (2 x gateways x planes) allows for; not expected.")

	// Control channel.
	m.ControlSessionsActive = b.gaugeVec("mrgw_control_sessions_active",
		"Authenticated QUIC control sessions open now, per remote region (the gateways of one region hold none with each other).",
		LabelPeerRegion)
	m.ControlSessions = b.counterVec("mrgw_control_sessions_total",
		"Control session attempts, dialled and accepted, by result: established, refused (certificate or name not accepted), failed (handshake or network).",
		LabelResult)
	m.ControlRefusals = b.counterVec("mrgw_control_refusals_total",
		"Control session handshakes this gateway refused, as listener or dialer, by reason: no_certificate, expired, unknown_ca, bad_name, unknown_peer, denied, identity_mismatch, version, protocol, other (each is also a result=\"refused\" of mrgw_control_sessions_total).",
		LabelReason)
	m.ControlDropped = b.counterVec("mrgw_control_packets_dropped_total",
		"Packets at control.listen (QUIC) turned away before any connection held state for them, by reason: retry (an Initial without an address token, answered with a QUIC Retry and forgotten: one per session attempt, and every junk or spoofed Initial), busy (too many handshakes in progress: refused), queue (a quic-go queue full), malformed, unknown_connection (a short-header packet of no connection), version, unexpected (not a packet a connection starts with), buffer (the kernel's receive buffer was full).",
		LabelReason)
	m.ControlHandshakes = b.gauge("mrgw_control_handshakes_in_progress",
		"QUIC handshakes in progress at control.listen, from addresses a Retry validated (at most 64; beyond, reason=\"busy\" of mrgw_control_packets_dropped_total).")
	m.ControlTimeouts = b.counter("mrgw_control_handshake_timeouts_total",
		"QUIC handshakes at control.listen given up because the peer went silent (3 s) or took too long (6 s).")
	m.KeyRotations = b.counterVec("mrgw_key_rotations_total",
		"Datagram key rotations with a peer gateway (every wan.key_rotation), by result: ok or failed.",
		LabelPeer, LabelPeerRegion, LabelResult)

	// WAN datagrams.
	m.WANDatagramsSent = b.counterVec("mrgw_wan_datagrams_sent_total",
		"Tunnel datagrams sent to a peer gateway on a plane (before GSO segmentation is undone by the kernel: one per datagram).",
		wanLabels...)
	m.WANDatagramsReceived = b.counterVec("mrgw_wan_datagrams_received_total",
		"Tunnel datagrams received from a peer gateway on a plane and accepted (authenticated, not replayed).",
		wanLabels...)
	m.WANSentBytes = b.counterVec("mrgw_wan_sent_bytes_total",
		"UDP payload bytes of tunnel datagrams sent, headers and AEAD tags included.",
		wanLabels...)
	m.WANReceivedBytes = b.counterVec("mrgw_wan_received_bytes_total",
		"UDP payload bytes of tunnel datagrams received and accepted, headers and AEAD tags included.",
		wanLabels...)
	m.WANDatagramsDropped = b.counterVec("mrgw_wan_datagrams_dropped_total",
		"Tunnel datagrams received on a plane and dropped before reaching a connection, by reason: auth, replay, malformed, queue, truncated, unknown_peer, buffer (the kernel's receive buffer of the plane socket was full; with wan.gro on, one drop may be a coalesced run of datagrams, about nine on loopback).",
		LabelPlane, LabelReason)

	// LAN datagrams.
	m.LANDatagramsDropped = b.counterVec("mrgw_lan_datagrams_dropped_total",
		"Datagrams from hosts dropped at the LAN socket before the protocol saw them, by reason: buffer (the kernel's receive buffer was full), truncated (longer than the receive buffer), unknown_source (not a registered host and not admitted as one), malformed (from an unknown source, looks like an INIT but is not a valid one: never answered).",
		LabelReason)
	m.ProtocolDatagramsDropped = b.counterVec("mrgw_protocol_datagrams_dropped_total",
		"Datagrams the MetaRoCE state machine dropped before any connection saw them, by reason: truncated, bad_version (answered with a VERSION packet), bad_type, malformed, unknown_conn (of no connection), refused (an INIT refused). From hosts (unauthenticated: junk from a registered host's address, or from any port of its IP, lands here) and from peer gateways (after authentication; unknown_conn is normal for a moment after a connection closes).",
		LabelReason)

	// Peer connections.
	m.PeerConnected = b.gaugeVec("mrgw_peer_connected",
		"1 while the WAN connection to the peer gateway is established, else 0.",
		peerLabels...)
	m.PeerGoodputBytes = b.counterVec("mrgw_peer_goodput_bytes_total",
		"Payload bytes delivered over the WAN connection, each byte once: direction=out acknowledged by the peer, direction=in placed here.",
		with(peerLabels, LabelDirection)...)
	m.PeerPayloadSentBytes = b.counterVec("mrgw_peer_payload_sent_bytes_total",
		"Payload bytes sent to the peer gateway, retransmissions included (compare with goodput for the overhead of loss).",
		peerLabels...)
	m.PeerDataPacketsSent = b.counterVec("mrgw_peer_data_packets_sent_total",
		"Data packets sent to the peer gateway, retransmissions included.",
		peerLabels...)
	m.PeerRetransmits = b.counterVec("mrgw_peer_retransmits_total",
		"Data packets sent again to the peer gateway (after a SACK gap or a timeout).",
		peerLabels...)
	m.PeerRetransmitsCause = b.counterVec("mrgw_peer_retransmits_by_cause_total",
		"Data packets sent again to the peer gateway, by the loss that queued them: cause=gap a gap in a path's selective-ack bitmap (a queue drop or loss on the wire, or reordering within a path), cause=timeout a probe timeout or a path taken down. The causes sum to mrgw_peer_retransmits_total.",
		with(peerLabels, LabelCause)...)
	m.PeerSpurious = b.counterVec("mrgw_peer_spurious_retransmits_total",
		"Data packets sent again to the peer gateway that were not lost: the peer acknowledged the original afterwards (a probe timeout too short for the path's queue, or reordering within a path).",
		peerLabels...)
	m.PeerPacketsLost = b.counterVec("mrgw_peer_packets_lost_total",
		"Data packets to the peer gateway declared lost (a gap in a path's selective-ack bitmap, or a timeout).",
		peerLabels...)
	m.PeerTimeouts = b.counterVec("mrgw_peer_timeouts_total",
		"Probe timeouts on the WAN connection to the peer gateway (a path's data went unacknowledged for a PTO).",
		peerLabels...)
	m.PeerDuplicates = b.counterVec("mrgw_peer_duplicates_received_total",
		"Data packets received from the peer gateway that had already been placed (dropped, never delivered twice).",
		peerLabels...)
	m.PeerRateHint = b.gaugeVec("mrgw_peer_rate_hint_bytes_per_second",
		"The peer gateway's latest receiver rate hint (its fair share for this gateway), in bytes per second; 0 means no hint.",
		peerLabels...)
	m.PeerPacingRate = b.gaugeVec("mrgw_peer_pacing_rate_bytes_per_second",
		"The congestion controller's pacing rate towards the peer gateway, in bytes per second; 0 means window-limited only.",
		peerLabels...)

	m.PeerSilenceDrops = b.counterVec("mrgw_peer_silence_drops_total",
		"WAN connections to the peer gateway dropped because it answered nothing for wan.dead_after while something waited for its answer (the liveness verdict; its flows are RESET so their sources re-open them elsewhere).",
		peerLabels...)

	// Paths.
	m.PathState = b.gaugeVec("mrgw_path_state",
		"1 for the path's current state (up, suspect, down, probing), 0 for the others.",
		with(pathLabels, LabelState)...)
	m.PathTransitions = b.counterVec("mrgw_path_transitions_total",
		"Path state changes, by the state entered; entering down also re-rolls the path's entropy (UDP source port).",
		with(pathLabels, LabelState)...)
	m.PathRTT = b.gaugeVec("mrgw_path_rtt_seconds",
		"The path's smoothed round-trip time; no series until the path has measured one (an unknown RTT is absent, not 0).",
		pathLabels...)
	m.PathMinRTT = b.gaugeVec("mrgw_path_min_rtt_seconds",
		"The smallest round-trip time the path has measured; no series until it has measured one.",
		pathLabels...)
	m.PathCwnd = b.gaugeVec("mrgw_path_cwnd_bytes",
		"The congestion window the controller gives the path, in bytes.",
		pathLabels...)
	m.PathInflight = b.gaugeVec("mrgw_path_inflight_bytes",
		"Bytes sent on the path and neither acknowledged nor declared lost.",
		pathLabels...)
	m.PathPacketsSent = b.counterVec("mrgw_path_packets_sent_total",
		"Data packets sent on the path, retransmissions included.",
		pathLabels...)
	m.PathPacketsAcked = b.counterVec("mrgw_path_packets_acked_total",
		"Data packets acknowledged on the path.",
		pathLabels...)
	m.PathPacketsLost = b.counterVec("mrgw_path_packets_lost_total",
		"Data packets declared lost on the path.",
		pathLabels...)
	m.PathECNMarked = b.counterVec("mrgw_path_ecn_marked_packets_total",
		"Data packets on the path that the receiver saw marked ECN-CE (congestion experienced).",
		pathLabels...)
	m.PathTimeouts = b.counterVec("mrgw_path_timeouts_total",
		"Probe timeouts on the path.",
		pathLabels...)
	m.PathGoodputBytes = b.counterVec("mrgw_path_goodput_bytes_total",
		"Payload bytes acknowledged on the path.",
		pathLabels...)

	m.PathsAvoidedTotal = b.counterVec("mrgw_paths_avoided_total",
		"WAN paths this gateway took out of service because another gateway's path-health report (gossip) said their plane was down, before its own timeouts fired; they are probed back like any failed path.",
		wanLabels...)
	b.pmtu()

	if !o.noStandard {
		r.MustRegister(
			collectors.NewGoCollector(),
			collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		)
	}
	bi := buildinfo.Get()
	m.BuildInfo.WithLabelValues(bi.Version, bi.Revision, bi.GoVersion).Set(1)
	// The fixed label sets exist from the start, so that a dashboard and
	// increase() see a zero before the first event (see also Init).
	for _, r := range RefuseReasons {
		m.HostFlowsRefused.WithLabelValues(r)
	}
	for _, r := range ReloadResults {
		m.ConfigReloads.WithLabelValues(r)
	}
	for _, r := range AdminRefuseReasons {
		m.AdminConnsRefused.WithLabelValues(r)
	}
	for _, r := range SessionResults {
		m.ControlSessions.WithLabelValues(r)
	}
	for _, d := range Directions {
		m.LANGoodputBytes.WithLabelValues(d)
	}
	for _, r := range LANDropReasons {
		m.LANDatagramsDropped.WithLabelValues(r)
	}
	for _, r := range ControlRefusalReasons {
		m.ControlRefusals.WithLabelValues(r)
	}
	for _, r := range ControlDropReasons {
		m.ControlDropped.WithLabelValues(r)
	}
	for _, r := range ProtocolDropReasons {
		m.ProtocolDatagramsDropped.WithLabelValues(r)
	}
	for _, r := range AdmitReasons {
		m.LANAdmissionRefused.WithLabelValues(r)
	}
	for _, r := range ReclaimReasons {
		m.LANPeersReclaimed.WithLabelValues(r)
	}
	for _, r := range RegisterReasons {
		m.RegistrationsRefused.WithLabelValues(r)
	}
	for _, r := range GossipDropReasons {
		m.GossipDatagramsDropped.WithLabelValues(r)
	}
	for _, r := range DemandDropReasons {
		m.DemandReportsDropped.WithLabelValues(r)
	}
	for _, r := range GossipRefuseReasons {
		m.GossipRefused.WithLabelValues(r)
	}
	return m
}

// Families returns the catalogue: every family New registers (the standard
// go_* and process_* families aside), sorted by name.
func (m *Metrics) Families() []Family {
	out := slices.Clone(m.families)
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

var (
	catalogueOnce sync.Once
	catalogue     []Family
)

// Catalogue returns the families of the catalogue, sorted by name, without
// building a registry for the caller.
func Catalogue() []Family {
	catalogueOnce.Do(func() { catalogue = New(WithoutStandardCollectors()).Families() })
	return slices.Clone(catalogue)
}

// Names lists the name of every metric family the daemon exports from the
// catalogue, sorted. A histogram is listed by its family name; its series
// are name_bucket, name_sum and name_count. The standard go_* and process_*
// families are exported as well but not listed.
func Names() []string {
	fams := Catalogue()
	out := make([]string, len(fams))
	for i, f := range fams {
		out[i] = f.Name
	}
	return out
}

// Lookup returns the catalogue entry of a family name.
func Lookup(name string) (Family, bool) {
	for _, f := range Catalogue() {
		if f.Name == name {
			return f, true
		}
	}
	return Family{}, false
}

// builder creates collectors, registers them and records the catalogue.
type builder struct {
	m *Metrics
	r prometheus.Registerer
}

func (b *builder) record(name string, t Type, help string, labels []string) {
	for _, f := range b.m.families {
		if f.Name == name {
			panic(fmt.Sprintf("metrics: %s defined twice", name))
		}
	}
	b.m.families = append(b.m.families, Family{Name: name, Type: t, Help: help, Labels: slices.Clone(labels)})
}

func (b *builder) track(v *prometheus.MetricVec, labels []string) {
	if slices.Contains(labels, LabelPeer) {
		b.m.vecs = append(b.m.vecs, v)
	}
}

func (b *builder) gauge(name, help string) prometheus.Gauge {
	b.record(name, Gauge, help, nil)
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
	b.r.MustRegister(g)
	return g
}

func (b *builder) counter(name, help string) prometheus.Counter {
	b.record(name, Counter, help, nil)
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	b.r.MustRegister(c)
	return c
}

func (b *builder) gaugeVec(name, help string, labels ...string) *prometheus.GaugeVec {
	b.record(name, Gauge, help, labels)
	v := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels)
	b.r.MustRegister(v)
	b.track(v.MetricVec, labels)
	return v
}

func (b *builder) counterVec(name, help string, labels ...string) *prometheus.CounterVec {
	b.record(name, Counter, help, labels)
	v := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
	b.r.MustRegister(v)
	b.track(v.MetricVec, labels)
	return v
}

func (b *builder) histogramVec(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	b.record(name, Histogram, help, labels)
	v := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, labels)
	b.r.MustRegister(v)
	b.track(v.MetricVec, labels)
	return v
}

// oneOf returns v if it is one of allowed, else Other: label values of the
// fixed sets never grow.
func oneOf(v string, allowed []string) string {
	if slices.Contains(allowed, v) {
		return v
	}
	return Other
}
