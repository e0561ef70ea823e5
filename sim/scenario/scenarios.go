package scenario

import (
	"fmt"
	"github.com/mrgw/mrgw/units"
	"time"

	"github.com/mrgw/mrgw/internal/report"
	"github.com/mrgw/mrgw/metaroce"
	"github.com/mrgw/mrgw/sim"
)

// Options scale the reference scenarios. The zero value runs them as
// docs/RESULTS.md reports them.
type Options struct {
	Seed uint64
	// RateBps per plane (default 100 Gbit/s).
	RateBps float64
	// Scale multiplies every duration (default 1; tests use less).
	Scale float64
	// Progress, if set, is called before each run.
	Progress func(i, n int, what string)
	// PlotDir, if set, is where the congestion-control scenarios write
	// their plots (SVG): rate or goodput over time per run, and shares.
	PlotDir string
}

func (o *Options) rate() float64 {
	if o.RateBps > 0 {
		return o.RateBps
	}
	return 100e9
}

func (o *Options) scale(d time.Duration) time.Duration {
	if o.Scale > 0 {
		return time.Duration(float64(d) * o.Scale)
	}
	return d
}

// durations returns the run length and warm-up for an RTT: long enough to
// amortise the first round trips, short enough to run in seconds.
func (o *Options) durations(rtt time.Duration) (time.Duration, time.Duration) {
	d := 20 * rtt
	if d < 4*time.Millisecond {
		d = 4 * time.Millisecond
	}
	w := 4 * rtt
	if w < time.Millisecond {
		w = time.Millisecond
	}
	return o.scale(d), o.scale(w)
}

func row(name string, s Setup, system string, r Result) report.Row {
	frac := r.GoodputBps / r.CapacityBps
	return report.Row{
		Scenario:         name,
		System:           system,
		CC:               r.CCName,
		Planes:           s.Planes,
		Paths:            s.Paths,
		RTTms:            float64(s.RTT) / 1e6,
		Loss:             s.Loss,
		Flows:            max(s.Flows, 1),
		CapacityBps:      r.CapacityBps,
		GoodputBps:       r.GoodputBps,
		Fraction:         frac,
		MaxQueueBytes:    r.MaxQueueBytes,
		Retransmits:      r.Retransmits,
		SimSeconds:       s.Duration.Seconds(),
		WallSeconds:      r.Wall.Seconds(),
		SimPacketsPerSec: float64(r.SimPackets) / r.Wall.Seconds(),
	}
}

// LossSweepRTTs and LossSweepRates are the loss-sweep's grid.
var (
	LossSweepRTTs  = []time.Duration{10 * time.Microsecond, 50 * time.Millisecond}
	LossSweepRates = []float64{0, 0.001, 0.01, 0.05, 0.10}
)

// LossSweep runs mrgw and the RoCEv2 baseline on one 100 Gbit/s plane at
// each RTT and random-loss rate. Loss hits the wire after the queue, so the
// ceiling at loss p is (1-p) of the loss-free goodput.
func LossSweep(o Options) ([]report.Row, error) {
	var rows []report.Row
	n := len(LossSweepRTTs) * len(LossSweepRates) * 2
	i := 0
	for _, rtt := range LossSweepRTTs {
		for _, mode := range []metaroce.Mode{metaroce.ModeMetaRoCE, metaroce.ModeRoCEv2} {
			var lossFree float64
			for _, loss := range LossSweepRates {
				d, w := o.durations(rtt)
				s := Setup{Mode: mode, Planes: 1, RateBps: o.rate(), RTT: rtt, Loss: loss, Paths: 8, Duration: d, Warmup: w, Seed: o.Seed + 1}
				i++
				if o.Progress != nil {
					o.Progress(i, n, fmt.Sprintf("loss-sweep %s rtt=%v loss=%g", mode, rtt, loss))
				}
				r, err := Run(s)
				if err != nil {
					return nil, err
				}
				s = s.withDefaults()
				rw := row("loss-sweep", s, mode.String(), r)
				if loss == 0 {
					lossFree = r.GoodputBps
				}
				if lossFree > 0 {
					rw.RelLossFree = r.GoodputBps / lossFree
				}
				rows = append(rows, rw)
			}
		}
	}
	return rows, nil
}

// PlaneCounts is the planes scenario's grid.
var PlaneCounts = []int{1, 2, 4, 8}

// Planes runs one mrgw connection over 1, 2, 4 and 8 planes of 100 Gbit/s
// behind ECMP at data-center RTT, with 16 paths per plane, and reports the
// scaling efficiency against one plane.
func Planes(o Options) ([]report.Row, error) {
	var rows []report.Row
	var one float64
	rtt := 10 * time.Microsecond
	for i, p := range PlaneCounts {
		d, w := o.durations(rtt)
		s := Setup{Planes: p, RateBps: o.rate(), RTT: rtt, Paths: 16 * p, WindowBDPs: 3, QueueBytes: 0, Duration: d, Warmup: w, Seed: o.Seed + 2}
		if o.Progress != nil {
			o.Progress(i+1, len(PlaneCounts), fmt.Sprintf("planes %d", p))
		}
		r, err := Run(s)
		if err != nil {
			return nil, err
		}
		s = s.withDefaults()
		rw := row("planes", s, "mrgw", r)
		if p == 1 {
			one = r.GoodputBps
		}
		rw.Efficiency = r.GoodputBps / (one * float64(p))
		rows = append(rows, rw)
	}
	cc, err := planesCC(o, LongRTTControllers, PlanesCCRTTs)
	return append(rows, cc...), err
}

