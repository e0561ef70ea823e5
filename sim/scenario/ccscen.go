package scenario

import (
	"fmt"
	"math"
	"time"

	"github.com/mrgw/mrgw/cc"
	"github.com/mrgw/mrgw/cc/longrtt"
	"github.com/mrgw/mrgw/internal/report"
	"github.com/mrgw/mrgw/metaroce"
	"github.com/mrgw/mrgw/sim"

	"github.com/mrgw/mrgw/units"
)

// Scenarios maps each `mrgw-lab sim` scenario name to its function.
var Scenarios = map[string]func(Options) ([]report.Row, error){
	"loss-sweep":           LossSweep,
	"planes":               Planes,
	"utilization":          Utilization,
	"rtt-fairness":         RTTFairness,
	"convergence":          Convergence,
	"incast":               Incast,
	"multipath-coupling":   MultipathCoupling,
	"loss-sweep-cc":        LossSweepCC,
	"coexistence":          Coexistence,
	"coexistence-stalls":   CoexistenceStalls,
	"coexistence-fallback": CoexistenceFallback,
}

// Controller names used by the congestion-control scenarios.
const (
	CCHTCP     = "longrtt-htcp"
	CCScalable = "longrtt-scalable"
	CCDC       = "dc-aimd"
	CCReno     = "reno"
	CCDCQCN    = "dcqcn"
)

// LongRTTControllers are ours; Baselines are measured beside them.
var (
	LongRTTControllers = []string{CCHTCP, CCScalable}
	Baselines          = []string{CCReno, CCDCQCN}
)

var _ = longrtt.DefaultRefRTT // the import registers the long-RTT controllers

// factory looks a controller up with what the scenario knows of the network.
func factory(name string, lineBps float64, rtt time.Duration) (cc.Factory, error) {
	return cc.Lookup(name, cc.Params{LineRate: units.BitRate(lineBps), BaseRTT: rtt})
}

// ecnThreshold is the marking threshold of the cc scenarios' bottlenecks:
// a tenth of the bandwidth-delay product, at least 64 KiB.
func ecnThreshold(bps float64, rtt time.Duration) int {
	return max(64<<10, int(units.BitRate(bps).Bytes().BytesIn(rtt)/10))
}

func (o *Options) rateOr(def float64) float64 {
	if o.RateBps > 0 {
		return o.RateBps
	}
	return def
}

func (o *Options) progress(i, n int, what string) {
	if o.Progress != nil {
		o.Progress(i, n, what)
	}
}

// ccRow fills the common columns of a cc scenario row.
func ccRow(name, variant string, s Setup, r Result) report.Row {
	s = s.withDefaults()
	rw := row(name, s, "mrgw", r)
	rw.Variant = variant
	rw.QueueDrops = r.QueueDrops
	if len(r.PerFlowBps) > 1 {
		rw.Jain = report.Jain(r.PerFlowBps)
		rw.Shares = make([]float64, len(r.PerFlowBps))
		for i, b := range r.PerFlowBps {
			if r.GoodputBps > 0 {
				rw.Shares[i] = b / r.GoodputBps
			}
		}
	}
	return rw
}

// namedRun is one run of a scenario, kept for its plots.
type namedRun struct {
	Label string
	Setup Setup
	Res   Result
}

// UtilizationRTTs is the utilization scenario's grid.
var UtilizationRTTs = []time.Duration{10 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond}

