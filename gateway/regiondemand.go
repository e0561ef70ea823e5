//go:build linux

package gateway

import (
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mrgw/mrgw/config"
	"github.com/mrgw/mrgw/metaroce"
	"github.com/mrgw/mrgw/metrics"
	"github.com/mrgw/mrgw/region"
	"github.com/mrgw/mrgw/units"
)

// maxDemandReports bounds the reports held: a region has at most 16
// gateways; reports of gateways that are not live in the region are
// pruned every exchange.
const maxDemandReports = 64

// heardDemand is the last report received from one gateway.
type heardDemand struct {
	demandReport
	at time.Time // when it arrived (this gateway's clock)
}

// regionDemand is the demand exchange's state (regionsplit.go).
type regionDemand struct {
	mu    sync.Mutex
	heard map[string]heardDemand // by gateway name; at most maxDemandReports
	// last and prev are the last two samples this gateway sent.
	last, prev *demandSample
	// Measurement: the WAN bytes counted at the last exchange, by peer
	// id (sent, received), when, and the part of the region's rate in
	// force then (wire bit/s).
	bytes    map[metaroce.PeerID][2]uint64
	at       time.Time
	partThen units.BitRate

	kick chan struct{} // a report arrived: re-read the part

	received, malformed, foreign, sent, sendFailed atomic.Uint64
}

func newRegionDemand() *regionDemand {
	return &regionDemand{heard: map[string]heardDemand{}, bytes: map[metaroce.PeerID][2]uint64{}, kick: make(chan struct{}, 1)}
}

// reset forgets this gateway's own samples and measurement (the key was
// cleared, or the gateway has not joined): the next exchange starts from
// the static part again.
func (d *regionDemand) reset() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.last, d.prev = nil, nil
	d.at = time.Time{}
	clear(d.bytes)
}

// dropDemand counts a demand report dropped for reason, in the metric and
// in /status (Foreign counts full too), and logs it at warn, once per
// reason per 10 s.
func (g *Gateway) dropDemand(reason string, args ...any) {
	if reason == metrics.DemandMalformed {
		g.demand.malformed.Add(1)
	} else {
		g.demand.foreign.Add(1)
	}
	g.metrics.DemandReportsDropped.WithLabelValues(reason).Inc()
	g.demandLog.Warn(reason, "dropping a demand report from the region's gateways", args...)
}

// onMessage takes a demand report from the region's gateway messages. It
// runs on memberlist's goroutine: it decodes, stores and signals, nothing
// more. Malformed reports and reports of another region or of this
// gateway's own name are dropped and counted.
func (g *Gateway) onDemandMessage(payload []byte) {
	d := g.demand
	r, err := decodeDemand(payload)
	if err != nil {
		g.dropDemand(metrics.DemandMalformed, "err", err)
		return
	}
	cfg := g.Config()
	if r.Region != cfg.Node.Region || r.From == cfg.Node.Name {
		g.dropDemand(metrics.DemandForeign, "from", r.From, "region", r.Region)
		return
	}
	now := time.Now()
	d.mu.Lock()
	old, ok := d.heard[r.From]
	switch {
	case ok && r.Seq <= old.Seq && now.Sub(old.at) <= demandStale:
		// Overtaken on the way by a later one. A restarted gateway whose
		// clock went back is heard again once its old report is stale.
		d.mu.Unlock()
		return
	case !ok && len(d.heard) >= maxDemandReports:
		d.mu.Unlock()
		g.dropDemand(metrics.DemandFull, "from", r.From, "tracked", maxDemandReports)
		return
	}
	d.heard[r.From] = heardDemand{demandReport: r, at: now}
	d.mu.Unlock()
	d.received.Add(1)
	select {
	case d.kick <- struct{}{}:
	default:
	}
}

// demandLoop runs the exchange: every demandEvery it measures this
// gateway's demand, sends it and re-reads its part; a report received in
// between re-reads the part at once, so a gateway that lent rate gives it
// back as soon as the borrower's demand arrives.
func (g *Gateway) demandLoop() {
	t := time.NewTicker(demandEvery)
	defer t.Stop()
	for {
		select {
		case <-g.ctx.Done():
			return
		case <-t.C:
			g.exchangeDemand(time.Now())
		case <-g.demand.kick:
			g.syncMu.Lock()
			g.syncShare(g.Config(), g.cluster.View())
			g.syncMu.Unlock()
		}
	}
}

