package scenario

import (
	"fmt"
	"math"
	"time"

	"github.com/mrgw/mrgw/cc"
	"github.com/mrgw/mrgw/internal/report"
	"github.com/mrgw/mrgw/metaroce"
	"github.com/mrgw/mrgw/sim"

	"github.com/mrgw/mrgw/units"
)

// RegionPair is traffic from one region to another: every gateway of
// region From has one connection to the same-numbered gateway of region
// To. From < To: data flows along the line from A towards D.
type RegionPair struct{ From, To int }

// RegionsSetup describes a regions run: regions on a line, joined by
// long-haul segments of Planes planes each, every region pair's traffic
// crossing the segments between its ends (so pairs share segments, their
// queues and their ECN marking).
type RegionsSetup struct {
	// SegmentDelays[k] is the one-way delay of the segment between region
	// k and k+1; there are len(SegmentDelays)+1 regions.
	SegmentDelays []time.Duration
	Pairs         []RegionPair
	Gateways      int     // per region; each is one metaroce endpoint
	Planes        int     // per segment
	RateBps       float64 // per plane of a segment, each direction
	Paths         int     // per connection
	CC            string  // controller name (cc registry)
	MTU, MsgSize  int
	// Warmup, then a steady window until FaultAt (or Duration if no
	// fault); at FaultAt plane FaultPlane of segment FaultSegment goes
	// down (both directions), and a second window runs from FaultAt+Settle
	// to Duration.
	Warmup, Duration time.Duration
	FaultAt, Settle  time.Duration
	FaultSegment     int
	FaultPlane       int
	Seed             uint64
	// NoHints turns the receivers' fair-share hints off (for comparison).
	NoHints bool
	// NoEgress turns the senders' egress shares off (cc.Egress: each
	// gateway's capacity divided max-min among the connections it sends
	// on), for comparison: each connection is then capped by the
	// gateway's capacity alone, as without the egress share.
	NoEgress bool
}

// DefaultRegions is the regions scenario's topology: four regions A, B, C,
// D on a line (A–B 40 ms, B–C 20 ms, C–D 10 ms one way) and five region
// pairs A→B (80 ms RTT), A→C (120), A→D (140), B→D (60), C→D (20). Every
// segment carries three pairs, each of a different round trip: A–B carries
// A→B, A→C, A→D; B–C carries A→C, A→D, B→D; C–D carries A→D, B→D, C→D.
// The max-min fair allocation gives every pair a third of each segment:
// D's receivers see three senders (their hints say so), while A→B and A→C
// are told the whole of B's and C's capacity and must find their share of
// A–B and B–C through the fabric (ECN, the sender loop).
func DefaultRegions(o Options) RegionsSetup {
	return RegionsSetup{
		SegmentDelays: []time.Duration{40 * time.Millisecond, 20 * time.Millisecond, 10 * time.Millisecond},
		Pairs:         []RegionPair{{0, 1}, {0, 2}, {0, 3}, {1, 3}, {2, 3}},
		Gateways:      2, Planes: 4, RateBps: o.rate() / 40, Paths: 16, CC: CCHTCP,
		Warmup: o.scale(4 * time.Second), FaultAt: o.scale(7 * time.Second), Settle: o.scale(2 * time.Second), Duration: o.scale(11 * time.Second),
		FaultSegment: 1, FaultPlane: 1, Seed: o.Seed + 21,
	}
}

// segmentCapacity is one segment's capacity in one direction, all planes up.
func (s *RegionsSetup) segmentCapacity() float64 { return float64(s.Planes) * s.RateBps }

// rtt is the pair's base round trip.
func (s *RegionsSetup) rtt(p RegionPair) time.Duration {
	lo, hi := min(p.From, p.To), max(p.From, p.To)
	var d time.Duration
	for k := lo; k < hi; k++ {
		d += s.SegmentDelays[k]
	}
	return 2 * d
}

// crosses reports whether pair p's data crosses segment k.
func crosses(p RegionPair, k int) bool { return k >= min(p.From, p.To) && k < max(p.From, p.To) }

