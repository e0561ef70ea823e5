//go:build linux

package gwload

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
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
	"github.com/mrgw/mrgw/metaroce"
	"github.com/mrgw/mrgw/netem"
	"github.com/mrgw/mrgw/pathmgr"
)

// Options tune how a scenario runs (not what it does).
type Options struct {
	// Bin is the goodput sampling interval [100ms].
	Bin time.Duration
	// Drain bounds the wait for messages in flight after Duration [15s].
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
	// on it (loadtest/recovery), as by mrgw demo and the tunnel tests.
	Delivered recovery.Series
	// FlowBytes are the bytes delivered per flow.
	FlowBytes []float64
	// StepMs are the step times of a synchronized workload, IdealStepMs
	// the step's bytes over the capacity.
	StepMs      []float64
	IdealStepMs float64

	mu sync.Mutex // the sampler and the fault injector append concurrently
}

// tracker counts deliveries and completions.
type tracker struct {
	total atomic.Uint64 // bytes delivered to applications

	mu        sync.Mutex
	seen      map[[2]uint64]uint8 // (flow, seq) -> deliveries
	perFlow   map[uint64]uint64   // flow -> bytes delivered
	dups      int64
	completed []msgRange // messages the sources saw complete
	failed    int
	errs      []string
}

type msgRange struct {
	flow, first uint64
	n           int
}

func newTracker() *tracker {
	return &tracker{seen: map[[2]uint64]uint8{}, perFlow: map[uint64]uint64{}}
}

func (t *tracker) deliver(d host.Delivery) {
	t.total.Add(d.Len)
	t.mu.Lock()
	k := [2]uint64{d.Flow, d.Seq}
	if c := t.seen[k]; c > 0 {
		t.dups++
	}
	if t.seen[k] < 255 {
		t.seen[k]++
	}
	t.perFlow[d.Flow] += d.Len
	t.mu.Unlock()
}

func (t *tracker) done(flow uint64, p *host.Pending, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err != nil {
		t.failed++
		t.addErr(err.Error())
		return
	}
	first, n := p.Seqs()
	t.completed = append(t.completed, msgRange{flow, first, n})
}

// fail counts a message that could not be written.
func (t *tracker) fail(e string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.failed++
	t.addErr(e)
}

func (t *tracker) addErr(e string) {
	if len(t.errs) < 10 {
		t.errs = append(t.errs, e)
	}
}

// lost counts completed messages with a segment never delivered.
func (t *tracker) lost() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	var n int64
	for _, m := range t.completed {
		for s := range m.n {
			if t.seen[[2]uint64{m.flow, m.first + uint64(s)}] == 0 {
				n++
				break
			}
		}
	}
	return n
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
		fmt.Fprintf(&b, " | d%d in %6.1fM out %6.1fM qd %d ld %d late %v", d, float64(cur.BytesIn-prev.BytesIn)*8/e.o.Bin.Seconds()/1e6,
			float64(cur.BytesDelivered-prev.BytesDelivered)*8/e.o.Bin.Seconds()/1e6,
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
		fmt.Fprintf(&b, " | %s f%d mem %dK lanin %.1fM hosts %d (%d no path up)", n, gs.Flows.Active, gs.Memory.InUse>>10, gs.LANInBps*8/1e6, gs.Hosts, down)
		for _, hl := range gs.HostLinks {
			if hl.FlowsOut == 0 {
				continue
			}
			fmt.Fprintf(&b, " >%s pace %.1fM cw %dK inf %dK up %d lost %d rtx %d", hl.Endpoint, hl.PacingBps*8/1e6, hl.Cwnd>>10, hl.Inflight>>10, hl.PathsUp, hl.Lost, hl.Retrans)
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
			fmt.Fprintf(&b, " >%s %.1fM pace %.1fM cw %dK inf %dK lost %d %v", p.Name, p.TxBps*8/1e6, p.PacingBps*8/1e6, cw>>10, inf>>10, p.Lost, states)
		}
	}
	fmt.Fprintln(e.o.Trace, b.String())
}