// Utilization runs one flow on one 100 Gbit/s ECN-marking bottleneck at 10,
// 50 and 100 ms, with each long-RTT controller and the baselines. Target for
// ours: at least 95% of capacity, peak queue below one BDP.
func Utilization(o Options) ([]report.Row, error) {
	rate := o.rateOr(100e9)
	names := append(append([]string{}, LongRTTControllers...), Baselines...)
	var rows []report.Row
	var runs []namedRun
	n, i := len(UtilizationRTTs)*len(names), 0
	for _, rtt := range UtilizationRTTs {
		for _, name := range names {
			i++
			o.progress(i, n, fmt.Sprintf("utilization %s rtt=%v", name, rtt))
			f, err := factory(name, rate, rtt)
			if err != nil {
				return nil, err
			}
			d, w := o.durations(rtt)
			s := Setup{Planes: 1, RateBps: rate, RTT: rtt, Paths: 8, CC: f, ECNThreshold: ecnThreshold(rate, rtt), Duration: d, Warmup: w, Seed: o.Seed + 11, Sample: rtt / 2}
			r, err := Run(s)
			if err != nil {
				return nil, err
			}
			rows = append(rows, ccRow("utilization", "", s, r))
			runs = append(runs, namedRun{fmt.Sprintf("%s %v", name, rtt), s, r})
		}
	}
	return rows, o.plot("utilization", runs)
}

// RTTFairnessRTTs are the round trips of the rtt-fairness flows.
var RTTFairnessRTTs = []time.Duration{10 * time.Millisecond, 50 * time.Millisecond, 150 * time.Millisecond}

// RTTFairness runs three flows at 10, 50 and 150 ms through one 10 Gbit/s
// bottleneck in the fabric (receiver hints off, so only the sender loop can
// share it), each controller in turn. Target for ours: Jain index >= 0.95.
func RTTFairness(o Options) ([]report.Row, error) {
	return rttFairness(o, append(append([]string{}, LongRTTControllers...), Baselines...))
}

// rttFairness runs the rtt-fairness scenario for the named controllers.
func rttFairness(o Options, names []string) ([]report.Row, error) {
	rate := o.rateOr(10e9)
	var rows []report.Row
	var runs []namedRun
	base := RTTFairnessRTTs[0]
	longest := RTTFairnessRTTs[len(RTTFairnessRTTs)-1]
	for i, name := range names {
		o.progress(i+1, len(names), "rtt-fairness "+name)
		ff := make([]cc.Factory, len(RTTFairnessRTTs))
		for k, rtt := range RTTFairnessRTTs {
			f, err := factory(name, rate, rtt)
			if err != nil {
				return nil, err
			}
			ff[k] = f
		}
		s := Setup{Planes: 1, RateBps: rate, RTT: base, Flows: len(RTTFairnessRTTs), FlowRTTs: RTTFairnessRTTs, FlowCC: ff, Paths: 8, NoHints: true,
			ECNThreshold: ecnThreshold(rate, longest), QueueBytes: int(units.BitRate(rate).Bytes().BytesIn(longest)),
			Duration: o.scale(80 * longest), Warmup: o.scale(30 * longest), Seed: o.Seed + 12, Sample: longest / 2}
		r, err := Run(s)
		if err != nil {
			return nil, err
		}
		rw := ccRow("rtt-fairness", "fabric bottleneck", s, r)
		rw.CC = name
		rw.RTTms = 0
		rw.Note = "flows at 10, 50, 150 ms"
		rows = append(rows, rw)
		runs = append(runs, namedRun{name, s, r})
	}
	return rows, o.plot("rtt-fairness", runs)
}

// settleIndex returns the first sample index from which every series stays
// within tol of its target until the end, or -1.
func settleIndex(series [][]float64, target []float64, from int, tol float64) int {
	last := -1
	for k := from; k < len(series[0]); k++ {
		ok := true
		for f := range series {
			if math.Abs(series[f][k]-target[f]) > tol*target[f] {
				ok = false
				break
			}
		}
		if !ok {
			last = k
		}
	}
	if last+1 >= len(series[0]) {
		return -1
	}
	if last < from {
		return from
	}
	return last + 1
}

