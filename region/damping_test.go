package region

import (
	"math"
	"testing"
	"time"

	"github.com/mrgw/mrgw/pathmgr"
)

// ownDown publishes a down on peer's plane and returns what went on the
// wire for it, the attribution wait (attrDelay, which is not damping)
// included.
func ownDown(t *testing.T, c *core, now *time.Time, peer, plane string) []HealthReport {
	t.Helper()
	out := own(t, c, now, peer, plane, pathmgr.Down)
	*now = now.Add(c.own.attrDelay)
	return append(out, c.flushOwn()...)
}

// A verdict that flaps: every down goes out at once, the third up within
// about a half-life is held back (the wire keeps saying down, so the
// flaps that follow cost nothing), and the up goes out by itself once the
// penalty has decayed below Reuse, ~21 s after the last flap with the
// defaults. Before damping every transition went on the wire.
func TestFlapDampingHoldsUpsNeverDowns(t *testing.T) {
	c, now := fakeCore(t, Config{HealthTTL: 30 * time.Second})
	addMember(t, c, "b1", "r2")
	step := func(d time.Duration) { *now = now.Add(d) }
	var sent []string
	downsHeld := 0
	for i := range 6 { // down 3 s, up 3 s
		out := ownDown(t, c, now, "b1", "p0")
		if i < 3 {
			if wire(out) != "[b1/p0 down]" {
				t.Fatalf("flap %d: down sent as %q, want at once", i, wire(out))
			}
		} else {
			// Held: the wire already says down. A down may still go
			// out as the renewal every TTL/3 (10 s), no more often.
			downsHeld += len(out)
			for _, h := range out {
				if h.State != pathmgr.Down {
					t.Fatalf("flap %d: %q sent while the up was held", i, wire(out))
				}
			}
		}
		step(3 * time.Second)
		out = own(t, c, now, "b1", "p0", pathmgr.Up)
		sent = append(sent, wire(out))
		step(3 * time.Second)
	}
	if downsHeld > 2 {
		t.Errorf("%d downs sent in the 3 flaps (18 s) while held, want at most the renewals (2)", downsHeld)
	}
	want := []string{"[b1/p0 up]", "[b1/p0 up]", "", "", "", ""}
	for i := range want {
		if sent[i] != want[i] {
			t.Errorf("up %d: sent %q, want %q (all: %q)", i, sent[i], want[i], sent)
		}
	}
	if h, ok := c.latest("b1", "p0"); !ok || h.State != pathmgr.Down {
		t.Errorf("table holds %+v %v while the up is held, want down", h, ok)
	}
	d := &c.own.damp
	if d.held != 4 || d.absorbed != 3 {
		t.Errorf("held %d (want 4: ups 3 to 6), absorbed %d (want 3)", d.held, d.absorbed)
	}
	// The plane now stays up: the up goes out when the penalty decays
	// below Reuse, not before.
	e := d.entries[healthKey{"b1", "p0"}]
	d.decay(e, *now)
	wait := time.Duration(math.Log2(e.penalty/DefaultDampingReuse) * float64(DefaultDampingHalfLife))
	step(wait - 500*time.Millisecond)
	if out := c.flushOwn(); len(out) != 0 {
		t.Fatalf("released %q before the penalty decayed", wire(out))
	}
	step(time.Second)
	if out := c.flushOwn(); wire(out) != "[b1/p0 up]" {
		t.Fatalf("after decay: sent %q, want the held up", wire(out))
	}
	if d.released != 1 {
		t.Errorf("released %d, want 1", d.released)
	}
	// Decayed to nothing, the entry is forgotten (bounded state).
	step(5 * time.Minute)
	c.refreshOwn()
	if len(d.entries) != 0 {
		t.Errorf("%d damping entries left after the penalty decayed", len(d.entries))
	}
}

// A held up that goes down again before its release sends nothing and is
// not released later: the verdict is down.
func TestFlapDampingDownWhileHeld(t *testing.T) {
	c, now := fakeCore(t, Config{HealthTTL: 30 * time.Second})
	addMember(t, c, "b1", "r2")
	for range 3 {
		ownDown(t, c, now, "b1", "p0")
		*now = now.Add(time.Second)
		own(t, c, now, "b1", "p0", pathmgr.Up)
		*now = now.Add(time.Second)
	}
	if !c.own.damp.isHeld(healthKey{"b1", "p0"}) {
		t.Fatal("third up within a second of flaps not held")
	}
	if out := ownDown(t, c, now, "b1", "p0"); len(out) != 0 {
		t.Fatalf("down while held sent %q", wire(out))
	}
	// The relay keeps republishing the down; nothing but its renewals
	// goes out, and no up is ever released.
	renewals := 0
	for range 120 {
		*now = now.Add(5 * time.Second)
		out := append(own(t, c, now, "b1", "p0", pathmgr.Down), c.flushOwn()...)
		out = append(out, c.refreshOwn()...)
		for _, h := range out {
			if h.State != pathmgr.Down {
				t.Fatalf("sent %q for a verdict that is down", wire(out))
			}
			renewals++
		}
	}
	if renewals < 50 {
		t.Errorf("%d renewals in 10 min at TTL/3 = 10 s", renewals)
	}
}

