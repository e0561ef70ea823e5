//go:build linux

package gateway_test

import (
	"context"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/mrgw/mrgw/loadtest/lab/labtest"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/mrgw/mrgw/config"
	"github.com/mrgw/mrgw/gateway"
	"github.com/mrgw/mrgw/host"
	"github.com/mrgw/mrgw/loadtest/lab"
	"github.com/mrgw/mrgw/metaroce"
	"github.com/mrgw/mrgw/metrics"
)

// wanConns returns the ids and pacing rates (bytes/s) of g's WAN
// connections.
func wanConns(t *testing.T, g *gateway.Gateway) (ids []uint64, rates []float64) {
	t.Helper()
	err := g.Endpoint().Call(context.Background(), func(_ time.Duration, ep *metaroce.Endpoint) {
		for _, c := range ep.Conns() {
			if c.Peer() < 1<<20 && c.Established() && !c.Closed() {
				ids = append(ids, c.ID())
				rates = append(rates, float64(c.Controller().PacingRate()))
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return ids, rates
}

func counter(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

func reload(t *testing.T, g *gateway.Gateway, change func(c *config.Config)) {
	t.Helper()
	next := *g.Config()
	change(&next)
	if err := next.Validate(); err != nil {
		t.Fatal(err)
	}
	if err := g.Reload(&next); err != nil {
		t.Fatalf("reload: %v", err)
	}
}

// TestReloadReachesExistingConnections: a live reload of wan.max_rate_bps
// and wan.key_rotation changes the WAN connections and control sessions
// that are already up, not only the next ones.
func TestReloadReachesExistingConnections(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	const slow, fast = 8e6, 80e6 // bit/s
	l := labtest.Start(t, ctx, lab.Config{WANControl: config.WANControllerFixed, WANRateBps: slow, OneWay: 5 * time.Millisecond})
	g := l.Gateways["euw-gw1"]
	// Both WAN connections were up at WaitReady; on a starved machine one
	// may be dropped as silent and dialled again right after (under -race
	// at load 12-16: "1 WAN connections"), so wait for the pair.
	ids, rates := wanConns(t, g)
	for len(ids) != 2 {
		select {
		case <-ctx.Done():
			t.Fatalf("euw-gw1 has %d WAN connections, want 2", len(ids))
		case <-time.After(20 * time.Millisecond):
		}
		ids, rates = wanConns(t, g)
	}
	for _, r := range rates {
		if r > slow/8 {
			t.Fatalf("pacing %v B/s above max_rate %v bit/s before the reload", r, slow)
		}
	}
	sessions := counter(t, g.Metrics().ControlSessions.WithLabelValues(metrics.ResultEstablished))
	rotations := func() float64 {
		return counter(t, g.Metrics().KeyRotations.WithLabelValues("use-gw1", lab.RegionB, metrics.ResultOK)) +
			counter(t, g.Metrics().KeyRotations.WithLabelValues("use-gw2", lab.RegionB, metrics.ResultOK))
	}
	if n := rotations(); n != 0 {
		t.Fatalf("%v key rotations before the reload (lifetime 10 min)", n)
	}

	// Raise max_rate everywhere (the receivers' capacity, which sets their
	// rate hints, too) and shorten euw-gw1's key lifetime to 1 s.
	for n, gw := range l.Gateways {
		reload(t, gw, func(c *config.Config) {
			c.WAN.MaxRateBps = fast
			if n == "euw-gw1" {
				c.WAN.KeyRotation = time.Second
			}
		})
	}
	// Traffic through euw-gw1 brings the receivers' new hints back in
	// acks; the existing connections then pace above the old ceiling.
	src, err := host.New(host.Config{Name: "src", Region: lab.RegionA, Gateways: []netip.AddrPort{netip.MustParseAddrPort(l.Configs["euw-gw1"].LAN.Listen)}, Key: l.HostKey,
		DeadAfter: time.Second, OpenTimeout: hostOpenTimeout, Logger: labtest.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst := newHost(t, l, "dst", lab.RegionB)
	tr := newTransfer(t, src, dst, 64<<20)
	rctx, rcancel := context.WithCancel(ctx)
	defer rcancel()
	go tr.receive(rctx)
	var flows []*host.Flow
	for range 4 { // flows are spread over use-gw1 and use-gw2 by id
		f, err := lab.OpenFlow(ctx, src, lab.RegionB, "dst", host.FlowOptions{}, t.Logf)
		if err != nil {
			t.Fatal(err)
		}
		flows = append(flows, f)
	}
	rng := rand.New(rand.NewPCG(1, 1))
	var peak float64
	for i := 0; peak <= slow/8 || rotations() < 2; i++ {
		if ctx.Err() != nil {
			t.Fatalf("after the reload: peak pacing %v B/s (old ceiling %v), %v key rotations", peak, slow/8, rotations())
		}
		if i < 600 {
			if err := tr.send(ctx, flows[i%len(flows)], rng); err != nil {
				t.Fatal(err)
			}
		} else {
			time.Sleep(20 * time.Millisecond)
		}
		now, rates := wanConns(t, g)
		if !slices.Equal(now, ids) {
			t.Fatalf("WAN connections changed from %x to %x: the reload must not reconnect", ids, now)
		}
		peak = max(peak, slices.Max(rates))
	}
	tr.wait(ctx)
	tr.check()
	if s := counter(t, g.Metrics().ControlSessions.WithLabelValues(metrics.ResultEstablished)); s != sessions {
		t.Fatalf("control sessions established went from %v to %v: rotation must use the sessions already up", sessions, s)
	}
	t.Logf("existing connections pace at up to %.0f B/s after raising max_rate (old ceiling %.0f); %v key rotations on the existing sessions", peak, slow/8, rotations())

	// Lower max_rate on euw-gw1 alone: its existing connections come
	// down at once, whatever the receivers' hints say.
	const lower = 4e6
	reload(t, g, func(c *config.Config) { c.WAN.MaxRateBps = lower })
	now, rates := wanConns(t, g)
	if !slices.Equal(now, ids) {
		t.Fatalf("WAN connections changed from %x to %x", ids, now)
	}
	for _, r := range rates {
		if r > lower/8 {
			t.Fatalf("pacing %v B/s after lowering max_rate to %v bit/s", r, lower)
		}
	}
}

func gauge(t *testing.T, c prometheus.Gauge) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetGauge().GetValue()
}