// regionName names region i by letter.
func regionName(i int) string { return sim.Site(i).String() }

// RegionsWindow is what one measurement window of a regions run saw.
type RegionsWindow struct {
	Name string
	// PairBps[i] is pair i's goodput (all its connections); ConnBps[i][g]
	// that of its connection from gateway g; FairBps[i] its max-min fair
	// share of the segments and receivers (payload rate).
	PairBps []float64
	ConnBps [][]float64
	FairBps []float64
	// Per segment, in the direction of the data (from the lower-lettered
	// region): wire bytes delivered over capacity up, the largest queue on
	// any of its planes during the window (sampled every millisecond), and
	// Jain's index over the connections crossing it of goodput ÷ fair share
	// (SegRawJain: of the goodputs themselves, which differs when the fair
	// shares differ, as after a fault).
	SegCapacity []float64
	SegUtil     []float64
	SegPeakQ    []int
	SegJain     []float64
	SegRawJain  []float64
	SegDrops    []uint64 // datagrams its queues dropped in the window
}

// RegionsResult is a regions run.
type RegionsResult struct {
	Windows  []RegionsWindow
	CCName   string
	SimPkts  uint64
	Wall     time.Duration
	PeakQ    []int // per segment, since the start
	Unroute  uint64
	Times    []time.Duration // every 100 ms: each pair's goodput over the last 100 ms
	Goodput  [][]float64     // [pair][k]
	Segments int
}

// RunRegions executes a regions setup.
func RunRegions(s RegionsSetup) (RegionsResult, error) {
	fault, err := s.check()
	if err != nil {
		return RegionsResult{}, err
	}
	r := &regionsRun{s: s, nreg: len(s.SegmentDelays) + 1, pktSize: s.MTU + metaroce.DataHeaderLen}
	r.buildNetwork()
	if err := r.addGateways(); err != nil {
		return RegionsResult{}, err
	}
	if err := r.connectPairs(); err != nil {
		return RegionsResult{}, err
	}
	r.sample()
	r.scheduleWindows(fault)
	start := time.Now()
	r.sm.Run(s.Duration)
	r.res.Wall = time.Since(start)
	r.summarize()
	return r.res, nil
}

// check fills in the defaults and validates the setup; fault reports
// whether the run has a fault window.
func (s *RegionsSetup) check() (fault bool, err error) {
	if s.MTU == 0 {
		s.MTU = 4096
	}
	if s.MsgSize == 0 {
		s.MsgSize = 1 << 20
	}
	nreg := len(s.SegmentDelays) + 1
	if nreg < 2 || s.Gateways < 1 || s.Planes < 1 || s.RateBps <= 0 || s.Paths < 1 || len(s.Pairs) == 0 || s.Warmup <= 0 || s.Duration <= s.Warmup {
		return false, fmt.Errorf("scenario: regions setup incomplete: %+v", *s)
	}
	for _, p := range s.Pairs {
		// Segments are measured in one direction, so every pair runs that way.
		if p.From < 0 || p.From >= p.To || p.To >= nreg {
			return false, fmt.Errorf("scenario: region pair %v: want 0 <= From < To < %d", p, nreg)
		}
	}
	fault = s.FaultAt > s.Warmup && s.FaultAt < s.Duration
	if fault && (s.FaultAt+s.Settle >= s.Duration || s.FaultSegment < 0 || s.FaultSegment >= nreg-1 || s.FaultPlane < 0 || s.FaultPlane >= s.Planes) {
		return false, fmt.Errorf("scenario: regions fault at %v (+%v settle) on segment %d plane %d does not fit", s.FaultAt, s.Settle, s.FaultSegment, s.FaultPlane)
	}
	return fault, nil
}

// regionsRun is one regions run being built and run.
type regionsRun struct {
	s       RegionsSetup
	nreg    int
	pktSize int
	sm      *sim.Sim
	net     *sim.Network
	// fwd[k][p] carries segment k on plane p from region k to k+1; rev back.
	fwd, rev   [][]*sim.Link
	gwCapacity float64
	gws        [][]*regionGateway
	// conns[i][g] is pair i's connection from gateway g.
	conns   [][]*metaroce.Conn
	windowQ []int // peak queue per segment in the current window
	windows []*regionsSpan
	res     RegionsResult
}

