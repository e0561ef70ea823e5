//go:build linux

package peers

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/mrgw/mrgw/units"
)

// Time series for plots (Options.Record): while a run measures, a sampler
// reads its receivers' byte counters at a fixed interval and, for mrgw,
// the sender's per-path smoothed RTT and window. Sampling is bounded:
// SampleInterval apart (longer for long runs, so that a run never has more
// than MaxSamples), and a Recorder keeps at most MaxRuns runs.

// SampleInterval is the sampling interval of runs up to
// MaxSamples × SampleInterval long.
const SampleInterval = 100 * time.Millisecond

// MaxSamples bounds the samples of one run.
const MaxSamples = 1000

// MaxRuns bounds the runs a Recorder keeps; later runs are not sampled.
const MaxRuns = 512

// maxPaths bounds the paths sampled per mrgw connection.
const maxPaths = 64

// Recorder collects the time series of a scenario's runs for Plot. Set
// Options.Record to one to sample; it is safe for concurrent use.
type Recorder struct {
	mu   sync.Mutex
	runs []*recording
}

// NewRecorder returns an empty Recorder.
func NewRecorder() *Recorder { return &Recorder{} }

// Runs returns a copy of the runs recorded so far.
func (r *Recorder) Runs() []Series {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Series, len(r.runs))
	for i, rc := range r.runs {
		rc.mu.Lock()
		out[i] = rc.s
		out[i].Flows = slices.Clone(rc.s.Flows)
		out[i].T = slices.Clone(rc.s.T)
		out[i].Bps = slices.Clone(rc.s.Bps)
		out[i].Faults = slices.Clone(rc.s.Faults)
		out[i].PathT = slices.Clone(rc.s.PathT)
		out[i].PathRTTms = slices.Clone(rc.s.PathRTTms)
		out[i].PathCwnd = slices.Clone(rc.s.PathCwnd)
		rc.mu.Unlock()
	}
	return out
}

// recording is a Series being sampled.
type recording struct {
	mu        sync.Mutex
	s         Series
	start     time.Time
	pathProbe probeFunc
}

// probeFunc reads a sender's per-path smoothed RTT (ms) and window
// (bytes); it gives up when ctx ends (the sampler stopping).
type probeFunc func(ctx context.Context) (rttMs, cwnd []float64)

// Series is one run's samples.
type Series struct {
	// Scenario is the rows' scenario name; Group names the plot the run is
	// drawn in together with the other runs of the group (one link setting,
	// say); Label names the run in it (its system).
	Scenario, Group, Label string
	// Flows names the run's flows (default: Label alone, or "flow k").
	Flows []string
	// Warmup is when the measurement starts, in seconds from the start of
	// sampling (the time origin of T).
	Warmup float64
	// T are the sample times in seconds; Bps[i][k] is flow k's goodput at
	// the receiver over the interval ending at T[i].
	T   []float64
	Bps [][]float64
	// Faults are the faults injected during the run (seconds, label).
	Faults []Fault
	// PathRTTms and PathCwnd are, for mrgw runs, the sender's per-path
	// smoothed RTT (ms) and window (bytes) at PathT[i] (0: path not
	// usable).
	PathT               []float64
	PathRTTms, PathCwnd [][]float64
}

// Fault is a fault's time in a Series.
type Fault struct {
	At    float64
	Label string
}

type seriesKey struct{}

// record returns ctx carrying a new Series of the run (scenario, group,
// label, flows), if o records and has room; else ctx.
func (o *Options) record(ctx context.Context, scenario, group, label string, flows ...string) context.Context {
	if o.Record == nil {
		return ctx
	}
	r := o.Record
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.runs) >= MaxRuns {
		return ctx
	}
	rc := &recording{s: Series{Scenario: scenario, Group: group, Label: label, Flows: flows}}
	r.runs = append(r.runs, rc)
	return context.WithValue(ctx, seriesKey{}, rc)
}

// seriesOf is the recording ctx records into (nil if none).
func seriesOf(ctx context.Context) *recording {
	s, _ := ctx.Value(seriesKey{}).(*recording)
	return s
}

// setPathProbe makes the sampler of ctx's Series read per-path state
// with probe too (mrgw's sender).
func setPathProbe(ctx context.Context, probe probeFunc) {
	if s := seriesOf(ctx); s != nil {
		s.mu.Lock()
		s.pathProbe = probe
		s.mu.Unlock()
	}
}

// mark records a fault now in ctx's Series.
func mark(ctx context.Context, label string) {
	if s := seriesOf(ctx); s != nil {
		s.mu.Lock()
		if !s.start.IsZero() {
			s.s.Faults = append(s.s.Faults, Fault{At: time.Since(s.start).Seconds(), Label: label})
		}
		s.mu.Unlock()
	}
}

// sample starts sampling counts into ctx's Series (if any) for a run of
// about total (warm-up included, which ends at warmup); the returned stop
// ends it and waits for the sampler. A Series is sampled once: later calls
// do nothing.
func sample(ctx context.Context, counts []func() uint64, warmup, total time.Duration) (stop func()) {
	s := seriesOf(ctx)
	if s == nil || len(counts) == 0 {
		return func() {}
	}
	s.mu.Lock()
	if !s.start.IsZero() {
		s.mu.Unlock()
		return func() {}
	}
	s.start = time.Now()
	s.s.Warmup = warmup.Seconds()
	if len(s.s.Flows) != len(counts) {
		s.s.Flows = nil
		for k := range counts {
			if len(counts) == 1 {
				s.s.Flows = append(s.s.Flows, s.s.Label)
			} else {
				s.s.Flows = append(s.s.Flows, fmt.Sprintf("flow %d", k))
			}
		}
	}
	s.mu.Unlock()
	interval := sampleInterval(total)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(interval)
		defer t.Stop()
		prev := make([]uint64, len(counts))
		for k, c := range counts {
			prev[k] = c()
		}
		prevT := s.start
		for n := 0; n < MaxSamples; n++ {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			now := time.Now()
			dt := now.Sub(prevT).Seconds()
			row := make([]float64, len(counts))
			for k, c := range counts {
				v := c()
				row[k] = float64(units.Throughput(float64(v-prev[k]), dt))
				prev[k] = v
			}
			prevT = now
			s.mu.Lock()
			probe := s.pathProbe
			s.mu.Unlock()
			var rtt, cwnd []float64
			if probe != nil {
				rtt, cwnd = probe(ctx)
			}
			s.mu.Lock()
			at := now.Sub(s.start).Seconds()
			s.s.T = append(s.s.T, at)
			s.s.Bps = append(s.s.Bps, row)
			if rtt != nil {
				s.s.PathT = append(s.s.PathT, at)
				s.s.PathRTTms = append(s.s.PathRTTms, rtt)
				s.s.PathCwnd = append(s.s.PathCwnd, cwnd)
			}
			s.mu.Unlock()
		}
	}()
	return func() { cancel(); <-done }
}

// loads returns the counters' Load methods.
func loads[T interface{ Load() uint64 }](counts []T) []func() uint64 {
	out := make([]func() uint64, len(counts))
	for i, c := range counts {
		out[i] = c.Load
	}
	return out
}

// sampleInterval is the sampling interval of a run of about total:
// SampleInterval, or longer so that the run has at most MaxSamples.
func sampleInterval(total time.Duration) time.Duration {
	return max(SampleInterval, (total+MaxSamples-1)/MaxSamples)
}
