//go:build linux

package host

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"
)

// placeHost is a host whose n gateways are ready, as the hosts of one
// region see the same gateways (the same addresses).
func placeHost(n int) *Host {
	h := &Host{}
	h.o.flows = map[uint64]*Flow{}
	for i := range n {
		h.o.gws = append(h.o.gws, &gateway{idx: i, state: gwReady, nextStream: 1,
			addr: netip.MustParseAddrPort(fmt.Sprintf("127.0.0.%d:4791", 21+i))})
	}
	return h
}

// place opens a flow of id on h as tryOpen does: the gateway pickGateway
// gives for the attempt, and the flow's stream on it.
func place(t *testing.T, h *Host, id uint64, attempt int, avoid *gateway) *Flow {
	t.Helper()
	g := h.pickGateway(id, attempt, avoid)
	if g == nil {
		t.Fatalf("flow %x: no gateway", id)
	}
	f := h.o.flows[id]
	if f == nil {
		f = &Flow{h: h, id: id}
		h.o.flows[id] = f
	}
	f.use(g)
	return f
}

// perGateway counts h's flows on each of its gateways (by index) from
// the flows themselves, and checks the load placement reads agrees.
func perGateway(t *testing.T, h *Host) []int {
	t.Helper()
	n := make([]int, len(h.o.gws))
	for _, f := range h.o.flows {
		if f.gw != nil {
			n[f.gw.idx]++
		}
	}
	for i, g := range h.o.gws {
		if g.flows != n[i] {
			t.Fatalf("gateway %v counts %d flows, %d use it", g.addr, g.flows, n[i])
		}
	}
	return n
}

func spread(n []int) int {
	lo, hi := n[0], n[0]
	for _, v := range n {
		lo, hi = min(lo, v), max(hi, v)
	}
	return hi - lo
}

// TestPickGatewayBalanced: two hosts open 8 and then 64 flows (random
// ids, in turn) over the region's 2 gateways, and over 3: each host's
// flows on any two gateways differ by at most one, and so the region's
// (two hosts) by at most two.
func TestPickGatewayBalanced(t *testing.T) {
	for _, gws := range []int{2, 3} {
		for _, flows := range []int{8, 64} {
			t.Run(fmt.Sprintf("gateways=%d/flows=%d", gws, flows), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(uint64(gws), uint64(flows)))
				hosts := []*Host{placeHost(gws), placeHost(gws)}
				for i := range flows {
					h := hosts[i%2]
					place(t, h, rng.Uint64()|1, 0, nil)
					if n := perGateway(t, h); spread(n) > 1 {
						t.Fatalf("after %d flows host %d has %v per gateway", i+1, i%2, n)
					}
				}
				total := make([]int, gws)
				for i, h := range hosts {
					n := perGateway(t, h)
					t.Logf("host %d: %v", i, n)
					for k, v := range n {
						total[k] += v
					}
				}
				if spread(total) > 2 {
					t.Errorf("region: %v flows per gateway", total)
				}
			})
		}
	}
}

// TestPickGatewayMovesOnlyTheLostGatewaysFlows: when one of three
// gateways stops being ready, the flows it carried re-open (attempt 1,
// avoiding it) on the other two, evenly, and every other flow keeps its
// gateway; when it is back, new flows go to it until it carries its
// share, and the flows placed meanwhile stay.
func TestPickGatewayMovesOnlyTheLostGatewaysFlows(t *testing.T) {
	h := placeHost(3)
	rng := rand.New(rand.NewPCG(7, 7))
	var flows []*Flow
	for range 30 {
		flows = append(flows, place(t, h, rng.Uint64()|1, 0, nil))
	}
	if n := perGateway(t, h); spread(n) > 0 {
		t.Fatalf("30 flows over 3 gateways: %v", n)
	}
	before := map[*Flow]*gateway{}
	for _, f := range flows {
		before[f] = f.gw
	}
	dead := h.o.gws[1]
	dead.state = gwDown
	for _, f := range flows {
		if f.gw == dead {
			f.abandonStream()
			place(t, h, f.id, 1, dead)
		}
	}
	for _, f := range flows {
		switch {
		case f.gw == dead || f.gw == nil:
			t.Fatalf("flow %x placed on %v", f.id, f.gw)
		case before[f] != dead && f.gw != before[f]:
			t.Fatalf("flow %x moved from %v to %v although its gateway is ready", f.id, before[f].addr, f.gw.addr)
		}
	}
	if n := perGateway(t, h); n[0] != 15 || n[1] != 0 || n[2] != 15 {
		t.Fatalf("after the loss: %v flows per gateway, want [15 0 15]", n)
	}
	dead.state = gwReady
	for range 15 {
		flows = append(flows, place(t, h, rng.Uint64()|1, 0, nil))
	}
	if n := perGateway(t, h); n[0] != 15 || n[1] != 15 || n[2] != 15 {
		t.Fatalf("15 new flows after the gateway came back: %v per gateway, want [15 15 15]", n)
	}
	for f, g := range before {
		if g != dead && f.gw != g {
			t.Fatalf("flow %x moved from %v to %v when a gateway came back", f.id, g.addr, f.gw.addr)
		}
	}
}

// TestPickGatewayAvoid: the gateway a flow just lost is passed over even
// when it carries the fewest flows, unless it is the only one ready; a
// first open with equal loads goes where rendezvous hashing ranks first;
// from the third attempt on, attempts rotate through the ready gateways.
func TestPickGatewayAvoid(t *testing.T) {
	h := placeHost(2)
	const id = 0x9e3779b97f4a7c15
	first := h.pickGateway(id, 0, nil)
	if g := h.pickGateway(id, 1, nil); g != first {
		t.Fatalf("equal loads: attempt 1 picked %v, attempt 0 %v", g.addr, first.addr)
	}
	for i := range 3 {
		place(t, h, uint64(i)*2+1, 0, nil)
	}
	light := h.o.gws[0]
	if light.flows > h.o.gws[1].flows {
		light = h.o.gws[1]
	}
	if g := h.pickGateway(id, 0, nil); g != light {
		t.Fatalf("picked %v with %d flows, not %v with %d", g.addr, g.flows, light.addr, light.flows)
	}
	if g := h.pickGateway(id, 1, light); g == light {
		t.Fatalf("avoid %v not passed over", light.addr)
	}
	seen := map[*gateway]bool{}
	for attempt := 2; attempt < 4; attempt++ {
		seen[h.pickGateway(id, attempt, nil)] = true
	}
	if len(seen) != 2 {
		t.Errorf("attempts 2 and 3 used %d gateways, want both", len(seen))
	}
	for _, g := range h.o.gws {
		if g != light {
			g.state = gwDown
		}
	}
	if g := h.pickGateway(id, 1, light); g != light {
		t.Fatalf("only the avoided gateway is ready: picked %v, want it", g)
	}
	light.state = gwDown
	if g := h.pickGateway(id, 1, nil); g != nil {
		t.Fatalf("no gateway ready: picked %v", g.addr)
	}
}
