package responder

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/mrgw/mrgw/conformance"
)

// startResponder runs a responder on loopback for the test's lifetime.
func startResponder(t *testing.T, opts Options) netip.AddrPort {
	t.Helper()
	r, err := New("127.0.0.1:0", opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("responder: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Error("responder did not stop")
		}
	})
	return r.Addr()
}

func runSuite(t *testing.T, target netip.AddrPort, ids ...string) []conformance.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	defer cancel()
	res, err := conformance.Run(ctx, target, conformance.Options{Cases: ids, Seed: 42})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// knownFailures are cases that mrgw's own endpoint is known to fail, with a
// substring of the expected failure detail; when a fix lands the case passes
// and TestSuiteAgainstResponder asks for the entry to be removed. Empty: the
// last one (a refused message stalling its stream, see
// TestMetaroceRefusedHeadStall) was fixed in metaroce.
var knownFailures = map[string]string{}

// TestSuiteAgainstResponder runs every case against mrgw's own responder:
// all pass, but for the known metaroce bug.
func TestSuiteAgainstResponder(t *testing.T) {
	addr := startResponder(t, Options{})
	res := runSuite(t, addr)
	var buf strings.Builder
	if err := conformance.WriteTable(&buf, res); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + buf.String())
	if len(res) != len(conformance.CaseIDs()) {
		t.Fatalf("%d results for %d cases", len(res), len(conformance.CaseIDs()))
	}
	for _, r := range res {
		if want, known := knownFailures[r.Case]; known {
			if r.Verdict != conformance.Fail || !strings.Contains(r.Detail, want) {
				t.Errorf("%s: known metaroce failure now %s (%s): if metaroce was fixed, remove it from knownFailures", r.Case, r.Verdict, r.Detail)
			}
			continue
		}
		if r.Verdict != conformance.Pass {
			t.Errorf("%s (%s): %s: %s", r.Case, r.Section, r.Verdict, r.Detail)
		}
	}
}
