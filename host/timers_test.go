package host

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestFlowTimersOrderAndReschedule: due returns exactly the flows whose
// latest schedule is due, in time order; re-scheduled and cancelled
// timers never fire from their old entries; the heap stays bounded by the
// live timers however often they are re-scheduled.
func TestFlowTimersOrderAndReschedule(t *testing.T) {
	var tm flowTimers
	rng := rand.New(rand.NewPCG(1, 2))
	const n = 500
	flows := make([]*Flow, n)
	want := make(map[*Flow]time.Duration) // the latest schedule of each armed flow
	for i := range flows {
		flows[i] = &Flow{id: uint64(i)}
	}
	// Many re-schedules and cancels.
	for range 20000 {
		f := flows[rng.IntN(n)]
		if rng.IntN(5) == 0 {
			tm.cancel(f)
			delete(want, f)
			continue
		}
		at := time.Duration(rng.IntN(1000)) * time.Millisecond
		tm.schedule(f, at)
		want[f] = at
	}
	if tm.live != len(want) {
		t.Fatalf("live %d, want %d", tm.live, len(want))
	}
	if tm.len() > 2*tm.live+64 {
		t.Fatalf("%d entries held for %d live timers", tm.len(), tm.live)
	}
	var fired []*Flow
	for now := time.Duration(0); now <= time.Second; now += 10 * time.Millisecond {
		got := tm.due(now, nil)
		for i, f := range got {
			at, ok := want[f]
			if !ok {
				t.Fatalf("flow %d fired, but its timer was cancelled", f.id)
			}
			if at > now {
				t.Fatalf("flow %d fired at %v, scheduled for %v", f.id, now, at)
			}
			if i > 0 && want[got[i-1]] > at {
				t.Fatalf("out of order: %v before %v", want[got[i-1]], at)
			}
		}
		fired = append(fired, got...)
	}
	if len(fired) != len(want) {
		t.Fatalf("%d timers fired, %d were armed", len(fired), len(want))
	}
	slices.SortFunc(fired, func(a, b *Flow) int { return int(a.id) - int(b.id) })
	if len(slices.Compact(fired)) != len(want) {
		t.Fatal("a timer fired twice")
	}
	if tm.live != 0 || len(tm.due(time.Hour, nil)) != 0 {
		t.Fatalf("after every timer fired: %d live, or more due", tm.live)
	}
	// Scheduling the same time twice keeps one entry.
	tm.schedule(flows[0], time.Second)
	tm.schedule(flows[0], time.Second)
	if tm.live != 1 {
		t.Fatalf("live %d after the same schedule twice", tm.live)
	}
}

// TestIdleFlowsHoldNoTimer: open flows with nothing due cost the
// housekeeping tick nothing: no timer entry, not in the blocked set.
// A flow whose gateway dies waits with a timer, and fails at FailAfter
// driven by that timer alone.
func TestIdleFlowsHoldNoTimer(t *testing.T) {
	ctx := testCtx(t)
	w := newWorld(t, 1, 1<<20)
	const flows = 50
	fs := make([]*Flow, flows)
	for i := range fs {
		var err error
		if fs[i], err = w.src.OpenFlow(ctx, "us", "dst", FlowOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var live, blocked, held int
	if err := w.src.call(ctx, func(time.Duration) {
		live, blocked, held = w.src.o.timers.live, len(w.src.o.blocked), w.src.o.timers.len()
	}); err != nil {
		t.Fatal(err)
	}
	if live != 0 || blocked != 0 {
		t.Fatalf("%d open idle flows: %d timers live (%d entries), %d blocked; want 0 and 0", flows, live, held, blocked)
	}
	if held > 2*flows+64 {
		t.Fatalf("%d stale timer entries kept", held)
	}
	// The only gateway dies: every flow waits for a route, each with one
	// timer, and fails after FailAfter (10 s in hostConfig) with no route.
	w.gws[0].kill()
	p, err := fs[0].Write(ctx, 1, 0, make([]byte, 1000))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Wait(ctx); err == nil {
		t.Fatal("a message completed with no gateway")
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if err := w.src.call(ctx, func(time.Duration) { live = w.src.o.timers.live }); err != nil {
			t.Fatal(err)
		}
		if live == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if live != 0 {
		t.Fatalf("%d timers still live after every flow failed", live)
	}
}

// benchHost is a host without sockets holding n idle open outgoing flows
// and n incoming flows: enough for its housekeeping tick.
func benchHost(n int) *Host {
	h := &Host{cfg: Config{}.withDefaults()}
	h.o.flows = map[uint64]*Flow{}
	h.o.blocked = map[*Flow]struct{}{}
	h.o.rx.init()
	for i := range n {
		id := uint64(i + 1)
		h.o.flows[id] = &Flow{h: h, id: id, state: flowOpen, lostAt: -1}
		h.o.rx.flows[id] = &rxFlow{id: id, streams: 1}
	}
	return h
}

// BenchmarkTickIdleFlows is the housekeeping tick (every 10 ms) of a host
// with n idle open flows, out and in: with the timer queue its cost does
// not grow with n, except the once-a-second idle sweep of incoming flows
// (1 tick in 100 here). walk-before is the per-tick walk it replaced
// (retryWaiting and every flow's tick), for the ratio in the same run.
func BenchmarkTickIdleFlows(b *testing.B) {
	for _, n := range []int{10, 2500, 10000} {
		b.Run(fmt.Sprintf("flows=%d", n), func(b *testing.B) {
			h := benchHost(n)
			now := time.Duration(0)
			for b.Loop() {
				now += tickEvery
				h.tick(now)
			}
		})
		b.Run(fmt.Sprintf("walk-before/flows=%d", n), func(b *testing.B) {
			h := benchHost(n)
			now := time.Duration(0)
			for b.Loop() {
				now += tickEvery
				for _, f := range h.o.flows { // retryWaiting
					if f.state == flowWaiting && now >= f.retryAt {
						f.tryOpen(now)
					}
				}
				for _, f := range h.o.flows { // (*Flow).tick
					switch f.state {
					case flowOpening:
						if f.opened && now >= f.openDeadline {
							f.reroute(now, ErrOpenTimeout, f.gw)
						}
					case flowWaiting:
						if f.lostAt >= 0 && now-f.lostAt >= f.h.cfg.FailAfter {
							f.finish(now, f.noRoute(), flowFailed, false)
						}
					case flowOpen:
						// pump of an idle flow: nothing to submit (its
						// conn's MTU lookup left out: this reference
						// is, if anything, cheaper than the old walk).
						if f.submitNext < f.nextSeq {
							f.pump(now)
						}
					}
				}
				for id, rf := range h.o.rx.flows { // rxTick's sweep, every tick
					if rf.streams == 0 && now-rf.idleSince > rxFlowIdle && len(rf.queued) == 0 {
						delete(h.o.rx.flows, id)
					}
				}
			}
		})
	}
}
