//go:build linux

package chaos

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/mrgw/mrgw/units"

	"github.com/mrgw/mrgw/internal/sleep"
)

// upgrade replaces every gateway's binary, one gateway at a time, as
// docs/OPERATIONS.md ("Upgrading a fleet") has an operator do it: SIGTERM
// (the gateway drains: its flows move to the region's other gateway), the
// binary replaced, started, and ready (gossip joined, both WAN peers up and
// seen alive) before the next is touched. Traffic runs throughout; the
// checks after it find anything lost, duplicated or failed.
func (r *run) upgrade(ctx context.Context, in *Injection, fail func(string, ...any)) {
	bin := r.o.UpgradeBinary
	if bin == "" {
		bin = r.cl.bin
	}
	in.Target = "every gateway"
	var took []string
	for _, gw := range r.cl.gws {
		t0 := time.Now()
		if err := r.cl.stop(gw, 10*time.Second); err != nil {
			fail("%v", err)
		}
		gw.bin, gw.args = bin, nil
		if err := r.cl.start(gw); err != nil {
			fail("%v", err)
			return
		}
		deadline := time.Now().Add(r.o.RecoverBound)
		for !r.cl.ready(ctx, gw) {
			if time.Now().After(deadline) || sleep.Ctx(ctx, 100*time.Millisecond) != nil {
				fail("%s not ready %v after its upgrade", gw.name, r.o.RecoverBound)
				return
			}
		}
		// The wire version each WAN connection of the upgraded gateway
		// agreed: 1 with the gateways still on the old release (OldArgs),
		// 2 between upgraded ones.
		var wires []string
		if st, err := gw.status(ctx); err == nil {
			for _, p := range st.Peers {
				wires = append(wires, fmt.Sprintf("%s v%d", p.Name, p.Wire))
			}
		}
		took = append(took, fmt.Sprintf("%s %.1f s (%s)", gw.name, time.Since(t0).Seconds(), strings.Join(wires, ", ")))
		r.say("%s: %s upgraded (stopped, replaced, ready) in %.1f s", FaultUpgrade, gw.name, time.Since(t0).Seconds())
	}
	in.Note = "stop to ready: " + strings.Join(took, "; ")
}

// dur is a seeded random duration in [lo, hi].
func (r *run) dur(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(r.rng.Int64N(int64(hi-lo)+1))
}

// faultLoop injects faults one at a time until Duration has passed: a
// seeded random pause, a fault (the types in a seeded random order, each
// before any repeats), its clearing, then the recovery window and the
// checks.
func (r *run) faultLoop(ctx context.Context) []Injection {
	var out []Injection
	deadline := time.Now().Add(r.o.Duration)
	var order []string
	for ctx.Err() == nil {
		if len(order) == 0 {
			order = slices.Clone(r.o.Faults)
			r.rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		}
		pause := r.dur(time.Second, 3*time.Second)
		// A fault and its recovery take about 10 s; do not start one that
		// would end far past the deadline.
		if time.Until(deadline) < pause+8*time.Second && len(out) > 0 {
			break
		}
		if sleep.Ctx(ctx, pause) != nil {
			break
		}
		kind := order[0]
		order = order[1:]
		in := r.inject(ctx, kind)
		out = append(out, in)
		if time.Now().After(deadline) {
			break
		}
	}
	return out
}