// Convergence: one flow runs alone on a 100 Gbit/s, 100 ms link; a second
// joins after 10 round trips. Reported: round trips from the join until both
// flows' goodput (per round trip) stays within 10% of half the link. Two
// variants: the receiver's link is the bottleneck (the rate hint hands the
// newcomer its share), and the fabric is (hints off: growth and back-off
// must find it). Target for ours in both: at most 30 round trips.
func Convergence(o Options) ([]report.Row, error) {
	return convergence(o, []convVariant{
		{"receiver bottleneck", false, LongRTTControllers},
		{"fabric bottleneck", true, append(append([]string{}, LongRTTControllers...), Baselines...)},
	})
}

// convVariant is one case of Convergence: where the bottleneck is (hints
// off: in the fabric) and the controllers run against it.
type convVariant struct {
	name    string
	noHints bool
	ccs     []string
}

func convergence(o Options, variants []convVariant) ([]report.Row, error) {
	rate := o.rateOr(100e9)
	rtt := 100 * time.Millisecond
	var rows []report.Row
	var runs []namedRun
	n, i := 0, 0
	for _, v := range variants {
		n += len(v.ccs)
	}
	join := 10 * rtt
	for _, v := range variants {
		for _, name := range v.ccs {
			i++
			o.progress(i, n, fmt.Sprintf("convergence %s %s", v.name, name))
			f, err := factory(name, rate, rtt)
			if err != nil {
				return nil, err
			}
			dur := join + o.scaleRTTs(60)*rtt
			s := Setup{Planes: 1, RateBps: rate, RTT: rtt, Flows: 2, FlowStart: []time.Duration{0, join}, CC: f, Paths: 8, NoHints: v.noHints,
				ECNThreshold: ecnThreshold(rate, rtt), Duration: dur, Warmup: join, Seed: o.Seed + 13, Sample: rtt}
			r, err := Run(s)
			if err != nil {
				return nil, err
			}
			rw := ccRow("convergence", v.name, s, r)
			share := r.CapacityBps * payloadFraction(s) / 2
			from := int(join/rtt) - 1
			k := settleIndex(r.Goodput, []float64{share, share}, from, 0.10)
			if k >= 0 {
				rw.SettleRTTs = float64(r.Times[k]-join) / float64(rtt)
			} else {
				rw.SettleRTTs = -1
				rw.Note = "did not settle within the run"
			}
			rows = append(rows, rw)
			runs = append(runs, namedRun{v.name + " " + name, s, r})
		}
	}
	return rows, o.plot("convergence", runs)
}

// scaleRTTs scales a count of round trips like a duration (tests shorten runs).
func (o *Options) scaleRTTs(n int) time.Duration {
	if o.Scale > 0 {
		return time.Duration(math.Ceil(float64(n) * o.Scale))
	}
	return time.Duration(n)
}

// payloadFraction is the share of a link's bytes that is payload.
func payloadFraction(s Setup) float64 {
	s = s.withDefaults()
	return float64(s.MTU) / float64(s.MTU+metaroce.DataHeaderLen)
}

// IncastSenders is the incast fan-in.
const IncastSenders = 64