// regionGateway is one gateway of a regions run: one endpoint.
type regionGateway struct {
	node  *Node
	host  *sim.Host
	bulks map[*metaroce.Conn]*bulk
}

// regionsSnap is what the counters said at one instant.
type regionsSnap struct {
	at         time.Duration
	placed     map[uint64]uint64
	seg, drops []uint64
}

// regionsSpan is one measurement window being recorded.
type regionsSpan struct {
	name       string
	start, end regionsSnap
	peakQ      []int
	down       bool // the faulty plane is down
}

// buildNetwork makes the simulator, the segments' plane links and the
// routes between every two regions.
func (r *regionsRun) buildNetwork() {
	s, nreg := &r.s, r.nreg
	var longest time.Duration
	for _, p := range s.Pairs {
		longest = max(longest, s.rtt(p))
	}
	// Each plane link: a queue of one bandwidth-delay product at the
	// longest round trip, marking at a tenth of it (as the cc scenarios).
	link := sim.LinkConfig{Rate: int64(s.RateBps), QueueLimit: int(units.BitRate(s.RateBps).Bytes().BytesIn(longest)), ECNThreshold: ecnThreshold(s.RateBps, longest)}
	inflight := 0
	for _, d := range s.SegmentDelays {
		inflight += 2 * s.Planes * (int(units.BitRate(s.RateBps).Bytes().BytesIn(d)) + link.QueueLimit) / r.pktSize
	}
	r.sm = sim.New(sim.Config{Seed: s.Seed, MaxDatagramSize: r.pktSize + 64, MaxDatagrams: inflight + 100_000})
	r.net = sim.NewTopology(r.sm, sim.TopologyConfig{Sites: nreg, Planes: s.Planes})
	r.fwd = make([][]*sim.Link, nreg-1)
	r.rev = make([][]*sim.Link, nreg-1)
	for k, d := range s.SegmentDelays {
		lc := link
		lc.Delay = d
		for p := 0; p < s.Planes; p++ {
			r.fwd[k] = append(r.fwd[k], r.net.AddLink(p, fmt.Sprintf("plane%d:%s>%s", p, regionName(k), regionName(k+1)), lc))
			r.rev[k] = append(r.rev[k], r.net.AddLink(p, fmt.Sprintf("plane%d:%s>%s", p, regionName(k+1), regionName(k)), lc))
		}
	}
	for a := 0; a < nreg; a++ {
		for b := 0; b < nreg; b++ {
			if a == b {
				continue
			}
			for p := 0; p < s.Planes; p++ {
				var route []*sim.Link
				if a < b {
					for k := a; k < b; k++ {
						route = append(route, r.fwd[k][p])
					}
				} else {
					for k := a - 1; k >= b; k-- {
						route = append(route, r.rev[k][p])
					}
				}
				r.net.SetRoute(sim.Site(a), sim.Site(b), p, route...)
			}
		}
	}
}

// regionBytes is the smallest registered region of a regions gateway.
const regionBytes = 16 << 20

