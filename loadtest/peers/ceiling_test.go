//go:build linux

package peers

import (
	"testing"
	"time"

	"github.com/mrgw/mrgw/loadtest/tunemu"
)

// The ceilings are the payload's share of each system's full packet: at
// IP MTU 1400, mrgw (wire v2) carries 1400 − 28 (IPv4, UDP) − 28 (AEAD
// envelope) − 28 (DATA header) = 1316 bytes; kernel TCP 1400 − 52 (IPv4,
// TCP, timestamps) = 1348.
func TestCeilingFromHeaders(t *testing.T) {
	l := Link{MTU: 1400}
	for _, c := range []struct {
		system string
		want   float64
	}{{MRGW, 1316.0 / 1400}, {TCPBBR, 1348.0 / 1400}, {RoCEv2, (1400.0 - 28 - 28 - 76) / 1400}} {
		if got := Ceiling(c.system, l); got != c.want {
			t.Errorf("%s: ceiling %.4f, want %.4f", c.system, got, c.want)
		}
	}
}

// No system's goodput exceeds the ceiling its headers allow
// (Ceiling): both emulators charge the link every packet's IP length, and
// a window counts only bytes sent and delivered inside it. Either fault
// (an emulator charging payloads only, or a window counting bytes that
// crossed before it, such as a window of data in flight when it opens)
// shows as a figure above the ceiling in short runs of systems that fill
// a small link. (QUIC's ceiling counts its UDP payload as payload, a
// looser bound than its frames allow.) The bound is physical: a busy machine can only lower
// goodput, never raise it above the ceiling.
func TestGoodputWithinHeaderCeiling(t *testing.T) {
	ctx := testCtx(t)
	o := quick()
	o.MTU = 1400
	// An unpaced window of 1.5 BDP over 4 paths: the transport at the
	// link's pace, its window inside the queue.
	o.MRGWCC, o.Paths = CCFixed, 4
	o = o.withDefaults()
	l := o.link(1, 20e6, 20*time.Millisecond, 0)
	peers := []Peer{{System: MRGW}, {System: KCP}}
	if err := tunemu.Check(); err != nil {
		t.Log("kernel TCP and QUIC skipped:", err)
	} else {
		peers = append(peers, Peer{System: TCPBBR, Streams: 1}, Peer{System: TCPCubic, Streams: 8}, Peer{System: QUIC, Streams: 8})
	}
	for _, p := range peers {
		r, err := Bulk(ctx, p, l, o.Warmup, o.Duration, o)
		if err != nil {
			t.Fatalf("%v: %v", p, err)
		}
		f, ceiling := r.GoodputBps/l.Capacity(), Ceiling(p.System, l)
		t.Logf("%v: %.3f of capacity, ceiling %.3f", p, f, ceiling)
		if f > ceiling {
			t.Errorf("%v: %.4f of capacity, above the %.4f its headers allow at IP MTU %d", p, f, ceiling, l.IPMTU())
		}
	}
}