// Incast runs 64 senders into one receiver at data-center round trip (10 µs)
// over a 100 Gbit/s link, with dc-aimd and the baselines. Reported: round
// trips from the first sender's connection until, for the rest of the run,
// every sender's pacing rate stays within 10% of its fair share AND the
// bottleneck queue stays below one bandwidth-delay product (target: at most
// 2), the peak queue, queue drops and the Jain index of the senders'
// goodput.
func Incast(o Options) ([]report.Row, error) {
	rate := o.rateOr(100e9)
	rtt := 10 * time.Microsecond
	names := []string{CCDC, CCDCQCN, CCReno}
	var rows []report.Row
	var runs []namedRun
	for i, name := range names {
		o.progress(i+1, len(names), "incast "+name)
		f, err := factory(name, rate, rtt)
		if err != nil {
			return nil, err
		}
		d := o.scale(2 * time.Millisecond)
		s := Setup{Planes: 1, RateBps: rate, RTT: rtt, Flows: IncastSenders, CC: f, Paths: 8, ECNThreshold: ecnThreshold(rate, rtt),
			QueueBytes: 4 << 20, MsgSize: 256 << 10, Duration: d, Warmup: d / 4, Seed: o.Seed + 14, Sample: rtt / 2}
		r, err := Run(s)
		if err != nil {
			return nil, err
		}
		rw := ccRow("incast", "", s, r)
		rw.Shares = nil
		// Counted from the first sender's connection: the incast starts
		// there, and senders not yet connected are not at their share.
		start := time.Duration(-1)
		for _, t := range r.ConnectedAt {
			if t >= 0 && (start < 0 || t < start) {
				start = t
			}
		}
		share := rate / float64(IncastSenders)
		target := make([]float64, IncastSenders)
		for k := range target {
			target[k] = share
		}
		from := 0
		for from < len(r.Times) && r.Times[from] < start {
			from++
		}
		k := settleIndex(r.Rate, target, from, 0.10)
		// The queue must have come down too: rates at the share over a
		// standing queue are not settled.
		bdp := units.BitRate(rate).Bytes().BytesIn(rtt)
		for q := len(r.Queue) - 1; k >= 0 && q >= k; q-- {
			if r.Queue[q] > bdp {
				k = q + 1
				break
			}
		}
		if k >= 0 && k < len(r.Times) {
			rw.SettleRTTs = max(0, float64(r.Times[k]-start)/float64(rtt))
		} else {
			rw.SettleRTTs = -1
			rw.Note = "rates never settled within 10% of the share with the queue below one BDP"
		}
		rows = append(rows, rw)
		runs = append(runs, namedRun{name, s, r})
	}
	return rows, o.plot("incast", runs)
}

// MultipathCoupling runs (a) an 8-path and a 1-path connection through one
// 10 Gbit/s bottleneck in the fabric (hints off): coupled growth must give
// them equal shares; and (b) one 8-path connection over 8 disjoint planes,
// which must use all 8.
func MultipathCoupling(o Options) ([]report.Row, error) {
	rate := o.rateOr(10e9)
	rtt := 50 * time.Millisecond
	var rows []report.Row
	var runs []namedRun
	for i, name := range LongRTTControllers {
		o.progress(i+1, len(LongRTTControllers)+1, "multipath-coupling shared "+name)
		f, err := factory(name, rate, rtt)
		if err != nil {
			return nil, err
		}
		s := Setup{Planes: 1, RateBps: rate, RTT: rtt, Flows: 2, FlowPaths: []int{8, 1}, CC: f, NoHints: true,
			ECNThreshold: ecnThreshold(rate, rtt), Duration: o.scale(80 * rtt), Warmup: o.scale(30 * rtt), Seed: o.Seed + 15, Sample: rtt}
		r, err := Run(s)
		if err != nil {
			return nil, err
		}
		rw := ccRow("multipath-coupling", "8 paths + 1 path, one bottleneck", s, r)
		rw.Paths = 0
		rows = append(rows, rw)
		runs = append(runs, namedRun{"shared " + name, s, r})
	}
	o.progress(len(LongRTTControllers)+1, len(LongRTTControllers)+1, "multipath-coupling disjoint planes")
	const planes = 8 // the line rate: all eight planes
	f, err := factory(CCHTCP, planes*rate, rtt)
	if err != nil {
		return nil, err
	}
	s := Setup{Planes: planes, RateBps: rate, RTT: rtt, Flows: 1, Paths: 8, CC: f, ECNThreshold: ecnThreshold(rate, rtt),
		Duration: o.scale(30 * rtt), Warmup: o.scale(6 * rtt), Sample: rtt}
	s.Seed = disjointSeed(s, o.Seed+16)
	r, err := Run(s)
	if err != nil {
		return nil, err
	}
	rw := ccRow("multipath-coupling", "8 paths over 8 disjoint planes", s, r)
	used := 0
	var most uint64
	for _, b := range r.PlaneBytes {
		most = max(most, b)
	}
	rw.Shares = make([]float64, len(r.PlaneBytes))
	for k, b := range r.PlaneBytes {
		if b > most/2 {
			used++
		}
		rw.Shares[k] = float64(b) / float64(most)
	}
	rw.Note = fmt.Sprintf("%d of 8 planes carry traffic; shares are per plane, relative to the busiest", used)
	rows = append(rows, rw)
	runs = append(runs, namedRun{"8 planes " + CCHTCP, s, r})
	return rows, o.plot("multipath-coupling", runs)
}