// addGateways makes one endpoint per gateway. Its failure detection is
// tuned to the shortest round trip it has (sending or receiving); its
// receiver loop divides the gateway's share of its region's long-haul
// capacity.
func (r *regionsRun) addGateways() error {
	s, nreg := &r.s, r.nreg
	r.gwCapacity = s.segmentCapacity() / float64(s.Gateways)
	shortest := make([]time.Duration, nreg)
	for _, p := range s.Pairs {
		for _, rg := range []int{p.From, p.To} {
			if shortest[rg] == 0 || s.rtt(p) < shortest[rg] {
				shortest[rg] = s.rtt(p)
			}
		}
	}
	r.gws = make([][]*regionGateway, nreg)
	regionSize := max(regionBytes, s.MsgSize)
	for rg := 0; rg < nreg; rg++ {
		if shortest[rg] == 0 {
			continue // a region with no traffic
		}
		for g := 0; g < s.Gateways; g++ {
			cfg := metaroce.Config{
				MTU: s.MTU, Paths: s.Paths, Path: PathConfig(shortest[rg]), Listen: true,
				MaxPathInflight: 1 << 20, MaxMessagesAhead: 1 << 16,
				Seed: s.Seed + uint64(rg*s.Gateways+g)*7919,
			}
			if !s.NoHints {
				cfg.ReceiveCapacity = units.BitRate(r.gwCapacity)
			}
			node, err := NewNode(cfg)
			if err != nil {
				return err
			}
			if err := node.EP.Memory().Register(bulkKey, make([]byte, regionSize)); err != nil {
				return err
			}
			gw := &regionGateway{node: node, bulks: make(map[*metaroce.Conn]*bulk)}
			node.OnEvent = func(now time.Duration, ev metaroce.Event) {
				if ev.Kind == metaroce.EventConnected || ev.Kind == metaroce.EventSendComplete {
					if b := gw.bulks[ev.Conn]; b != nil {
						b.fill(now)
					}
				}
			}
			gw.host = r.net.AddHost(sim.Site(rg), node, sim.HostConfig{})
			node.Host = gw.host
			r.gws[rg] = append(r.gws[rg], gw)
		}
	}
	return nil
}

// connectPairs opens every pair's connections, one per gateway, each
// driven by a bulk sender.
func (r *regionsRun) connectPairs() error {
	s := &r.s
	src := make([]byte, s.MsgSize)
	for i := range src {
		src[i] = byte(i*7 + i>>8)
	}
	regionSize := max(regionBytes, s.MsgSize)
	r.conns = make([][]*metaroce.Conn, len(s.Pairs))
	r.res.Segments = r.nreg - 1
	// Every sending gateway shares its capacity among its connections
	// (cc.Egress), measuring their sending rates over its longest round
	// trip.
	egress := make([][]*cc.Egress, r.nreg)
	if !s.NoEgress {
		longest := make([]time.Duration, r.nreg)
		for _, p := range s.Pairs {
			longest[p.From] = max(longest[p.From], s.rtt(p))
		}
		for rg := range egress {
			for g := 0; g < s.Gateways && longest[rg] > 0; g++ {
				egress[rg] = append(egress[rg], cc.NewEgress(units.BitRate(r.gwCapacity), longest[rg]))
			}
		}
	}
	for i, p := range s.Pairs {
		rtt := s.rtt(p)
		// Enough messages outstanding that the application never limits:
		// twice the gateway's capacity over the round trip.
		outstanding := int(2*units.BitRate(r.gwCapacity).Bytes().BytesIn(rtt))/s.MsgSize + 4
		for g := 0; g < s.Gateways; g++ {
			params := cc.Params{LineRate: units.BitRate(r.gwCapacity), BaseRTT: rtt}
			if egress[p.From] != nil {
				params.Egress = egress[p.From][g]
			}
			f, err := cc.Lookup(s.CC, params)
			if err != nil {
				return err
			}
			from, to := r.gws[p.From][g], r.gws[p.To][g]
			c, err := from.node.EP.ConnectWith(0, metaroce.PeerID(to.host.ID()), metaroce.ConnOptions{CC: f, Paths: s.Paths})
			if err != nil {
				return err
			}
			from.bulks[c] = &bulk{conn: c, msgSize: s.MsgSize, outstanding: outstanding, src: src, key: bulkKey, regionSize: regionSize, stream: uint32(i)}
			r.conns[i] = append(r.conns[i], c)
			r.res.CCName = c.Controller().Name()
		}
	}
	return nil
}

// placed is the payload placed per connection so far. Goodput is payload
// placed at the receiving gateway; connection IDs are shared by both ends.
func (r *regionsRun) placed() map[uint64]uint64 {
	out := make(map[uint64]uint64)
	for _, rg := range r.gws {
		for _, gw := range rg {
			for _, c := range gw.node.EP.Conns() {
				out[c.ID()] += c.Stats.PayloadBytesPlaced
			}
		}
	}
	return out
}

