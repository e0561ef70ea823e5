//go:build linux

package gwload

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mrgw/mrgw/host"
	"github.com/mrgw/mrgw/internal/report"
	"github.com/mrgw/mrgw/loadtest/lab"
	"github.com/mrgw/mrgw/loadtest/recovery"
	"github.com/mrgw/mrgw/netem"

	"github.com/mrgw/mrgw/units"
)

// Options tune how a scenario runs (not what it does).
type Options struct {
	// Bin is the goodput sampling interval [100ms].
	Bin time.Duration
	// Drain ends the wait for messages in flight after Duration once
	// nothing was delivered for this long [15s].
	Drain time.Duration
	// OpenTimeout bounds the start: gateways ready and flows opened [60s].
	OpenTimeout time.Duration
	// Progress, if set, is called about every Bin with the fraction of the
	// run done and what is happening.
	Progress func(frac float64, what string)
	// Logger receives the gateways' and hosts' logs [discard].
	Logger *slog.Logger
	// Trace, if set, receives one line per Bin: goodput, the emulator's
	// per-direction rate and drops, and every WAN connection's sending
	// rate, summed window and bytes in flight (for finding what limits a
	// run).
	Trace io.Writer
}

func (o Options) withDefaults() Options {
	if o.Bin <= 0 {
		o.Bin = 100 * time.Millisecond
	}
	if o.Drain <= 0 {
		o.Drain = 15 * time.Second
	}
	if o.OpenTimeout <= 0 {
		o.OpenTimeout = 60 * time.Second
	}
	return o
}

// Mark is a fault on the time axis.
type Mark struct {
	At    float64 // seconds from the start of traffic
	Label string
}

// Series is what a run recorded over time, for plots.
type Series struct {
	Scenario string
	Variant  string
	// T are the ends of the sampling bins (seconds); Goodput the bits/s
	// delivered to the destination applications in each.
	T, Goodput []float64
	Faults     []Mark
	// PathRTT (ms) and PathCwnd (bytes) of the WAN connection that carried
	// the most at the start (Watched), per path id and bin; 0 where the
	// path or its gateway was gone.
	Watched  string
	PathRTT  [][]float64
	PathCwnd [][]float64
	// Delivered is the cumulative count behind Goodput (bytes delivered
	// by each bin's end, from the start of traffic): recovery is measured
	// on it (loadtest/recovery), as by mrgw-lab demo and the tunnel tests.
	Delivered recovery.Series
	// FlowBytes are the bytes delivered per flow.
	FlowBytes []float64
	// StepMs are the step times of a synchronized workload, IdealStepMs
	// the step's bytes over the capacity.
	StepMs      []float64
	IdealStepMs float64

	mu sync.Mutex // the sampler and the fault injector append concurrently
}

// env is one running lab with its hosts.
type env struct {
	sc  *resolved
	o   Options
	l   *lab.Lab
	tr  *tracker
	src []*host.Host // source regions (region A of the default lab)
	dst []*host.Host // the destination region (region B)
	// srcRegions are the source regions in order, dstRegion the
	// destination; with Scenario.Sources, src holds Hosts hosts of each
	// source region in that order.
	srcRegions []string
	dstRegion  string
	flows      []*flowRef
	key        uint32
	area       uint64 // bytes of each host's registered memory
	start      time.Time

	incomplete atomic.Int64
	lastEmu    netem.Stats
}

