package region

import (
	"bytes"
	"errors"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mrgw/mrgw/pathmgr"
)

// fakeCore is a core with a clock the test moves.
func fakeCore(t testing.TB, cfg Config) (*core, *time.Time) {
	t.Helper()
	cfg = cfg.withDefaults()
	c := newCore("self", &cfg, slog.New(slog.DiscardHandler))
	now := time.Unix(1000, 0)
	c.now = func() time.Time { return now }
	return c, &now
}

func addMember(t testing.TB, c *core, name, region string) {
	t.Helper()
	b, err := EncodeMeta(testMeta(region, 1))
	if err != nil {
		t.Fatal(err)
	}
	c.setMember(name, netip.MustParseAddrPort("127.0.0.1:1"), b, Alive)
}

func TestHealthExpiryUsesAge(t *testing.T) {
	c, now := fakeCore(t, Config{HealthTTL: 10 * time.Second})
	h := HealthReport{From: "x", Peer: "p", Plane: "a", State: pathmgr.Up, At: time.Unix(5, 0)}
	if !c.addHealth(h, 4*time.Second, false) {
		t.Fatal("fresh report refused")
	}
	*now = now.Add(5 * time.Second) // 9 s old
	if _, ok := c.latest("p", "a"); !ok {
		t.Fatal("report expired early")
	}
	*now = now.Add(time.Second) // 10 s old
	if _, ok := c.latest("p", "a"); ok {
		t.Fatal("report outlived its TTL")
	}
	if c.addHealth(HealthReport{From: "y", Peer: "p", Plane: "a", At: time.Unix(6, 0)}, 10*time.Second, false) {
		t.Error("a report already as old as the TTL was accepted")
	}
	// Expired reports are pruned; a reporter may then start over.
	c.prune()
	if len(c.health) != 0 {
		t.Errorf("%d reports left after prune", len(c.health))
	}
}

func TestHealthOrdering(t *testing.T) {
	c, now := fakeCore(t, Config{})
	h := HealthReport{From: "x", Peer: "p", Plane: "a", State: pathmgr.Down, At: time.Unix(5, 0)}
	if !c.addHealth(h, 0, false) {
		t.Fatal("first report refused")
	}
	if c.addHealth(h, 0, false) {
		t.Error("duplicate accepted (it would be relayed forever)")
	}
	older := h
	older.State, older.At = pathmgr.Up, time.Unix(4, 0)
	if c.addHealth(older, 0, false) {
		t.Error("older report accepted")
	}
	if c.addHealth(HealthReport{From: "self", Peer: "p", Plane: "a", At: time.Unix(9, 0)}, 0, false) {
		t.Error("own report echoed back was accepted")
	}
	// Two reporters: Health answers with the most recently measured.
	*now = now.Add(time.Second)
	other := HealthReport{From: "y", Peer: "p", Plane: "a", State: pathmgr.Suspect, At: time.Unix(1, 0)}
	c.addHealth(other, 0, false)
	if got, _ := c.latest("p", "a"); got.From != "y" {
		t.Errorf("latest = %+v, want y's (measured later, whatever y's clock says)", got)
	}
}

func TestHealthTableBounded(t *testing.T) {
	c, now := fakeCore(t, Config{MaxHealthReports: 3})
	for i, plane := range []string{"a", "b", "c", "d"} {
		*now = now.Add(time.Second)
		c.addHealth(HealthReport{From: "x", Peer: "p", Plane: plane, At: time.Unix(int64(i), 0)}, 0, false)
	}
	if len(c.health) != 3 {
		t.Fatalf("%d reports held, limit 3", len(c.health))
	}
	if _, ok := c.latest("p", "a"); ok {
		t.Error("the oldest report survived eviction")
	}
}

func TestSuspectFromHealth(t *testing.T) {
	c, now := fakeCore(t, Config{HealthTTL: 10 * time.Second})
	changes, stop := c.changes.add(8)
	defer stop()
	addMember(t, c, "b1", "b")
	if ch := <-changes; ch.To != Alive || ch.From != Unknown {
		t.Fatalf("join change = %+v", ch)
	}
	down := func(plane string, at int64) {
		c.addHealth(HealthReport{From: "a1", Peer: "b1", Plane: plane, State: pathmgr.Down, At: time.Unix(at, 0)}, 0, false)
	}
	down("p0", 1)
	if g, _ := c.view().Gateway("b1"); g.State != Alive {
		t.Fatalf("one plane down made b1 %s", g.State)
	}
	down("p1", 1)
	if g, _ := c.view().Gateway("b1"); g.State != Suspect {
		t.Fatalf("all planes down: b1 is %s, want suspect", g.State)
	}
	if ch := <-changes; ch.To != Suspect || ch.From != Alive || ch.Region != "b" {
		t.Errorf("change = %+v", ch)
	}
	gws, err := c.route("b")
	if err != nil || len(gws) != 1 || gws[0].State != Suspect {
		t.Errorf("Route with only a suspect gateway = %v, %v; suspect ones are still offered", gws, err)
	}
	// The down reports expire: back to alive, and watchers hear it.
	*now = now.Add(11 * time.Second)
	c.prune()
	if ch := <-changes; ch.To != Alive {
		t.Errorf("after expiry change = %+v", ch)
	}
}