// take snapshots the counters.
func (r *regionsRun) take() regionsSnap {
	bytes, drops := make([]uint64, r.nreg-1), make([]uint64, r.nreg-1)
	for k := range r.fwd {
		for _, l := range r.fwd[k] {
			bytes[k] += l.Stats().BytesDelivered
			drops[k] += l.Stats().DroppedQueue
		}
	}
	return regionsSnap{r.sm.Now(), r.placed(), bytes, drops}
}

// sample records each segment's peak queue every millisecond and each
// pair's goodput every 100 ms (plots, and the docs' description of the run).
func (r *regionsRun) sample() {
	s := &r.s
	r.windowQ = make([]int, r.nreg-1)
	r.sm.Every(time.Millisecond, time.Millisecond, func(now time.Duration) bool {
		for k := range r.fwd {
			for _, l := range r.fwd[k] {
				r.windowQ[k] = max(r.windowQ[k], l.QueueBytes())
			}
		}
		return now < s.Duration
	})
	const sampleEvery = 100 * time.Millisecond
	r.res.Goodput = make([][]float64, len(s.Pairs))
	prev := map[uint64]uint64{}
	r.sm.Every(sampleEvery, sampleEvery, func(now time.Duration) bool {
		cur := r.placed()
		r.res.Times = append(r.res.Times, now)
		for i := range s.Pairs {
			var b uint64
			for _, c := range r.conns[i] {
				b += cur[c.ID()] - prev[c.ID()]
			}
			r.res.Goodput[i] = append(r.res.Goodput[i], float64(units.Throughput(float64(b), sampleEvery.Seconds())))
		}
		prev = cur
		return now < s.Duration
	})
}

// scheduleWindows schedules the steady window and, with a fault, the fault
// and the window after it.
func (r *regionsRun) scheduleWindows(fault bool) {
	s := &r.s
	open := func(name string, down bool) *regionsSpan {
		w := &regionsSpan{name: name, down: down}
		r.windows = append(r.windows, w)
		return w
	}
	steady := open("steady", false)
	r.sm.At(s.Warmup, func() {
		steady.start = r.take()
		clear(r.windowQ)
	})
	if fault {
		faulty := open(fmt.Sprintf("%s–%s plane %d down", regionName(s.FaultSegment), regionName(s.FaultSegment+1), s.FaultPlane), true)
		r.sm.At(s.FaultAt, func() {
			steady.end = r.take()
			steady.peakQ = append([]int(nil), r.windowQ...)
			r.fwd[s.FaultSegment][s.FaultPlane].SetDown(true)
			r.rev[s.FaultSegment][s.FaultPlane].SetDown(true)
		})
		r.sm.At(s.FaultAt+s.Settle, func() {
			faulty.start = r.take()
			clear(r.windowQ)
		})
		r.sm.At(s.Duration, func() {
			faulty.end = r.take()
			faulty.peakQ = append([]int(nil), r.windowQ...)
		})
	} else {
		r.sm.At(s.Duration, func() {
			steady.end = r.take()
			steady.peakQ = append([]int(nil), r.windowQ...)
		})
	}
}

// summarize fills in the result after the run.
func (r *regionsRun) summarize() {
	r.res.SimPkts = r.sm.Stats().DatagramsSent
	r.res.Unroute = r.sm.Stats().Unroutable
	for k := range r.fwd {
		q := 0
		for _, l := range r.fwd[k] {
			q = max(q, l.Stats().MaxQueueBytes)
		}
		r.res.PeakQ = append(r.res.PeakQ, q)
	}
	for _, w := range r.windows {
		r.res.Windows = append(r.res.Windows, r.window(w))
	}
}

