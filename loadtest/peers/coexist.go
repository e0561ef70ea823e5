//go:build linux

package peers

import (
	"context"
	"fmt"
	"io"
	"math"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mrgw/mrgw/internal/report"
	"github.com/mrgw/mrgw/internal/sleep"
	"github.com/mrgw/mrgw/loadtest/tunemu"
	"github.com/mrgw/mrgw/netem"

	"github.com/mrgw/mrgw/internal/tcpcc"
	"github.com/mrgw/mrgw/units"
)

// The coexistence scenario (Coexistence) puts two flows on one emulated
// bottleneck and asks whether either starves the other: the question an
// operator asks before letting a WAN gateway share a link with ordinary
// TCP. Both flows run through one tunemu emulator (one plane, one queue):
// kernel TCP as in the other scenarios, and mrgw's tunnel with its sockets
// opened inside the namespaces (tunNet), so that its sealed datagrams and
// the TCP segments wait in the same queue, are marked by the same ECN
// threshold and dropped by the same drop-tail.

// ScenarioCoexist is the coexistence rows' scenario name.
const ScenarioCoexist = "peers-coexistence"

// StarvedShare is the share of the pair's goodput below which a flow is
// called starved: a quarter of its fair half.
const StarvedShare = 0.125

// Coexistence defaults: a cubic flow probes for bandwidth over a cubic
// epoch of seconds at this BDP (about 8.6 s from a 30% cut of 860
// packets), so the measurement spans several epochs.
const (
	DefaultCoexistDuration = 20 * time.Second
	DefaultCoexistWarmup   = 5 * time.Second
)

// Pair is two flows sharing the bottleneck: Flow (the system under test)
// starts first and Against (the reference flow, normally tcp-cubic) right
// after it, with no wait.
type Pair struct{ Flow, Against string }

func (p Pair) String() string { return p.Flow + "+" + p.Against }

// BaselinePair is the pair every other one is compared with: two cubic
// flows.
var BaselinePair = Pair{TCPCubic, TCPCubic}

// DefaultPairs are the coexistence pairs run by default, baseline first.
var DefaultPairs = []Pair{BaselinePair, {TCPBBR, TCPCubic}, {MRGW, TCPCubic}, {MRGW, TCPBBR}}

// ParsePair reads "flow+against", each one of mrgw, tcp-cubic, tcp-bbr.
func ParsePair(s string) (Pair, error) {
	a, b, ok := strings.Cut(strings.TrimSpace(s), "+")
	p := Pair{strings.TrimSpace(a), strings.TrimSpace(b)}
	if !ok || !coexistSystem(p.Flow) || !coexistSystem(p.Against) {
		return Pair{}, fmt.Errorf("peers: pair %q: want flow+against, each of %s, %s, %s", s, MRGW, TCPCubic, TCPBBR)
	}
	return p, nil
}

func coexistSystem(s string) bool { return s == MRGW || s == TCPCubic || s == TCPBBR }

