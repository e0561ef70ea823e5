//go:build linux

package netio

import (
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mrgw/mrgw/cc"
	"github.com/mrgw/mrgw/metaroce"
	"github.com/mrgw/mrgw/netio/udp"
	"github.com/mrgw/mrgw/units"
)

// slowSocket is a real UDP socket whose every WriteBatch sleeps while
// slow is set: senders that hold every batch the owner has.
type slowSocket struct {
	*udp.Conn
	slow  *atomic.Bool
	delay time.Duration
}

func (s slowSocket) WriteBatch(msgs []udp.Message) (int, error) {
	if s.slow.Load() {
		time.Sleep(s.delay)
	}
	return s.Conn.WriteBatch(msgs)
}

// TestStarvedOwnerSleeps: while every batch is with a sender, a paced
// connection with data queued falls behind its schedule, so its next
// deadline is always due; the owner cannot send without a batch and must
// sleep until a sender returns one. Before, it went round its loop (the
// timers due, the due connections' deadlines, the clock) without sleeping,
// about a million times a second, on the core the senders needed. The
// bound holds however slowly the machine runs the test: a busy machine
// runs the owner less, not more.
func TestStarvedOwnerSleeps(t *testing.T) {
	ctx := testCtx(t)
	var slow atomic.Bool
	const delay = 20 * time.Millisecond
	p := newPair(t, nil, nil, func(c *Config) {
		c.Protocol.CC = cc.NewFixed(256<<10, units.ByteRate(1e9))
		if c.Protocol.Listen {
			return // only the sending endpoint (a) is slow
		}
		c.Bind = func(local netip.AddrPort, o udp.Options) (Socket, error) {
			u, err := udp.Listen(local, o)
			if err != nil {
				return nil, err
			}
			return slowSocket{Conn: u, slow: &slow, delay: delay}, nil
		}
	})
	c := p.transfer(t, ctx, 4, 64<<10)
	const size = 32 << 20
	p.key++
	key := p.key
	if err := p.b.Call(ctx, func(_ time.Duration, ep *metaroce.Endpoint) {
		if err := ep.Memory().Register(key, make([]byte, size)); err != nil {
			t.Error(err)
		}
	}); err != nil {
		t.Fatal(err)
	}
	slow.Store(true)
	defer slow.Store(false)
	if _, err := p.a.Write(ctx, c, 0, key, 0, make([]byte, size)); err != nil {
		t.Fatal(err)
	}
	s0 := p.a.Stats()
	time.Sleep(20 * delay)
	s1 := p.a.Stats()
	sent := s1.TxDatagrams - s0.TxDatagrams
	if sent*1400 >= size {
		t.Fatalf("%d datagrams sent while the senders were slow: the message was not waiting for batches", sent)
	}
	// Each pass is a wake-up: a returned batch, received datagrams (the
	// acks of what the slow senders wrote), a command, or the 1 ms
	// recheck. 20 writes of 20 ms per sender allow a few hundred.
	passes := s1.OwnerPasses - s0.OwnerPasses
	t.Logf("%d owner passes, %d datagrams sent", passes, sent)
	if passes > 3000 {
		t.Errorf("the owner went round its loop %d times in %v while its senders held the batches (%d datagrams sent): it spun",
			passes, 20*delay, sent)
	}
}
