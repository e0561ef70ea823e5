//go:build linux

package datapath

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/mrgw/mrgw/cc"
	"github.com/mrgw/mrgw/internal/report"
	"github.com/mrgw/mrgw/internal/sleep"
	"github.com/mrgw/mrgw/loadtest/bulk"
	"github.com/mrgw/mrgw/loadtest/recovery"
	"github.com/mrgw/mrgw/metaroce"
	"github.com/mrgw/mrgw/netem"
	"github.com/mrgw/mrgw/pathmgr"
	"github.com/mrgw/mrgw/tunnel"
	"github.com/mrgw/mrgw/tunnel/tunneltest"

	"github.com/mrgw/mrgw/units"
)

// PlaneFailureOptions configure PlaneFailure. Zero values pick the
// defaults: the WAN of the tunnel's tests (4 planes of 25 Mbit/s each way,
// 40 ms RTT, 512 KiB queues), without random loss unless Loss is set.
type PlaneFailureOptions struct {
	Planes  int
	RateBps uint64 // per plane
	OneWay  time.Duration
	Loss    float64
	// Before is how long the transfer runs before the failure (after a
	// 1 s warm-up), After how long it runs after it (defaults 1.5 s, 4 s).
	Before, After time.Duration
	// DownAfter is the number of consecutive timeouts that take a path
	// down (default 1).
	DownAfter int
}

func (o *PlaneFailureOptions) defaults() {
	if o.Planes == 0 {
		o.Planes = 4
	}
	if o.RateBps == 0 {
		o.RateBps = 25e6
	}
	if o.OneWay == 0 {
		o.OneWay = 20 * time.Millisecond
	}
	if o.Before == 0 {
		o.Before = 1500 * time.Millisecond
	}
	if o.After == 0 {
		o.After = 4 * time.Second
	}
	if o.DownAfter == 0 {
		o.DownAfter = 1
	}
}

// PlaneFailure runs a steady sealed transfer between two tunnels through
// the link emulator, fails plane 0 in the middle, and reports the goodput
// before and after, the recovery time in round trips (until goodput is
// back to (P-1)/P of its level before), and whether any message was lost:
// once the measurement ends, every message written must complete, once and
// in order, at both ends.
//
// The sender uses fixed windows paced at the planes' total rate, sized so
// that the surviving planes' queues can hold what is in flight (32 paths of
// 48 KiB): the figures are the datapath's and the path manager's, not a
// congestion controller's.
func PlaneFailure(ctx context.Context, o PlaneFailureOptions) (report.Row, error) {
	o.defaults()
	row := report.Row{Scenario: "datapath", System: "tunnel-plane-failure", Planes: o.Planes, Paths: 32,
		RTTms: float64(2*o.OneWay) / 1e6, Loss: o.Loss, CapacityBps: float64(o.Planes) * float64(o.RateBps)}
	em, err := netem.New(ctx, netem.Config{
		Planes: o.Planes, Seed: 3, MaxDatagram: 4096,
		Link: netem.LinkConfig{Delay: o.OneWay, Loss: o.Loss, Rate: o.RateBps, QueueBytes: 512 << 10},
	})
	if err != nil {
		return row, err
	}
	defer em.Close()

	// The sender keeps 8 messages of 256 KiB queued until told to stop.
	src := make([]byte, 256<<10)
	dst := make([]byte, 256<<10)
	var (
		mu        sync.Mutex
		completed recovery.Series
	)
	tr := bulk.New(src, bulk.Options{Outstanding: 8, OnComplete: func(_ metaroce.Event, n uint64) {
		mu.Lock()
		defer mu.Unlock()
		completed.Add(time.Now(), n*uint64(len(src)))
	}})
	a, b, closeTunnels, err := pfTunnels(ctx, em, o, row.Paths, tr)
	if err != nil {
		return row, err
	}
	defer closeTunnels()
	var regErr error
	if err := b.Endpoint().Call(ctx, func(_ time.Duration, ep *metaroce.Endpoint) { regErr = ep.Memory().Register(1, dst) }); err != nil {
		return row, err
	}
	if regErr != nil {
		return row, regErr
	}

	// Sample the bytes placed at b every 10 ms: placement, unlike
	// completions (in order, so in bursts after a repair), shows the
	// goodput as it happens.
	samp := recovery.Sample(10*time.Millisecond, func() (uint64, bool) {
		var n uint64
		err := b.Endpoint().Call(ctx, func(_ time.Duration, ep *metaroce.Endpoint) {
			for _, c := range ep.Conns() {
				n += c.Stats.PayloadBytesPlaced
			}
		})
		return n, err == nil
	})
	defer samp.Stop()

	if _, err := a.Connect(ctx); err != nil {
		return row, err
	}
	if err := sleep.Ctx(ctx, time.Second+o.Before); err != nil {
		return row, err
	}
	if err := em.Fail(0); err != nil {
		return row, err
	}
	tFail := time.Now()
	if err := sleep.Ctx(ctx, o.After); err != nil {
		return row, err
	}
	end := time.Now()
	tr.Stop()
	samp.Stop()
	placed := samp.Series()

	// Every message written must complete at both ends.
	counts, err := tr.Drain(ctx, 30*time.Second)
	if err != nil {
		lost := counts.Incomplete()
		row.MessagesLost = &lost
		return row, errors.New("messages still incomplete 30 s after the measurement")
	}
	st := em.Stats()
	if st.Links[netem.AtoB][0].DownDrops == 0 && st.Links[netem.BtoA][0].DownDrops == 0 {
		return row, errors.New("the failed plane dropped nothing: the failure was not exercised")
	}
	mu.Lock()
	defer mu.Unlock()
	pfMeasure(&row, o, counts, placed, completed, tFail, end)
	return row, nil
}