// trace writes one line of Options.Trace.
func (e *env) trace(el time.Duration, goodput float64) {
	st := e.l.Emu.Stats()
	var b strings.Builder
	fmt.Fprintf(&b, "%6.2fs gp %6.1f", el.Seconds(), goodput/1e6)
	for d := range 2 {
		cur := st.Total(netem.Dir(d))
		var prev netem.LinkStats
		if len(e.lastEmu.Links[d]) > 0 {
			prev = e.lastEmu.Total(netem.Dir(d))
		}
		fmt.Fprintf(&b, " | d%d in %6.1fM out %6.1fM qd %d ld %d late %v", d, float64(units.Throughput(float64(cur.BytesIn-prev.BytesIn), e.o.Bin.Seconds()))/1e6,
			float64(units.Throughput(float64(cur.BytesDelivered-prev.BytesDelivered), e.o.Bin.Seconds()))/1e6,
			cur.QueueDrops-prev.QueueDrops, cur.LossDrops-prev.LossDrops, st.Late[d].Max.Round(time.Millisecond))
	}
	e.lastEmu = st
	names := make([]string, 0, len(e.l.Gateways))
	for n := range e.l.Gateways {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		g := e.l.Gateways[n]
		select {
		case <-g.Done():
			continue
		default:
		}
		gs := g.Status()
		down := 0
		for _, hl := range gs.HostLinks {
			if hl.PathsUp == 0 {
				down++
			}
		}
		fmt.Fprintf(&b, " | %s f%d mem %dK lanin %.1fM hosts %d (%d no path up)", n, gs.Flows.Active, gs.Memory.InUse>>10, float64(gs.LANInBps.Bits())/1e6, gs.Hosts, down)
		for _, hl := range gs.HostLinks {
			if hl.FlowsOut == 0 {
				continue
			}
			fmt.Fprintf(&b, " >%s pace %.1fM cw %dK inf %dK up %d lost %d rtx %d", hl.Endpoint, float64(hl.PacingBps.Bits())/1e6, hl.Cwnd>>10, hl.Inflight>>10, hl.PathsUp, hl.Lost, hl.Retrans)
		}
		for _, p := range gs.Peers {
			if p.TxBps < 1e5 {
				continue
			}
			var cw, inf int
			states := map[string]int{}
			for _, pa := range p.Paths {
				states[pa.State]++
				if pa.State == "up" {
					cw += pa.Cwnd
					inf += pa.Inflight
				}
			}
			fmt.Fprintf(&b, " >%s %.1fM pace %.1fM cw %dK inf %dK lost %d %v", p.Name, float64(p.TxBps.Bits())/1e6, float64(p.PacingBps.Bits())/1e6, cw>>10, inf>>10, p.Lost, states)
		}
	}
	fmt.Fprintln(e.o.Trace, b.String())
}