// While the up is held, the down it keeps on the wire is renewed every
// TTL/3, so that it does not expire at the others mid-hold.
func TestFlapDampingRenewsHeldDown(t *testing.T) {
	c, now := fakeCore(t, Config{HealthTTL: 9 * time.Second, FlapDamping: DampingConfig{MaxHold: 10 * time.Minute}})
	addMember(t, c, "b1", "r2")
	for range 4 {
		ownDown(t, c, now, "b1", "p0")
		own(t, c, now, "b1", "p0", pathmgr.Up)
	}
	renewals := 0
	for range 20 {
		*now = now.Add(time.Second)
		out := own(t, c, now, "b1", "p0", pathmgr.Up) // the relay republishes
		for _, h := range append(out, c.refreshOwn()...) {
			if h.State != pathmgr.Down {
				t.Fatalf("sent %v while held", h.State)
			}
			renewals++
		}
		if h, ok := c.latest("b1", "p0"); !ok || h.State != pathmgr.Down {
			t.Fatalf("held down expired from the table: %+v %v", h, ok)
		}
	}
	if renewals < 5 {
		t.Errorf("%d renewals in 20 s at TTL/3 = 3 s", renewals)
	}
}

// The verdict on the gateway's own plane is damped the same way, and
// while it is held down it covers the per-peer verdicts.
func TestFlapDampingOwnPlane(t *testing.T) {
	c, now := fakeCore(t, Config{HealthTTL: 30 * time.Second})
	var ups int
	for range 5 {
		for _, h := range own(t, c, now, c.self, "p0", pathmgr.Down) {
			if h.State != pathmgr.Down {
				t.Fatalf("down published as %v", h.State)
			}
		}
		*now = now.Add(2 * time.Second)
		for _, h := range own(t, c, now, c.self, "p0", pathmgr.Up) {
			if h.State == pathmgr.Up {
				ups++
			}
		}
		*now = now.Add(2 * time.Second)
	}
	if ups != 2 {
		t.Errorf("%d ups of 5 flaps sent, want 2 (then held)", ups)
	}
	if s := c.own.self["p0"]; s.wire != pathmgr.Down || s.local != pathmgr.Up {
		t.Errorf("self verdict wire %v local %v, want down held over up", s.wire, s.local)
	}
	*now = now.Add(5 * time.Minute)
	if out := c.flushOwn(); wire(out) != "[self/p0 up]" {
		t.Errorf("release sent %q", wire(out))
	}
}

// Off: every transition goes out, as before damping.
func TestFlapDampingOff(t *testing.T) {
	c, now := fakeCore(t, Config{HealthTTL: 30 * time.Second, FlapDamping: DampingConfig{Off: true}})
	addMember(t, c, "b1", "r2")
	for i := range 6 {
		if out := ownDown(t, c, now, "b1", "p0"); len(out) != 1 {
			t.Fatalf("flap %d: down sent %q", i, wire(out))
		}
		if out := own(t, c, now, "b1", "p0", pathmgr.Up); len(out) != 1 {
			t.Fatalf("flap %d: up sent %q", i, wire(out))
		}
	}
	if len(c.own.damp.entries) != 0 {
		t.Error("damping off keeps penalties")
	}
}

// The penalty is capped: however long a verdict flapped, its up is held
// at most MaxHold after the last flap.
func TestFlapDampingMaxHold(t *testing.T) {
	d := newDamper(DampingConfig{})
	k := healthKey{"b", "p"}
	now := time.Unix(0, 0)
	for range 1000 {
		d.flap(k, now)
		now = now.Add(100 * time.Millisecond)
	}
	if !d.holdUp(k, now) {
		t.Fatal("not held after 1000 flaps")
	}
	now = now.Add(DefaultDampingMaxHold - 100*time.Millisecond + time.Millisecond)
	if due := d.due(now); len(due) != 1 {
		t.Errorf("still held %s after the last flap (MaxHold %s)", DefaultDampingMaxHold, DefaultDampingMaxHold)
	}
}

