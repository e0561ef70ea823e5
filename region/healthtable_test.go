package region

import (
	"fmt"
	"testing"
	"time"

	"github.com/mrgw/mrgw/pathmgr"
)

// own publishes self's verdict on its paths to peer over plane at the
// fake clock's time and returns what went on the wire.
func own(t *testing.T, c *core, now *time.Time, peer, plane string, st pathmgr.State) []HealthReport {
	t.Helper()
	*now = now.Add(time.Millisecond)
	out, err := c.publishOwn(HealthReport{From: c.self, Peer: peer, Plane: plane, State: st, At: *now})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func wire(out []HealthReport) string {
	s := ""
	for _, h := range out {
		s += fmt.Sprintf("[%s/%s %s]", h.Peer, h.Plane, h.State)
	}
	return s
}

// Reports are deduplicated by (gateway, plane), not kept per reporter: a
// second reporter of the same failure is not news, a change is, and so is
// a renewal once the first report is no longer fresh.
func TestVerdictsDeduplicatedAcrossReporters(t *testing.T) {
	c, now := fakeCore(t, Config{HealthTTL: 30 * time.Second})
	down := func(from string, age time.Duration) bool {
		return c.addHealth(HealthReport{From: from, Peer: "b1", Plane: "p0", State: pathmgr.Down, At: now.Add(-age)}, age, false)
	}
	if !down("a1", 0) {
		t.Fatal("first report of a down plane refused")
	}
	*now = now.Add(time.Second)
	if down("a2", 0) || down("a3", 500*time.Millisecond) {
		t.Error("a second reporter of the same verdict was news (it would be relayed: G reporters, G floods)")
	}
	if down("a1", time.Second) {
		t.Error("a copy of a1's report was news")
	}
	// b1's own verdict that its plane is back is news, and so is a later
	// down from a reporter that still sees it down.
	*now = now.Add(time.Second)
	if !c.addHealth(HealthReport{From: "b1", Peer: "b1", Plane: "p0", State: pathmgr.Up, At: *now}, 0, false) {
		t.Error("the plane's own up was not news")
	}
	if down("a2", 3*time.Second) {
		t.Error("a down measured before the up replaced it")
	}
	*now = now.Add(time.Second)
	if !down("a2", 0) {
		t.Error("a fresh down after the up was not news")
	}
	// A renewal of the same verdict is news once the last one is older
	// than the dedup window (TTL/6): it keeps the verdict from expiring.
	*now = now.Add(4 * time.Second)
	if down("a3", 0) {
		t.Error("renewal inside the dedup window was news")
	}
	*now = now.Add(2 * time.Second)
	if !down("a3", 0) {
		t.Error("renewal after the dedup window was not news")
	}
	if got, _ := c.latest("b1", "p0"); got.From != "a3" || got.State != pathmgr.Down {
		t.Errorf("latest = %+v", got)
	}
	if n := len(c.health); n != 1 {
		t.Errorf("table holds %d entries for one (gateway, plane), want 1", n)
	}
}

// A gateway whose plane fails towards most of its peers says so once, on
// its own plane, instead of once per peer; it takes it back when the
// peers see the plane again, and says what still differs per peer.
func TestOwnPlaneVerdictAggregates(t *testing.T) {
	c, now := fakeCore(t, Config{HealthTTL: 30 * time.Second})
	var peers []string
	for _, r := range []string{"b", "c", "d"} {
		for i := 1; i <= 4; i++ {
			name := fmt.Sprintf("%s%d", r, i)
			addMember(t, c, name, r)
			peers = append(peers, name)
		}
	}
	// Up everywhere: nothing on the wire, and nothing for RTT changes.
	for _, p := range peers {
		if out := own(t, c, now, p, "p0", pathmgr.Up); len(out) != 0 {
			t.Fatalf("an up that holds went on the wire: %s", wire(out))
		}
	}
	// The plane fails at self: its peers go down one after another.
	// Each waits attrDelay for self's verdict on its own plane, which
	// goes out when half of them are down and covers them all.
	var sent []HealthReport
	for i, p := range peers {
		out := own(t, c, now, p, "p0", pathmgr.Down)
		sent = append(sent, out...)
		switch {
		case i == 5 && wire(out) != "[self/p0 down]":
			t.Fatalf("half the peers down: sent %s, want self's own plane down", wire(out))
		case i != 5 && len(out) != 0:
			t.Fatalf("peer %d down: sent %s", i, wire(out))
		}
	}
	*now = now.Add(c.own.attrDelay)
	sent = append(sent, c.flushOwn()...)
	if len(sent) != 1 {
		t.Errorf("12 peers down sent %s, want self's own plane only", wire(sent))
	}
	if h, ok := c.latest("self", "p0"); !ok || h.State != pathmgr.Down || h.From != "self" {
		t.Errorf("own plane's verdict = %+v, %v", h, ok)
	}
	// Back up: the own verdict holds until fewer than a quarter are down
	// (12 peers: 2 left down), then clears, and the two still down are
	// said per peer.
	for i, p := range peers[:10] {
		out := own(t, c, now, p, "p0", pathmgr.Up)
		switch {
		case i < 9 && len(out) != 0:
			t.Fatalf("peer %d up while the own verdict holds: sent %s", i, wire(out))
		case i == 9 && wire(out) != "[self/p0 up]":
			t.Errorf("fewer than a quarter down: sent %s, want self's plane up", wire(out))
		}
	}
	*now = now.Add(c.own.attrDelay)
	if out := c.flushOwn(); wire(out) != "[d3/p0 down][d4/p0 down]" && wire(out) != "[d4/p0 down][d3/p0 down]" {
		t.Errorf("attrDelay after the own verdict cleared: sent %s, want d3 and d4 down", wire(out))
	}
	for _, p := range peers[10:] {
		if h, ok := c.latest(p, "p0"); !ok || h.State != pathmgr.Down {
			t.Errorf("%s still down: table has %+v, %v", p, h, ok)
		}
	}

	// A peer's plane down alone (not self's): said per peer, after
	// attrDelay.
	if out := own(t, c, now, "b1", "p1", pathmgr.Down); len(out) != 0 {
		t.Fatalf("sent at once: %s", wire(out))
	}
	*now = now.Add(c.own.attrDelay)
	if out := c.flushOwn(); wire(out) != "[b1/p1 down]" {
		t.Errorf("after attrDelay sent %s", wire(out))
	}
}

// Verdicts that are not up are renewed every TTL/3 by the cluster, unless
// another gateway renewed them first; ups never are; verdicts on peers no
// longer published about are forgotten after a TTL.
func TestOwnVerdictsRenewed(t *testing.T) {
	c, now := fakeCore(t, Config{HealthTTL: 30 * time.Second})
	addMember(t, c, "b1", "b")
	addMember(t, c, "b2", "b")
	own(t, c, now, "b1", "p0", pathmgr.Down)
	*now = now.Add(c.own.attrDelay)
	if out := c.flushOwn(); len(out) != 1 {
		t.Fatalf("down sent %s", wire(out))
	}
	own(t, c, now, "b2", "p0", pathmgr.Up)
	if out := c.refreshOwn(); len(out) != 0 {
		t.Fatalf("renewed at once: %s", wire(out))
	}
	*now = now.Add(10 * time.Second)
	out := c.refreshOwn()
	if wire(out) != "[b1/p0 down]" {
		t.Fatalf("after TTL/3 renewed %s", wire(out))
	}
	// Someone else renewed it first: no copy.
	*now = now.Add(9 * time.Second)
	c.addHealth(HealthReport{From: "x", Peer: "b1", Plane: "p0", State: pathmgr.Down, At: *now}, 0, false)
	*now = now.Add(2 * time.Second)
	if out := c.refreshOwn(); len(out) != 0 {
		t.Errorf("renewed although x just did: %s", wire(out))
	}
	// The relay stops publishing (connection gone): forgotten after a TTL.
	*now = now.Add(30 * time.Second)
	c.refreshOwn()
	if c.own.n != 0 {
		t.Errorf("%d own verdicts left", c.own.n)
	}
	if _, err := c.publishOwn(HealthReport{From: "self", Peer: "b1", Plane: "p0", State: pathmgr.Up, At: time.Unix(1, 0)}); err != nil {
		t.Errorf("after forgetting, a report was refused: %v", err)
	}
}

// The table is bounded and never lets a down verdict go silently: an up
// gives way first, an up finds no room among downs, a down takes the
// oldest down's place and is counted.
func TestHealthTableKeepsDownVerdicts(t *testing.T) {
	c, now := fakeCore(t, Config{MaxHealthReports: 3})
	add := func(peer string, st pathmgr.State) bool {
		*now = now.Add(time.Second)
		return c.addHealth(HealthReport{From: "x", Peer: peer, Plane: "p", State: st, At: *now}, 0, false)
	}
	add("u", pathmgr.Up)
	add("d1", pathmgr.Down)
	add("d2", pathmgr.Down)
	add("d3", pathmgr.Down) // the up gives way
	if _, ok := c.latest("u", "p"); ok || len(c.health) != 3 {
		t.Fatalf("up kept (%v) or %d entries", ok, len(c.health))
	}
	add("u2", pathmgr.Up)
	if _, ok := c.latest("u2", "p"); ok || c.own.downEvicted.Load() != 0 {
		t.Fatal("an up took a down's place")
	}
	add("d4", pathmgr.Down)
	if _, ok := c.latest("d1", "p"); ok || c.own.downEvicted.Load() != 1 || len(c.health) != 3 {
		t.Errorf("full of downs: d1 kept %v, evictions counted %d", ok, c.own.downEvicted.Load())
	}
}

// In the gossip queue an up never replaces a down that was not sent, and
// a message that gives way before it was sent once is counted lost.
func TestHealthQueueKeepsDowns(t *testing.T) {
	limit := 3
	q := newHealthQueue(func() int { return 4 }, 4, func() int { return limit })
	down := HealthReport{From: "a", Peer: "b", Plane: "p", State: pathmgr.Down}
	up := down
	up.State = pathmgr.Up
	q.queue(broadcastName(down), []byte("down"), true)
	q.queue(broadcastName(up), []byte("up"), false)
	if got := q.GetBroadcasts(0, 1400); len(got) != 2 {
		t.Fatalf("sent %q, want the down and the up", got)
	}
	q.queue("x", []byte("x"), false)
	q.queue("y", []byte("y"), true) // full: the most sent non-down gives way
	if q.lost.Load() != 0 || q.len() != 3 {
		t.Fatalf("lost %d, queued %d", q.lost.Load(), q.len())
	}
	q.queue("z", []byte("z"), true) // full: x, never sent, gives way
	if q.lost.Load() != 1 || q.lostDown.Load() != 0 {
		t.Errorf("lost %d (down %d), want 1 (0)", q.lost.Load(), q.lostDown.Load())
	}
}

// With two regions a gateway whose plane fails says so per peer: its
// verdict (Peer = u, From = b) is the only word u gets that b's side of
// the plane is down. When u's key (u, p) already held a third gateway's
// down (c's, on its own paths to u: held by damping, or from u's side
// flapping earlier), b's verdict was "another reporter of the same
// verdict": b did not send it, and u, had it come, would have dropped it
// as well; u learnt of b's failure at b's next renewal (TTL/3) at best.
// This was the fleet storm's missed deliveries at 8 gateways
// (docs/results/fleet.md). Now b sends it straight to u as well, and u
// takes every reporter's verdict on its paths to u in, whatever its
// table holds (copies once). The table's rule for everyone else is
// unchanged: still one verdict per (gateway, plane).
func TestPeerVerdictReachesPeerPastAnotherReporter(t *testing.T) {
	// At b ("self"): c1's down on u1's plane p0 is held; then b's own
	// paths to u1 over p0 fail.
	b, now := fakeCore(t, Config{HealthTTL: 30 * time.Second})
	addMember(t, b, "u1", "r2")
	addMember(t, b, "c1", "r1")
	if !b.addHealth(HealthReport{From: "c1", Peer: "u1", Plane: "p0", State: pathmgr.Down, At: *now}, 0, false) {
		t.Fatal("c1's down not news")
	}
	*now = now.Add(time.Second)
	if out := ownDown(t, b, now, "u1", "p0"); len(out) != 0 {
		t.Fatalf("gossiped %q: the table's dedup across reporters changed", wire(out))
	}
	if d := b.takeDirect(); wire(d) != "[u1/p0 down]" || d[0].From != "self" {
		t.Fatalf("sent to u1 directly: %q, want b's down on its paths to u1", wire(d))
	}

	// At u ("self"): c1's down on its paths to u over p0 is held; b1's
	// comes (direct or gossiped) and must reach u's relay.
	u, unow := fakeCore(t, Config{HealthTTL: 30 * time.Second})
	ch, stop := u.reports.add(8)
	defer stop()
	got := func() string {
		s := ""
		for {
			select {
			case h := <-ch:
				s += fmt.Sprintf("[%s %s]", h.From, h.State)
			default:
				return s
			}
		}
	}
	if !u.addHealth(HealthReport{From: "c1", Peer: "self", Plane: "p0", State: pathmgr.Down, At: *unow}, 0, false) {
		t.Fatal("c1's down on u not news")
	}
	*unow = unow.Add(time.Second)
	b1 := HealthReport{From: "b1", Peer: "self", Plane: "p0", State: pathmgr.Down, At: *unow}
	if u.addHealth(b1, 0, false) {
		t.Error("b1's down was news for the table (it would be relayed: every reporter of a plane, every gateway)")
	}
	u.addHealth(b1, 100*time.Millisecond, false) // a copy: once is enough
	if s := got(); s != "[c1 down][b1 down]" {
		t.Fatalf("u's relay got %q, want c1's down and b1's down once", s)
	}
	// b1's renewal and its up are taken in too.
	*unow = unow.Add(10 * time.Second)
	u.addHealth(HealthReport{From: "b1", Peer: "self", Plane: "p0", State: pathmgr.Down, At: *unow}, 0, false)
	*unow = unow.Add(time.Second)
	u.addHealth(HealthReport{From: "b1", Peer: "self", Plane: "p0", State: pathmgr.Up, At: *unow}, 0, false)
	if s := got(); s != "[b1 down][b1 up]" {
		t.Fatalf("u's relay got %q, want b1's renewal and its up", s)
	}
	// A third party's table is unchanged: b1's down on u's plane is not
	// news where c1's is held.
	x, xnow := fakeCore(t, Config{HealthTTL: 30 * time.Second})
	xc, xstop := x.reports.add(8)
	defer xstop()
	x.addHealth(HealthReport{From: "c1", Peer: "u1", Plane: "p0", State: pathmgr.Down, At: *xnow}, 0, false)
	*xnow = xnow.Add(time.Second)
	if x.addHealth(HealthReport{From: "b1", Peer: "u1", Plane: "p0", State: pathmgr.Down, At: *xnow}, 0, false) {
		t.Error("a third party took b1's down on u1's plane as news")
	}
	if len(xc) != 1 {
		t.Errorf("a third party's relay got %d reports, want c1's only", len(xc))
	}
}

// A gateway's own verdict that its plane is down is not overruled by
// another gateway's up on its paths to it (one link: often an up its
// damping held back and releases later, measured after the owner's
// down). It took the key everywhere, and the owner's down, already
// sent, reached no one until its renewal 10 s later (the fleet storm at
// 8 gateways, seed 3: one delivery missed). The owner's own up ends it,
// and so does its expiry; the owner itself still takes the up in.
func TestOwnPlaneDownNotOverruledByAnotherUp(t *testing.T) {
	c, now := fakeCore(t, Config{HealthTTL: 30 * time.Second})
	if !c.addHealth(HealthReport{From: "b1", Peer: "b1", Plane: "p0", State: pathmgr.Down, At: *now}, 0, false) {
		t.Fatal("b1's own down not news")
	}
	*now = now.Add(time.Second)
	if c.addHealth(HealthReport{From: "x1", Peer: "b1", Plane: "p0", State: pathmgr.Up, At: *now}, 0, false) {
		t.Error("x1's up on its paths to b1 overruled b1's own down")
	}
	if h, _ := c.latest("b1", "p0"); h.From != "b1" || h.State != pathmgr.Down {
		t.Errorf("table holds %s's %s, want b1's down", h.From, h.State)
	}
	// Another's down is news over the owner's up, as before.
	*now = now.Add(time.Second)
	if !c.addHealth(HealthReport{From: "b1", Peer: "b1", Plane: "p0", State: pathmgr.Up, At: *now}, 0, false) {
		t.Error("b1's own up not news")
	}
	*now = now.Add(time.Second)
	if !c.addHealth(HealthReport{From: "x1", Peer: "b1", Plane: "p0", State: pathmgr.Down, At: *now}, 0, false) {
		t.Error("x1's down over b1's up not news")
	}
	// Once the owner's down has expired, another's up is news again.
	c.addHealth(HealthReport{From: "b1", Peer: "b1", Plane: "p1", State: pathmgr.Down, At: *now}, 0, false)
	*now = now.Add(31 * time.Second)
	if !c.addHealth(HealthReport{From: "x1", Peer: "b1", Plane: "p1", State: pathmgr.Up, At: *now}, 0, false) {
		t.Error("x1's up after b1's down expired not news")
	}
	// At the owner: another's up on its paths to it is taken in.
	o, onow := fakeCore(t, Config{HealthTTL: 30 * time.Second})
	oc, ostop := o.reports.add(8)
	defer ostop()
	o.mu.Lock()
	o.storeLocked(HealthReport{From: "self", Peer: "self", Plane: "p0", State: pathmgr.Down, At: *onow}, *onow, *onow)
	o.mu.Unlock()
	*onow = onow.Add(time.Second)
	o.addHealth(HealthReport{From: "x1", Peer: "self", Plane: "p0", State: pathmgr.Up, At: *onow}, 0, false)
	if len(oc) != 1 {
		t.Errorf("the owner's relay got %d reports, want x1's up", len(oc))
	}
}

// The verdicts on this gateway's own links are bounded by the health
// table's bound (the oldest gives way) and expire with the TTL.
func TestAboutSelfBounded(t *testing.T) {
	c, now := fakeCore(t, Config{HealthTTL: 30 * time.Second, MaxHealthReports: 3})
	ch, stop := c.reports.add(16)
	defer stop()
	for i := range 5 {
		*now = now.Add(time.Second)
		c.addHealth(HealthReport{From: fmt.Sprintf("x%d", i), Peer: c.self, Plane: "p0", State: pathmgr.Down, At: *now}, 0, false)
		if n := len(c.own.aboutSelf); n > 3 {
			t.Fatalf("%d entries, bound 3", n)
		}
	}
	if len(ch) != 5 {
		t.Errorf("%d of 5 reporters' verdicts taken in", len(ch))
	}
	if _, ok := c.own.aboutSelf[healthKey{"x0", "p0"}]; ok {
		t.Error("the oldest did not give way")
	}
	*now = now.Add(31 * time.Second)
	c.prune()
	if n := len(c.own.aboutSelf); n != 0 {
		t.Errorf("%d entries after the TTL", n)
	}
}

// A verdict on a peer that only repeats what the peer said (its own
// verdict on its plane, or its verdict on its paths to this gateway, of
// the same state) is not sent back to it: arriving after the peer's paths
// came back, it took them down again, and the two kept each other down.
func TestDirectVerdictNotEchoed(t *testing.T) {
	c, now := fakeCore(t, Config{HealthTTL: 30 * time.Second})
	addMember(t, c, "u1", "r2")
	addMember(t, c, "u2", "r3")
	c.addHealth(HealthReport{From: "u1", Peer: "u1", Plane: "p0", State: pathmgr.Down, At: *now}, 0, false)
	c.addHealth(HealthReport{From: "u2", Peer: c.self, Plane: "p0", State: pathmgr.Down, At: *now}, 0, false)
	*now = now.Add(time.Second)
	ownDown(t, c, now, "u1", "p0")
	ownDown(t, c, now, "u2", "p0")
	if d := c.takeDirect(); len(d) != 0 {
		t.Fatalf("echoed %q to the peers that said it", wire(d))
	}
	// What the peer did not say goes to it: the up.
	*now = now.Add(time.Second)
	own(t, c, now, "u2", "p0", pathmgr.Up)
	if d := c.takeDirect(); wire(d) != "[u2/p0 up]" {
		t.Fatalf("sent %q to u2, want the up", wire(d))
	}
}