// window is what window w saw.
func (r *regionsRun) window(w *regionsSpan) RegionsWindow {
	s := &r.s
	payload := float64(s.MTU) / float64(r.pktSize)
	secs := (w.end.at - w.start.at).Seconds()
	rw := RegionsWindow{Name: w.name, PairBps: make([]float64, len(s.Pairs)), ConnBps: make([][]float64, len(s.Pairs))}
	// Capacities in this window, as payload rates: the segments (less
	// a plane that is down) and every receiving gateway's hint.
	segCap := make([]float64, r.nreg-1)
	for k := range segCap {
		up := s.Planes
		if w.down && k == s.FaultSegment {
			up--
		}
		segCap[k] = float64(up) * s.RateBps
		rw.SegCapacity = append(rw.SegCapacity, segCap[k])
	}
	rw.FairBps = s.maxMinShares(segCap, payload)
	for i := range s.Pairs {
		for _, c := range r.conns[i] {
			bps := float64(units.Throughput(float64(w.end.placed[c.ID()]-w.start.placed[c.ID()]), secs))
			rw.ConnBps[i] = append(rw.ConnBps[i], bps)
			rw.PairBps[i] += bps
		}
	}
	for k := range segCap {
		rw.SegUtil = append(rw.SegUtil, float64(units.Throughput(float64(w.end.seg[k]-w.start.seg[k]), secs))/segCap[k])
		rw.SegPeakQ = append(rw.SegPeakQ, w.peakQ[k])
		rw.SegDrops = append(rw.SegDrops, w.end.drops[k]-w.start.drops[k])
		var norm, raw []float64
		for i, p := range s.Pairs {
			if !crosses(p, k) {
				continue
			}
			for _, b := range rw.ConnBps[i] {
				raw = append(raw, b)
				norm = append(norm, b/(rw.FairBps[i]/float64(s.Gateways)))
			}
		}
		rw.SegJain = append(rw.SegJain, jainOrZero(norm))
		rw.SegRawJain = append(rw.SegRawJain, jainOrZero(raw))
	}
	return rw
}

func jainOrZero(x []float64) float64 {
	if len(x) == 0 {
		return 0
	}
	return report.Jain(x)
}

// maxMinShares returns each pair's max-min fair share (payload bits/s) of
// the segments (capacities segCap, wire bits/s) and of the receiving
// gateways (each gives its senders a fair share of its capacity), by
// progressive filling over the connections. Connections are
// interchangeable within a pair, so the pair's share is Gateways times its
// connections'.
func (s *RegionsSetup) maxMinShares(segCap []float64, payload float64) []float64 {
	type res struct {
		left  float64
		users []int // pair indexes
	}
	var rs []*res
	for k, c := range segCap {
		r := &res{left: c * payload}
		for i, p := range s.Pairs {
			if crosses(p, k) {
				r.users = append(r.users, i)
			}
		}
		rs = append(rs, r)
	}
	if !s.NoHints {
		// A receiving gateway's capacity is its share of its region's
		// segment capacity (all planes: the hint does not know of faults).
		nreg := len(s.SegmentDelays) + 1
		for r := 0; r < nreg; r++ {
			rcv := &res{left: s.segmentCapacity() * payload} // all of the region's gateways together
			for i, p := range s.Pairs {
				if p.To == r {
					rcv.users = append(rcv.users, i)
				}
			}
			if len(rcv.users) > 0 {
				rs = append(rs, rcv)
			}
		}
	}
	share := make([]float64, len(s.Pairs))
	frozen := make([]bool, len(s.Pairs))
	for {
		// The tightest resource: the smallest equal increment its unfrozen users can take.
		inc, tight := math.Inf(1), -1
		for j, r := range rs {
			n := 0
			for _, i := range r.users {
				if !frozen[i] {
					n++
				}
			}
			if n > 0 && r.left/float64(n) < inc {
				inc, tight = r.left/float64(n), j
			}
		}
		if tight < 0 {
			return share
		}
		for i := range share {
			if frozen[i] {
				continue
			}
			share[i] += inc
			for _, r := range rs {
				for _, u := range r.users {
					if u == i {
						r.left -= inc
					}
				}
			}
		}
		for _, i := range rs[tight].users {
			frozen[i] = true
		}
		// Freeze users of any other resource that is now full too.
		for _, r := range rs {
			if r.left <= 1e-9*s.segmentCapacity() {
				for _, i := range r.users {
					frozen[i] = true
				}
			}
		}
	}
}

