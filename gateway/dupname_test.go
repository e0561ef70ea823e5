//go:build linux

package gateway_test

import (
	"context"
	"errors"
	"io"
	"net/netip"
	"strings"
	"testing"

	"github.com/mrgw/mrgw/loadtest/lab/labtest"

	"github.com/mrgw/mrgw/config"
	"github.com/mrgw/mrgw/gateway"
	"github.com/mrgw/mrgw/loadtest/lab"
)

// TestDuplicateNameStopsTheNewcomer: a copy of a running gateway's
// configuration started on other addresses stops on its own, before it
// serves anything, with ErrNameInUse naming the holder's gossip address;
// the holder and its peers see no control session come or go, and every
// gateway still has the holder at its own address. Before, the copy ran:
// its control sessions under the same name replaced the holder's at every
// peer, and the holder's WAN connections flapped until the copy stopped.
func TestDuplicateNameStopsTheNewcomer(t *testing.T) {
	l, err := lab.New(context.Background(), lab.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	l.Start()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	if err := l.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	holderGossip := l.Gateways["euw-gw1"].Cluster().Addr()
	sessions := func() map[string]float64 {
		out := map[string]float64{}
		for n, g := range l.Gateways {
			out[n] = counter(t, g.Metrics().ControlSessions.WithLabelValues("established"))
		}
		return out
	}
	before := sessions()

	cfg := *l.Configs["euw-gw1"]
	ip := netip.MustParseAddrPort(cfg.Gossip.Bind).Addr()
	var held []io.Closer
	port := func() string {
		a, h, err := lab.FreePort(ip)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, h...)
		return a.String()
	}
	cfg.LAN.Listen, cfg.Control.Listen, cfg.Gossip.Bind = port(), port(), port()
	planes := append([]config.Plane(nil), cfg.WAN.Planes...)
	for i := range planes {
		planes[i].Local, planes[i].Advertise = port(), ""
	}
	cfg.WAN.Planes = planes
	for _, c := range held {
		c.Close()
	}
	dup, err := gateway.New(&cfg, gateway.Options{Logger: labtest.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	defer dup.Close()
	err = dup.Run(ctx)
	if !errors.Is(err, gateway.ErrNameInUse) || !strings.Contains(err.Error(), holderGossip) {
		t.Fatalf("the copy's Run returned %v; want ErrNameInUse naming %s", err, holderGossip)
	}
	t.Logf("the copy stopped: %v", err)
	if after := sessions(); !equalCounts(before, after) {
		t.Errorf("control sessions established, before the copy %v, after %v", before, after)
	}
	for n, g := range l.Gateways {
		gw, ok := g.Cluster().View().Gateway("euw-gw1")
		if !ok || !gw.State.Live() || gw.Gossip.String() != holderGossip {
			t.Errorf("%s sees euw-gw1 as %+v (found %v), want live at %s", n, gw, ok, holderGossip)
		}
	}
}

func equalCounts(a, b map[string]float64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
