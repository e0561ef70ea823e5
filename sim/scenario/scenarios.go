package scenario

import (
	"fmt"
	"time"

	"github.com/mrgw/mrgw/internal/report"
	"github.com/mrgw/mrgw/metaroce"
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
	return rows, nil
}