// inject runs one fault: inject, hold, clear, wait for recovery, check.
func (r *run) inject(ctx context.Context, kind string) Injection {
	in := Injection{Fault: kind}
	fail := func(format string, a ...any) {
		e := fmt.Sprintf(format, a...)
		if in.Err != "" {
			in.Err += "; "
		}
		in.Err += e
	}
	gw := r.cl.gws[r.rng.IntN(len(r.cl.gws))]
	in.t0 = time.Now()
	switch kind {
	case FaultPlaneLoss:
		p := r.rng.IntN(r.o.Planes)
		in.Target = fmt.Sprintf("plane %d", p)
		if err := r.cl.emu.Fail(p); err != nil {
			fail("fail: %v", err)
		}
		r.say("%s: %s failed", kind, in.Target)
		sleep.Ctx(ctx, r.dur(2*time.Second, 5*time.Second))
		if err := r.cl.emu.Restore(p); err != nil {
			fail("restore: %v", err)
		}
	case FaultGatewayKill:
		in.Target, in.entering = gw.name, r.entering(gw.lan)
		if err := r.cl.kill9(gw); err != nil {
			fail("%v", err)
		}
		r.say("%s: %s killed with SIGKILL at %s", kind, gw.name, time.Now().Format("15:04:05.000"))
		sleep.Ctx(ctx, r.dur(time.Second, 3*time.Second))
		if err := r.cl.start(gw); err != nil {
			fail("%v", err)
		}
	case FaultPartition:
		r.partition(ctx, &in)
	case FaultKeyRotation:
		in.Target = gw.name
		before, _ := gw.metric(ctx, "mrgw_key_rotations_total", `result="ok"`)
		if err := r.reload(gw, variantRotate); err != nil {
			fail("%v", err)
		}
		r.say("%s: %s reloaded with wan.key_rotation 1s", kind, gw.name)
		sleep.Ctx(ctx, r.dur(3*time.Second, 5*time.Second))
		after, _ := gw.metric(ctx, "mrgw_key_rotations_total", `result="ok"`)
		if err := r.reload(gw, variantBase); err != nil {
			fail("%v", err)
		}
		in.Note = fmt.Sprintf("%.0f rotations on %s", after-before, gw.name)
		if after <= before {
			fail("no key rotation counted on %s", gw.name)
		}
	case FaultHUPGood:
		in.Target = gw.name
		before, _ := gw.metric(ctx, "mrgw_config_reloads_total", `result="ok"`)
		if err := r.reload(gw, variantGood); err != nil {
			fail("%v", err)
		}
		r.say("%s: %s reloaded with changed limits, class weights and wan.max_rate_bps", kind, gw.name)
		if !r.waitMetric(ctx, gw, "mrgw_config_reloads_total", `result="ok"`, before+1) {
			fail("the good reload was not counted as ok on %s", gw.name)
		}
		sleep.Ctx(ctx, r.dur(2*time.Second, 4*time.Second))
		if err := r.reload(gw, variantBase); err != nil {
			fail("%v", err)
		}
		if !r.waitMetric(ctx, gw, "mrgw_config_reloads_total", `result="ok"`, before+2) {
			fail("the reload back was not counted as ok on %s", gw.name)
		}
	case FaultHUPBad:
		r.hupBad(ctx, gw, &in, fail)
	case FaultHostKill:
		in.Target = "a-proc"
		inc := 0
		if _, _, ok := r.child.current(); ok {
			inc = r.child.incarnation
			if err := r.child.kill9(); err != nil {
				fail("%v", err)
			}
		}
		r.say("%s: host process a-proc killed with SIGKILL", kind)
		sleep.Ctx(ctx, r.dur(500*time.Millisecond, 2*time.Second))
		if err := r.child.start(inc + 1); err != nil {
			fail("%v", err)
		}
	case FaultUpgrade:
		r.upgrade(ctx, &in, fail)
	case FaultJunk:
		in.Target = "16 sockets"
		sent, err := r.junkFlood(r.o.JunkPerSocket)
		if err != nil {
			fail("%v", err)
		}
		r.junk += sent
		in.Note = fmt.Sprintf("%d datagrams", sent)
		r.say("%s: %d random datagrams sent to the LAN, WAN, control and gossip sockets of the 4 gateways", kind, sent)
	}
	in.tClear = time.Now()
	r.recover(ctx, &in)
	r.ck.checkLost(time.Now().Add(-3 * time.Second))
	r.measure(&in)
	nl := len(r.ck.lost())
	if kind == FaultHostKill {
		id, since, ok := r.child.current()
		if ok {
			if t := r.ck.firstAfter(id, since); !t.IsZero() {
				in.Note = fmt.Sprintf("restarted host process delivered %.0f ms after its start", float64(t.Sub(since).Microseconds())/1000)
			} else {
				fail("restarted host process delivered nothing")
			}
		}
	}
	r.say("%s %s: worst stall %.0f ms (%s); duplicated %d, corrupted %d, failed %d, flows not recovered %d, lost so far %d%s",
		kind, in.Target, in.StallMs, in.Worst, in.Dup, in.Corrupt, in.Failed, in.NotRecov, nl, errSuffix(in.Err))
	if r.o.LogLevel != "" {
		// Each flow's first delivery after the injection, in the logs'
		// wall-clock time, to read its stall out of them.
		for _, id := range r.liveWriters(in.t0) {
			if t := r.ck.firstAfter(id, in.t0); !t.IsZero() {
				r.say("  %s: first delivery at %s (%.0f ms after the injection)", r.writerName(id), t.Format("15:04:05.000"), units.Ms(t.Sub(in.t0)))
			}
		}
	}
	return in
}