// pfTunnels makes the two tunnels of PlaneFailure through em, a (site A)
// sending and b (site B) receiving, with tr's event handlers; closeTunnels
// closes both and their control sessions.
func pfTunnels(ctx context.Context, em *netem.Emulator, o PlaneFailureOptions, paths int, tr *bulk.Transfer) (a, b *tunnel.Tunnel, closeTunnels func(), err error) {
	routerA, routerB := tunnel.NewRouter(), tunnel.NewRouter()
	sp, err := tunneltest.LoopbackSessions(ctx, "pf-a", "pf-b", routerA.OnEvent, routerB.OnEvent)
	if err != nil {
		return nil, nil, nil, err
	}
	var closers []func()
	closeTunnels = func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	closers = append(closers, sp.Close)
	defer func() {
		if err != nil {
			closeTunnels()
		}
	}()
	proto := func(listen bool) metaroce.Config {
		return metaroce.Config{
			MTU: 1400, Paths: paths, Listen: listen, Seed: 11,
			CC:          cc.NewFixed(48<<10, units.BitRate(float64(o.Planes)*float64(o.RateBps)).Bytes()),
			MaxAckDelay: 2 * time.Millisecond,
			Path: pathmgr.Config{
				InitialRTT: 2 * o.OneWay, MinPTO: 10 * time.Millisecond, MaxAckDelay: 2 * time.Millisecond,
				DownAfter: o.DownAfter, ProbeInterval: 20 * time.Millisecond, MaxProbeInterval: time.Second, UpAfter: 2,
			},
		}
	}
	var realB netip.AddrPort
	a, err = tunnel.New(sp.A, tunnel.Config{Protocol: proto(false), Listen: loop4, Router: routerA, OnEvent: tr.Sender,
		PlaneOf: func(_ int, local netip.AddrPort) int { return em.PlaneOf(netem.AtoB, local, realB) }})
	if err != nil {
		return nil, nil, nil, err
	}
	closers = append(closers, func() { a.Close() })
	b, err = tunnel.New(sp.B, tunnel.Config{Protocol: proto(true), Listen: loop4, Router: routerB, OnEvent: tr.Receiver})
	if err != nil {
		return nil, nil, nil, err
	}
	closers = append(closers, func() { b.Close() })
	realB = b.LocalAddr()
	standA, err := em.Expose(netem.SiteA, a.LocalAddr())
	if err != nil {
		return nil, nil, nil, err
	}
	standB, err := em.Expose(netem.SiteB, realB)
	if err != nil {
		return nil, nil, nil, err
	}
	if err := a.SetPeerAddr(standB); err != nil {
		return nil, nil, nil, err
	}
	if err := b.SetPeerAddr(standA); err != nil {
		return nil, nil, nil, err
	}
	return a, b, closeTunnels, nil
}

// pfMeasure fills in the row of a plane failure at tFail measured until
// end: recovery from the bytes placed, and from the messages completed.
func pfMeasure(row *report.Row, o PlaneFailureOptions, counts bulk.Counts, placed, completed recovery.Series, tFail, end time.Time) {
	rtt := 2 * o.OneWay
	target := float64(o.Planes-1) / float64(o.Planes)
	rp := placed.Measure(tFail, end, rtt, target)
	rc := completed.Measure(tFail, end, rtt, target)
	// A gap is a message never delivered in its place; written - recv
	// counts those that never completed at all (none, after the drain).
	lost := counts.Lost()
	dup := int64(counts.Dups)
	row.MessagesFailed = counts.Failed
	row.Messages = int(counts.Written)
	row.MessagesLost, row.MessagesDuplicated = &lost, &dup
	row.Fault = fmt.Sprintf("plane 0 fails after %v", time.Second+o.Before)
	row.GoodputBps = rp.After
	row.Fraction = rp.After / rp.Before
	row.RecoveryRTTs = rp.RTTs
	row.RecoveryMs = rp.RTTs * float64(rtt) / 1e6
	if rp.RTTs < 0 {
		row.RecoveryMs = -1
	}
	row.Note = fmt.Sprintf("placed bytes: %.1f Mbit/s before, %.1f after recovery (%.2f of before; target %.2f), "+
		"%.0f%% of %v windows below target; completed messages: recovered after %.1f RTTs, %.1f Mbit/s after (%.2f of before)",
		rp.Before/1e6, rp.After/1e6, rp.After/rp.Before, target, 100*rp.Below, rp.Window,
		rc.RTTs, rc.After/1e6, rc.After/rc.Before)
}
