//go:build linux

package gwload

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/mrgw/mrgw/internal/report"
	"github.com/mrgw/mrgw/netem"

	"github.com/mrgw/mrgw/units"
)

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
		ser.Goodput = append(ser.Goodput, float64(units.Throughput(float64(tot-last), e.o.Bin.Seconds())))
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

// row builds the report row once traffic has ended.
func (e *env) row(ser *Series, steps []time.Duration, stepRates []float64) report.Row {
	sc := e.sc
	w := sc.Workload
	rtt := 2 * sc.base.Delay
	capA := e.capacity(0)
	r := report.Row{
		Scenario: sc.Name, System: "mrgw", Variant: variant(sc), Planes: sc.Planes, Paths: 16,
		RTTms: units.Ms(rtt), Loss: sc.base.Loss, Flows: len(e.flows), CapacityBps: capA,
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
	// The WAN peers' retransmissions, with the DATA packets sent beside
	// them and split by cause, so that a row tells queue drops and loss
	// (gap) from timeouts and copies the peer did not need (spurious).
	// Beside them, per hop: the gateways' retransmissions to their hosts
	// (the destination's LAN hop) and what the emulator dropped in each
	// direction, from its queues and at random, so that the WAN's
	// retransmissions can be set against the packets the WAN lost.
	var data, gap, timeout, spurious, lanRetx uint64
	for _, g := range e.l.Gateways {
		st := g.Status()
		for _, p := range st.Peers {
			r.Retransmits += p.Retrans
			data += p.DataSent
			gap, timeout, spurious = gap+p.RetransGap, timeout+p.RetransTimeout, spurious+p.RetransSpurious
		}
		for _, hl := range st.HostLinks {
			lanRetx += hl.Retrans
		}
	}
	if data > 0 {
		r.Note = report.JoinNote(r.Note, fmt.Sprintf("wan retransmits %.2f%% of %d data packets: gap %d, timeout %d, spurious %d",
			100*float64(r.Retransmits)/float64(data), data, gap, timeout, spurious))
	}
	emu := e.l.Emu.Stats()
	ab, ba := emu.Total(netem.Dir(0)), emu.Total(netem.Dir(1))
	r.Note = report.JoinNote(r.Note, fmt.Sprintf("emulator drops a-b queue %d random %d, b-a queue %d random %d; lan retransmits gateways to hosts %d",
		ab.QueueDrops, ab.LossDrops, ba.QueueDrops, ba.LossDrops, lanRetx))
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
			r.MaxStepMs = math.Max(r.MaxStepMs, units.Ms(s))
		}
		r.Steps = len(steps)
		if len(steps) > 0 {
			r.StepMs = units.Ms(total) / float64(len(steps))
			bytesPerStep := float64(len(e.flows)) * float64(e.sc.msgSize)
			r.GoodputBps = float64(units.Throughput(bytesPerStep*float64(len(steps)), total.Seconds()))
			if r.CapacityBps > 0 {
				r.IdealStepMs = bytesPerStep / float64(units.BitRate(r.CapacityBps).Bytes()) * 1000
				r.StepRatio = r.StepMs / r.IdealStepMs
			}
		}
		if len(stepRates) > 0 {
			r.Jain = report.Jain(stepRates)
		}
		if len(steps) < w.Steps {
			errs = append(errs, fmt.Sprintf("%d of %d steps completed", len(steps), w.Steps))
		}
		r.Note = report.JoinNote(stepList(steps), r.Note)
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
		fmt.Fprintf(&b, " %.0f", units.Ms(s))
	}
	return b.String()
}
