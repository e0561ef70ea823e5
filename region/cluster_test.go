package region

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/mrgw/mrgw/pathmgr"
	"go.uber.org/goleak"
)

func TestClusterLifecycle(t *testing.T) {
	cs := startCluster(t, "a1", "a2", "b1", "b2")
	a1, a2, b1, b2 := cs[0], cs[1], cs[2], cs[3]

	// Metadata: every gateway sees what every other announced, exactly.
	for _, c := range cs {
		v := c.View()
		if got := names(v.Regions["a"]); !slices.Equal(got, []string{"a1", "a2"}) {
			t.Fatalf("%s: region a = %v", c.Name(), got)
		}
		for _, other := range cs {
			g, ok := v.Gateway(other.Name())
			if !ok {
				t.Fatalf("%s does not know %s", c.Name(), other.Name())
			}
			if want := other.cfg.Meta; !metaEqual(g.Meta, want) {
				t.Errorf("%s sees %s meta %+v, announced %+v", c.Name(), other.Name(), g.Meta, want)
			}
			if g.Gossip.String() != other.Addr() {
				t.Errorf("%s sees %s at %s, it listens at %s", c.Name(), other.Name(), g.Gossip, other.Addr())
			}
		}
	}

	gws, err := a1.Route("b")
	if err != nil || !slices.Equal(names(gws), []string{"b1", "b2"}) {
		t.Fatalf("Route(b) = %v, %v; want [b1 b2]", names(gws), err)
	}
	_, err = a1.Route("nowhere")
	var re *RouteError
	if !errors.Is(err, ErrUnknownRegion) || !errors.As(err, &re) || re.Region != "nowhere" {
		t.Fatalf("Route(nowhere) error = %v, want a RouteError for ErrUnknownRegion", err)
	}

	changes, stop := a1.WatchChanges(16)
	defer stop()

	// A gateway that crashes (no Leave) ends up dead on every survivor,
	// and its region routes to the other gateway only.
	if err := b1.Shutdown(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []*Cluster{a1, a2, b2} {
		waitState(t, c, "b1", Dead)
		gws, err := c.Route("b")
		if err != nil || !slices.Equal(names(gws), []string{"b2"}) {
			t.Fatalf("%s: Route(b) after b1 died = %v, %v; want [b2]", c.Name(), names(gws), err)
		}
	}
	waitChange(t, changes, Change{Name: "b1", Region: "b", From: Alive, To: Dead})

	// A graceful leave shows as left, not dead; with both gone the region
	// is unreachable, and says why.
	if err := b2.Leave(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if err := b2.Shutdown(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []*Cluster{a1, a2} {
		waitState(t, c, "b2", Left)
	}
	waitChange(t, changes, Change{Name: "b2", Region: "b", From: Alive, To: Left})

	// It answers from local state: no call waits for the network (a
	// probe would take a probe timeout, 100 ms or more). The fastest of
	// five calls is compared, so that one descheduling of a loaded test
	// machine does not read as a network wait.
	fastest := time.Hour
	for range 5 {
		begin := time.Now()
		gws, err = a1.Route("b")
		fastest = min(fastest, time.Since(begin))
	}
	if fastest > 100*time.Millisecond {
		t.Errorf("Route took at least %s in five calls; it must answer from local state", fastest)
	}
	if gws != nil || !errors.Is(err, ErrRegionUnreachable) || !errors.As(err, &re) {
		t.Fatalf("Route(b) with both gone = %v, %v; want ErrRegionUnreachable", names(gws), err)
	}
	if got := re.Error(); got != `region "b": region unreachable (b1 dead, b2 left)` {
		t.Errorf("error text = %q", got)
	}
	// Region a is untouched.
	if gws, err := a2.Route("a"); err != nil || len(gws) != 2 {
		t.Errorf("Route(a) = %v, %v", names(gws), err)
	}

	// After Shutdown the cluster refuses Leave instead of panicking in
	// memberlist, and watcher channels are closed.
	if err := b2.Leave(time.Second); !errors.Is(err, ErrClosed) {
		t.Errorf("Leave after Shutdown = %v, want ErrClosed", err)
	}
	ch, _ := b2.WatchChanges(1)
	if _, open := <-ch; open {
		t.Error("WatchChanges after Shutdown returned an open channel")
	}
}

func waitChange(t *testing.T, ch <-chan Change, want Change) {
	t.Helper()
	timeout := time.After(deadline)
	for {
		select {
		case got := <-ch:
			got.At = time.Time{}
			if got == want {
				return
			}
		case <-timeout:
			t.Fatalf("no change %+v within %s", want, deadline)
		}
	}
}

func metaEqual(a, b Meta) bool {
	return a.Region == b.Region && a.Control == b.Control &&
		slices.Equal(a.Planes, b.Planes) && slices.Equal(a.Capabilities, b.Capabilities) &&
		slices.Equal(a.Wire, b.Wire) && a.Capacity == b.Capacity
}

func TestHealthReportsReachAll(t *testing.T) {
	cs := startCluster(t, "a1", "a2", "b1", "b2")
	a1 := cs[0]
	watch, stop := cs[3].WatchHealth(16)
	defer stop()

	at := time.Now()
	first := HealthReport{Peer: "b1", Plane: "p0", State: pathmgr.Suspect, RTT: 42 * time.Millisecond,
		Loss: 0.01, ECNFraction: 0.25, At: at}
	if err := a1.PublishHealth(first); err != nil {
		t.Fatal(err)
	}
	want, ok := a1.Health("b1", "p0")
	if !ok || want.From != "a1" || want.State != pathmgr.Suspect || want.RTT != 42*time.Millisecond {
		t.Fatalf("publisher's own Health = %+v, %v", want, ok)
	}
	for _, c := range cs[1:] {
		waitFor(t, c.Name()+" to receive a1's report", func() bool {
			got, ok := c.Health("b1", "p0")
			return ok && healthEqual(got, want)
		})
	}
	select {
	case got := <-watch:
		if !healthEqual(got, want) {
			t.Errorf("watcher got %+v, want %+v", got, want)
		}
	case <-time.After(deadline):
		t.Fatal("watcher got nothing")
	}

	// A newer report on the same peer and plane replaces the older one
	// everywhere; an older one is refused at the source.
	second := first
	second.State, second.At = pathmgr.Up, at.Add(time.Second)
	if err := a1.PublishHealth(second); err != nil {
		t.Fatal(err)
	}
	if err := a1.PublishHealth(first); err == nil {
		t.Error("publishing a report older than the current one succeeded")
	}
	for _, c := range cs[1:] {
		waitFor(t, c.Name()+" to see the newer report", func() bool {
			got, ok := c.Health("b1", "p0")
			return ok && got.State == pathmgr.Up && got.At.Equal(second.At)
		})
	}

	// Every plane of b1 reported down: b1 still gossips, so it is not
	// dead, but it is suspect and routed to last.
	for _, plane := range []string{"p0", "p1"} {
		if err := a1.PublishHealth(HealthReport{Peer: "b1", Plane: plane, State: pathmgr.Down, At: at.Add(2 * time.Second)}); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range cs {
		waitState(t, c, "b1", Suspect)
	}
	if gws, err := cs[1].Route("b"); err != nil || !slices.Equal(names(gws), []string{"b2", "b1"}) {
		t.Errorf("Route(b) with b1 suspect = %v, %v; want [b2 b1]", names(gws), err)
	}
	if err := a1.PublishHealth(HealthReport{Peer: "b1", Plane: "p1", State: pathmgr.Up, At: at.Add(3 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	for _, c := range cs {
		waitState(t, c, "b1", Alive)
	}
}

func healthEqual(a, b HealthReport) bool {
	return a.From == b.From && a.Peer == b.Peer && a.Plane == b.Plane && a.State == b.State &&
		a.RTT == b.RTT && a.Loss == b.Loss && a.ECNFraction == b.ECNFraction && a.At.Equal(b.At)
}

// A gateway that joins after the broadcasts are over learns the table from
// the push/pull exchange of its join.
func TestLateJoinerLearnsHealth(t *testing.T) {
	cs := startCluster(t, "a1", "b1")
	rep := HealthReport{Peer: "b1", Plane: "p0", State: pathmgr.Down, RTT: time.Millisecond}
	if err := cs[0].PublishHealth(rep); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "b1 to receive the report", func() bool { _, ok := cs[1].Health("b1", "p0"); return ok })
	waitFor(t, "broadcast queues to drain", func() bool {
		return cs[0].queue.len() == 0 && cs[1].queue.len() == 0
	})
	late := start(t, testConfig("c1", "c"))
	join(t, late, cs[1])
	got, ok := late.Health("b1", "p0")
	if !ok || got.From != "a1" || got.State != pathmgr.Down {
		t.Fatalf("late joiner's Health right after Join = %+v, %v", got, ok)
	}
}

func TestEncryptedGossip(t *testing.T) {
	k1 := bytes.Repeat([]byte{1}, 32)
	k2 := bytes.Repeat([]byte{2}, 16)
	a1 := start(t, testConfig("a1", "a", k1))
	a2 := start(t, testConfig("a2", "a", k1))
	join(t, a2, a1)
	waitState(t, a1, "a2", Alive)

	for _, tc := range []struct {
		name string
		keys [][]byte
	}{{"wrong key", [][]byte{k2}}, {"no key", nil}} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig("x-"+tc.name[:2], "x", tc.keys...)
			cfg.JoinAttempts = 2
			x := start(t, cfg)
			ctx, cancel := context.WithTimeout(context.Background(), deadline)
			defer cancel()
			n, err := x.Join(ctx, []string{a1.Addr()})
			if err == nil || n != 0 {
				t.Fatalf("Join with %s = %d, %v; want an error", tc.name, n, err)
			}
			if errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Join with %s hung until the deadline: %v", tc.name, err)
			}
			if _, err := x.Route("a"); !errors.Is(err, ErrUnknownRegion) {
				t.Errorf("outsider learned region a: %v", err)
			}
			if _, ok := a1.View().Gateway(cfg.Name); ok {
				t.Errorf("a1 admitted %s", cfg.Name)
			}
		})
	}
}

func TestKeyRotation(t *testing.T) {
	k1 := bytes.Repeat([]byte{1}, 32)
	k2 := bytes.Repeat([]byte{2}, 32)
	var cs []*Cluster
	for _, n := range []string{"a1", "a2", "b1"} {
		c := start(t, testConfig(n, n[:1], k1))
		if len(cs) > 0 {
			join(t, c, cs[0])
		}
		cs = append(cs, c)
	}
	for _, c := range cs {
		waitFor(t, c.Name()+" to see 3 alive", func() bool { return c.core.aliveCount() == 3 })
	}

	// The three steps, each on every gateway before the next.
	for _, c := range cs {
		if err := c.SetKeyring([][]byte{k1, k2}); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range cs {
		if err := c.SetKeyring([][]byte{k2, k1}); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range cs {
		if err := c.SetKeyring([][]byte{k2}); err != nil {
			t.Fatal(err)
		}
		if got := c.Keys(); len(got) != 1 || !bytes.Equal(got[0], k2) {
			t.Fatalf("%s keyring after rotation has %d keys", c.Name(), len(got))
		}
	}

	// The cluster still works on the new key: gossip flows, nobody died,
	// a newcomer with the new key joins, one with the old key cannot.
	if err := cs[0].PublishHealth(HealthReport{Peer: "b1", Plane: "p0", State: pathmgr.Suspect}); err != nil {
		t.Fatal(err)
	}
	for _, c := range cs[1:] {
		waitFor(t, c.Name()+" to receive a report after rotation", func() bool { _, ok := c.Health("b1", "p0"); return ok })
	}
	fresh := start(t, testConfig("c1", "c", k2))
	join(t, fresh, cs[1])
	for _, c := range cs {
		waitState(t, c, "c1", Alive)
		for _, o := range cs {
			if g, _ := c.View().Gateway(o.Name()); g.State != Alive {
				t.Errorf("%s sees %s %s after rotation", c.Name(), o.Name(), g.State)
			}
		}
	}
	oldCfg := testConfig("c2", "c", k1)
	oldCfg.JoinAttempts = 1
	old := start(t, oldCfg)
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	if _, err := old.Join(ctx, []string{cs[0].Addr()}); err == nil {
		t.Error("a gateway with the retired key joined")
	}

	// Individual key operations.
	c := cs[0]
	if err := c.RemoveKey(k2); err == nil {
		t.Error("removing the primary key succeeded")
	}
	if err := c.InstallKey(k1); err != nil {
		t.Fatal(err)
	}
	if err := c.UseKey(k1); err != nil {
		t.Fatal(err)
	}
	if err := c.RemoveKey(k2); err != nil {
		t.Fatal(err)
	}
	if err := c.SetKeyring(nil); err == nil {
		t.Error("SetKeyring(nil) turned encryption off")
	}
}

func TestKeysWithoutEncryption(t *testing.T) {
	c := start(t, testConfig("a1", "a"))
	k := bytes.Repeat([]byte{1}, 16)
	for name, err := range map[string]error{
		"InstallKey": c.InstallKey(k), "UseKey": c.UseKey(k), "RemoveKey": c.RemoveKey(k),
		"SetKeyring": c.SetKeyring([][]byte{k}),
	} {
		if !errors.Is(err, ErrEncryptionDisabled) {
			t.Errorf("%s = %v, want ErrEncryptionDisabled", name, err)
		}
	}
}

func TestStartStopLeaksNothing(t *testing.T) {
	defer goleak.VerifyNone(t)
	a := start(t, testConfig("a1", "a"))
	b := start(t, testConfig("b1", "b"))
	join(t, b, a)
	waitState(t, a, "b1", Alive)
	_, stop := a.WatchHealth(1)
	defer stop()
	if err := b.Leave(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	for _, c := range []*Cluster{a, b} {
		if err := c.Shutdown(); err != nil {
			t.Fatal(err)
		}
		if err := c.Shutdown(); err != nil {
			t.Fatalf("second Shutdown: %v", err)
		}
	}
}

func TestJoinBounded(t *testing.T) {
	cfg := testConfig("a1", "a")
	// So many rounds that only the context can end the join: a Join that
	// ignored ctx would not return within the test's timeout, and one that
	// ran out of rounds would not report ctx's error. No clock is read.
	cfg.JoinAttempts = 1 << 30
	c := start(t, cfg)
	if n, err := c.Join(context.Background(), nil); n != 0 || err != nil {
		t.Errorf("Join with no seeds = %d, %v; want 0, nil", n, err)
	}
	// A seed nobody listens on: the attempts are bounded by ctx.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := c.Join(ctx, []string{"127.0.0.1:1"})
	if err == nil {
		t.Fatal("Join to a closed port succeeded")
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Join to a closed port ended with %v; want the context's deadline", err)
	}
	var je *JoinError
	if !errors.As(err, &je) || je.Attempts < 1 {
		t.Errorf("Join error %v: want a *JoinError counting its attempts", err)
	}
}

func TestUpdateMeta(t *testing.T) {
	cs := startCluster(t, "a1", "b1")
	m := cloneMeta(cs[1].cfg.Meta)
	m.Planes = append(m.Planes, Plane{Name: "p2", WAN: m.Planes[0].WAN})
	m.Capabilities = append(m.Capabilities, "gso")
	if err := cs[1].UpdateMeta(m, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a1 to see b1's new planes", func() bool {
		g, _ := cs[0].View().Gateway("b1")
		return metaEqual(g.Meta, m) && g.State == Alive
	})
	m.Region = ""
	if err := cs[1].UpdateMeta(m, time.Second); err == nil {
		t.Error("UpdateMeta accepted metadata without a region")
	}
	_ = cs[1].Shutdown()
	if err := cs[1].UpdateMeta(cs[1].cfg.Meta, time.Second); !errors.Is(err, ErrClosed) {
		t.Errorf("UpdateMeta after Shutdown = %v, want ErrClosed", err)
	}
}