// Coexistence runs each pair (Options.Pairs, default DefaultPairs) for
// Warmup + Duration (default 5 s + 20 s; Quick: 0.5 s + 1 s) on one plane
// of CapacityBps at each of Options.RTTs (default 50 ms only), with the
// queue (default 1 BDP) and ECN threshold (default 0.1 BDP) of the other
// scenarios and no random loss. tunemu marks CE on any ECT IPv4 packet,
// whatever its protocol: mrgw's datagrams (ECT(0) on every one) and the
// TCP segments (ECN negotiated by net.ipv4.tcp_ecn=1: cubic cuts its
// window on an ECE ack as on a loss, bbr ignores ECN) see the same marks.
//
// Each pair yields two rows, Flow's then Against's, naming each other in
// Competitor; Share is each flow's part of the pair's goodput, Utilization
// the pair's goodput over the capacity, Jain their fairness index, Starved
// whether Share < StarvedShare. The Against row of a tcp-cubic flow gets
// RelBaseline: its share over the share of the second cubic flow of the
// baseline pair at the same RTT (when the baseline ran). The run fails if
// a flow moved nothing. It needs tunemu (root); without it no pair runs and
// the error matches tunemu.ErrUnavailable. Duration: about 26 s per pair with
// the defaults, under 2 minutes for the four default pairs at one RTT.
func Coexistence(ctx context.Context, o Options) ([]report.Row, error) {
	if len(o.RTTs) == 0 {
		o.RTTs = []time.Duration{50 * time.Millisecond}
	}
	if !o.Quick {
		if o.Duration <= 0 {
			o.Duration = DefaultCoexistDuration
		}
		if o.Warmup <= 0 {
			o.Warmup = DefaultCoexistWarmup
		}
	}
	o = o.withDefaults()
	pairs := DefaultPairs
	if len(o.Pairs) > 0 {
		pairs = nil
		for _, s := range o.Pairs {
			p, err := ParsePair(s)
			if err != nil {
				return nil, err
			}
			pairs = append(pairs, p)
		}
	}
	var rows []report.Row
	n := len(pairs) * len(o.RTTs)
	for k, rtt := range o.RTTs {
		l := o.link(1, o.CapacityBps, rtt, 0)
		var group []report.Row
		baseline := 0.0 // the second cubic flow's share against the first
		for i, p := range pairs {
			o.progress(k*len(pairs)+i+1, n, fmt.Sprintf("coexistence %s rtt=%v", p, l.RTT))
			rctx := o.record(ctx, ScenarioCoexist, fmt.Sprintf("%s, rtt %v", p, rtt), p.String(), "1: "+p.Flow, "2: "+p.Against)
			pr, err := coexistRun(rctx, p, l, o)
			if err != nil {
				return append(rows, group...), fmt.Errorf("peers: coexistence %s at %v: %w", p, rtt, err)
			}
			if p == BaselinePair && baseline == 0 {
				baseline = pr[1].Share
				pr[1].Note = report.JoinNote(pr[1].Note, "baseline")
			}
			group = append(group, pr[:]...)
		}
		if baseline > 0 {
			for j := 1; j < len(group); j += 2 {
				if group[j].System == TCPCubic && group[j].Variant != BaselinePair.String() {
					group[j].RelBaseline = group[j].Share / baseline
				}
			}
		}
		rows = append(rows, group...)
	}
	return rows, nil
}

// coFlow is one running flow of a pair.
type coFlow interface {
	received() uint64
	// start marks the start of the measurement.
	start()
	// status is a short trace of the flow's state ("" if none).
	status() string
	// finish stops the flow and returns what it measured besides goodput.
	finish(ctx context.Context) (Result, error)
}

// startCoFlow starts a bulk flow of system from A to B through te.
func startCoFlow(ctx context.Context, te *tunemu.Emulator, system string, l Link, o Options) (coFlow, error) {
	switch system {
	case MRGW:
		f, err := startTunnelFlow(ctx, tunNet{te}, false, l, o)
		if err != nil {
			return nil, err
		}
		return mrgwCoFlow{f}, nil
	case TCPCubic, TCPBBR:
		return startTCPFlow(ctx, te, system[len("tcp-"):])
	}
	return nil, fmt.Errorf("peers: %q cannot run in a coexistence pair", system)
}

type mrgwCoFlow struct{ *tunnelFlow }

func (mrgwCoFlow) start()         {}
func (mrgwCoFlow) status() string { return "" } // traceTunnel prints the sender's state

func (f mrgwCoFlow) finish(ctx context.Context) (Result, error) {
	r := f.result(ctx)
	r.Emulator = EmuTUN
	f.close()
	return r, nil
}

// tcpFlow is one kernel TCP connection from A to B sending as fast as its
// congestion control lets it.
type tcpFlow struct {
	algo  string
	p     *tcpPair
	got   atomic.Uint64
	stop  chan struct{}
	wg    sync.WaitGroup
	info0 unix.TCPInfo // at the start of the measurement
}

func startTCPFlow(ctx context.Context, te *tunemu.Emulator, algo string) (*tcpFlow, error) {
	f := &tcpFlow{algo: algo, stop: make(chan struct{})}
	var err error
	f.p, err = dialTCP(ctx, te, algo, 1, func(c net.Conn) {
		countReads(c, &f.got)
	})
	if err != nil {
		return nil, err
	}
	c := f.p.conns[0]
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		buf := make([]byte, 256<<10)
		for {
			select {
			case <-f.stop:
				return
			default:
			}
			// The deadline only lets the loop see stop.
			c.SetWriteDeadline(time.Now().Add(200 * time.Millisecond))
			if _, err := c.Write(buf); err != nil && !isTimeout(err) {
				return
			}
		}
	}()
	return f, nil
}

func (f *tcpFlow) received() uint64 { return f.got.Load() }

func (f *tcpFlow) start() { f.info0 = tcpInfo(f.p.conns[0]) }