// partition cuts gossip between the regions. A gateway of each region
// watches the other region's gateways through the cut, which lasts until
// gossip declares one of them dead (what the fault is for; at most 30 s on
// a slow machine) and at least the drawn hold.
func (r *run) partition(ctx context.Context, in *Injection) {
	kind := in.Fault
	in.Target = RegionA + " | " + RegionB
	watch := map[string]*gwProc{}
	for _, p := range r.cl.gws {
		if watch[p.region] == nil {
			watch[p.region] = p
		}
	}
	alive := func(p *gwProc) float64 {
		other := RegionB
		if p.region == RegionB {
			other = RegionA
		}
		v, err := p.metric(ctx, "mrgw_peers_alive", `peer_region="`+other+`"`)
		if err != nil {
			return -1
		}
		return v
	}
	before, least := map[string]float64{}, map[string]float64{}
	for reg, p := range watch {
		before[reg] = alive(p)
		least[reg] = before[reg]
	}
	r.cl.partition(true)
	r.say("%s: gossip between %s cut", kind, in.Target)
	hold, longest := time.Now().Add(r.dur(3*time.Second, 6*time.Second)), time.Now().Add(30*time.Second)
	for {
		for reg, p := range watch {
			if v := alive(p); v >= 0 && v < least[reg] {
				least[reg] = v
			}
		}
		in.CutSeen = least[RegionA] < before[RegionA] || least[RegionB] < before[RegionB]
		if now := time.Now(); (in.CutSeen && now.After(hold)) || now.After(longest) {
			break
		}
		if sleep.Ctx(ctx, 200*time.Millisecond) != nil {
			break
		}
	}
	r.cl.partition(false)
	in.Note = fmt.Sprintf("other region's gateways alive during the cut, least seen: %s %g of %g, %s %g of %g",
		RegionA, least[RegionA], before[RegionA], RegionB, least[RegionB], before[RegionB])
}

func errSuffix(e string) string {
	if e == "" {
		return ""
	}
	return "; ERROR: " + e
}

// reload writes gw's file in a variant and sends SIGHUP.
func (r *run) reload(gw *gwProc, v cfgVariant) error {
	if err := r.cl.writeConfig(gw, v); err != nil {
		return err
	}
	return r.cl.signal(gw, syscall.SIGHUP)
}

// waitMetric waits up to 5 s for a counter to reach want.
func (r *run) waitMetric(ctx context.Context, gw *gwProc, name, label string, want float64) bool {
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if v, err := gw.metric(ctx, name, label); err == nil && v >= want {
			return true
		}
		if sleep.Ctx(ctx, 100*time.Millisecond) != nil {
			return false
		}
	}
	return false
}