// exchangeDemand measures, sends and re-reads the part.
func (g *Gateway) exchangeDemand(now time.Time) {
	cfg := g.Config()
	if cfg.WAN.RegionRateBps == 0 || !g.joined.Load() {
		g.demand.reset()
		if g.demandFrac.Load() != 0 { // back to the static share
			g.syncMu.Lock()
			g.syncShare(cfg, g.cluster.View())
			g.syncMu.Unlock()
		}
		return
	}
	view := g.cluster.View()
	s, ok := g.measureDemand(cfg, now)
	if ok {
		g.sendDemand(cfg, view, s, now)
	}
	g.syncMu.Lock()
	g.syncShare(cfg, view)
	g.syncMu.Unlock()
}

// measureDemand is this gateway's demand since the last exchange: the
// bytes its WAN connections sent and received (the larger), on the wire,
// and whether its part of the region's rate held it back (it sent at least
// demandLimited of the smaller of its parts then and now, and that part,
// not wan.max_rate_bps, was its ceiling). false on the first call, which
// only starts the measurement.
func (g *Gateway) measureDemand(cfg *config.Config, now time.Time) (demandSample, bool) {
	d := g.demand
	var tx, rx uint64
	seen := map[metaroce.PeerID][2]uint64{}
	for _, p := range g.peerList() {
		var c [2]uint64
		for _, ps := range g.ep.PlaneStats(p.id) {
			c[0] += ps.TxBytes
			c[1] += ps.RxBytes
		}
		seen[p.id] = c
	}
	part := g.regionPart().of(cfg.WAN.RegionRate())
	d.mu.Lock()
	defer d.mu.Unlock()
	for id, c := range seen {
		old, ok := d.bytes[id]
		if !ok || c[0] < old[0] || c[1] < old[1] {
			old = [2]uint64{} // a new peer, or counters that started again
		}
		tx += c[0] - old[0]
		rx += c[1] - old[1]
	}
	first := d.at.IsZero()
	dt := now.Sub(d.at)
	partThen := d.partThen
	d.bytes, d.at, d.partThen = seen, now, part
	if first || dt <= 0 {
		return demandSample{}, false
	}
	// The counters hold a datagram's content; the wire carries its
	// envelope and headers too.
	plain := units.ByteRate(float64(max(tx, rx)) / dt.Seconds()).Bits()
	wire := units.BitRate(float64(plain) * wireFactor(cfg))
	held := min(part, partThen)
	ceiling := cfg.WAN.MaxRate()
	s := demandSample{Rate: wire, Limited: (ceiling <= 0 || held <= ceiling) && wire >= demandLimited*held}
	d.prev, d.last = d.last, &s
	return s, true
}

// sendDemand sends s to every other live gateway of the region that reads
// demand reports.
func (g *Gateway) sendDemand(cfg *config.Config, view region.View, s demandSample, now time.Time) {
	d := g.demand
	msg, err := appendDemand(nil, demandReport{Region: cfg.Node.Region, From: cfg.Node.Name, Seq: uint64(now.UnixNano()),
		demandSample: s, Part: g.regionPart().of(cfg.WAN.RegionRate())})
	if err != nil {
		g.log.Debug("cannot encode a demand report", "err", err)
		return
	}
	for _, gw := range view.Regions[cfg.Node.Region] {
		if gw.Name == cfg.Node.Name || !gw.State.Live() || !gw.Gossip.IsValid() || !slices.Contains(gw.Meta.Capabilities, capRegionDemand) {
			continue
		}
		if err := g.cluster.SendMessage(gw.Name, gw.Gossip, msg); err != nil {
			d.sendFailed.Add(1)
			g.log.Debug("cannot send a demand report", "peer", gw.Name, "err", err)
			continue
		}
		d.sent.Add(1)
	}
}