type flowRef struct {
	f      *host.Flow
	idx    int
	region int // index of its source region in env.srcRegions
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
		Classes: classes(sc.Workload.Class), FlowCreditBytes: int64(sc.flowCredit),
		Regions: regions,
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
		ser.StepMs = append(ser.StepMs, ms(st))
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

// hosts creates the hosts.
func (e *env) hosts() error {
	w := e.sc.Workload
	nsrc, ndst := w.Hosts, 1
	if w.Pattern == PatternAllreduce {
		ndst = w.Hosts
	}
	// Each host's registered memory holds a few messages; writes wrap
	// around in it (the content is not checked: deliveries are counted).
	e.area = uint64(e.sc.msgSize) * uint64(min(max(w.Window, 1)*4, 16))
	if w.Pattern != PatternBulk {
		e.area = 2 * uint64(e.sc.msgSize) // steps alternate between two slots
	}
	// Only hosts that receive register memory (allreduce: all of them).
	mk := func(region, name string) (*host.Host, error) {
		h, err := host.New(host.Config{Name: name, Region: region, Gateways: e.l.HostGateways(region), Key: e.l.HostKey,
			DeadAfter: time.Second, Logger: e.o.Logger, MaxFlowMessages: 1024, Protocol: labHostProtocol()})
		if err != nil {
			return nil, fmt.Errorf("gwload: host %s: %w", name, err)
		}
		if region != e.dstRegion && w.Pattern != PatternAllreduce {
			return h, nil
		}
		if err := h.RegisterMemory(e.key, make([]byte, e.area)); err != nil {
			h.Close()
			return nil, err
		}
		return h, nil
	}
	for _, reg := range e.srcRegions {
		for range nsrc {
			h, err := mk(reg, fmt.Sprintf("a%d", len(e.src)))
			if err != nil {
				return err
			}
			e.src = append(e.src, h)
		}
	}
	for i := range ndst {
		h, err := mk(e.dstRegion, fmt.Sprintf("b%d", i))
		if err != nil {
			return err
		}
		e.dst = append(e.dst, h)
	}
	return nil
}

// labHostProtocol is the hosts' MetaRoCE configuration on the lab's LAN.
//
// The host library's defaults are a data centre's: an initial RTT of
// 100 µs, so a handshake sends its 8 INITs 300 µs, 600 µs, ... apart and
// gives up after about 76 ms. Here up to 66 hosts, four gateways and the
// emulator share two cores: a connection set-up that waits 100 ms for the
// CPU timed out, the host reconnected (new path sockets, ~0.8 MiB of
// receive buffers each, 8 per connection) and the allocations starved
// everything further: incast 64→1 spent 55% of its CPU clearing fresh
// buffers and its hosts lost their registrations (measured with pprof,
// 19:15 UTC 2026-11-29). A loopback LAN that shares its CPU with everything
// is given a millisecond-scale start (a 3.8 s handshake budget) and 4 paths
// per gateway connection, which is plenty for a hop that has no ECMP.
func labHostProtocol() metaroce.Config {
	return metaroce.Config{
		Paths: 4,
		// The host's receive capacity, divided among the gateways that
		// send to it as rate hints (labHostReceiveBps).
		ReceiveCapacityBps: labHostReceiveBps,
		Path: pathmgr.Config{
			InitialRTT: 5 * time.Millisecond, MinPTO: lab.LANMinPTO, MaxAckDelay: time.Millisecond,
			DownAfter: 3, ProbeInterval: 20 * time.Millisecond, MaxProbeInterval: time.Second, UpAfter: 2,
		},
	}
}

// labHostReceiveBps is what each lab host tells the gateways sending to it
// it can take (metaroce rate hints), split among them.
//
// Without it the gateways' LAN controller (dc-aimd, no lan.max_rate_bps
// in the lab) had no scale for its rate: growth measured against its own
// rate, and when every path of a gateway→host connection went down for a
// moment (the LAN paths time out under the CPU load of 64 hosts opening
// flows), the controller's rate fell to zero and stayed there, so the
// destination gateway trickled 55 MB of the first incast step to the
// receiving host over 26 s while the WAN had carried it in 4 (mrgw
// loadtest --trace, 2026-11-29 22:01). A hint gives the rate its scale
// back: growth is then a share of it per round trip, bounded by it.
// 4 Gbit/s: loopback, far above any scenario's WAN capacity.
const labHostReceiveBps = 4e9

// open opens the flows, 64 at a time.
func (e *env) open(ctx context.Context) error {
	w := e.sc.Workload
	nsrc := len(e.src)
	type job struct {
		from            *host.Host
		region, dstName string
		srcRegion       int
	}
	var jobs []job
	switch w.Pattern {
	case PatternBulk:
		// Flow i comes from source region i mod R, from its hosts in turn.
		nr := len(e.srcRegions)
		per := nsrc / nr
		for i := range w.Flows {
			r := i % nr
			jobs = append(jobs, job{e.src[r*per+(i/nr)%per], e.dstRegion, "b0", r})
		}
	case PatternIncast:
		for i := range w.Flows {
			jobs = append(jobs, job{e.src[i], e.dstRegion, "b0", 0})
		}
	case PatternAllreduce:
		for i := range w.Hosts {
			jobs = append(jobs, job{e.src[i], e.dstRegion, fmt.Sprintf("b%d", i), 0})
			jobs = append(jobs, job{e.dst[i], e.srcRegions[0], fmt.Sprintf("a%d", i), 0})
		}
	}
	e.flows = make([]*flowRef, len(jobs))
	sem := make(chan struct{}, 64)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for i, j := range jobs {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			f, err := j.from.OpenFlow(ctx, j.region, j.dstName, host.FlowOptions{Class: w.Class})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if firstErr == nil {
					firstErr = fmt.Errorf("gwload: open flow %d (%s -> %s/%s): %w", i, j.from.Name(), j.region, j.dstName, err)
				}
				return
			}
			e.flows[i] = &flowRef{f: f, idx: i, region: j.srcRegion}
		}()
	}
	wg.Wait()
	return firstErr
}

