//go:build linux

package udp

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/mrgw/mrgw/internal/ecn"
)

func TestPlanGSO(t *testing.T) {
	a := netip.MustParseAddrPort("192.0.2.1:4000")
	b := netip.MustParseAddrPort("192.0.2.2:4000")
	type m struct {
		n    int
		addr netip.AddrPort
		ecn  ecn.Codepoint
	}
	type g struct{ start, count, seg int }
	tests := []struct {
		name     string
		msgs     []m
		maxSegs  int
		maxBytes int
		want     []g
	}{
		{"empty", nil, 128, maxGSOBytes, nil},
		{"one", []m{{1400, a, 0}}, 128, maxGSOBytes, []g{{0, 1, 1400}}},
		{"equal run", []m{{1400, a, 0}, {1400, a, 0}, {1400, a, 0}}, 128, maxGSOBytes, []g{{0, 3, 1400}}},
		{"short last joins", []m{{1400, a, 0}, {1400, a, 0}, {600, a, 0}}, 128, maxGSOBytes, []g{{0, 3, 1400}}},
		{"after a short one, a new group", []m{{1400, a, 0}, {600, a, 0}, {600, a, 0}}, 128, maxGSOBytes, []g{{0, 2, 1400}, {2, 1, 600}}},
		{"longer never joins", []m{{1000, a, 0}, {1400, a, 0}, {1400, a, 0}}, 128, maxGSOBytes, []g{{0, 1, 1000}, {1, 2, 1400}}},
		{"destination splits", []m{{1400, a, 0}, {1400, b, 0}, {1400, b, 0}, {1400, a, 0}}, 128, maxGSOBytes, []g{{0, 1, 1400}, {1, 2, 1400}, {3, 1, 1400}}},
		{"ECN splits", []m{{1400, a, ecn.ECT0}, {1400, a, ecn.CE}, {1400, a, ecn.CE}}, 128, maxGSOBytes, []g{{0, 1, 1400}, {1, 2, 1400}}},
		{"NotECT means the default", []m{{1400, a, ecn.NotECT}, {1400, a, ecn.ECT0}, {1400, a, ecn.ECT1}}, 128, maxGSOBytes, []g{{0, 2, 1400}, {2, 1, 1400}}},
		{"segment limit", []m{{10, a, 0}, {10, a, 0}, {10, a, 0}, {10, a, 0}, {10, a, 0}}, 2, maxGSOBytes, []g{{0, 2, 10}, {2, 2, 10}, {4, 1, 10}}},
		{"byte limit", []m{{1400, a, 0}, {1400, a, 0}, {1400, a, 0}}, 128, 2800, []g{{0, 2, 1400}, {2, 1, 1400}}},
		{"GSO off", []m{{1400, a, 0}, {1400, a, 0}}, 1, maxGSOBytes, []g{{0, 1, 1400}, {1, 1, 1400}}},
		{"empty datagrams stand alone", []m{{0, a, 0}, {0, a, 0}, {5, a, 0}, {0, a, 0}}, 128, maxGSOBytes, []g{{0, 1, 0}, {1, 1, 0}, {2, 1, 5}, {3, 1, 0}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var msgs []Message
			for _, x := range tt.msgs {
				msgs = append(msgs, Message{N: x.n, Addr: x.addr, ECN: x.ecn})
			}
			groups := planGSO(nil, msgs, tt.maxSegs, tt.maxBytes, ecn.ECT0)
			var got []g
			total := 0
			for _, gr := range groups {
				got = append(got, g{gr.start, gr.count, gr.segSize})
				bytes := 0
				for _, m := range msgs[gr.start : gr.start+gr.count] {
					bytes += m.N
				}
				if bytes != gr.bytes {
					t.Errorf("group at %d: bytes %d, want %d", gr.start, gr.bytes, bytes)
				}
				total += gr.count
			}
			if !slices.Equal(got, tt.want) {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
			if total != len(msgs) {
				t.Fatalf("groups cover %d messages of %d", total, len(msgs))
			}
		})
	}
}

// TestPlanGSOMaxSegments checks the kernel's 128-segment and 65,507-byte
// limits on long runs.
func TestPlanGSOMaxSegments(t *testing.T) {
	a := netip.MustParseAddrPort("192.0.2.1:4000")
	msgs := make([]Message, 300)
	for i := range msgs {
		msgs[i] = Message{N: 100, Addr: a}
	}
	groups := planGSO(nil, msgs, maxGSOSegments, maxGSOBytes, ecn.ECT0)
	if len(groups) != 3 || groups[0].count != 128 || groups[1].count != 128 || groups[2].count != 44 {
		t.Fatalf("100-byte run split as %+v", groups)
	}
	for i := range msgs {
		msgs[i].N = 1400
	}
	groups = planGSO(groups[:0], msgs, maxGSOSegments, maxGSOBytes, ecn.ECT0)
	if groups[0].count != maxGSOBytes/1400 || groups[0].bytes > maxGSOBytes {
		t.Fatalf("1400-byte run: first group %+v, want %d segments", groups[0], maxGSOBytes/1400)
	}
}
