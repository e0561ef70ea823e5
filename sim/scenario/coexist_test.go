package scenario

import (
	"testing"
)

// TestCCCoexistence: at a bottleneck that marks CE above 0.1 BDP, mrgw's
// WAN controllers must not starve a classic-ECN flow (issue #6). The
// classic flow must keep at least a quarter of its fair half of the pair
// and at least 0.4 of what it gets against another classic flow; with
// drop-tail only, the same. The controllers must still use the link.
// Before markedShare (cc/aimd.go) the classic flow held 0.002 of the pair
// under the marking; with it, 0.271 (htcp) and 0.233 (scalable), 0.57
// and 0.50 of its goodput against a classic flow.
func TestCCCoexistence(t *testing.T) {
	rows, err := Coexistence(Options{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	logRows(t, rows)
	base := map[string]float64{} // variant -> classic flow's goodput against a classic flow
	for _, r := range rows {
		if r.CC == CoexistClassic+"+"+CoexistClassic {
			base[r.Variant] = r.Shares[1] * r.Fraction
		}
	}
	for _, r := range rows {
		if r.CC == CoexistClassic+"+"+CoexistClassic {
			continue
		}
		got := r.Shares[1] * r.Fraction
		if r.Shares[1] < 0.125 || got < 0.4*base[r.Variant] {
			t.Errorf("%s, %s: classic flow's share %.3f of the pair (want >= 0.125), %.3f of the link (want >= 0.4 × %.3f, its goodput against a classic flow)",
				r.CC, r.Variant, r.Shares[1], got, base[r.Variant])
		}
		if r.Fraction < 0.8 {
			t.Errorf("%s, %s: link %.3f busy, want >= 0.8", r.CC, r.Variant, r.Fraction)
		}
	}
}