func (e *env) close() {
	for _, h := range e.src {
		h.Close()
	}
	for _, h := range e.dst {
		h.Close()
	}
}

// payload is shared by every write (never modified).
func payload(n int) []byte {
	b := make([]byte, n)
	rng := rand.New(rand.NewPCG(uint64(n), 7))
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// bulk keeps Window messages in flight on every flow until deadline, then
// waits at most Drain for what is in flight.
func (e *env) bulk(ctx context.Context, deadline time.Time) {
	w := e.sc.Workload
	data := payload(e.sc.msgSize)
	slots := e.area / uint64(e.sc.msgSize)
	dctx, dcancel := context.WithDeadline(ctx, deadline.Add(e.o.Drain))
	defer dcancel()
	var wg sync.WaitGroup
	for _, fr := range e.flows {
		wg.Add(1)
		go func() {
			defer wg.Done()
			wctx, wcancel := context.WithDeadline(ctx, deadline)
			defer wcancel()
			// With a window of 1 this goroutine writes and waits (at
			// 10,000 flows a writer and a waiter per flow would be 20,000
			// goroutines on two cores); otherwise a waiter takes the
			// pending messages while the writer keeps Window in flight.
			handOff := func(p *host.Pending) bool { e.wait(dctx, fr, p); return true }
			if w.Window > 1 {
				pend := make(chan *host.Pending, w.Window)
				var waiter sync.WaitGroup
				waiter.Add(1)
				go func() {
					defer waiter.Done()
					for p := range pend {
						e.wait(dctx, fr, p)
					}
				}()
				defer func() { close(pend); waiter.Wait() }()
				handOff = func(p *host.Pending) bool {
					select {
					case pend <- p:
						return true
					case <-wctx.Done():
						pend <- p // the message is written: it still counts
						return false
					}
				}
			}
			for n := uint64(0); wctx.Err() == nil; n++ {
				addr := ((uint64(fr.idx) + n) % slots) * uint64(e.sc.msgSize)
				p, err := fr.f.Write(wctx, e.key, addr, data)
				if err != nil {
					if wctx.Err() == nil {
						e.tr.fail("write: " + err.Error())
					}
					return
				}
				if !handOff(p) {
					return
				}
			}
		}()
	}
	wg.Wait()
}

// wait waits for a bulk message's completion, at most until dctx ends,
// and records the outcome.
func (e *env) wait(dctx context.Context, fr *flowRef, p *host.Pending) {
	err := p.Wait(dctx)
	if err != nil && dctx.Err() != nil && p.Err() == nil {
		e.incomplete.Add(1)
		return
	}
	e.tr.done(fr.f.ID(), p, err)
}

// stepped runs synchronized steps (incast, allreduce): every flow writes
// one message at once; a step ends when the last completes. It returns the
// step times and every transfer's rate (bytes/s).
func (e *env) stepped(ctx context.Context, deadline time.Time) ([]time.Duration, []float64) {
	data := payload(e.sc.msgSize)
	var steps []time.Duration
	var rates []float64
	for s := 0; s < e.sc.Workload.Steps && time.Now().Before(deadline); s++ {
		sctx, scancel := context.WithDeadline(ctx, deadline.Add(e.o.Drain))
		t0 := time.Now()
		var wg sync.WaitGroup
		var mu sync.Mutex
		ok := true
		for _, fr := range e.flows {
			wg.Add(1)
			go func() {
				defer wg.Done()
				addr := uint64(s%2) * uint64(e.sc.msgSize) % e.area
				p, err := fr.f.Write(sctx, e.key, addr, data)
				if err != nil {
					e.tr.fail("write: " + err.Error())
					mu.Lock()
					ok = false
					mu.Unlock()
					return
				}
				err = p.Wait(sctx)
				if err != nil && sctx.Err() != nil && p.Err() == nil {
					e.incomplete.Add(1)
					mu.Lock()
					ok = false
					mu.Unlock()
					return
				}
				e.tr.done(fr.f.ID(), p, err)
				mu.Lock()
				if err != nil {
					ok = false
				} else {
					rates = append(rates, float64(e.sc.msgSize)/time.Since(t0).Seconds())
				}
				mu.Unlock()
			}()
		}
		wg.Wait()
		scancel()
		if !ok {
			break
		}
		steps = append(steps, time.Since(t0))
	}
	return steps, rates
}

// faults applies the scenario's faults at their times.
func (e *env) faults(ctx context.Context, ser *Series, stop <-chan struct{}) {
	for _, f := range e.sc.Faults {
		wait := time.Until(e.start.Add(f.At))
		if wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-stop:
				t.Stop()
				return
			case <-ctx.Done():
				t.Stop()
				return
			}
		}
		label := f.String()
		switch f.Kind {
		case FaultPlaneFail, FaultPlaneRestore:
			p, _ := strconv.Atoi(f.Target)
			var err error
			if f.Kind == FaultPlaneFail {
				err = e.l.Emu.Fail(p)
			} else {
				err = e.l.Emu.Restore(p)
			}
			if err != nil {
				label += " (failed: " + err.Error() + ")"
			}
		case FaultGatewayKill:
			name := e.gatewayTarget(f.Target)
			label = fmt.Sprintf("gateway-kill %s @%v", name, f.At)
			if g := e.l.Gateways[name]; g != nil {
				g.Close()
			}
		}
		ser.mu.Lock()
		ser.Faults = append(ser.Faults, Mark{At: time.Since(e.start).Seconds(), Label: label})
		ser.mu.Unlock()
	}
}

