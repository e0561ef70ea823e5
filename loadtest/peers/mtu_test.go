//go:build linux

package peers

import (
	"testing"
	"time"

	"github.com/mrgw/mrgw/loadtest/tunemu"
)

// TestJumboFrames: with Options.MTU 9000, mrgw fills 9000-byte packets
// through emu (whose planes clamp at 9000 and take datagrams up to 8972
// bytes), and kernel TCP runs through tunemu's TUN devices at MTU 9000.
func TestJumboFrames(t *testing.T) {
	ctx := testCtx(t)
	o := quick()
	o.MTU = 9000
	o = o.withDefaults()
	l := o.link(1, 200e6, 10*time.Millisecond, 0)
	if l.IPMTU() != 9000 || l.mrgwMTU() != 9000-28-28-28 || l.rocev2MTU() != 9000-28-28-76 {
		t.Fatalf("link mtu %d, mrgw payload %d (wire v2), rocev2 payload %d (v1)", l.IPMTU(), l.mrgwMTU(), l.rocev2MTU())
	}
	if v1 := (Link{MTU: 9000, Wire: 1}); v1.mrgwMTU() != 9000-28-28-76 {
		t.Fatalf("wire v1 payload %d", v1.mrgwMTU())
	}
	n, _, closeNet, err := o.tunnelNet(ctx, l)
	if err != nil {
		t.Fatal(err)
	}
	defer closeNet()
	f, err := startTunnelFlow(ctx, n, false, l, o)
	if err != nil {
		t.Fatal(err)
	}
	defer f.close()
	deadline := time.Now().Add(20 * time.Second)
	for f.received() < 4<<20 {
		if time.Now().After(deadline) {
			t.Fatalf("mrgw moved %d bytes in 20 s", f.received())
		}
		time.Sleep(20 * time.Millisecond)
	}
	ab, _, _ := n.linkStats()
	if ab.In == 0 || ab.BytesIn/ab.In < 4000 || ab.SizeDrops != 0 {
		t.Errorf("A→B: %d datagrams of %d bytes on average, %d over the MTU: want jumbo datagrams, none dropped",
			ab.In, ab.BytesIn/max(ab.In, 1), ab.SizeDrops)
	}
	if err := n.check(); err != nil {
		t.Error(err)
	}

	if err := tunemu.Check(); err != nil {
		t.Log("TCP at MTU 9000 skipped:", err)
		return
	}
	r, err := Bulk(ctx, Peer{System: TCPBBR, Streams: 1}, l, o.Warmup, o.Duration, o)
	if err != nil {
		t.Fatal(err)
	}
	if r.GoodputBps <= 0 || r.Emulator != EmuTUN {
		t.Errorf("tcp-bbr at MTU 9000: goodput %v over %q", r.GoodputBps, r.Emulator)
	}
	t.Logf("tcp-bbr at MTU 9000: %.1f Mbit/s; mrgw A→B: %d datagrams, %d bytes each on average", r.GoodputBps/1e6, ab.In, ab.BytesIn/ab.In)
}
