//go:build linux

package fleet

import (
	"context"
	"time"

	"github.com/mrgw/mrgw/internal/sleep"
	"github.com/mrgw/mrgw/pathmgr"
	"github.com/mrgw/mrgw/region"
)

// The storm: a quarter of all planes flapping.

// storm flaps a quarter of all (gateway, plane) pairs for o.Storm and
// returns the down episodes, each measured until every user has it.
func (f *fleet) storm(ctx context.Context) ([]*episode, error) {
	type flapper struct {
		n     *node
		plane int
		down  bool
		next  time.Time
		ep    *episode
	}
	lv := f.live()
	users := map[*node][]string{}
	userNodes := map[*node][]*node{}
	for _, n := range lv {
		users[n] = f.users(n)
		for _, m := range lv {
			if m.region != n.region {
				userNodes[n] = append(userNodes[n], m)
			}
		}
	}
	var all []flapper
	for _, n := range lv {
		for p := range f.o.Planes {
			all = append(all, flapper{n: n, plane: p})
		}
	}
	f.rng.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
	fl := all[:max(len(all)/4, 1)]
	start := time.Now()
	for i := range fl {
		fl[i].next = start.Add(time.Duration(f.rng.Int64N(int64(2 * f.o.Flap))))
	}
	f.logf("storm: %d of %d planes flap (down %s, up %s, ±25%%) for %s", len(fl), len(all), f.o.Flap, f.o.Flap, f.o.Storm)
	var evs []*episode
	jitter := func() time.Duration {
		return f.o.Flap*3/4 + time.Duration(f.rng.Int64N(int64(f.o.Flap/2)+1))
	}
	end := start.Add(f.o.Storm)
	// stopped: the episodes that ended (their plane came back up); those
	// still open were cut short.
	stopped := func(err error) ([]*episode, error) {
		for i := range fl {
			switch x := &fl[i]; {
			case x.ep == nil:
			case x.down:
				f.tr.close(x.ep)
			default:
				evs = append(evs, x.ep)
			}
		}
		return evs, err
	}
	for time.Now().Before(end) {
		if err := ctx.Err(); err != nil {
			return stopped(err)
		}
		now := time.Now()
		for i := range fl {
			x := &fl[i]
			if now.Before(x.next) {
				continue
			}
			if !x.down {
				if x.ep != nil {
					evs = append(evs, x.ep)
				}
				x.ep = f.tr.open("plane", x.n.name, planeName(x.plane), users[x.n], now)
				f.knownDown(x.ep, x.n, x.plane, userNodes[x.n])
				x.n.failPlane(x.plane)
			} else {
				f.debugMissed(x.ep)
				f.tr.close(x.ep) // an episode ends with its plane's up
				x.n.restorePlane(x.plane)
			}
			x.down = !x.down
			x.next = now.Add(jitter())
		}
		if err := sleep.Ctx(ctx, 20*time.Millisecond); err != nil {
			return stopped(err)
		}
	}
	// The planes still down: their verdicts get EventTimeout to arrive,
	// then they come back.
	for i := range fl {
		x := &fl[i]
		if x.down {
			f.tr.wait(ctx, x.ep, max(f.o.EventTimeout-time.Since(end), 0))
			if err := ctx.Err(); err != nil {
				return stopped(err)
			}
			f.debugMissed(x.ep)
			x.n.restorePlane(x.plane)
			x.down = false
		}
		if x.ep != nil {
			evs = append(evs, x.ep)
			x.ep = nil
		}
	}
	return evs, sleep.Ctx(ctx, 2*time.Second)
}

// userNodes are the live gateways whose paths cross b's planes.
func (f *fleet) userNodes(b *node) []*node {
	var u []*node
	for _, n := range f.live() {
		if n.region != b.region {
			u = append(u, n)
		}
	}
	return u
}

// knownDown: the users that already hold a down verdict on b's plane when
// it goes down again get it at t0. With flap damping b held back the up
// of its last flap, so they never saw the plane come back: nothing needs
// to reach them (and nothing is sent). Without damping no user holds a
// down then (the up went out and reached them before this flap: the
// episode before ended with it).
func (f *fleet) knownDown(ep *episode, b *node, plane int, users []*node) {
	p := planeName(plane)
	all := true
	damped := 0
	for _, u := range users {
		h, ok := u.c.Health(b.name, p) // b's plane, whoever said it
		if !ok || !(h.State == pathmgr.Down || h.State == pathmgr.Probing) {
			h, ok = u.c.Health(u.name, p) // b's verdict on its paths to u
			ok = ok && h.From == b.name
		}
		if !ok || !(h.State == pathmgr.Down || h.State == pathmgr.Probing) {
			// b's own verdict on its paths to u over the plane already
			// says down on the wire: b marked them down when u's side of
			// the plane flapped before, and damping at u held u's up back
			// (or it came while b's plane was down), so b never saw u
			// come back. b's failure then changes nothing b says about
			// u: no message is due to u (by design, docs/GATEWAY.md,
			// "Flap damping"), u's relay holds b's standing down (its
			// renewals) among its reports, and u's own probes would see
			// the far end die, which this harness does not model. The
			// table's one slot per (gateway, plane) may show another
			// reporter's verdict there, so the check above can miss it.
			// Waiting for gossip here measured whatever message came
			// next (a renewal, up to TTL/3 = 10 s later, or a released
			// hold: 2.9 s, 6.5 s, 6.9 s at 8 gateways) or nothing at all
			// (missed), not the verdict's spread.
			if w, own := b.c.OwnWire(u.name, p); own && (w == pathmgr.Down || w == pathmgr.Probing) {
				h, ok = region.HealthReport{State: w}, true
				damped++
			}
		}
		if ok && (h.State == pathmgr.Down || h.State == pathmgr.Probing) {
			f.tr.deliver("plane", b.name, p, u.name)
		} else {
			all = false
		}
	}
	ep.mu.Lock()
	ep.known, ep.damped = all, damped
	ep.mu.Unlock()
}