// gatewayTarget resolves busiest-src/busiest-dst to a gateway name.
func (e *env) gatewayTarget(t string) string {
	region := ""
	switch t {
	case TargetBusiestSrc:
		region = lab.RegionA
	case TargetBusiestDst:
		region = lab.RegionB
	default:
		return t
	}
	// The gateway the most source flows go through, by LAN address.
	byAddr := map[string]string{}
	for _, n := range e.l.Names[region] {
		byAddr[e.l.Configs[n].LAN.Listen] = n
	}
	count := map[string]int{}
	for _, fr := range e.flows {
		if n, ok := byAddr[fr.f.Gateway().String()]; ok {
			count[n]++
		}
	}
	best := e.l.Names[region][0]
	for _, n := range e.l.Names[region] {
		if count[n] > count[best] {
			best = n
		}
	}
	if region == lab.RegionB || len(count) == 0 {
		// Destination side: the one relaying the most flows.
		for _, n := range e.l.Names[region] {
			if e.l.Gateways[n].Status().Flows.Active > e.l.Gateways[best].Status().Flows.Active {
				best = n
			}
		}
	}
	return best
}

// sample records goodput and the watched connection's paths every Bin.
func (e *env) sample(ctx context.Context, ser *Series, stop <-chan struct{}, peakMem, peakFlows *int64, progress func(float64, string)) {
	tick := time.NewTicker(e.o.Bin)
	defer tick.Stop()
	var last uint64
	ser.mu.Lock()
	ser.Delivered.Add(e.start, e.tr.total.Load())
	ser.mu.Unlock()
	var watchGW, watchPeer string
	paths := map[int]int{} // path id -> column
	maxBins := int(e.sc.Duration/e.o.Bin) + 2
	for range maxBins {
		select {
		case <-tick.C:
		case <-stop:
			return
		case <-ctx.Done():
			return
		}
		el := time.Since(e.start)
		tot := e.tr.total.Load()
		ser.mu.Lock()
		ser.Delivered.Add(e.start.Add(el), tot)
		ser.T = append(ser.T, el.Seconds())
		ser.Goodput = append(ser.Goodput, float64(tot-last)*8/e.o.Bin.Seconds())
		ser.mu.Unlock()
		last = tot
		var mem, flows int64
		for _, g := range e.l.Gateways {
			select {
			case <-g.Done():
				continue
			default:
			}
			st := g.Status()
			mem += st.Memory.Reserved
			flows += int64(st.Flows.Active)
		}
		if flows > 0 && (*peakFlows == 0 || mem*(*peakFlows) > *peakMem*flows) {
			*peakMem, *peakFlows = mem, flows
		}
		if watchGW == "" && el > 500*time.Millisecond {
			var best uint64
			var names []string
			for _, reg := range e.srcRegions {
				names = append(names, e.l.Names[reg]...)
			}
			for _, n := range names {
				for _, p := range e.l.Gateways[n].Status().Peers {
					if p.Sent > best {
						best, watchGW, watchPeer = p.Sent, n, p.Name
					}
				}
			}
			ser.Watched = watchGW + " -> " + watchPeer
		}
		rtt := make([]float64, len(paths))
		cwnd := make([]float64, len(paths))
		if g := e.l.Gateways[watchGW]; g != nil {
			alive := true
			select {
			case <-g.Done():
				alive = false
			default:
			}
			for _, p := range g.Status().Peers {
				if !alive || p.Name != watchPeer {
					continue
				}
				for _, pa := range p.Paths {
					c, ok := paths[pa.ID]
					if !ok && len(paths) < 64 {
						c = len(paths)
						paths[pa.ID] = c
						rtt = append(rtt, 0)
						cwnd = append(cwnd, 0)
						ok = true
					}
					if ok && pa.State == "up" {
						rtt[c], cwnd[c] = pa.RTT, float64(pa.Cwnd)
					}
				}
			}
		}
		if e.o.Trace != nil {
			e.trace(el, ser.Goodput[len(ser.Goodput)-1])
		}
		ser.mu.Lock()
		ser.PathRTT = append(ser.PathRTT, rtt)
		ser.PathCwnd = append(ser.PathCwnd, cwnd)
		ser.mu.Unlock()
		progress(el.Seconds()/e.sc.Duration.Seconds(), fmt.Sprintf("%s %s: %s", e.sc.Name, variant(e.sc), report.FormatBps(ser.Goodput[len(ser.Goodput)-1])))
	}
}

