//go:build linux

package gateway_test

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/mrgw/mrgw/loadtest/lab/labtest"

	dto "github.com/prometheus/client_model/go"

	"github.com/mrgw/mrgw/loadtest/lab"
	"github.com/mrgw/mrgw/netem"
	"github.com/mrgw/mrgw/region"
	"github.com/mrgw/mrgw/tunnel/control"
)

// TestTrustByCertificate: a gateway is accepted for what its certificate
// says (chained to the CA, mrgw://REGION/NAME) matched against what it
// announces in gossip, with no list of peers configured. A gateway that
// announces region ap-south in gossip but whose certificate says us-east
// is refused, counted (identity_mismatch) and logged; the same gateway
// with a matching certificate is accepted; a reload that denies its
// region ends its session and refuses it again (denied). Before fleets the
// listener accepted exactly control.peer_names (or the gateways regions
// named): a gateway could claim any region in gossip.
func TestTrustByCertificate(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	l := labtest.Start(t, ctx, lab.Config{Direct: true, Regions: []lab.Region{
		{Name: lab.RegionA, Site: netem.SiteA, Gateways: 1, Prefix: "euw"},
		{Name: lab.RegionB, Site: netem.SiteB, Gateways: 1, Prefix: "use"},
	}})
	gw := l.Gateways["euw-gw1"]
	cfg := l.Configs["euw-gw1"]

	// A gateway "evil-gw1" of ap-south joins gossip (it runs no data
	// plane: its announced addresses lead nowhere).
	nowhere := netip.MustParseAddrPort("127.0.0.1:9")
	ev, err := region.New(region.Config{Name: "evil-gw1", Bind: "127.0.0.1:0", Profile: region.ProfileCustom,
		Timings: region.Timings{ProbeInterval: 500 * time.Millisecond, ProbeTimeout: 400 * time.Millisecond, SuspicionMult: 3, GossipInterval: 50 * time.Millisecond},
		Meta:    region.Meta{Region: "ap-south", Control: nowhere, Planes: []region.Plane{{Name: "wan", WAN: nowhere}}}}, labtest.Logger())
	if err != nil {
		t.Fatal(err)
	}
	defer ev.Shutdown()
	if _, err := ev.Join(ctx, []string{cfg.Gossip.Bind}); err != nil {
		t.Fatal(err)
	}
	for {
		if g, ok := gw.Cluster().View().Gateway("evil-gw1"); ok && g.State == region.Alive {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("euw-gw1 never saw evil-gw1 in gossip")
		case <-time.After(20 * time.Millisecond):
		}
	}
	dial := func(certRegion string) error {
		id, err := l.CA().IssueIn(certRegion, "evil-gw1", time.Now().Add(-time.Minute), time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		dctx, c := context.WithTimeout(ctx, 10*time.Second)
		defer c()
		s, err := control.Dial(dctx, cfg.Control.Listen, "euw-gw1", control.Config{
			Credentials: l.CA().Credentials(id), ExpectedPeers: []string{"euw-gw1"},
			Local: control.LocalInfo{Name: "evil-gw1", Region: certRegion, Planes: []netip.AddrPort{nowhere}, NumPaths: 1},
		})
		if err == nil {
			s.Close()
		}
		return err
	}
	refused := func(reason string) float64 {
		var d dto.Metric
		if err := gw.Metrics().ControlRefusals.WithLabelValues(reason).Write(&d); err != nil {
			t.Fatal(err)
		}
		return d.GetCounter().GetValue()
	}
	// The listener counts a refusal after it has closed the connection:
	// wait for the count.
	waitRefused := func(reason string, n float64) {
		t.Helper()
		for refused(reason) < n {
			select {
			case <-ctx.Done():
				t.Fatalf("%s refusals = %v, want %v", reason, refused(reason), n)
			case <-time.After(10 * time.Millisecond):
			}
		}
		if got := refused(reason); got != n {
			t.Fatalf("%s refusals = %v, want %v", reason, got, n)
		}
	}

	// Certificate us-east, gossip ap-south: refused as a mismatch.
	if err := dial(lab.RegionB); !errors.Is(err, control.ErrUnknownPeer) {
		t.Fatalf("a certificate of another region than announced: dial = %v, want refused", err)
	}
	waitRefused(control.ReasonMismatch, 1)
	// A certificate without a region (the old form) for a gateway the
	// configuration does not name: refused too.
	if err := dial(""); !errors.Is(err, control.ErrUnknownPeer) {
		t.Fatalf("an old-form certificate: dial = %v, want refused", err)
	}
	// The matching certificate: accepted, with no peer list anywhere.
	if err := dial("ap-south"); err != nil {
		t.Fatalf("the matching certificate was refused: %v", err)
	}
	// Revocation: a reload denying the region refuses it (live).
	next := *cfg
	next.Control.Deny = []string{"ap-south/*"}
	if err := gw.Reload(&next); err != nil {
		t.Fatal(err)
	}
	if err := dial("ap-south"); !errors.Is(err, control.ErrPeerDenied) && !errors.Is(err, control.ErrUnknownPeer) {
		t.Fatalf("after the deny-list reload: dial = %v, want refused", err)
	}
	waitRefused(control.ReasonDenied, 1)
	if _, ok := gw.PeerID("evil-gw1"); ok {
		t.Error("euw-gw1 still has a peer evil-gw1 after denying it")
	}
	// us-east, not denied, still carries traffic.
	src := newHost(t, l, "loader", lab.RegionA)
	dst := newHost(t, l, "trainer", lab.RegionB)
	moveAndCheck(t, ctx, src, dst, lab.RegionB, 4)
}