// PlanesCCRTTs are the round trips of the planes scenario's rows with the
// long-RTT controllers.
var PlanesCCRTTs = []time.Duration{10 * time.Microsecond, 50 * time.Millisecond}

// planesCC is the planes scenario with the real controllers:
// one connection, 16 paths per plane, planes of a tenth of the
// scenario's rate (10 Gbit/s by default) with ECN above a tenth of their
// BDP, the controller told the fabric's capacity and the receiver hinting
// it. Reported per row: fraction of capacity, scaling efficiency against
// one plane, the peak queue, and in the note the standing queue (the mean,
// over the measurement window, of the fullest plane's queue) in ms.
func planesCC(o Options, names []string, rtts []time.Duration) ([]report.Row, error) {
	rate := o.rate() / 10
	var rows []report.Row
	n, i := len(names)*len(rtts)*len(PlaneCounts), 0
	for _, rtt := range rtts {
		if rtt >= time.Millisecond {
			n += len(names) // the unequal row
		}
	}
	for _, name := range names {
		for _, rtt := range rtts {
			var one float64
			for _, p := range PlaneCounts {
				i++
				o.progress(i, n, fmt.Sprintf("planes %s rtt=%v %d", name, rtt, p))
				f, err := factory(name, float64(p)*rate, rtt)
				if err != nil {
					return nil, err
				}
				d, w := o.scale(60*rtt), o.scale(30*rtt)
				if rtt < time.Millisecond {
					d, w = o.scale(20*time.Millisecond), o.scale(10*time.Millisecond)
				}
				s := Setup{Planes: p, RateBps: rate, RTT: rtt, Paths: 16 * p, CC: f, ECNThreshold: ecnThreshold(rate, rtt),
					Duration: d, Warmup: w, Seed: o.Seed + 2, Sample: max(rtt/4, 50*time.Microsecond)}
				r, err := Run(s)
				if err != nil {
					return nil, err
				}
				rw := ccRow("planes", "", s, r)
				rw.Jain, rw.Shares = 0, nil
				if p == 1 {
					one = r.GoodputBps
				}
				rw.Efficiency = r.GoodputBps / (one * float64(p))
				rw.Note = fmt.Sprintf("standing queue %.2f ms", standingQueue(r, w)/float64(units.BitRate(rate).Bytes())*1e3)
				rows = append(rows, rw)
			}
			if rtt >= time.Millisecond {
				i++
				o.progress(i, n, fmt.Sprintf("planes %s rtt=%v unequal", name, rtt))
				rw, err := planesUnequal(o, name, rate, rtt)
				if err != nil {
					return nil, err
				}
				rows = append(rows, rw)
			}
		}
	}
	return rows, nil
}

// UnequalPlanes is the unequal row of the planes scenario: six planes, of
// which plane 1 is 5 ms slower (one way), plane 2 loses 2% of its packets
// and plane 3 runs at half rate. The row's Fraction
// is of the usable capacity: the planes' rates, the lossy one's less its
// loss.
const UnequalPlanes = 6

// planesUnequal runs one connection of controller name over the unequal
// planes (UnequalPlanes) at rtt, each plane of rate bit/s at most.
func planesUnequal(o Options, name string, rate float64, rtt time.Duration) (report.Row, error) {
	p := UnequalPlanes
	f, err := factory(name, float64(p)*rate, rtt)
	if err != nil {
		return report.Row{}, err
	}
	d, w := o.scale(60*rtt), o.scale(30*rtt)
	s := Setup{Planes: p, RateBps: rate, RTT: rtt, Paths: 16 * p, CC: f, ECNThreshold: ecnThreshold(rate, rtt),
		Duration: d, Warmup: w, Seed: o.Seed + 2, Sample: max(rtt/4, 50*time.Microsecond),
		Faults: func(n *sim.Network) {
			for _, l := range n.Route(0, 1, 1) {
				l.SetDelay(l.Config().Delay + 5*time.Millisecond)
			}
			for _, l := range n.Route(0, 1, 2) {
				l.SetLoss(0.02)
			}
			for _, l := range n.Route(0, 1, 3) {
				l.SetRate(int64(rate / 2))
			}
		}}
	r, err := Run(s)
	if err != nil {
		return report.Row{}, err
	}
	usable := (float64(p-2) + 0.98 + 0.5) * rate
	rw := ccRow("planes", "unequal", s, r)
	rw.Jain, rw.Shares = 0, nil
	rw.Fraction = r.GoodputBps / usable
	rw.Note = fmt.Sprintf("standing queue %.2f ms (fullest plane); fraction of usable capacity: plane 1 +5 ms, plane 2 2%% loss, plane 3 half rate", standingQueue(r, w)/float64(units.BitRate(rate).Bytes())*1e3)
	return rw, nil
}

// standingQueue is the mean, over the samples from `from` on, of the
// fullest plane's queue in bytes.
func standingQueue(r Result, from time.Duration) float64 {
	sum, k := 0.0, 0
	for j, t := range r.Times {
		if t >= from {
			sum += r.Queue[j]
			k++
		}
	}
	if k == 0 {
		return 0
	}
	return sum / float64(k)
}