// Fleet at 8 gateways: a3 flapped its paths to b1 over p0, so
// its up is held and the wire (and every table) keeps saying (b1, p0)
// down, From a3. When b1's plane p0 then fails for real, b1's own verdict
// is the owner's word and must go out at once: it used to be deduplicated
// as "another reporter of the same verdict" against a3's held down, so
// b1 sent nothing until its renewal a refresh interval later (2.9 s in
// the fleet), and a3's released up could meanwhile say the plane was up.
func TestOwnPlaneDownNotDedupedAgainstHeldPeerVerdict(t *testing.T) {
	c, now := fakeCore(t, Config{HealthTTL: 9 * time.Second})
	c.self = "b1"
	// a3's verdict on its paths to b1 over p0, renewed while held.
	if !c.addHealth(HealthReport{From: "a3", Peer: "b1", Plane: "p0", State: pathmgr.Down, At: *now}, 0, false) {
		t.Fatal("a3's down refused")
	}
	*now = now.Add(100 * time.Millisecond) // inside the dedup window
	if got := wire(own(t, c, now, "b1", "p0", pathmgr.Down)); got != "[b1/p0 down]" {
		t.Fatalf("b1's own plane down sent %q, want it at once", got)
	}
	if got, _ := c.latest("b1", "p0"); got.From != "b1" || got.State != pathmgr.Down {
		t.Errorf("table holds %+v, want b1's own down", got)
	}

	// A receiver holding a3's down takes b1's own down as news (and
	// relays it); a second other reporter of it still is not news.
	r, rnow := fakeCore(t, Config{HealthTTL: 9 * time.Second})
	r.addHealth(HealthReport{From: "a3", Peer: "b1", Plane: "p0", State: pathmgr.Down, At: *rnow}, 0, false)
	*rnow = rnow.Add(100 * time.Millisecond)
	if !r.addHealth(HealthReport{From: "b1", Peer: "b1", Plane: "p0", State: pathmgr.Down, At: *rnow}, 0, false) {
		t.Error("b1's own down was not news to a table holding a3's down on b1's plane")
	}
	*rnow = rnow.Add(100 * time.Millisecond)
	if r.addHealth(HealthReport{From: "a2", Peer: "b1", Plane: "p0", State: pathmgr.Down, At: *rnow}, 0, false) {
		t.Error("a second reporter's down after b1's own was news")
	}
	if r.addHealth(HealthReport{From: "b1", Peer: "b1", Plane: "p0", State: pathmgr.Down, At: rnow.Add(-time.Millisecond)}, 0, false) {
		t.Error("a copy of b1's own down was news")
	}
}

// A gateway whose own up is held back keeps saying down on the wire, and
// a later down of its plane needs no message, since the others still
// hold the down. Not when another gateway's later verdict took the key
// meanwhile (the table keeps one verdict per (gateway, plane), whoever
// said it): then the others hold that, and the down must go out again.
// It was absorbed, and the others heard of the failure only at the
// renewal, 10 s later (the fleet storm at 8 gateways, seed 5: a down
// everyone got after 10.4 s, where another's up had taken the key; an up
// no longer can, TestOwnPlaneDownNotOverruledByAnotherUp, so here the
// key is taken by another's probing).
func TestOwnPlaneDownResentWhenAnotherTookTheKey(t *testing.T) {
	c, now := fakeCore(t, Config{HealthTTL: 30 * time.Second})
	for range 3 { // down 2 s, up 2 s: the third up is held
		own(t, c, now, c.self, "p0", pathmgr.Down)
		*now = now.Add(2 * time.Second)
		own(t, c, now, c.self, "p0", pathmgr.Up)
		*now = now.Add(2 * time.Second)
	}
	if s := c.own.self["p0"]; s.wire != pathmgr.Down || !c.own.damp.isHeld(healthKey{c.self, "p0"}) {
		t.Fatalf("wire %v, held %v: want the up held", s.wire, c.own.damp.isHeld(healthKey{c.self, "p0"}))
	}
	// Another gateway's verdict on its paths to this one over p0, later:
	// it takes the key everywhere (here too).
	if !c.addHealth(HealthReport{From: "x1", Peer: c.self, Plane: "p0", State: pathmgr.Probing, At: *now}, 0, false) {
		t.Fatal("x1's probing not news")
	}
	*now = now.Add(time.Second)
	if out := own(t, c, now, c.self, "p0", pathmgr.Down); wire(out) != "[self/p0 down]" {
		t.Fatalf("the plane failed again: sent %q, want the down (the others hold x1's probing)", wire(out))
	}
	// While the key holds this gateway's down, a repeat costs nothing.
	*now = now.Add(time.Second)
	own(t, c, now, c.self, "p0", pathmgr.Up)
	*now = now.Add(time.Second)
	if out := own(t, c, now, c.self, "p0", pathmgr.Down); len(out) != 0 {
		t.Fatalf("sent %q while the cluster held the down", wire(out))
	}
}
