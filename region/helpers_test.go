package region

import (
	"context"
	"log/slog"
	"net/netip"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fastTimings are the tuned timings of LIBRARIES.md: a dead member is
// noticed in well under a second on loopback. Tests never assert how fast,
// only that it happens before a generous deadline.
var fastTimings = Timings{
	ProbeInterval:  200 * time.Millisecond,
	ProbeTimeout:   100 * time.Millisecond,
	SuspicionMult:  2,
	GossipInterval: 50 * time.Millisecond,
}

// deadline bounds every wait for gossip: a bound on a hang, not a measure (a
// leave took over 15 s to reach a peer under -race on a busy 2-core machine).
const deadline = 60 * time.Second

func testLogger() *slog.Logger {
	if os.Getenv("REGION_TEST_LOG") == "" {
		return nil
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func testMeta(region string, n int) Meta {
	return Meta{
		Region:  region,
		Control: netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(7000+n)),
		Planes: []Plane{
			{Name: "p0", WAN: netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(8000+n))},
			{Name: "p1", WAN: netip.AddrPortFrom(netip.MustParseAddr("::1"), uint16(9000+n))},
		},
		Capabilities: []string{"metaroce-v1", CapHealthBatch},
		Wire:         []uint8{1, 2},
		Capacity:     uint32(100 * n),
	}
}

// metaV1 is m as a version-1 writer encoded it: without the version-2
// fields.
func metaV1(t testing.TB, m Meta) []byte {
	t.Helper()
	m.Wire, m.Capacity = nil, 0
	b, err := EncodeMeta(m)
	if err != nil {
		t.Fatal(err)
	}
	b = b[:len(b)-5] // wire count 0, capacity 0
	b[0] = 1
	return b
}

var nodeSeq int

func testConfig(name, region string, keys ...[]byte) Config {
	nodeSeq++
	return Config{
		Name: name,
		Meta: testMeta(region, nodeSeq),
		// Port 0: the kernel picks a free port, so parallel test runs
		// in the same tree never collide.
		Bind:    "127.0.0.1:0",
		Profile: ProfileCustom,
		Timings: fastTimings,
		Keys:    keys,
	}
}

func start(t *testing.T, cfg Config) *Cluster {
	t.Helper()
	c, err := New(cfg, testLogger())
	if err != nil {
		t.Fatalf("New(%s): %v", cfg.Name, err)
	}
	t.Cleanup(func() { _ = c.Shutdown() })
	return c
}

func join(t *testing.T, c *Cluster, seed *Cluster) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	if _, err := c.Join(ctx, []string{seed.Addr()}); err != nil {
		t.Fatalf("%s joining %s: %v", c.Name(), seed.Name(), err)
	}
}

// startCluster starts one gateway per name ("a1" serves region "a") and
// joins each to the first; it returns when every one sees every other
// alive.
func startCluster(t *testing.T, names ...string) []*Cluster {
	t.Helper()
	var cs []*Cluster
	for _, n := range names {
		c := start(t, testConfig(n, n[:1]))
		if len(cs) > 0 {
			join(t, c, cs[0])
		}
		cs = append(cs, c)
	}
	for _, c := range cs {
		for _, n := range names {
			waitState(t, c, n, Alive)
		}
	}
	return cs
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	end := time.Now().Add(deadline)
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf("gave up after %s waiting for %s", deadline, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func waitState(t *testing.T, c *Cluster, name string, want State) {
	t.Helper()
	end := time.Now().Add(deadline)
	for {
		g, _ := c.View().Gateway(name)
		if g.State == want {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("gave up after %s waiting for %s to see %s %s; it sees %s", deadline, c.Name(), name, want, g.State)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func names(gws []Gateway) []string {
	var out []string
	for _, g := range gws {
		out = append(out, g.Name)
	}
	return out
}