// capacity is the sum of the planes' rates in direction d (0: unlimited).
func (e *env) capacity(d int) float64 {
	var c float64
	for _, lc := range e.sc.links[d] {
		if lc.Rate == 0 {
			return 0
		}
		c += float64(lc.Rate)
	}
	return c
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// row builds the report row once traffic has ended.
func (e *env) row(ser *Series, steps []time.Duration, stepRates []float64) report.Row {
	sc := e.sc
	w := sc.Workload
	rtt := 2 * sc.base.Delay
	capA := e.capacity(0)
	r := report.Row{
		Scenario: sc.Name, System: "mrgw", Variant: variant(sc), Planes: sc.Planes, Paths: 16,
		RTTms: ms(rtt), Loss: sc.base.Loss, Flows: len(e.flows), CapacityBps: capA,
		MessageBytes: int64(e.sc.msgSize), Emulator: "emu",
	}
	if w.Pattern == PatternAllreduce {
		r.CapacityBps = capA + e.capacity(1) // both directions carry shards
	}
	lost := e.tr.lost()
	e.tr.mu.Lock()
	dups := e.tr.dups
	r.Messages = len(e.tr.completed)
	r.MessagesFailed = e.tr.failed
	errs := append([]string{}, e.tr.errs...)
	var shares []float64
	for _, fr := range e.flows {
		shares = append(shares, float64(e.tr.perFlow[fr.f.ID()]))
	}
	e.tr.mu.Unlock()
	r.MessagesLost, r.MessagesDuplicated = &lost, &dups
	r.Incomplete = int(e.incomplete.Load())
	ser.FlowBytes = shares
	r.Jain = report.Jain(shares)
	srcNote := ""
	if len(sc.Sources) > 0 {
		// Shares per source region (each has the same number of flows).
		perRegion := make([]float64, len(sc.Sources))
		var tot float64
		for i, fr := range e.flows {
			perRegion[fr.region] += shares[i]
			tot += shares[i]
		}
		for _, b := range perRegion {
			if tot > 0 {
				r.Shares = append(r.Shares, math.Round(b/tot*1000)/1000)
			}
		}
		r.RTTms = 0
		var rtts []string
		for _, s := range sc.Sources {
			rtts = append(rtts, s.RTT.String())
		}
		srcNote = "shares per source region, RTT " + strings.Join(rtts, ", ")
	} else if len(shares) <= 16 {
		var tot float64
		for _, s := range shares {
			tot += s
		}
		for _, s := range shares {
			if tot > 0 {
				r.Shares = append(r.Shares, math.Round(s/tot*1000)/1000)
			}
		}
	}
	for _, g := range e.l.Gateways {
		for _, p := range g.Status().Peers {
			r.Retransmits += p.Retrans
		}
	}
	ser.mu.Lock()
	defer ser.mu.Unlock()
	if w.Pattern == PatternBulk {
		// Goodput over the bins after a warm-up of a second (or a fifth of
		// the run, if shorter).
		warm := math.Min(1, sc.Duration.Seconds()/5)
		var bytes, secs float64
		for i, t := range ser.T {
			if t-e.o.Bin.Seconds() >= warm-1e-9 {
				bytes += ser.Goodput[i] * e.o.Bin.Seconds()
				secs += e.o.Bin.Seconds()
			}
		}
		if secs > 0 {
			r.GoodputBps = bytes / secs
		}
	} else {
		var total time.Duration
		for _, s := range steps {
			total += s
			r.MaxStepMs = math.Max(r.MaxStepMs, ms(s))
		}
		r.Steps = len(steps)
		if len(steps) > 0 {
			r.StepMs = ms(total) / float64(len(steps))
			bytesPerStep := float64(len(e.flows)) * float64(e.sc.msgSize)
			r.GoodputBps = bytesPerStep * 8 * float64(len(steps)) / total.Seconds()
			if r.CapacityBps > 0 {
				r.IdealStepMs = bytesPerStep * 8 / r.CapacityBps * 1000
				r.StepRatio = r.StepMs / r.IdealStepMs
			}
		}
		if len(stepRates) > 0 {
			r.Jain = report.Jain(stepRates)
		}
		if len(steps) < w.Steps {
			errs = append(errs, fmt.Sprintf("%d of %d steps completed", len(steps), w.Steps))
		}
		r.Note = stepList(steps)
	}
	if r.CapacityBps > 0 {
		r.Fraction = r.GoodputBps / r.CapacityBps
	}
	if len(ser.Faults) > 0 {
		f := ser.Faults[0]
		r.Fault = f.Label
		thr := 0.5
		if sc.Planes > 1 {
			thr = float64(sc.Planes-1) / float64(sc.Planes)
		}
		r.RecoveryMs, r.RecoveryRTTs = faultRecovery(ser.Delivered, e.start, f.At, sc.Duration, rtt, thr)
	}
	if len(errs) > 0 {
		note := errs[0]
		if len(errs) > 1 {
			note += fmt.Sprintf(" (+%d more)", len(errs)-1)
		}
		r.Note = strings.TrimPrefix(r.Note+"; "+note, "; ")
	}
	if srcNote != "" {
		r.Note = strings.TrimSuffix(srcNote+"; "+r.Note, "; ")
	}
	return r
}

// stepList lists step times in ms ("steps 2810 2702 ..."), the figure the
// mean and maximum summarise.
func stepList(steps []time.Duration) string {
	if len(steps) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("steps ms")
	for _, s := range steps {
		fmt.Fprintf(&b, " %.0f", ms(s))
	}
	return b.String()
}

// faultRecovery measures recovery after a fault at seconds `at` from start
// with loadtest/recovery, over the traffic's duration (or up to the last
// sample, if the run stopped early): until the goodput over a window of
// four round trips is back to thr of the goodput in the second before the
// fault, counting the window's length. It returns milliseconds and round
// trips, or -1, -1 if goodput did not come back within the run.
func faultRecovery(delivered recovery.Series, start time.Time, at float64, dur, rtt time.Duration, thr float64) (float64, float64) {
	end := start.Add(dur)
	if n := len(delivered.At); n > 0 && delivered.At[n-1].Before(end) {
		end = delivered.At[n-1]
	}
	rep := delivered.Measure(start.Add(time.Duration(at*float64(time.Second))), end, rtt, thr)
	if rep.RTTs < 0 {
		return -1, -1
	}
	return rep.RTTs * ms(rtt), rep.RTTs
}
