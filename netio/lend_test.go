//go:build linux

package netio

import (
	"bytes"
	crand "crypto/rand"
	"net/netip"
	"testing"
	"time"

	"github.com/mrgw/mrgw/metaroce"
	"github.com/mrgw/mrgw/netio/udp"
)

// lateSocket is a real UDP socket whose WriteBatch returns a while after
// it wrote: a sender goroutine descheduled before it hands its batch back.
type lateSocket struct {
	*udp.Conn
	late time.Duration
}

func (s lateSocket) WriteBatch(msgs []udp.Message) (int, error) {
	n, err := s.Conn.WriteBatch(msgs)
	time.Sleep(s.late)
	return n, err
}

// TestLentPayloadBufferReuse relays messages from chunk buffers that are
// reused (overwritten) the moment the connection releases them, as a
// gateway's relay pool reuses its buffers, over a version-2 connection,
// whose payloads the senders copy behind their headers after the owner
// polled them. The sending endpoint's senders hand each batch back late,
// so that ACKs arrive while batches with lent payloads are still out:
// the releases and completions they hold back must still all come (the
// hand-backs report the payloads done). What arrives must be what was
// supplied, every buffer must come back, and the payloads must indeed
// have been lent to the senders.
func TestLentPayloadBufferReuse(t *testing.T) {
	ctx := testCtx(t)
	p := newPair(t, nil, nil, func(c *Config) {
		c.Protocol.WireVersions = []uint8{metaroce.Version2}
		if c.Protocol.Listen {
			return
		}
		c.Bind = func(local netip.AddrPort, o udp.Options) (Socket, error) {
			u, err := udp.Listen(local, o)
			if err != nil {
				return nil, err
			}
			return lateSocket{Conn: u, late: 2 * time.Millisecond}, nil
		}
	})
	c, err := p.a.Connect(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	const msgs, msgLen = 6, 200 << 10
	src := make([]byte, msgs*msgLen)
	if _, err := crand.Read(src); err != nil {
		t.Fatal(err)
	}
	dst := make([]byte, len(src))
	const key = 1
	if err := p.b.Call(ctx, func(_ time.Duration, ep *metaroce.Endpoint) {
		if err := ep.Memory().Register(key, dst); err != nil {
			t.Error(err)
		}
	}); err != nil {
		t.Fatal(err)
	}
	// supplied and released are the owner goroutine's (Call, release).
	var supplied, released int
	release := func(b []byte) {
		released++
		for i := range b {
			b[i] = 0xee
		}
	}
	if err := p.a.Call(ctx, func(_ time.Duration, _ *metaroce.Endpoint) {
		mtu := c.MTU()
		for m := range msgs {
			rm, err := c.WriteRelay(0, uint64(m), metaroce.OpWrite, key, uint64(m*msgLen), msgLen, release)
			if err != nil {
				t.Error(err)
				return
			}
			for off := 0; off < msgLen; off += mtu {
				chunk := src[m*msgLen+off : m*msgLen+min(off+mtu, msgLen)]
				if err := rm.Supply(uint64(off), append([]byte(nil), chunk...)); err != nil {
					t.Error(err)
					return
				}
				supplied++
			}
		}
	}); err != nil {
		t.Fatal(err)
	}
	count := func(kind metaroce.EventKind) func([]metaroce.Event) bool {
		return func(evs []metaroce.Event) bool {
			n := 0
			for _, ev := range evs {
				if ev.Kind == kind {
					if ev.Err != nil {
						t.Errorf("message %d: %v", ev.Seq, ev.Err)
					}
					n++
				}
			}
			return n >= msgs
		}
	}
	p.ra.Wait(t, ctx, "send completions", count(metaroce.EventSendComplete))
	p.rb.Wait(t, ctx, "receive completions", count(metaroce.EventRecvComplete))
	if err := p.b.Call(ctx, func(time.Duration, *metaroce.Endpoint) {
		if !bytes.Equal(src, dst) {
			t.Error("received bytes differ from the supplied ones")
		}
	}); err != nil {
		t.Fatal(err)
	}
	// A message completes once every chunk is acknowledged, and every
	// release of its buffers comes before its completion.
	var lent uint64
	if err := p.a.Call(ctx, func(time.Duration, *metaroce.Endpoint) {
		lent = p.a.owner.tx.lent
		if released != supplied {
			t.Errorf("%d buffers released, %d supplied", released, supplied)
		}
	}); err != nil {
		t.Fatal(err)
	}
	if lent == 0 {
		t.Error("no payload was lent to the senders")
	}
}
