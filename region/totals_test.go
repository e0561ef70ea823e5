package region

import (
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
)

// walkTotals recomputes core's running totals the way healthBound,
// aliveCount and allHave used to: a walk of every member.
func walkTotals(c *core) (planes, alive int, caps map[string]int) {
	caps = map[string]int{}
	for _, m := range c.members {
		planes += max(len(m.gw.Meta.Planes), 1)
		if m.gossip != Alive {
			continue
		}
		alive++
		seen := map[string]bool{}
		for _, cp := range m.gw.Meta.Capabilities {
			if !seen[cp] {
				seen[cp] = true
				caps[cp]++
			}
		}
	}
	return planes, alive, caps
}

// randomMeta: 0 to 3 planes, a random subset of the capabilities
// (sometimes one twice, as a careless writer might announce it).
func randomMeta(rng *rand.Rand, universe []string) Meta {
	m := Meta{Region: fmt.Sprintf("r%d", rng.IntN(3)), Control: netip.MustParseAddrPort("127.0.0.1:7000")}
	for i := range rng.IntN(4) {
		m.Planes = append(m.Planes, Plane{Name: fmt.Sprintf("p%d", i), WAN: netip.MustParseAddrPort("127.0.0.1:8000")})
	}
	for _, cp := range universe {
		if rng.IntN(2) == 0 {
			m.Capabilities = append(m.Capabilities, cp)
		}
	}
	if len(m.Capabilities) > 0 && rng.IntN(5) == 0 {
		m.Capabilities = append(m.Capabilities, m.Capabilities[0])
	}
	return m
}

// The running totals (planes for the health bound, alive members for the
// retransmit limit, capabilities for verdict batches) match a full walk
// of the members after every step of a random sequence of joins, deaths,
// goodbyes, returns, metadata updates (alive or not) and unreadable
// metadata.
func TestMemberTotalsMatchWalk(t *testing.T) {
	universe := []string{CapHealthBatch, "metaroce-v1", "x"}
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 1))
		c, _ := fakeCore(t, Config{})
		addr := netip.MustParseAddrPort("127.0.0.1:1")
		for step := range 400 {
			name := fmt.Sprintf("g%d", rng.IntN(24))
			var op string
			switch k := rng.IntN(10); {
			case k < 4:
				op = "alive" // a join, a return, or a metadata update
				b, err := EncodeMeta(randomMeta(rng, universe))
				if err != nil {
					t.Fatal(err)
				}
				c.setMember(name, addr, b, Alive)
			case k < 6:
				op = "dead"
				c.setMember(name, addr, nil, Dead)
			case k < 7:
				op = "dead with metadata"
				b, _ := EncodeMeta(randomMeta(rng, universe))
				c.setMember(name, addr, b, Dead)
			case k < 8:
				op = "goodbye"
				c.goodbye(name)
			case k < 9:
				op = "unreadable metadata"
				c.setMember(name, addr, []byte{0xff, 1, 2}, Alive)
			default:
				op = "alive, metadata kept"
				c.setMember(name, addr, nil, Alive)
			}
			planes, alive, caps := walkTotals(c)
			c.mu.Lock()
			gotPlanes, gotAlive, gotCaps := c.planeSum, c.alive, maps.Clone(c.aliveCaps)
			c.mu.Unlock()
			if gotPlanes != planes || gotAlive != alive || !maps.Equal(gotCaps, caps) {
				t.Fatalf("seed %d step %d (%s %s): totals planes %d alive %d caps %v; walk: %d %d %v",
					seed, step, op, name, gotPlanes, gotAlive, gotCaps, planes, alive, caps)
			}
			if got, want := c.healthBound(), max(DefaultMaxHealthReports, 2*planes); got != want {
				t.Fatalf("seed %d step %d: healthBound %d, want %d", seed, step, got, want)
			}
			if got := c.aliveCount(); got != alive {
				t.Fatalf("seed %d step %d: aliveCount %d, want %d", seed, step, got, alive)
			}
			for _, cp := range universe {
				if got, want := c.allHave(cp), caps[cp] == alive; got != want {
					t.Fatalf("seed %d step %d: allHave(%q) %v, want %v", seed, step, cp, got, want)
				}
			}
		}
	}
}

// The health bound follows the fleet past DefaultMaxHealthReports: 2·G·P
// at 3,000 gateways of 2 planes. Config's defaults used to set
// MaxHealthReports to 4096, which made the bound 4096 at any size.
func TestHealthBoundGrowsWithFleet(t *testing.T) {
	cfg := (&Config{}).withDefaults()
	c := newCore("self", &cfg, slog.New(slog.DiscardHandler))
	for i := range 3000 {
		addMember(t, c, fmt.Sprintf("g%04d", i), "r1") // testMeta: 2 planes
	}
	if got, want := c.healthBound(), 2*3000*2; got != want {
		t.Fatalf("healthBound at 3,000 gateways × 2 planes = %d, want 2·G·P = %d", got, want)
	}
	cfg = (&Config{MaxHealthReports: 100}).withDefaults()
	if c := newCore("self", &cfg, slog.New(slog.DiscardHandler)); c.healthBound() != 100 {
		t.Fatalf("MaxHealthReports 100: bound %d", c.healthBound())
	}
}

// What the gossip queue asks for every new message and every packet
// (the health bound, the alive count, whether every alive member reads
// batches) costs the same whatever the number of members: compare
// ns/op across the sizes (the walk it replaced, "walk", grows with
// them).
func BenchmarkMemberTotals(b *testing.B) {
	for _, n := range []int{128, 1024, 8192} {
		c, _ := fakeCore(b, Config{})
		for i := range n {
			addMember(b, c, fmt.Sprintf("g%05d", i), fmt.Sprintf("r%d", i%16))
		}
		b.Run(fmt.Sprintf("members=%d", n), func(b *testing.B) {
			for b.Loop() {
				_ = c.healthBound()
				_ = c.aliveCount()
				_ = c.allHave(CapHealthBatch)
			}
		})
		b.Run(fmt.Sprintf("walk/members=%d", n), func(b *testing.B) {
			for b.Loop() {
				c.mu.Lock()
				_ = oldWalks(c)
				c.mu.Unlock()
			}
		})
	}
}

// oldWalks is what the three questions cost before the running totals:
// the three walks healthBoundLocked, aliveCount and allHave made.
func oldWalks(c *core) bool {
	planes, alive, all := 0, 0, true
	for _, m := range c.members {
		planes += max(len(m.gw.Meta.Planes), 1)
	}
	for _, m := range c.members {
		if m.gossip == Alive {
			alive++
		}
	}
	for _, m := range c.members {
		if m.gossip == Alive && !slices.Contains(m.gw.Meta.Capabilities, CapHealthBatch) {
			all = false
			break
		}
	}
	return planes > alive && all
}
