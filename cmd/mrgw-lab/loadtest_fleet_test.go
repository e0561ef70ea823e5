//go:build linux

package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// A size whose --timeout passes still prints its rows, the step cut short
// carrying the timeout in "partial", then the next size runs; the
// command fails (exit status 1). It printed nothing before.
func TestFleetTimeoutPrintsRows(t *testing.T) {
	out, errOut, err := run(t, "loadtest", "fleet", "--gateways", "3,4", "--planes", "2", "--timeout", "1ms", "--json", "--quiet")
	if err == nil {
		t.Error("a run cut short did not fail")
	}
	sizes := map[int]bool{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var r struct {
			Gateways int    `json:"gateways"`
			Event    string `json:"event"`
			Partial  string `json:"partial"`
		}
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		if r.Partial != "" {
			if !strings.Contains(r.Partial, "timeout of 1ms") {
				t.Errorf("%d gateways, %s: partial %q does not name the timeout", r.Gateways, r.Event, r.Partial)
			}
			sizes[r.Gateways] = true
		}
	}
	if !sizes[3] || !sizes[4] {
		t.Errorf("partial rows for sizes %v, want 3 and 4 (stdout %q)", sizes, out)
	}
	if !strings.Contains(errOut, "timeout of 1ms") {
		t.Errorf("stderr %q does not name the timeout", errOut)
	}
}
