//go:build linux

package gwload

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/mrgw/mrgw/host"
	"github.com/mrgw/mrgw/loadtest/lab"
	"github.com/mrgw/mrgw/metaroce"
	"github.com/mrgw/mrgw/pathmgr"
)

type flowRef struct {
	f      *host.Flow
	idx    int
	region int // index of its source region in env.srcRegions
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
			DeadAfter: time.Second, Logger: e.o.Logger, MaxFlowMessages: 1024, Protocol: labHostProtocol(),
			// The load measures goodput and shares, not how long a
			// REGISTER or OPEN takes: a host default of 5 s failed the
			// run under the race detector at a load average of 16.
			OpenTimeout: hostOpenTimeout})
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
		ReceiveCapacity: labHostReceiveBps,
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
			// The gateways were ready: what fails an OPEN now is a machine
			// too busy to run the lab (lab.OpenFlow says which failures
			// and why); ctx bounds the start (Options.OpenTimeout).
			f, err := lab.OpenFlow(ctx, j.from, j.region, j.dstName, host.FlowOptions{Class: w.Class}, e.warnf)
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
// waits for what is in flight until nothing was delivered for Drain.
func (e *env) bulk(ctx context.Context, deadline time.Time) {
	w := e.sc.Workload
	data := payload(e.sc.msgSize)
	slots := e.area / uint64(e.sc.msgSize)
	dctx, dcancel := drainContext(ctx, deadline, e.o.Drain, e.tr.total.Load)
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
		sctx, scancel := drainContext(ctx, deadline, e.o.Drain, e.tr.total.Load)
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

// hostOpenTimeout bounds the hosts' REGISTER and OPEN (host.Config.OpenTimeout).
const hostOpenTimeout = 20 * time.Second

// drainContext returns a context that ends once deadline has passed and
// progress (bytes delivered) has not moved for idle: the wait for messages
// in flight is a wait on progress, so a machine too busy to finish them
// within a fixed budget (under the race detector at a load average of 16,
// 13 of 48 messages were cut off by a 15 s one) slows the run down
// instead of failing it, and a run whose traffic stopped ends idle later.
func drainContext(ctx context.Context, deadline time.Time, idle time.Duration, progress func() uint64) (context.Context, context.CancelFunc) {
	dctx, cancel := context.WithCancel(ctx)
	go func() {
		t := time.NewTimer(time.Until(deadline))
		defer t.Stop()
		select {
		case <-t.C:
		case <-dctx.Done():
			return
		}
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		last, since := progress(), time.Now()
		for {
			select {
			case <-dctx.Done():
				return
			case <-tick.C:
			}
			if p := progress(); p != last {
				last, since = p, time.Now()
			} else if time.Since(since) >= idle {
				cancel()
				return
			}
		}
	}()
	return dctx, cancel
}

// warnf logs a failed OPEN attempt at warn (lab.OpenFlow), when the run
// has a logger.
func (e *env) warnf(format string, args ...any) {
	if e.o.Logger != nil {
		e.o.Logger.Warn(fmt.Sprintf(format, args...))
	}
}
