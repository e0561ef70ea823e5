//go:build linux

package gateway_test

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

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
			Key: key, Takeover: takeover, OpenTimeout: open, Logger: testLogger(t)})
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
