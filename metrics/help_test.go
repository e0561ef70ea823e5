package metrics

import (
	"regexp"
	"strings"
	"testing"
)

// TestHelpSaysRegionsNotPairs: a region has 1 to 16 gateways, not a pair.
// mrgw_control_sessions_active still said "its pair partner" after
// regions grew past two; no help text may speak of a pair or a partner
// (no metric is about a pair of anything).
func TestHelpSaysRegionsNotPairs(t *testing.T) {
	pair := regexp.MustCompile(`(?i)\b(pairs?|partners?)\b`)
	for _, f := range Catalogue() {
		if m := pair.FindString(f.Help); m != "" {
			t.Errorf("%s: help speaks of a %q: %q", f.Name, m, f.Help)
		}
	}
	f, ok := Lookup("mrgw_control_sessions_active")
	if !ok {
		t.Fatal("mrgw_control_sessions_active is not in the catalogue")
	}
	if !strings.Contains(f.Help, "gateways of one region hold none with each other") {
		t.Errorf("mrgw_control_sessions_active: help %q does not say that a region's gateways hold no sessions with each other", f.Help)
	}
}
