//go:build linux

package gateway_test

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/mrgw/mrgw/loadtest/lab/labtest"

	"github.com/mrgw/mrgw/gateway"
	"github.com/mrgw/mrgw/host"
)

// TestDuplicateEndpointRefused: a second host with the
// name of a live one used to steal it silently, and when it exited the
// original was unreachable (/status: 0 hosts). Now the duplicate is refused
// with an error that says what to do, the original keeps its name, an
// explicit takeover works (and the holder is told), and a host killed and
// restarted under its name gets it back once the old one is silent.
func TestDuplicateEndpointRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	g, key := soloGateway(t, ctx, gateway.Options{}, nil)
	reg := g.Config().Node.Region
	newHost := func(name string, takeover bool, open time.Duration) (*host.Host, error) {
		h, err := host.New(host.Config{Name: name, Region: reg, Gateways: []netip.AddrPort{g.LANAddr()},
			Key: key, Takeover: takeover, OpenTimeout: open, Logger: labtest.Logger()})
		if err == nil {
			t.Cleanup(func() { h.Close() })
		}
		return h, err
	}
	h1, err := newHost("trainer-0", false, patience/4)
	if err != nil {
		t.Fatal(err)
	}
	waitStatus(t, ctx, g, "trainer-0 registered", func(st gateway.Status) bool { return st.Hosts == 1 && st.Admission.Peers == 1 })
	// The duplicate is refused, clearly.
	h2, err := newHost("trainer-0", false, 2*time.Second)
	if err == nil {
		h2.Close()
		t.Fatal("a second host registered a live host's name")
	}
	if !errors.Is(err, host.ErrRefused) || !strings.Contains(err.Error(), "--takeover") {
		t.Fatalf("duplicate: %v, want ErrRefused saying what to do", err)
	}
	t.Logf("duplicate refused: %v", err)
	// The original still holds it once the duplicate is gone.
	waitStatus(t, ctx, g, "the duplicate's peer gone", func(st gateway.Status) bool { return st.Admission.Peers == 1 })
	if st := g.Status(); st.Hosts != 1 {
		t.Fatalf("after the duplicate left: %d hosts, want 1 (the original)", st.Hosts)
	}
	if gw := h1.Gateways(); len(gw) != 1 || !gw[0].Ready {
		t.Fatalf("the original lost its registration: %+v", gw)
	}
	// An explicit takeover replaces it, and the holder is told.
	if _, err := newHost("trainer-0", true, patience/4); err != nil {
		t.Fatalf("takeover: %v", err)
	}
	for {
		if gw := h1.Gateways(); len(gw) == 1 && !gw[0].Ready {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("the host taken over still believes it is registered")
		case <-time.After(20 * time.Millisecond):
		}
	}
	// A host killed and restarted gets its name back once the dead one is
	// silent (no waiting for the idle reclaim).
	v, err := newHost("trainer-1", false, patience/4)
	if err != nil {
		t.Fatal(err)
	}
	v.Kill()
	if _, err := newHost("trainer-1", false, patience/2); err != nil {
		t.Fatalf("restart under the same name: %v", err)
	}
}

// TestHostOfAnotherRegionRefused: a host that names another region than
// its gateway's is refused at once, with a REGISTER_ERR that says which
// region the gateway serves and what to change, counted as wrong_region.
// Before, it registered, and flows addressed to it in the region it named
// never found it.
func TestHostOfAnotherRegionRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	g, key := soloGateway(t, ctx, gateway.Options{}, nil)
	reg := g.Config().Node.Region
	h, err := host.New(host.Config{Name: "trainer-0", Region: reg + "-other", Gateways: []netip.AddrPort{g.LANAddr()},
		Key: key, OpenTimeout: patience / 2, Logger: labtest.Logger()})
	if err == nil {
		h.Close()
		t.Fatalf("a host naming region %q registered with a gateway of %q", reg+"-other", reg)
	}
	if !errors.Is(err, host.ErrRefused) || !strings.Contains(err.Error(), `serves region "`+reg+`"`) || !strings.Contains(err.Error(), "--region") {
		t.Fatalf("wrong region: %v, want ErrRefused naming the gateway's region and saying what to do", err)
	}
	t.Logf("refused: %v", err)
	if n := counter(t, g.Metrics().RegistrationsRefused.WithLabelValues("wrong_region")); n != 1 {
		t.Errorf("wrong_region refusals = %v, want 1", n)
	}
}

// TestRepeatedRefusalLoggedOnce: a host whose name is in use retries
// with backoff and is refused each time; it logs the refusal once, not on
// every retry (14 identical error lines in 3 s before). When the holder
// goes, it registers.
func TestRepeatedRefusalLoggedOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	g, key := soloGateway(t, ctx, gateway.Options{}, nil)
	reg := g.Config().Node.Region
	h1, err := host.New(host.Config{Name: "trainer-0", Region: reg, Gateways: []netip.AddrPort{g.LANAddr()},
		Key: key, OpenTimeout: patience / 4, Logger: labtest.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	var logs lockedBuffer
	done := make(chan error, 1)
	go func() {
		h2, err := host.New(host.Config{Name: "trainer-0", Region: reg, Gateways: []netip.AddrPort{g.LANAddr()},
			Key: key, OpenTimeout: patience / 2, Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelError}))})
		if err == nil {
			h2.Close()
		}
		done <- err
	}()
	dup := g.Metrics().RegistrationsRefused.WithLabelValues("duplicate")
	for counter(t, dup) < 3 {
		select {
		case err := <-done:
			t.Fatalf("the second host ended before three refusals: %v", err)
		case <-ctx.Done():
			t.Fatalf("%v refusals", counter(t, dup))
		case <-time.After(20 * time.Millisecond):
		}
	}
	h1.Close()
	if err := <-done; err != nil {
		t.Fatalf("the second host did not register once the holder left: %v", err)
	}
	lines := strings.Count(logs.String(), "level=ERROR")
	t.Logf("%v refusals, %d error lines:\n%s", counter(t, dup), lines, logs.String())
	if lines != 1 {
		t.Errorf("%d error lines for %v identical refusals, want 1", lines, counter(t, dup))
	}
}

// TestGatewayGoneWarnedOnce: a host whose gateway stopped tries again
// every OpenTimeout and warns once that nothing answers, not on every
// attempt (a drained gateway made its hosts warn every 5 s).
func TestGatewayGoneWarnedOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	g, key := soloGateway(t, ctx, gateway.Options{}, nil)
	var logs lockedBuffer
	h, err := host.New(host.Config{Name: "trainer-0", Region: g.Config().Node.Region, Gateways: []netip.AddrPort{g.LANAddr()},
		Key: key, OpenTimeout: 300 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	base := h.Stats().ConnectFailures
	g.Close()
	for h.Stats().ConnectFailures < base+3 {
		select {
		case <-ctx.Done():
			t.Fatalf("%d failed attempts", h.Stats().ConnectFailures-base)
		case <-time.After(20 * time.Millisecond):
		}
	}
	n := strings.Count(logs.String(), "no answer to the handshake")
	t.Logf("%d failed attempts, %d warnings:\n%s", h.Stats().ConnectFailures-base, n, logs.String())
	if n != 1 {
		t.Errorf("%d warnings of an unanswered handshake for %d attempts, want 1", n, h.Stats().ConnectFailures-base)
	}
}