func (f *tcpFlow) status() string {
	i := tcpInfo(f.p.conns[0])
	return fmt.Sprintf("cwnd=%d srtt=%.0fms retx=%d notsent=%dk", i.Snd_cwnd, float64(i.Rtt)/1e3,
		i.Total_retrans-f.info0.Total_retrans, i.Notsent_bytes>>10)
}

// finish reads the socket's congestion control and retransmissions, and
// notes what else limited it over the measurement (TCP_INFO): its
// retransmissions and how many of them the receiver reported as
// duplicates (DSACK: spurious, the original was not lost), the packets
// the receiver echoed as CE-marked (ECE acks: the emulator's marks reached
// this flow), and the parts of the sender's busy time it was limited by
// the receive window or the send buffer (rather than by its congestion
// window), then closes.
func (f *tcpFlow) finish(context.Context) (Result, error) {
	c := f.p.conns[0]
	name, retx := tcpcc.Info(c)
	i := tcpInfo(c)
	close(f.stop)
	f.p.close()
	f.wg.Wait()
	busy := float64(i.Busy_time - f.info0.Busy_time)
	frac := func(a, b uint64) float64 {
		if busy <= 0 {
			return 0
		}
		return float64(a-b) / busy
	}
	r := Result{CC: name, Retransmits: uint64(retx), Emulator: EmuTUN,
		Note: fmt.Sprintf("measured: retx=%d dsack=%d ce-acked=%d rwnd-limited=%.2f sndbuf-limited=%.2f; end: cwnd=%d srtt=%.0fms",
			i.Total_retrans-f.info0.Total_retrans, i.Dsack_dups-f.info0.Dsack_dups, i.Delivered_ce-f.info0.Delivered_ce,
			frac(i.Rwnd_limited, f.info0.Rwnd_limited),
			frac(i.Sndbuf_limited, f.info0.Sndbuf_limited), i.Snd_cwnd, float64(i.Rtt)/1e3)}
	if name != f.algo {
		return r, fmt.Errorf("peers: asked for TCP congestion control %s, socket uses %q", f.algo, name)
	}
	return r, nil
}

// tcpInfo reads a connection's TCP_INFO (zero if it cannot).
func tcpInfo(c net.Conn) unix.TCPInfo {
	var info unix.TCPInfo
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return info
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return info
	}
	_ = rc.Control(func(fd uintptr) {
		if i, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO); err == nil {
			info = *i
		}
	})
	return info
}