// Regions runs the default regions topology (DefaultRegions) with the
// long-RTT H-TCP controller and receiver hints: the steady state, then one
// plane of the B–C segment fails. Rows: per window, one per region pair
// (goodput against its max-min fair share) and one per segment
// (utilisation, Jain's index of its connections' goodput over their fair
// shares, peak queue).
//
// The same run follows with the receivers' hints off, for comparison: it
// shows which shares the receiver loop holds and which the sender loop
// finds alone.
func Regions(o Options) ([]report.Row, error) {
	var rows []report.Row
	for i, noHints := range []bool{false, true} {
		s := DefaultRegions(o)
		s.NoHints = noHints
		what := "regions"
		if noHints {
			what += " (no hints)"
		}
		o.progress(i+1, 2, what)
		r, err := RunRegions(s)
		if err != nil {
			return nil, err
		}
		if !noHints {
			if err := o.plotRegions(s, r); err != nil {
				return nil, err
			}
		}
		rows = append(rows, regionRows(s, r)...)
	}
	return rows, nil
}

func regionRows(s RegionsSetup, r RegionsResult) []report.Row {
	var rows []report.Row
	for _, w := range r.Windows {
		if s.NoHints {
			w.Name += ", no hints"
		}
		for i, p := range s.Pairs {
			rw := report.Row{
				Scenario: "regions", System: "mrgw", CC: r.CCName, Variant: w.Name, Planes: s.Planes, Paths: s.Paths,
				RTTms: float64(s.rtt(p)) / 1e6, Flows: s.Gateways, CapacityBps: w.FairBps[i], GoodputBps: w.PairBps[i],
				Note: fmt.Sprintf("pair %s→%s", regionName(p.From), regionName(p.To)),
			}
			if w.FairBps[i] > 0 {
				rw.Fraction = w.PairBps[i] / w.FairBps[i]
			}
			rw.Jain = jainOrZero(w.ConnBps[i])
			rows = append(rows, rw)
		}
		for k := range w.SegUtil {
			rw := report.Row{
				Scenario: "regions", System: "mrgw", CC: r.CCName, Variant: w.Name, Planes: s.Planes,
				RTTms: float64(2*s.SegmentDelays[k]) / 1e6, CapacityBps: w.SegCapacity[k], Fraction: w.SegUtil[k],
				Jain: w.SegJain[k], MaxQueueBytes: w.SegPeakQ[k], QueueDrops: w.SegDrops[k],
				Note: fmt.Sprintf("segment %s→%s", regionName(k), regionName(k+1)),
			}
			var total float64
			for i, p := range s.Pairs {
				if crosses(p, k) {
					rw.Flows += s.Gateways
					total += w.PairBps[i]
				}
			}
			rw.GoodputBps = total
			for i, p := range s.Pairs {
				if crosses(p, k) && total > 0 {
					rw.Shares = append(rw.Shares, w.PairBps[i]/total)
				}
			}
			rows = append(rows, rw)
		}
	}
	if len(rows) > 0 { // the run's cost, once
		rows[0].SimSeconds = s.Duration.Seconds()
		rows[0].WallSeconds = r.Wall.Seconds()
		rows[0].SimPacketsPerSec = float64(r.SimPkts) / r.Wall.Seconds()
	}
	return rows
}

// plotRegions writes the pairs' goodput over time, if o.PlotDir is set.
func (o *Options) plotRegions(s RegionsSetup, r RegionsResult) error {
	if o.PlotDir == "" || len(r.Times) == 0 {
		return nil
	}
	label := "pairs " + s.CC
	return o.plot("regions", []namedRun{{Label: label, Res: Result{Times: r.Times, Goodput: r.Goodput}}})
}

func init() { Scenarios["regions"] = Regions }