// demandSplit is this gateway's part of the region's rate as a fraction
// of it, from the reports held (splitRegion), over the live gateways
// shareOf counts; it prunes the reports of gateways no longer among them.
func (g *Gateway) demandSplit(cfg *config.Config, view region.View, now time.Time) float64 {
	rate := cfg.WAN.RegionRate()
	if rate <= 0 {
		return 0
	}
	d := g.demand
	d.mu.Lock()
	defer d.mu.Unlock()
	self := ownDemand{Weight: region.Meta{Capacity: uint32(cfg.Node.Capacity)}.Weight(), Last: d.last, Prev: d.prev}
	var others []regionMember
	live := map[string]bool{}
	for _, gw := range view.Regions[cfg.Node.Region] {
		if gw.Name == cfg.Node.Name || !gw.State.Live() || g.probe.silent(gw.Name) {
			continue
		}
		live[gw.Name] = true
		m := regionMember{Weight: gw.Meta.Weight()}
		if h, ok := d.heard[gw.Name]; ok {
			m.Heard, m.At, m.demandSample = true, h.at, h.demandSample
		}
		others = append(others, m)
	}
	for name := range d.heard {
		if !live[name] {
			delete(d.heard, name)
		}
	}
	return float64(splitRegion(rate, now, self, others)) / float64(rate)
}

// regionPart is this gateway's part of wan.region_rate_bps now.
func (g *Gateway) regionPart() regionPart {
	return regionPart{share: unpackShare(g.share.Load()), frac: math.Float64frombits(g.demandFrac.Load())}
}

// RegionDemandStatus is the demand exchange as /status shows it (with
// wan.region_rate_bps set).
type RegionDemandStatus struct {
	// FairBps is the static fair part: node.capacity's part of the
	// region's rate among its live gateways. PartBps is the part the
	// gateway holds now, by demand. DemandBps and Limited are what it
	// last reported.
	FairBps   units.BitRate `json:"fair_bps"`
	PartBps   units.BitRate `json:"part_bps"`
	DemandBps units.BitRate `json:"demand_bps"`
	Limited   bool          `json:"limited"`
	// Peers are the region's other gateways heard from.
	Peers []RegionDemandPeer `json:"peers,omitempty"`
	// Reports sent and received; SendFailed could not be sent; Malformed
	// and Foreign were dropped (undecodable; of another region, of this
	// gateway's own name, or beyond the table's bound).
	Sent       uint64 `json:"sent"`
	SendFailed uint64 `json:"send_failed"`
	Received   uint64 `json:"received"`
	Malformed  uint64 `json:"malformed"`
	Foreign    uint64 `json:"foreign"`
}

// RegionDemandPeer is the last report of one other gateway of the region.
type RegionDemandPeer struct {
	Name      string        `json:"name"`
	DemandBps units.BitRate `json:"demand_bps"`
	Limited   bool          `json:"limited"`
	PartBps   units.BitRate `json:"part_bps"`
	AgeMs     float64       `json:"age_ms"`
}

// demandStatus fills /status's region_demand.
func (g *Gateway) demandStatus(cfg *config.Config, now time.Time) *RegionDemandStatus {
	rate := cfg.WAN.RegionRate()
	if rate <= 0 {
		return nil
	}
	d := g.demand
	p := g.regionPart()
	st := &RegionDemandStatus{FairBps: p.share.of(rate), PartBps: p.of(rate),
		Sent: d.sent.Load(), SendFailed: d.sendFailed.Load(), Received: d.received.Load(), Malformed: d.malformed.Load(), Foreign: d.foreign.Load()}
	d.mu.Lock()
	if d.last != nil {
		st.DemandBps, st.Limited = d.last.Rate, d.last.Limited
	}
	for name, h := range d.heard {
		st.Peers = append(st.Peers, RegionDemandPeer{Name: name, DemandBps: h.Rate, Limited: h.Limited, PartBps: h.Part,
			AgeMs: units.Ms(now.Sub(h.at))})
	}
	d.mu.Unlock()
	slices.SortFunc(st.Peers, func(a, b RegionDemandPeer) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	return st
}