// coexistRun runs one pair on a fresh emulator and returns its two rows
// (RelBaseline not yet set).
func coexistRun(ctx context.Context, p Pair, l Link, o Options) (rows [2]report.Row, err error) {
	te, err := tunemu.New(ctx, l.tunConfig())
	if err != nil {
		return rows, err
	}
	defer te.Close()
	systems := [2]string{p.Flow, p.Against}
	var flows [2]coFlow
	defer func() {
		for _, f := range flows {
			if f != nil {
				_, _ = f.finish(ctx)
			}
		}
	}()
	var trace io.Writer
	if o.Trace != nil {
		trace = &lockedWriter{w: o.Trace}
		fmt.Fprintf(trace, "coexistence %s rtt=%v capacity=%.0fMb/s queue=%dB ecn=%dB\n", p, l.RTT, l.Capacity()/1e6, l.QueueBytes, l.ECNThreshold)
	}
	for i, s := range systems {
		oo := o
		oo.Trace = nil
		if flows[i], err = startCoFlow(ctx, te, s, l, oo); err != nil {
			return rows, fmt.Errorf("%s: %w", s, err)
		}
		if tf, ok := flows[i].(mrgwCoFlow); ok && trace != nil {
			stop := traceTunnel(ctx, trace, tf.tunnelFlow, l)
			defer stop()
		}
	}
	for _, f := range flows {
		if tf, ok := f.(mrgwCoFlow); ok {
			setPathProbe(ctx, tf.pathProbe())
		}
	}
	stopSampling := sample(ctx, []func() uint64{flows[0].received, flows[1].received}, o.Warmup, o.Warmup+o.Duration)
	defer stopSampling()
	if err := sleep.Ctx(ctx, o.Warmup); err != nil {
		return rows, err
	}
	// Both counters are read at the same instants, once a second for the
	// trace and at both ends of the measurement.
	flows[0].start()
	flows[1].start()
	t0 := time.Now()
	b0 := [2]uint64{flows[0].received(), flows[1].received()}
	st0 := te.Stats()
	s0 := st0.Total(netem.AtoB)
	dev0 := deviceDrops(te)
	prev, prevT := b0, t0
	for end := t0.Add(o.Duration); ; {
		step := min(time.Second, time.Until(end))
		if step <= 0 {
			break
		}
		if err := sleep.Ctx(ctx, step); err != nil {
			return rows, err
		}
		if trace != nil {
			cur := [2]uint64{flows[0].received(), flows[1].received()}
			now := time.Now()
			dt := now.Sub(prevT).Seconds()
			st := te.Stats().Total(netem.AtoB)
			fmt.Fprintf(trace, "  t=%4.1fs %s=%6.1fMb/s %s %s=%6.1fMb/s %s | link ce=%d qdrop=%d maxq=%.2fbdp\n",
				now.Sub(t0).Seconds(), systems[0], float64(units.Throughput(float64(cur[0]-prev[0]), dt))/1e6, flows[0].status(),
				systems[1], float64(units.Throughput(float64(cur[1]-prev[1]), dt))/1e6, flows[1].status(),
				st.CEMarks, st.QueueDrops, float64(st.MaxQueueBytes)/l.BDP())
			if d := deviceDrops(te); d[0] >= 0 {
				fmt.Fprintf(trace, "           tun-drops a->b=%d b->a=%d\n", d[0], d[1])
			}
			prev, prevT = cur, now
		}
	}
	t1 := time.Now()
	b1 := [2]uint64{flows[0].received(), flows[1].received()}
	stopSampling()
	st1 := te.Stats()
	s1 := st1.Total(netem.AtoB)
	dev1 := deviceDrops(te)
	secs := t1.Sub(t0).Seconds()
	var bps [2]float64
	for i := range bps {
		bps[i] = float64(units.Throughput(float64(b1[i]-b0[i]), secs))
	}
	total := bps[0] + bps[1]
	var results [2]Result
	for i, f := range flows {
		flows[i] = nil
		r, ferr := f.finish(ctx)
		results[i] = r
		if ferr != nil && err == nil {
			err = fmt.Errorf("%s: %w", systems[i], ferr)
		}
	}
	if err != nil {
		return rows, err
	}
	// The emulator's own faults (its buffer cap, TUN writes that failed)
	// would be losses the link model did not decide: they are noted.
	link := fmt.Sprintf("link ce=%d qdrop=%d", s1.CEMarks-s0.CEMarks, s1.QueueDrops-s0.QueueDrops)
	if d := st1.Overflow + st1.WriteErrors - st0.Overflow - st0.WriteErrors; d > 0 {
		link += fmt.Sprintf(" emulator-faults=%d", d)
	}
	// Packets a TUN device dropped before the emulator read them (its
	// reader fell behind on the loaded machine): losses the link model
	// did not decide, which the flows see all the same.
	if dev0[0] >= 0 && dev1[0] >= 0 {
		link += fmt.Sprintf(" tun-drops a->b=%d b->a=%d", dev1[0]-dev0[0], dev1[1]-dev0[1])
	}
	jain := total * total / (2 * (bps[0]*bps[0] + bps[1]*bps[1]))
	for i := range rows {
		r := results[i]
		r.GoodputBps = bps[i]
		rw := row(ScenarioCoexist, Peer{System: systems[i]}, l, r)
		if systems[i] == MRGW {
			rw.Paths = o.Paths
		} else {
			rw.Streams = 1
		}
		rw.Variant = p.String()
		rw.Competitor = systems[1-i]
		rw.Share = bps[i] / total
		rw.Utilization = total / l.Capacity()
		rw.Jain = jain
		rw.MaxQueueBytes = int(s1.MaxQueueBytes)
		rw.QueueDrops = s1.QueueDrops - s0.QueueDrops
		starved := rw.Share < StarvedShare
		rw.Starved = &starved
		rw.Note = report.JoinNote(rw.Note, link)
		rows[i] = rw
	}
	for i := range bps {
		if bps[i] == 0 || math.IsNaN(rows[i].Share) {
			return rows, fmt.Errorf("%s moved nothing during the measurement", systems[i])
		}
	}
	return rows, nil
}

// deviceDrops returns the TX drops of site A's and site B's TUN devices,
// -1 if they cannot be read.
func deviceDrops(te *tunemu.Emulator) [2]int64 {
	var d [2]int64
	for i, s := range []tunemu.Site{tunemu.SiteA, tunemu.SiteB} {
		ds, err := te.DeviceStats(s)
		if err != nil {
			return [2]int64{-1, -1}
		}
		d[i] = int64(ds.TxDropped)
	}
	return d
}

// lockedWriter serialises the trace lines of the pair's two samplers.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (w *lockedWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(b)
}
