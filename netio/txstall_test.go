//go:build linux

package netio

import (
	"context"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mrgw/mrgw/metaroce"
	"github.com/mrgw/mrgw/netio/udp"
)

// stallSocket is a real UDP socket whose next WriteBatch, once armed,
// sleeps before it writes: a sender goroutine the machine did not run.
type stallSocket struct {
	*udp.Conn
	armed *atomic.Bool
	stall time.Duration
}

func (s stallSocket) WriteBatch(msgs []udp.Message) (int, error) {
	if s.armed.CompareAndSwap(true, false) {
		time.Sleep(s.stall)
	}
	return s.Conn.WriteBatch(msgs)
}

// TestStalledSenderIsNotASilentPath: a sender that holds a batch of DATA
// for several probe timeouts before writing it must not make the paths of
// those datagrams time out. The protocol records a datagram as sent when
// the owner polls it; before the owner told it when each datagram actually
// left (returned, metaroce Conn.Departed; before that, holdTimers held the
// endpoint's timers), the probe timeout ran from the poll, fired while the
// datagrams were still with the sender, and declared the flight lost (a
// false timeout, then every chunk of it sent again).
func TestStalledSenderIsNotASilentPath(t *testing.T) {
	ctx := testCtx(t)
	var armed atomic.Bool
	// The stall is several probe timeouts long (and within
	// maxSenderWait); the probe timeout is long enough that this loaded
	// machine, under the race detector, does not hold the receiver up as
	// long on its own (with 50 ms it did, once in a few runs).
	const minPTO = 150 * time.Millisecond
	const stall = 400 * time.Millisecond
	p := newPair(t, nil, nil, func(c *Config) {
		c.Protocol.Path.MinPTO = minPTO
		if c.Protocol.Listen {
			return // only the sending endpoint (a) stalls
		}
		c.Bind = func(local netip.AddrPort, o udp.Options) (Socket, error) {
			u, err := udp.Listen(local, o)
			if err != nil {
				return nil, err
			}
			return stallSocket{Conn: u, armed: &armed, stall: stall}, nil
		}
	})
	// A first transfer: the paths have round-trip samples and sockets.
	c := p.transfer(t, ctx, 8, 64<<10)
	stats := func() (st metaroce.ConnStats) {
		if err := p.a.Call(ctx, func(time.Duration, *metaroce.Endpoint) { st = c.Stats }); err != nil {
			t.Fatal(err)
		}
		return st
	}
	before := stats()
	for round := range 3 {
		armed.Store(true)
		// One message of 4 chunks: one datagram per path (round robin),
		// all polled in one flush; the first batch written stalls.
		p.sendMore(t, ctx, c, 4*1400)
		if armed.Load() {
			t.Fatalf("round %d: no write stalled", round)
		}
	}
	after := stats()
	// Read as silence, the stall timed out most of the held datagrams'
	// paths (8 of the 12 before the fix). A machine busy enough can still
	// hold the receiver up for a PTO on its own, now and then (1 timeout
	// in a run beside two CPU hogs, scripts/test-busy.sh): that is not
	// what this test is about, so it allows as much.
	const noise = 2
	if d := after.Timeouts - before.Timeouts; d > noise {
		t.Errorf("%d probe timeouts while a sender held its datagrams for %v (retransmits %d): the stall read as silent paths",
			d, stall, after.Retransmits-before.Retransmits)
	}
}

// sendMore WRITEs n bytes on c into fresh memory at b and waits until the
// message completes at a.
func (p *pair) sendMore(t *testing.T, ctx context.Context, c *metaroce.Conn, n int) {
	t.Helper()
	p.key++
	key := p.key
	dst := make([]byte, n)
	if err := p.b.Call(ctx, func(_ time.Duration, ep *metaroce.Endpoint) {
		if err := ep.Memory().Register(key, dst); err != nil {
			t.Error(err)
		}
	}); err != nil {
		t.Fatal(err)
	}
	count := func(evs []metaroce.Event) int {
		k := 0
		for _, ev := range evs {
			if ev.Kind == metaroce.EventSendComplete {
				k++
			}
		}
		return k
	}
	want := count(p.ra.Events()) + 1
	if _, err := p.a.Write(ctx, c, 0, key, 0, make([]byte, n)); err != nil {
		t.Fatal(err)
	}
	p.ra.Wait(t, ctx, "the message's completion", func(evs []metaroce.Event) bool { return count(evs) >= want })
}
