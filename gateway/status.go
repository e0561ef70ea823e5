//go:build linux

package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/mrgw/mrgw/internal/ratelog"
	"github.com/mrgw/mrgw/metaroce"
	"github.com/mrgw/mrgw/metrics"
	"github.com/mrgw/mrgw/netio/seal"
	"github.com/mrgw/mrgw/region"
	"github.com/mrgw/mrgw/units"
)

// Admin HTTP server bounds (see Options.AdminIdleTimeout).
const (
	defaultAdminIdleTimeout = 30 * time.Second
	defaultAdminMaxConns    = 64
	adminReadHeaderTimeout  = 5 * time.Second
	adminReadTimeout        = 10 * time.Second
	// adminWriteTimeout bounds one response; /metrics of a gateway with
	// thousands of hosts is the largest.
	adminWriteTimeout = 30 * time.Second
)

// Status is the gateway's state as /status serves it (JSON) and `mrgw
// status` prints it. It is a snapshot taken every Options.StatsEvery.
type Status struct {
	Node     string         `json:"node"`
	Region   string         `json:"region"`
	At       time.Time      `json:"at"`
	Ready    bool           `json:"ready"`
	Draining bool           `json:"draining"`
	Members  []MemberStatus `json:"members"`
	// Unseen lists the gateways regions[].gateways[] names ("REGION/NAME")
	// that gossip has not shown, 30 s after the start.
	Unseen []string     `json:"unseen_gateways,omitempty"`
	Peers  []PeerStatus `json:"peers"`
	Flows  FlowStatus   `json:"flows"`
	Memory MemoryStatus `json:"memory"`
	// LAN goodput through the gateway, bytes per second: towards remote
	// regions (out) and towards local hosts (in).
	LANOutBps units.ByteRate `json:"lan_out_bytes_per_second"`
	LANInBps  units.ByteRate `json:"lan_in_bytes_per_second"`
	// WANRate is the WAN capacity on the wire the gateway paces to (0:
	// none): wan.max_rate_bps or its part of wan.region_rate_bps (by
	// demand), and RegionShare its static fair part ("100/200": its
	// node.capacity over the sum over its region's live gateways; empty
	// without the key).
	WANRate     units.BitRate `json:"wan_rate_bps"`
	RegionShare string        `json:"region_share,omitempty"`
	// RegionDemand is the demand-aware split of wan.region_rate_bps:
	// the static fair part, the part held now, what this gateway and the
	// region's others last reported (nil without the key).
	RegionDemand *RegionDemandStatus `json:"region_demand,omitempty"`
	Hosts        int                 `json:"hosts"`
	// HostLinks are the connections to registered hosts (the LAN hop).
	HostLinks []HostLinkStatus `json:"host_links,omitempty"`
	// PathsAvoided counts WAN paths taken out of service because another
	// gateway reported their plane down (path-health gossip).
	PathsAvoided uint64 `json:"paths_avoided"`
	// Admission is the LAN admission state (admission.go).
	Admission AdmissionStatus `json:"admission"`
	// PathSockets are the UDP sockets open for paths now: the WAN's, one
	// per peer path, and the hosts' shared pool (Options.HostPathSockets).
	PathSockets uint64 `json:"path_sockets"`
}

// HostLinkStatus is the connection to one registered host: what this
// gateway's controller allows on it and what is in flight.
type HostLinkStatus struct {
	Endpoint  string         `json:"endpoint"`
	PacingBps units.ByteRate `json:"pacing_bytes_per_second"`
	Cwnd      int            `json:"cwnd_bytes"`
	Inflight  int            `json:"inflight_bytes"`
	PathsUp   int            `json:"paths_up"`
	Sent      uint64         `json:"payload_bytes_sent"`
	Lost      uint64         `json:"packets_lost"`
	Retrans   uint64         `json:"retransmits"`
	FlowsOut  int            `json:"flows_out"`
}

// MemberStatus is one gateway as gossip sees it.
type MemberStatus struct {
	Name   string `json:"name"`
	Region string `json:"region"`
	State  string `json:"state"`
}

