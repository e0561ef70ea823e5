//go:build linux

package gateway_test

import (
	"context"
	"encoding/base64"
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/mrgw/mrgw/loadtest/lab/labtest"

	"github.com/mrgw/mrgw/gateway"
	"github.com/mrgw/mrgw/host"
)

// TestUnauthenticatedRegistrationRefused: with
// lan.host_keys set, a REGISTER without a credential, under an unknown key
// or with a wrong secret is refused, counted by reason and the host told
// what to do; the right key registers; a reloaded key list applies to the
// next registration. Before, anyone who reached the LAN port could
// register any name.
func TestUnauthenticatedRegistrationRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	g, key := soloGateway(t, ctx, gateway.Options{}, nil)
	reg := g.Config().Node.Region
	try := func(name string, k *host.Key) error {
		h, err := host.New(host.Config{Name: name, Region: reg, Gateways: []netip.AddrPort{g.LANAddr()},
			Key: k, OpenTimeout: patience / 4, Logger: labtest.Logger()})
		if err == nil {
			t.Cleanup(func() { h.Close() })
		}
		return err
	}
	refused := func(reason string) float64 {
		return counter(t, g.Metrics().RegistrationsRefused.WithLabelValues(reason))
	}
	for _, tc := range []struct {
		name   string
		key    *host.Key
		reason string
	}{
		{"no credential", nil, "unauthenticated"},
		{"unknown key", &host.Key{ID: "nope", Secret: key.Secret}, "unknown_key"},
		{"wrong secret", &host.Key{ID: key.ID, Secret: []byte("0123456789abcdef0123456789abcdef")}, "bad_mac"},
	} {
		err := try("intruder", tc.key)
		if err == nil {
			t.Fatalf("%s: registered", tc.name)
		}
		if !errors.Is(err, host.ErrRefused) || !strings.Contains(err.Error(), "credential") {
			t.Fatalf("%s: %v, want ErrRefused saying a credential is needed", tc.name, err)
		}
		if n := refused(tc.reason); n != 1 {
			t.Fatalf("%s: mrgw_host_registrations_refused_total{reason=%q} = %v, want 1", tc.name, tc.reason, n)
		}
	}
	if st := g.Status(); st.Hosts != 0 {
		t.Fatalf("%d hosts registered without a valid credential", st.Hosts)
	}
	if err := try("trainer-0", key); err != nil {
		t.Fatalf("the right key: %v", err)
	}
	// A reloaded key list: the old key is refused, the new one works.
	next := *g.Config()
	fresh := &host.Key{ID: "k2", Secret: []byte("fedcba9876543210fedcba9876543210")}
	next.LAN.HostKeys = []string{fresh.ID + ":" + base64.StdEncoding.EncodeToString(fresh.Secret)}
	if err := g.Reload(&next); err != nil {
		t.Fatal(err)
	}
	if err := try("trainer-1", key); err == nil {
		t.Fatal("a key removed by reload still registers")
	}
	if err := try("trainer-2", fresh); err != nil {
		t.Fatalf("the reloaded key: %v", err)
	}
}
