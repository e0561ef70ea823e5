//go:build linux

package gateway_test

import (
	"context"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/mrgw/mrgw/host"
	"github.com/mrgw/mrgw/loadtest/lab"
	"github.com/mrgw/mrgw/loadtest/lab/labtest"
)

// TestRegionRateFollowsDemand: the region's rate goes to the gateways
// that carry traffic. Two gateways of a region told 16 Mbit/s take half
// each while idle; with flows through one of them only, it takes well
// above half (all but the idle one's floor, 15/16); once the other
// carries flows too, both come back to about half.
func TestRegionRateFollowsDemand(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*patience)
	defer cancel()
	const rate = 16e6
	l := labtest.Start(t, ctx, lab.Config{Direct: true, RegionRateBps: rate})
	wan := func(name string) float64 { return gauge(t, l.Gateways[name].Metrics().WANRateBps) }
	waitUntil := func(what string, cond func(a, b float64) bool) {
		t.Helper()
		for {
			a, b := wan("euw-gw1"), wan("euw-gw2")
			if cond(a, b) {
				t.Logf("%s: euw-gw1 %.0f, euw-gw2 %.0f bit/s", what, a, b)
				return
			}
			if ctx.Err() != nil {
				t.Fatalf("waiting for %s: euw-gw1 paces at %.0f bit/s, euw-gw2 at %.0f (region rate %.0f)", what, a, b, float64(rate))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitUntil("both idle at half", func(a, b float64) bool { return a == rate/2 && b == rate/2 })

	dst := newHost(t, l, "dst", lab.RegionB)
	const key = 9
	if err := dst.RegisterMemory(key, make([]byte, 32<<10)); err != nil {
		t.Fatal(err)
	}
	pctx, pcancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { pcancel(); wg.Wait() }()
	wg.Add(1)
	go func() { // the deliveries are not checked here: drain them
		defer wg.Done()
		for {
			select {
			case <-pctx.Done():
				return
			case _, ok := <-dst.Received():
				if !ok {
					return
				}
			}
		}
	}()
	// pump sends through one gateway only, as fast as its flows go.
	pump := func(name, via string) {
		src, err := host.New(host.Config{Name: name, Region: lab.RegionA, Gateways: []netip.AddrPort{netip.MustParseAddrPort(l.Configs[via].LAN.Listen)},
			Key: l.HostKey, DeadAfter: time.Second, OpenTimeout: hostOpenTimeout, Logger: labtest.Logger()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { src.Close() })
		data := make([]byte, 32<<10)
		for range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for pctx.Err() == nil {
					f, err := lab.OpenFlow(pctx, src, lab.RegionB, "dst", host.FlowOptions{}, t.Logf)
					if err != nil {
						continue // the context ended, or try again
					}
					for pctx.Err() == nil {
						if _, err := f.Write(pctx, key, 0, data); err != nil {
							break
						}
					}
					f.Close()
				}
			}()
		}
	}
	pump("src1", "euw-gw1")
	waitUntil("flows through euw-gw1 only", func(a, b float64) bool { return a > 0.75*rate && a+b <= rate })
	pump("src2", "euw-gw2")
	waitUntil("flows through both", func(a, b float64) bool {
		return a >= 0.4*rate && a <= 0.6*rate && b >= 0.4*rate && b <= 0.6*rate
	})
}