// PeerStatus is a peer gateway: its control session and WAN connection.
type PeerStatus struct {
	Name       string         `json:"name"`
	Region     string         `json:"region"`
	State      string         `json:"state"` // down, connecting, session, up
	Since      time.Time      `json:"since"`
	LastError  string         `json:"last_error,omitempty"`
	ControlRTT float64        `json:"control_rtt_ms,omitempty"` // omitted until measured
	TxBps      units.ByteRate `json:"tx_payload_bytes_per_second"`
	PacingBps  units.ByteRate `json:"pacing_bytes_per_second"` // the controller's pacing rate
	RxBps      units.ByteRate `json:"rx_payload_bytes_per_second"`
	Sent       uint64         `json:"payload_bytes_sent"`
	Received   uint64         `json:"payload_bytes_received"`
	Retrans    uint64         `json:"retransmits"`
	Lost       uint64         `json:"packets_lost"`
	// DataSent counts the DATA packets sent, retransmissions included;
	// RetransGap and RetransTimeout split Retrans by the loss that queued
	// them, RetransSpurious the ones the peer had received after all
	// (metaroce.ConnStats).
	DataSent        uint64 `json:"data_packets_sent"`
	RetransGap      uint64 `json:"retransmits_gap"`
	RetransTimeout  uint64 `json:"retransmits_timeout"`
	RetransSpurious uint64 `json:"retransmits_spurious"`
	Flows           int    `json:"flows"`
	// Wire is the MetaRoCE wire version the WAN connection agreed (1 or
	// 2: the highest both gateways speak).
	Wire  int          `json:"wire_version,omitempty"`
	Paths []PathStatus `json:"paths"`
	// PMTU is the path MTU discovery of each plane (pmtu.go).
	PMTU []PlaneMTUStatus `json:"pmtu,omitempty"`
}

// PathStatus is one path of a WAN connection.
type PathStatus struct {
	ID       int     `json:"id"`
	Plane    string  `json:"plane"`
	State    string  `json:"state"`
	RTT      float64 `json:"rtt_ms,omitempty"` // omitted until the path has measured one
	MinRTT   float64 `json:"min_rtt_ms,omitempty"`
	Cwnd     int     `json:"cwnd_bytes"`
	Inflight int     `json:"inflight_bytes"`
	Sent     uint64  `json:"packets_sent"`
	Lost     uint64  `json:"packets_lost"`
}

// FlowStatus counts host flows.
type FlowStatus struct {
	Active    int    `json:"active"`
	Refused   uint64 `json:"refused"`
	Resets    uint64 `json:"resets"`
	Completed uint64 `json:"messages_completed"`
	// Detoured counts routes that passed over the gateway the placement
	// rule picks for the flow among those with an established WAN
	// connection (the least loaded, ties by rendezvous rank), because it
	// was gossip-suspect, silent while waited on, or refused the
	// endpoint.
	Detoured uint64 `json:"detoured"`
	// ChunksInPlace counts chunks relayed in the receive buffer they
	// arrived in; ChunksCopied those copied out of it (the two hops cut
	// the message differently, the whole buffer did not fit the flow's
	// credit or the memory limit, or the receive path could not give up
	// its buffer).
	ChunksInPlace uint64 `json:"chunks_relayed_in_place"`
	ChunksCopied  uint64 `json:"chunks_relayed_copied"`
}

// MemoryStatus is the relay buffer budget.
type MemoryStatus struct {
	InUse    int64 `json:"in_use_bytes"`
	Reserved int64 `json:"reserved_bytes"`
	Limit    int64 `json:"limit_bytes"`
}

// Status returns the latest snapshot.
func (g *Gateway) Status() Status { return *g.status.Load() }

func (g *Gateway) planeName(path int) string { return planeNameOf(g.planes, path) }

type rateState struct {
	at                 time.Time
	fromHosts, toHosts uint64
	sent, received     map[string]uint64
}