// Run runs one scenario and returns its report row and recorded series.
// A fault's outcome (messages lost, incomplete, flows failed, goodput not
// recovered) is reported in the row, not as an error; errors are for runs
// that could not be set up.
func Run(ctx context.Context, s Scenario, o Options) ([]report.Row, *Series, error) {
	sc, err := s.resolve()
	if err != nil {
		return nil, nil, err
	}
	o = o.withDefaults()
	e := &env{sc: sc, o: o, tr: newTracker(), key: 1, srcRegions: []string{lab.RegionA}, dstRegion: lab.RegionB}
	var regions []lab.Region
	if len(sc.Sources) > 0 {
		e.srcRegions, e.dstRegion = nil, DestRegion
		for i, src := range sc.Sources {
			regions = append(regions, lab.Region{Name: src.Name, Site: netem.SiteA, Gateways: 1, Prefix: fmt.Sprintf("s%d", i+1), OneWay: src.RTT / 2})
			e.srcRegions = append(e.srcRegions, src.Name)
		}
		regions = append(regions, lab.Region{Name: DestRegion, Site: netem.SiteB, Gateways: 1, Prefix: DestRegion})
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	progress := func(frac float64, what string) {
		if o.Progress != nil {
			o.Progress(math.Min(math.Max(frac, 0), 1), what)
		}
	}
	progress(0, sc.Name+": starting gateways")
	base := sc.base
	l, err := lab.New(ctx, lab.Config{
		Planes: sc.Planes, OneWay: base.Delay, Loss: base.Loss, RateBps: base.Rate, Queue: base.QueueBytes,
		MTU: 4096, Paths: 16, Seed: sc.Seed, Logger: o.Logger,
		Classes: classes(sc.Workload.Class), FlowCreditBytes: int64(sc.flowCredit), WANRateBps: int64(sc.wanRate),
		RegionRateBps: int64(sc.regionRate),
		Regions:       regions,
		// A gateway may carry every flow (the default admits 4096).
		MaxFlows: max(4096, sc.Workload.Flows+1024),
	})
	if err != nil {
		return nil, nil, err
	}
	e.l = l
	defer l.Close()
	for d := range 2 {
		for p, lc := range sc.links[d] {
			cur, err := l.Emu.Link(netem.Dir(d), p)
			if err != nil {
				return nil, nil, err
			}
			lc.ECNThreshold = cur.ECNThreshold
			if lc != cur {
				if err := l.Emu.SetLink(netem.Dir(d), p, lc); err != nil {
					return nil, nil, fmt.Errorf("gwload: plane %d %v: %w", p, netem.Dir(d), err)
				}
			}
		}
	}
	l.Start()
	octx, ocancel := context.WithTimeout(ctx, o.OpenTimeout)
	defer ocancel()
	if err := l.WaitReady(octx); err != nil {
		return nil, nil, err
	}
	progress(0, sc.Name+": opening flows")
	defer e.close()
	if err := e.hosts(); err != nil {
		return nil, nil, err
	}
	runtime.GC()
	var ms0 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	if err := e.open(octx); err != nil {
		return nil, nil, err
	}
	runtime.GC()
	var ms1 runtime.MemStats
	runtime.ReadMemStats(&ms1)
	heapPerFlow := (float64(ms1.HeapInuse) - float64(ms0.HeapInuse)) / float64(len(e.flows))
	ocancel()

	// Receivers: every host drains its deliveries until the end.
	var rwg sync.WaitGroup
	rctx, rcancel := context.WithCancel(ctx)
	for _, h := range append(append([]*host.Host{}, e.src...), e.dst...) {
		rwg.Add(1)
		go func() {
			defer rwg.Done()
			for {
				select {
				case d, ok := <-h.Received():
					if !ok {
						return
					}
					e.tr.deliver(d)
				case <-rctx.Done():
					return
				}
			}
		}()
	}
	defer func() { rcancel(); rwg.Wait() }()

	ser := &Series{Scenario: sc.Name, Variant: variant(sc)}
	e.start = time.Now()
	stop := make(chan struct{})
	sampled := make(chan struct{})
	var peakGwMem, peakFlows int64
	go func() {
		defer close(sampled)
		e.sample(ctx, ser, stop, &peakGwMem, &peakFlows, progress)
	}()
	faultsDone := make(chan struct{})
	go func() {
		defer close(faultsDone)
		e.faults(ctx, ser, stop)
	}()

	var steps []time.Duration
	var stepFlowRates []float64
	deadline := e.start.Add(sc.Duration)
	if sc.Workload.Pattern == PatternBulk {
		e.bulk(ctx, deadline)
	} else {
		steps, stepFlowRates = e.stepped(ctx, deadline)
	}
	close(stop)
	<-sampled
	<-faultsDone
	// Deliveries racing the last completions: give them a moment.
	time.Sleep(min(200*time.Millisecond, o.Drain))

	row := e.row(ser, steps, stepFlowRates)
	if peakFlows > 0 {
		row.GatewayBytesPerFlow = float64(peakGwMem) / float64(peakFlows)
	}
	if heapPerFlow > 0 {
		row.HeapBytesPerFlow = heapPerFlow
	}
	for _, st := range steps {
		ser.StepMs = append(ser.StepMs, units.Ms(st))
	}
	ser.IdealStepMs = row.IdealStepMs
	return []report.Row{row}, ser, nil
}

func classes(c string) map[string]int {
	if c == "" || c == "default" {
		return nil
	}
	return map[string]int{c: 1}
}

func variant(sc *resolved) string {
	w := sc.Workload
	switch w.Pattern {
	case PatternIncast:
		return fmt.Sprintf("%d to 1, %s", w.Flows, w.MessageSize)
	case PatternAllreduce:
		return fmt.Sprintf("%d hosts/region, %s shards", w.Hosts, w.MessageSize)
	}
	if n := len(sc.Sources); n > 0 {
		var rtts []string
		for _, s := range sc.Sources {
			rtts = append(rtts, strconv.FormatInt(s.RTT.Milliseconds(), 10))
		}
		return fmt.Sprintf("%d flows from each of %s ms, %s x%d", w.Flows/n, strings.Join(rtts, "/"), w.MessageSize, w.Window)
	}
	return fmt.Sprintf("%d flows, %d hosts, %s x%d", w.Flows, w.Hosts, w.MessageSize, w.Window)
}