func TestRouteRules(t *testing.T) {
	c, _ := fakeCore(t, Config{ExpectedRegions: []string{"far"}})
	addMember(t, c, "b2", "b")
	addMember(t, c, "b1", "b")
	gws, err := c.route("b")
	if err != nil || !slices.Equal(names(gws), []string{"b1", "b2"}) {
		t.Fatalf("Route(b) = %v, %v", names(gws), err)
	}
	if _, err := c.route("far"); !errors.Is(err, ErrRegionUnreachable) {
		t.Errorf("expected region never seen: %v, want ErrRegionUnreachable", err)
	}
	if _, err := c.route("near"); !errors.Is(err, ErrUnknownRegion) {
		t.Errorf("unknown region: %v", err)
	}
	// Dead is dead until the member comes back; a goodbye makes it left,
	// even when it arrives after the death.
	c.setMember("b1", netip.AddrPort{}, nil, Dead)
	c.setMember("b2", netip.AddrPort{}, nil, Dead)
	if !c.goodbye("b2") || c.goodbye("b2") {
		t.Error("goodbye news reporting is wrong")
	}
	_, err = c.route("b")
	if err == nil || err.Error() != `region "b": region unreachable (b1 dead, b2 left)` {
		t.Errorf("err = %v", err)
	}
	addMember(t, c, "b2", "b") // rejoined: the old goodbye no longer applies
	c.setMember("b2", netip.AddrPort{}, nil, Dead)
	if g, _ := c.view().Gateway("b2"); g.State != Dead {
		t.Errorf("rejoined then crashed b2 is %s, want dead", g.State)
	}
	// A member whose metadata is not ours is ignored.
	c.setMember("stranger", netip.AddrPort{}, []byte{0xff}, Alive)
	if _, ok := c.view().Gateway("stranger"); ok || c.badMeta.Load() != 1 {
		t.Error("member with unreadable metadata entered the view")
	}
}

func TestFanoutNeverBlocks(t *testing.T) {
	var f fanout[int]
	ch, stop := f.add(2)
	for i := range 5 {
		f.send(i) // must not block with nobody reading
	}
	if got := f.dropped.Load(); got != 3 {
		t.Errorf("dropped %d, want 3", got)
	}
	if a, b := <-ch, <-ch; a != 0 || b != 1 {
		t.Errorf("kept %d, %d; want the first two", a, b)
	}
	stop()
	stop() // idempotent
	if _, open := <-ch; open {
		t.Error("channel open after stop")
	}
	f.close()
	late, _ := f.add(1)
	if _, open := <-late; open {
		t.Error("watch after close returned an open channel")
	}
}

// The sequence that loses a message in memberlist v0.7.0's
// TransmitLimitedQueue (see healthQueue): a replacement of the only queued
// message, then another message of the same length.
func TestHealthQueueReplaceThenQueue(t *testing.T) {
	q := newHealthQueue(func() int { return 4 }, 4, func() int { return 100 })
	q.queue("x", []byte("old0"), false)
	q.GetBroadcasts(0, 1400)
	q.queue("x", []byte("new0"), false)
	q.queue("y", []byte("new1"), false)
	got := q.GetBroadcasts(0, 1400)
	if len(got) != 2 || !slices.ContainsFunc(got, func(b []byte) bool { return string(b) == "new0" }) {
		t.Fatalf("sent %q, want new0 and new1", got)
	}
	// Each message is sent mult × ⌈log10(n+1)⌉ = 4 times, then dropped.
	for i := range 3 {
		if n := len(q.GetBroadcasts(0, 1400)); n != 2 {
			t.Fatalf("round %d sent %d messages, want 2", i+2, n)
		}
	}
	if n := q.len(); n != 0 {
		t.Errorf("%d messages still queued after 4 transmissions", n)
	}
	// Size limit: what does not fit waits; fresher messages go first.
	q.queue("a", bytes.Repeat([]byte{1}, 100), false)
	q.queue("b", bytes.Repeat([]byte{2}, 100), false)
	got = q.GetBroadcasts(10, 150)
	if len(got) != 1 || got[0][0] != 2 {
		t.Errorf("with room for one, sent %d messages (want the newer b)", len(got))
	}
	if retransmitLimit(4, 4) != 4 || retransmitLimit(4, 10) != 8 {
		t.Error("retransmit limit differs from memberlist's formula")
	}
}

func TestSlogWriter(t *testing.T) {
	var buf bytes.Buffer
	w := slogWriter{slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	w.Write([]byte("[WARN] memberlist: Refuting a suspect message (from: b1)\n"))
	out := buf.String()
	for _, want := range []string{"level=DEBUG", `msg="Refuting a suspect message (from: b1)"`, "memberlist_level=WARN", "source=memberlist"} {
		if !strings.Contains(out, want) {
			t.Errorf("log line %q lacks %q", out, want)
		}
	}
}