// recover waits until every gateway is running and ready, every flow has
// delivered since the fault was cleared and Settle has passed, at most
// RecoverBound; in.tEnd is when.
func (r *run) recover(ctx context.Context, in *Injection) {
	bound := in.tClear.Add(r.o.RecoverBound)
	for _, p := range r.cl.gws {
		if !p.running() && p.unexpect.Load() > 0 {
			r.addErr("%s had exited by itself; restarting it. Log:\n%s", p.name, p.logTail(20))
			_ = r.cl.start(p)
		}
	}
	var waiting string // what the last check waited for
	for ctx.Err() == nil {
		now := time.Now()
		waiting = ""
		if now.Sub(in.tClear) < r.o.Settle {
			waiting = "settle"
		}
		// Every flow delivers again: a delivery after the fault was
		// cleared and in the last second.
		for _, id := range r.liveWriters(in.t0) {
			if waiting != "" {
				break
			}
			last := r.ck.lastDelivery(id)
			if !last.After(in.tClear) || now.Sub(last) > time.Second {
				waiting = "flow " + r.writerName(id)
			}
		}
		if id, since, ok := r.child.current(); ok && waiting == "" && in.Fault == FaultHostKill && r.ck.firstAfter(id, since).IsZero() {
			waiting = "the restarted host process's first delivery"
		}
		for _, p := range r.cl.gws {
			if waiting != "" {
				break
			}
			if !p.running() || !r.cl.ready(ctx, p) {
				waiting = p.name + " ready"
			}
		}
		if waiting == "" || now.After(bound) {
			break
		}
		sleep.Ctx(ctx, 100*time.Millisecond)
	}
	if d := time.Since(in.tClear); d > r.o.Settle+5*time.Second {
		w := fmt.Sprintf("recovery took %.1f s after clearing (last waited for: %s)", d.Seconds(), waiting)
		if waiting == "" {
			w = fmt.Sprintf("recovery took %.1f s after clearing", d.Seconds())
		}
		if in.Note != "" {
			in.Note += "; "
		}
		in.Note += w
	}
	in.tEnd = time.Now()
	if !in.tEnd.After(bound) {
		return
	}
	var names []string
	for _, p := range r.cl.gws {
		if !p.running() || !r.cl.ready(ctx, p) {
			names = append(names, p.name)
		}
	}
	if len(names) == 0 {
		return
	}
	in.Err = fmt.Sprintf("gateways not ready %v after the fault was cleared: %v; the harness restarts gateways so that the next fault starts from a healthy deployment", r.o.RecoverBound, names)
	// Repair, so that one fault's damage is not counted against the
	// next: restart the first gateway not ready (a restarted gateway joins
	// its seeds, which may be all the others need), wait, and again.
	var restarted []string
	for range len(r.cl.gws) {
		var p *gwProc
		for _, q := range r.cl.gws {
			if !q.running() || !r.cl.ready(ctx, q) {
				p = q
				break
			}
		}
		if p == nil {
			break
		}
		if p.running() {
			_ = r.cl.kill9(p)
		}
		if err := r.cl.start(p); err != nil {
			r.addErr("restart %s: %v", p.name, err)
		}
		restarted = append(restarted, p.name)
		if r.cl.waitReady(ctx, 10*time.Second) == nil {
			break
		}
	}
	if err := r.cl.waitReady(ctx, r.o.RecoverBound); err != nil {
		r.addErr("after restarting %v: %v", restarted, err)
	}
	r.say("restarted %v: the deployment was not ready %v after the fault was cleared", restarted, r.o.RecoverBound)
}

// hupBad sends a gateway SIGHUP with a bad file (not YAML, an invalid
// value, or a restart-only key changed) and checks that the reload is
// counted as invalid or refused and the gateway keeps running.
func (r *run) hupBad(ctx context.Context, gw *gwProc, in *Injection, fail func(string, ...any)) {
	kind := in.Fault
	v := []cfgVariant{variantBadParse, variantBadValue, variantBadLive}[r.rng.IntN(3)]
	what := map[cfgVariant]string{variantBadParse: "not YAML", variantBadValue: "wan.key_rotation: 5", variantBadLive: "restart-only wan.mtu changed"}[v]
	in.Target = gw.name + " (" + what + ")"
	inv, _ := gw.metric(ctx, "mrgw_config_reloads_total", `result="invalid"`)
	ref, _ := gw.metric(ctx, "mrgw_config_reloads_total", `result="refused"`)
	if err := r.reload(gw, v); err != nil {
		fail("%v", err)
	}
	r.say("%s: %s sent SIGHUP with a bad file: %s", kind, gw.name, what)
	deadline := time.Now().Add(5 * time.Second)
	for {
		i2, _ := gw.metric(ctx, "mrgw_config_reloads_total", `result="invalid"`)
		f2, _ := gw.metric(ctx, "mrgw_config_reloads_total", `result="refused"`)
		if i2+f2 > inv+ref {
			break
		}
		if time.Now().After(deadline) {
			fail("the bad reload was not counted as invalid or refused on %s", gw.name)
			break
		}
		sleep.Ctx(ctx, 100*time.Millisecond)
	}
	// The file goes back to the running configuration (not reloaded:
	// nothing changed), so that a later restart starts from it.
	if err := r.cl.writeConfig(gw, variantBase); err != nil {
		fail("%v", err)
	}
	sleep.Ctx(ctx, time.Second)
	if !gw.running() {
		fail("%s exited after a bad reload", gw.name)
	}
}