// LossSweepCCRates is the loss grid of loss-sweep-cc.
var LossSweepCCRates = []float64{0, 0.001, 0.01, 0.05, 0.10}

// LossSweepCC is the loss sweep with the real controllers: one 8-path
// connection at 50 ms over an ECN-marking bottleneck with random loss after
// the queue, each long-RTT controller and the baselines. Targets for ours:
// at 1% loss at least 95% of loss-free goodput, at 10% at least 85%.
func LossSweepCC(o Options) ([]report.Row, error) {
	rate := o.rateOr(100e9)
	rtt := 50 * time.Millisecond
	names := append(append([]string{}, LongRTTControllers...), Baselines...)
	var rows []report.Row
	var runs []namedRun
	n, i := len(names)*len(LossSweepCCRates), 0
	for _, name := range names {
		var lossFree float64
		for _, loss := range LossSweepCCRates {
			i++
			o.progress(i, n, fmt.Sprintf("loss-sweep-cc %s loss=%g", name, loss))
			f, err := factory(name, rate, rtt)
			if err != nil {
				return nil, err
			}
			d, w := o.durations(rtt)
			s := Setup{Planes: 1, RateBps: rate, RTT: rtt, Loss: loss, Paths: 8, CC: f, ECNThreshold: ecnThreshold(rate, rtt), Duration: d, Warmup: w, Seed: o.Seed + 17, Sample: rtt}
			r, err := Run(s)
			if err != nil {
				return nil, err
			}
			rw := ccRow("loss-sweep-cc", "", s, r)
			if loss == 0 {
				lossFree = r.GoodputBps
			}
			if lossFree > 0 {
				rw.RelLossFree = r.GoodputBps / lossFree
			}
			rows = append(rows, rw)
			runs = append(runs, namedRun{fmt.Sprintf("%s %s", name, report.FormatPercent(loss)), s, r})
		}
	}
	return rows, o.plot("loss-sweep-cc", runs)
}

// disjointSeed returns the first seed from start on with which the single
// sender's paths hash onto distinct planes, so that "8 paths over 8 disjoint
// planes" means one path per plane. (ECMP is a hash: 8 random paths over 8
// planes cover only about 5 of them. A deployment gets the same effect from
// re-rolling a path's entropy; the scenario picks it up front to measure the
// controller, not the hash.)
func disjointSeed(s Setup, start uint64) uint64 {
	s = s.withDefaults()
	for seed := start; seed < start+100000; seed++ {
		sm := sim.New(sim.Config{Seed: seed})
		net := sim.NewNetwork(sm, sim.NetworkConfig{Planes: s.Planes, AtoB: sim.LinkConfig{}, BtoA: sim.LinkConfig{}})
		ep, err := metaroce.NewEndpoint(metaroce.Config{Paths: s.Paths, Seed: seed}, nil)
		if err != nil {
			return start
		}
		conn, err := ep.Connect(0, metaroce.PeerID(1))
		if err != nil {
			return start
		}
		seen := make(map[int]bool)
		for _, p := range conn.Paths().Paths {
			seen[net.PlaneOf(2, 1, p.Entropy, ListenPort)] = true
		}
		if len(seen) == min(s.Paths, s.Planes) {
			return seed
		}
	}
	return start
}
