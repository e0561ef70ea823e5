//go:build linux

package fleet

import (
	"context"
	"fmt"
	"time"

	"github.com/mrgw/mrgw/units"

	"github.com/mrgw/mrgw/internal/sleep"
)

// The steps of a run, in order; each appends its rows or says where it
// stopped.

// runForm starts the fleet and waits until every gateway sees every other.
func (f *fleet) runForm(ctx context.Context, rep *Report) *stop {
	o := f.o
	w := f.window()
	f.begin, f.cpu0 = w.at, w.cpu
	if err := f.form(ctx); err != nil {
		return &stop{err: err, w: w, events: []string{"form"}}
	}
	form := f.row("form", w, nil)
	rep.Rows = append(rep.Rows, form)
	f.logf("every gateway sees %d alive after %.1f s; the process used %.2f cores meanwhile (load average %.1f, scheduling lag p99 %.0f ms)",
		o.Gateways, form.WindowS, form.CPUPerGateway*float64(o.Gateways), form.LoadAvg, form.SchedLagP99ms)
	for _, n := range f.live() {
		n.initSets()
	}
	return nil
}

// runSteady lets the joins' gossip settle, then measures steady state.
func (f *fleet) runSteady(ctx context.Context, rep *Report) *stop {
	o := f.o
	w := f.window()
	if err := sleep.Ctx(ctx, 3*time.Second); err != nil {
		return &stop{err: err, w: w, events: []string{"steady"}}
	}
	w = f.window()
	if err := sleep.Ctx(ctx, o.Steady); err != nil {
		return &stop{err: err, w: w, events: []string{"steady"}}
	}
	steady := f.row("steady", w, nil)
	rep.Rows = append(rep.Rows, steady)
	f.logf("steady: %.0f B/s sent per gateway, %.4f cores per gateway (%.2f in all), scheduling lag p99 %.0f ms", steady.BytesSentPerS, steady.CPUPerGateway, steady.CPUPerGateway*float64(o.Gateways), steady.SchedLagP99ms)
	return nil
}

// runPlaneFailures fails planes one at a time. An event the stop cut short
// is left out of the row: it was not measured to its end.
func (f *fleet) runPlaneFailures(ctx context.Context, rep *Report) *stop {
	o := f.o
	w := f.window()
	var evs []*episode
	for i := range o.Failures {
		if err := ctx.Err(); err != nil {
			return &stop{err: err, w: w, evs: evs, events: []string{"plane_verdict"}}
		}
		lv := f.live()
		b := lv[f.rng.IntN(len(lv))]
		p := f.rng.IntN(o.Planes)
		ep := f.tr.open("plane", b.name, planeName(p), f.users(b), time.Now())
		f.knownDown(ep, b, p, f.userNodes(b))
		b.failPlane(p)
		f.tr.wait(ctx, ep, o.EventTimeout)
		if err := ctx.Err(); err != nil {
			return &stop{err: err, w: w, evs: evs, events: []string{"plane_verdict"}}
		}
		f.debugMissed(ep)
		evs = append(evs, ep)
		// Back up, and let the up reach everyone before the next, unless
		// flap damping holds it back (then the users keep the down, and
		// a later failure of that plane is known at t0: knownDown).
		up := f.tr.open("planeup", b.name, planeName(p), f.users(b), time.Now())
		b.restorePlane(p)
		if b.c.HealthTables().Held > 0 {
			f.tr.close(up)
		}
		f.tr.wait(ctx, up, o.EventTimeout)
		if (i+1)%5 == 0 {
			f.logf("plane failures: %d of %d", i+1, o.Failures)
		}
	}
	rep.Rows = append(rep.Rows, f.row("plane_verdict", w, evs))
	return nil
}

// runDeaths kills gateways without a goodbye.
func (f *fleet) runDeaths(ctx context.Context, rep *Report) *stop {
	w := f.window()
	var evs []*episode
	for range f.o.Deaths {
		lv := f.live()
		if len(lv) <= 2 {
			break
		}
		x := lv[f.rng.IntN(len(lv))]
		var others []string
		for _, n := range lv {
			if n != x {
				others = append(others, n.name)
			}
		}
		ep := f.tr.open("dead", x.name, "", others, time.Now())
		x.kill()
		f.tr.wait(ctx, ep, f.membershipWait())
		if err := ctx.Err(); err != nil {
			return &stop{err: err, w: w, evs: evs, events: []string{"gateway_dead"}}
		}
		evs = append(evs, ep)
		f.logf("gateway %s killed: routed around everywhere in %.0f ms (missed by %d)", x.name, units.Ms(ep.span()), ep.missed())
	}
	rep.Rows = append(rep.Rows, f.row("gateway_dead", w, evs))
	return nil
}

// runJoins adds new regions, one gateway each.
func (f *fleet) runJoins(ctx context.Context, rep *Report) *stop {
	w := f.window()
	var evs []*episode
	for j := range f.o.Joins {
		lv := f.live()
		var others []string
		for _, n := range lv {
			others = append(others, n.name)
		}
		r := fmt.Sprintf("new%02d", j)
		name := "g-" + r
		ep := f.tr.open("join", name, "", others, time.Now())
		n, err := f.start(name, r)
		if err != nil {
			return &stop{fatal: err}
		}
		if err := f.join(ctx, n); err != nil {
			return &stop{err: err, w: w, evs: evs, events: []string{"region_join"}}
		}
		f.tr.wait(ctx, ep, f.membershipWait())
		if err := ctx.Err(); err != nil {
			return &stop{err: err, w: w, evs: evs, events: []string{"region_join"}}
		}
		evs = append(evs, ep)
		f.logf("region %s: routable everywhere in %.0f ms (missed by %d)", r, units.Ms(ep.span()), ep.missed())
	}
	rep.Rows = append(rep.Rows, f.row("region_join", w, evs))
	for _, n := range f.live() {
		n.initSets() // the new regions' gateways are peers too
	}
	return nil
}

// runStorm flaps a quarter of all planes.
func (f *fleet) runStorm(ctx context.Context, rep *Report) *stop {
	w := f.window()
	evs, err := f.storm(ctx)
	if err != nil {
		return &stop{err: err, w: w, evs: evs, events: []string{"storm_plane_verdict", "storm"}}
	}
	storm := f.row("storm", w, nil)
	sv := f.row("storm_plane_verdict", w, evs)
	rep.Rows = append(rep.Rows, sv, storm)
	f.logf("storm: %d verdicts, p99 %.0f ms, %.0f B/s sent per gateway", sv.Samples, sv.P99ms, storm.BytesSentPerS)
	return nil
}