// statsLoop refreshes metrics and the status snapshot.
func (g *Gateway) statsLoop() {
	t := time.NewTicker(g.opts.StatsEvery)
	defer t.Stop()
	prev := rateState{at: time.Now(), sent: map[string]uint64{}, received: map[string]uint64{}}
	for {
		g.snapshot(&prev)
		select {
		case <-g.ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (g *Gateway) snapshot(prev *rateState) {
	now := time.Now()
	dt := now.Sub(prev.at).Seconds()
	if dt <= 0 {
		dt = 1
	}
	st := &Status{Node: g.Config().Node.Name, Region: g.Config().Node.Region, At: now}
	peerList := g.peerList()
	peers := map[string]*PeerStatus{}
	for _, p := range peerList {
		p.mu.Lock()
		ps := &PeerStatus{Name: p.name, Region: p.region, State: p.state, Since: p.since, LastError: p.lastErr,
			ControlRTT: units.Ms(p.rtt)}
		p.mu.Unlock()
		if ps.State == "" {
			ps.State = "down"
		}
		peers[p.name] = ps
	}
	r := g.relay
	err := g.ep.Call(g.ctx, func(epNow time.Duration, ep *metaroce.Endpoint) {
		g.syncProtocolDrops(ep)
		st.Draining = r.draining
		r.adm.reclaim(epNow)
		st.Admission = r.adm.status(epNow)
		st.PathSockets = g.ep.Stats().PathSockets
		st.Flows = FlowStatus{Active: len(r.flows), Refused: r.refused, Resets: r.resets, Completed: r.completed, Detoured: r.detoured,
			ChunksInPlace: r.inPlace, ChunksCopied: r.copied}
		st.Memory = MemoryStatus{InUse: r.inUse, Reserved: r.reserved, Limit: r.memLimit}
		st.LANOutBps = units.ByteRate(float64(r.fromHosts-prev.fromHosts) / dt)
		st.LANInBps = units.ByteRate(float64(r.toHosts-prev.toHosts) / dt)
		g.metrics.LANGoodputBytes.WithLabelValues(metrics.DirOut).Add(float64(r.fromHosts - prev.fromHosts))
		g.metrics.LANGoodputBytes.WithLabelValues(metrics.DirIn).Add(float64(r.toHosts - prev.toHosts))
		prev.fromHosts, prev.toHosts = r.fromHosts, r.toHosts
		st.Hosts = len(r.hosts)
		part := g.regionPart()
		st.WANRate = wanWire(g.rateCfg, part)
		if g.rateCfg.WAN.RegionRateBps > 0 && part.share.total > 0 {
			st.RegionShare = fmt.Sprintf("%d/%d", part.share.mine, part.share.total)
		}
		st.RegionDemand = g.demandStatus(g.rateCfg, time.Now())
		for name, ci := range r.hosts {
			if !ci.up || ci.dead {
				continue
			}
			hs := HostLinkStatus{Endpoint: name, PacingBps: ci.c.Controller().PacingRate(),
				Sent: ci.c.Stats.PayloadBytesSent, Lost: ci.c.Stats.PacketsLost, Retrans: ci.c.Stats.Retransmits, FlowsOut: len(ci.out)}
			for i := range ci.c.Paths().Paths {
				pp := &ci.c.Paths().Paths[i]
				if pp.State.String() == "up" {
					hs.PathsUp++
					hs.Cwnd += ci.c.Controller().Window(i)
				}
				hs.Inflight += pp.InflightBytes
			}
			st.HostLinks = append(st.HostLinks, hs)
		}
		r.health.reports.Expire(epNow)
		r.actOnReports(epNow)
		st.PathsAvoided = r.health.avoided
		for p := range r.wan {
			ci := p.conn
			ps := peers[p.name]
			if ps == nil || !ci.up {
				continue
			}
			s := ci.c.Stats
			ps.Sent, ps.Received = s.PayloadBytesSent, s.PayloadBytesPlaced
			ps.Retrans, ps.Lost = s.Retransmits, s.PacketsLost
			ps.DataSent, ps.RetransGap, ps.RetransTimeout, ps.RetransSpurious = s.DataSent, s.RetransmitsGap, s.RetransmitsTimeout, s.RetransmitsSpurious
			ps.Flows = len(ci.in) + len(ci.out)
			ps.Wire = ci.c.WireVersion()
			if old, ok := prev.sent[p.name]; ok && s.PayloadBytesSent >= old {
				ps.TxBps = units.ByteRate(float64(s.PayloadBytesSent-old) / dt)
			}
			if old, ok := prev.received[p.name]; ok && s.PayloadBytesPlaced >= old {
				ps.RxBps = units.ByteRate(float64(s.PayloadBytesPlaced-old) / dt)
			}
			prev.sent[p.name], prev.received[p.name] = s.PayloadBytesSent, s.PayloadBytesPlaced
			p.metrics.Sync(s)
			p.metrics.SetRates(0, ci.c.Controller().PacingRate())
			ps.PacingBps = ci.c.Controller().PacingRate()
			for i := range ci.c.Paths().Paths {
				pp := &ci.c.Paths().Paths[i]
				w := ci.c.Controller().Window(i)
				ps.Paths = append(ps.Paths, PathStatus{ID: i, Plane: g.planeName(i), State: pp.State.String(),
					RTT: units.Ms(pp.SRTT), MinRTT: units.Ms(pp.MinRTT), Cwnd: w, Inflight: pp.InflightBytes,
					Sent: pp.SentPackets, Lost: pp.LostPackets})
				g.metrics.Path(p.name, p.region, g.planeName(i), i).Sync(metrics.SnapshotOf(pp, w, 0))
			}
			ps.PMTU = g.pmtuStatus(p, ci.c)
			r.publishPlanes(ci, now, true)
			r.markActivity(ci)
		}
	})
	if err != nil {
		return
	}
	prev.at = now
	for _, p := range peerList {
		st.Peers = append(st.Peers, *peers[p.name])
		for _, ps := range g.ep.PlaneStats(p.id) {
			if ps.Plane < len(g.planes) {
				g.metrics.SyncWAN(p.name, p.region, g.planes[ps.Plane], metrics.WANCounters{
					SentDatagrams: ps.TxDatagrams, SentBytes: ps.TxBytes,
					ReceivedDatagrams: ps.RxDatagrams, ReceivedBytes: ps.RxBytes})
			}
		}
	}
	g.syncPlaneDrops()
	g.syncSendFailures()
	g.syncLANDrops()
	g.syncControlDrops()
	view := g.cluster.View()
	gs := g.cluster.Stats()
	g.metrics.SyncGossip(gs.DatagramsDropped, gs.Refused)
	g.metrics.SyncGossipHealth(metrics.GossipHealth{Held: gs.HealthHeld, Released: gs.HealthReleased,
		Absorbed: gs.HealthAbsorbed, DownEvicted: gs.HealthDownEvicted})
	g.syncMembership(st, view, peerList)
	st.Unseen = g.unseenGateways(view)
	if len(st.Unseen) > 0 {
		g.peerRefusals.Warn("unseen", "gateways listed under regions have never been seen in gossip", "gateways", st.Unseen)
	}
	g.metrics.MemoryBufferedBytes.Set(float64(st.Memory.InUse))
	g.metrics.HostFlowsActive.Set(float64(st.Flows.Active))
	g.metrics.SyncDetoured(st.Flows.Detoured)
	st.Ready = g.ready(st)
	g.status.Store(st)
}

// syncPlaneDrops folds every plane socket's drops, by reason, into
// mrgw_wan_datagrams_dropped_total.
func (g *Gateway) syncPlaneDrops() {
	for _, d := range g.ep.PlaneDrops() {
		if d.Plane < 0 || d.Plane >= len(g.planes) {
			continue
		}
		plane := g.planes[d.Plane]
		g.metrics.SyncDropped(plane, metrics.DropUnknownPeer, d.UnknownSource)
		if d.KernelErr == nil {
			g.metrics.SyncDropped(plane, metrics.DropBuffer, d.Kernel)
		}
		var byReason [len(dropReasonOf)]uint64
		for e, n := range d.OpenErrors {
			byReason[dropReasonIndex(e)] += n
		}
		for i, n := range byReason {
			if n > 0 {
				g.metrics.SyncDropped(plane, dropReasonOf[i], n)
			}
		}
	}
}

// syncSendFailures counts the datagrams the kernel refused to send since
// the last call (mrgw_datagrams_send_failed_total) and warns of them,
// rate-limited. Only the stats loop calls it.
func (g *Gateway) syncSendFailures() { g.countSendFailures(g.ep.Stats().TxErrors) }

// countSendFailures takes netio's running total of refused datagrams.
func (g *Gateway) countSendFailures(n uint64) {
	if n > g.sendFailed {
		d := n - g.sendFailed
		g.metrics.DatagramsSendFailed.Add(float64(d))
		g.sendFailLog.Warn("send", "datagrams the kernel refused to send: the protocol resends them as lost", "count", d)
	}
	g.sendFailed = n
}

// syncMembership lists gossip's members in st and sets the per-region
// alive and reachable gauges.
func (g *Gateway) syncMembership(st *Status, view region.View, peerList []*wanPeer) {
	reach := map[string]bool{}
	for reg, gws := range view.Regions {
		alive := 0
		for _, gw := range gws {
			st.Members = append(st.Members, MemberStatus{Name: gw.Name, Region: reg, State: gw.State.String()})
			if gw.State.Live() {
				reach[reg] = true
				if gw.Name != view.Self {
					alive++
				}
			}
		}
		g.metrics.PeersAlive.WithLabelValues(reg).Set(float64(alive))
	}
	for _, reg := range g.Config().Regions {
		g.metrics.SetRegionReachable(reg.Name, reach[reg.Name])
	}
	for _, p := range peerList {
		if !g.pinnedRegion(p.region) {
			g.metrics.SetRegionReachable(p.region, reach[p.region])
		}
	}
}

// ready: gossip joined, not draining, and a WAN connection up to at least
// one peer gateway (when there are peers). A gateway that is not ready
// still answers hosts: with OPEN_ERR, at once.
func (g *Gateway) ready(st *Status) bool {
	if !g.joined.Load() || st.Draining || st.Admission.Saturated {
		return false
	}
	if len(st.Peers) == 0 {
		return true // no gateway of another region announced yet
	}
	for _, p := range st.Peers {
		if p.State == "up" {
			return true
		}
	}
	return false
}

// dropReasonOf names the reasons seal errors are counted under, indexed
// by dropReasonIndex.
var dropReasonOf = [...]metrics.DropReason{metrics.DropOther, metrics.DropMalformed, metrics.DropAuth, metrics.DropReplay}

// dropReasonIndex maps a seal.Error (netio.PlaneDrops.OpenErrors index) to
// dropReasonOf: too short or of an unknown type is malformed, an unknown
// key epoch or a failed tag is auth, a replay is replay.
func dropReasonIndex(e int) int {
	switch seal.Error(e) {
	case seal.ErrTooShort, seal.ErrUnknownType:
		return 1
	case seal.ErrUnknownEpoch, seal.ErrAuth:
		return 2
	case seal.ErrReplayed:
		return 3
	}
	return 0
}

// adminCaps returns the admin server's total and per-source connection
// caps from Options.AdminMaxConns and AdminMaxConnsPerSource (0: default).
// The per-source cap defaults to a quarter of the total (at least 1), so
// that one source leaves three quarters to Prometheus and the operators
// whatever the total: it was 16 whatever the total, which with a total of
// 16 or less let one source take every slot. A per-source cap above the
// total is the total (it could never bind).
func adminCaps(total, perSource int) (int, int) {
	if total <= 0 {
		total = defaultAdminMaxConns
	}
	if perSource <= 0 {
		perSource = max(1, total/4)
	}
	return total, min(perSource, total)
}

// adminServer builds the admin HTTP server on g.adminLn, which it wraps in
// connection caps: every timeout is set, so an idle or slow client holds a
// connection (and its goroutine) for a bounded time; at most
// Options.AdminMaxConns are open at once (3,000 idle keep-alive connections
// stayed open, with 3,054 goroutines, when nothing was set), and a new
// connection over the cap takes the slot of the one that has waited
// longest for a request (evictingListener: idle or slow connections never
// keep a probe or a scrape waiting); and at most
// Options.AdminMaxConnsPerSource of them from one source IP, so that one
// client cannot hold them all (refusals counted in
// mrgw_admin_connections_refused_total and logged at warn, at most once a
// second).
func (g *Gateway) adminServer() *http.Server {
	idle := g.opts.AdminIdleTimeout
	if idle <= 0 {
		idle = defaultAdminIdleTimeout
	}
	maxConns, perSource := adminCaps(g.opts.AdminMaxConns, g.opts.AdminMaxConnsPerSource)
	refusals := ratelog.New(g.log.With("part", "admin"), time.Second)
	perSourceLn := newSourceLimitListener(g.adminLn, perSource, func(src netip.Addr, open int) {
		g.metrics.AdminRefused(metrics.AdminPerSource)
		refusals.Warn(metrics.AdminPerSource, "admin connection refused: its source holds the per-source cap",
			"reason", metrics.AdminPerSource, "source", src.String(), "open", open, "limit", perSource)
	})
	// The total cap outside: a connection refused per source never takes
	// one of its slots.
	total := newEvictingListener(perSourceLn, maxConns, func(victim netip.Addr, waited time.Duration) {
		g.metrics.AdminRefused(metrics.AdminEvicted)
		refusals.Warn(metrics.AdminEvicted, "admin connection closed to make room: every slot was taken",
			"reason", metrics.AdminEvicted, "source", victim.String(), "waited", waited.Round(time.Millisecond), "limit", maxConns)
	}, func(src netip.Addr) {
		g.metrics.AdminRefused(metrics.AdminBusy)
		refusals.Warn(metrics.AdminBusy, "admin connection refused: every slot is serving a request",
			"reason", metrics.AdminBusy, "source", src.String(), "limit", maxConns)
	})
	g.adminLn = total
	h := g.adminHandler()
	return &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if c, ok := r.Context().Value(connKey{}).(net.Conn); ok {
				total.serving(c)
			}
			h.ServeHTTP(w, r)
		}),
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(ctx, connKey{}, c)
		},
		ConnState: func(c net.Conn, s http.ConnState) {
			if s == http.StateIdle {
				total.idle(c)
			}
		},
		ReadHeaderTimeout: min(adminReadHeaderTimeout, idle),
		ReadTimeout:       adminReadTimeout,
		WriteTimeout:      adminWriteTimeout,
		IdleTimeout:       idle,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(g.log.Handler(), slog.LevelDebug),
	}
}

func (g *Gateway) adminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(g.metrics.Registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		select {
		case <-g.stopped:
			http.Error(w, "stopped", http.StatusServiceUnavailable)
		default:
			fmt.Fprintln(w, "ok")
		}
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		st := g.Status()
		if !st.Ready {
			http.Error(w, "not ready: "+g.notReadyReason(&st), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, g.Status())
	})
	g.adminExtras(mux)
	mux.HandleFunc("GET /probe", g.probeHandler) // probe.go
	return mux
}

func (g *Gateway) notReadyReason(st *Status) string {
	switch {
	case st.Admission.Saturated:
		return fmt.Sprintf("admission saturated (%d of %d LAN peers, %d not registered)", st.Admission.Peers, st.Admission.Limit, st.Admission.Pending)
	case st.Draining:
		return "draining"
	case !g.joined.Load():
		if err := g.cluster.JoinErr(); err != nil {
			return "gossip not joined: " + err.Error()
		}
		return "gossip not joined"
	}
	return "no WAN connection to any peer gateway"
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
