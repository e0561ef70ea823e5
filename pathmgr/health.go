package pathmgr

import "time"

// Path-health gossip, both ends of it.
//
// A gateway summarises its paths to a peer per plane (PlaneSummary) and
// publishes the summary's verdict; one bad path is not a dead plane, so the
// verdict is "down" only when no path of the plane can carry data. Other
// gateways feed the verdicts they receive into Reports, which says when to
// take their own paths over that plane out of service before their own
// timeouts fire. The state machine of the paths stays in Set: a plane
// avoided on a report is marked down and probed back like any failed path,
// so a wrong report costs a few probe round trips, not the plane.

// PlaneSummary aggregates the paths of a set that use one plane.
type PlaneSummary struct {
	Paths   int // paths on the plane
	Usable  int // up or suspect
	Suspect int
	Probing int
	// SRTT is the mean smoothed RTT of the usable paths that have one (0:
	// none has).
	SRTT time.Duration
	// Cumulative counters of the plane's paths since their set was created.
	Sent, Acked, Lost, Marked uint64
}

// PlaneSummary aggregates the paths that planeOf places on plane.
func (s *Set) PlaneSummary(plane int, planeOf PlaneMap) PlaneSummary {
	var ps PlaneSummary
	var rttSum time.Duration
	rtts := 0
	for i := range s.Paths {
		p := &s.Paths[i]
		if planeOf(i, p.Entropy) != plane {
			continue
		}
		ps.Paths++
		ps.Sent += p.SentPackets
		ps.Acked += p.AckedPackets
		ps.Lost += p.LostPackets
		ps.Marked += p.MarkedPackets
		switch p.State {
		case Up:
			ps.Usable++
		case Suspect:
			ps.Usable++
			ps.Suspect++
		case Probing:
			ps.Probing++
		}
		if p.State.Usable() && p.hasRTT {
			rttSum += p.SRTT
			rtts++
		}
	}
	if rtts > 0 {
		ps.SRTT = rttSum / time.Duration(rtts)
	}
	return ps
}

// State is the plane's verdict: down when none of its paths can carry data
// (probing when some of them already answer probes again), suspect when
// fewer than half can or any timed out, up otherwise. A plane without paths
// is up: there is nothing to say against it.
func (ps PlaneSummary) State() State {
	switch {
	case ps.Paths == 0:
		return Up
	case ps.Usable == 0 && ps.Probing > 0:
		return Probing
	case ps.Usable == 0:
		return Down
	case 2*ps.Usable < ps.Paths || ps.Suspect > 0:
		return Suspect
	}
	return Up
}

// PeerReport is another gateway's verdict on its paths to Peer over Plane
// (an index into this gateway's planes).
type PeerReport struct {
	From, Peer string
	Plane      int
	State      State
}

// ReportsConfig bounds Reports.
type ReportsConfig struct {
	// TTL is how long a report is believed after it arrived, unless a newer
	// one from the same reporter replaces it.
	TTL time.Duration
	// Max is the most reports kept (one per reporter, peer and plane)
	// when Bound is nil, and the floor of the bound when it is set.
	Max int
	// Bound, when set, is the bound by the documented formula
	// (docs/GATEWAY.md, "What path-health gossip costs"): the gateway
	// passes region's health-table bound, max(4096, 2·Σ planes of the
	// gateways in its view) = 2·G·P, so that the reports of a fleet
	// larger than 4096/(2P) gateways are not evicted while they hold.
	// It is asked only when the table is full by Max, and is clamped to
	// [Max, MaxReportsCap].
	Bound func() int
	// HoldDown is how long after a report acted on a peer and plane no
	// other report acts on them: a plane that flaps, or several reporters
	// of one failure, take the paths down once per HoldDown, not at every
	// report (0: no hold-down).
	HoldDown time.Duration
}

// MaxReportsCap is the hard cap on Reports' entries whatever Bound says:
// 2·G·P at 2,048 gateways × 32 planes; about 100 bytes each, 13 MB.
const MaxReportsCap = 1 << 17

// DefaultReportsConfig matches region's default health TTL.
func DefaultReportsConfig() ReportsConfig {
	return ReportsConfig{TTL: 30 * time.Second, Max: 4096, HoldDown: 10 * time.Second}
}

type reportKey struct {
	from, peer string
	plane      int
}

type reportEntry struct {
	state   State
	expires time.Duration
	pending bool // a down episode held back by the hold-down, not acted on yet
}

// Reports holds the plane verdicts other gateways published and decides
// when they should take this gateway's paths down.
//
// Hysteresis: a reporter's "down" acts once, when it starts (no report
// from that reporter on that peer and plane, an expired one, or one that
// was not down); repeats of it only keep it alive. So when this gateway's
// own probes bring the paths back while the reporter still says down
// (its own NIC on the plane failed, say), the paths stay up: first-hand
// evidence wins over hearsay. A report that is not "down" ends the
// reporter's episode; one that expires does too.
//
// Like Set, Reports does no I/O and takes time as an argument; it is not
// safe for concurrent use.
type Reports struct {
	cfg     ReportsConfig
	entries map[reportKey]*reportEntry
	acted   map[actKey]time.Duration // last action per peer and plane
	evicted uint64                   // unexpired reports that gave way to a new one
}

