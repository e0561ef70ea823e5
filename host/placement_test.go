//go:build linux

package host

import (
	"fmt"
	"net/netip"
	"testing"
)

// TestPickGatewayRendezvous: flows spread over three ready gateways; when
// one stops being ready only its flows move (each to the gateway that
// ranks next for it), and when it is back they return. With the modulo
// placement before (live[(id+attempt) % n]) two thirds of the flows moved.
func TestPickGatewayRendezvous(t *testing.T) {
	h := &Host{}
	for i := range 3 {
		h.o.gws = append(h.o.gws, &gateway{idx: i, state: gwReady,
			addr: netip.MustParseAddrPort(fmt.Sprintf("127.0.0.%d:4791", 21+i))})
	}
	const flows = 3000
	first := make([]*gateway, flows)
	count := map[*gateway]int{}
	for id := range uint64(flows) {
		first[id] = h.pickGateway(id*0x9e3779b97f4a7c15, 0, nil)
		count[first[id]]++
	}
	for _, g := range h.o.gws {
		if c := count[g]; c < flows/3-150 || c > flows/3+150 {
			t.Errorf("gateway %v has %d of %d flows", g.addr, c, flows)
		}
	}
	dead := h.o.gws[1]
	dead.state = gwDown
	for id := range uint64(flows) {
		// A flow that lost its gateway re-opens with attempt 1 and the
		// lost gateway to avoid; the others stay on attempt 0.
		var got *gateway
		if first[id] == dead {
			got = h.pickGateway(id*0x9e3779b97f4a7c15, 1, dead)
		} else {
			got = h.pickGateway(id*0x9e3779b97f4a7c15, 0, nil)
		}
		switch {
		case got == dead || got == nil:
			t.Fatalf("flow %d placed on %v", id, got)
		case first[id] != dead && got != first[id]:
			t.Fatalf("flow %d moved from %v to %v although its gateway is ready", id, first[id].addr, got.addr)
		}
	}
	dead.state = gwReady
	for id := range uint64(flows) {
		if got := h.pickGateway(id*0x9e3779b97f4a7c15, 0, nil); got != first[id] {
			t.Fatalf("flow %d on %v after the gateway came back, was on %v", id, got.addr, first[id].addr)
		}
	}
}