type actKey struct {
	peer  string
	plane int
}

// NewReports returns an empty Reports; zero fields of cfg take
// DefaultReportsConfig's.
func NewReports(cfg ReportsConfig) *Reports {
	d := DefaultReportsConfig()
	if cfg.TTL <= 0 {
		cfg.TTL = d.TTL
	}
	if cfg.Max <= 0 {
		cfg.Max = d.Max
	}
	return &Reports{cfg: cfg, entries: map[reportKey]*reportEntry{}, acted: map[actKey]time.Duration{}}
}

// Add records r, received at now. It returns true when r starts a down
// episode and no report acted on r.Peer and r.Plane within HoldDown: the
// caller should take its usable paths to r.Peer over r.Plane down now
// (Set.MarkDown, keeping a usable plane). An episode held back by the
// hold-down is not lost: Due returns it once the hold-down has passed, if
// the report still says down.
func (rs *Reports) Add(now time.Duration, r PeerReport) bool {
	k := reportKey{r.From, r.Peer, r.Plane}
	e := rs.entries[k]
	wasDown := e != nil && now < e.expires && e.state == Down
	if e == nil {
		if len(rs.entries) >= rs.cfg.Max {
			if bound := rs.bound(); len(rs.entries) >= bound {
				rs.evict(now, bound)
			}
		}
		e = &reportEntry{}
		rs.entries[k] = e
	}
	e.state, e.expires = r.State, now+rs.cfg.TTL
	switch {
	case r.State != Down:
		e.pending = false
		return false
	case !wasDown:
		e.pending = true
	}
	return e.pending && rs.act(now, k, e)
}

// act decides whether the pending episode of e (key k) acts now: not
// within HoldDown of the last action on its peer and plane.
func (rs *Reports) act(now time.Duration, k reportKey, e *reportEntry) bool {
	ak := actKey{k.peer, k.plane}
	if last, ok := rs.acted[ak]; ok && now-last < rs.cfg.HoldDown {
		return false
	}
	if len(rs.acted) >= rs.cfg.Max && len(rs.acted) >= rs.bound() {
		for k, t := range rs.acted {
			if now-t >= rs.cfg.HoldDown {
				delete(rs.acted, k)
			}
		}
		if len(rs.acted) >= rs.bound() {
			clear(rs.acted) // bounded; at worst one extra action each
		}
	}
	rs.acted[ak] = now
	e.pending = false
	return true
}

// Due returns, appended to dst, the down reports whose action the
// hold-down held back and that may act now (still down, unexpired); each
// is returned once. Call it periodically.
func (rs *Reports) Due(dst []PeerReport, now time.Duration) []PeerReport {
	for k, e := range rs.entries {
		if e.pending && e.state == Down && now < e.expires && rs.act(now, k, e) {
			dst = append(dst, PeerReport{From: k.from, Peer: k.peer, Plane: k.plane, State: Down})
		}
	}
	return dst
}

// bound is the most entries kept now (see ReportsConfig.Bound).
func (rs *Reports) bound() int {
	if rs.cfg.Bound == nil {
		return rs.cfg.Max
	}
	return min(max(rs.cfg.Bound(), rs.cfg.Max), MaxReportsCap)
}

// Bound is the most reports kept now.
func (rs *Reports) Bound() int { return rs.bound() }

// Evicted is how many unexpired reports gave way in a full table: with
// the bound 2·G·P it stays 0 (the caller logs it when it grows).
func (rs *Reports) Evicted() uint64 { return rs.evicted }

// evict drops expired entries, or else the one closest to expiry.
func (rs *Reports) evict(now time.Duration, bound int) {
	var victim reportKey
	var found bool
	var soonest time.Duration
	for k, e := range rs.entries {
		if now >= e.expires {
			delete(rs.entries, k)
			continue
		}
		if !found || e.expires < soonest {
			victim, soonest, found = k, e.expires, true
		}
	}
	if len(rs.entries) >= bound && found {
		delete(rs.entries, victim)
		rs.evicted++
	}
}

// Expire forgets the reports that expired by now and returns how many.
func (rs *Reports) Expire(now time.Duration) int {
	for k, t := range rs.acted {
		if now-t >= rs.cfg.HoldDown {
			delete(rs.acted, k)
		}
	}
	n := 0
	for k, e := range rs.entries {
		if now >= e.expires {
			delete(rs.entries, k)
			n++
		}
	}
	return n
}

// Down reports whether some gateway's unexpired report says plane towards
// peer is down. A connection that comes up while it is starts with that
// plane's paths down (probed back as usual).
func (rs *Reports) Down(now time.Duration, peer string, plane int) bool {
	for k, e := range rs.entries {
		if k.peer == peer && k.plane == plane && e.state == Down && now < e.expires {
			return true
		}
	}
	return false
}

// Len returns the number of reports held.
func (rs *Reports) Len() int { return len(rs.entries) }
