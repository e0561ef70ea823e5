package metaroce

import (
	"testing"
)

const testLimit = 1 << 16

func TestRecvWindowVerdicts(t *testing.T) {
	var w recvWindow
	steps := []struct {
		seq, floor uint64
		want       rxVerdict
		cum        uint64
	}{
		{seq: 0, want: rxInOrder, cum: 1},
		{seq: 1, want: rxInOrder, cum: 2},
		{seq: 4, want: rxGap, cum: 2},       // 2 and 3 missing
		{seq: 4, want: rxDuplicate, cum: 2}, // again
		{seq: 5, want: rxInOrder, cum: 2},
		{seq: 3, want: rxFill, cum: 2},
		{seq: 1, want: rxDuplicate, cum: 2}, // below the cumulative point
		{seq: 2, want: rxFill, cum: 6},      // the hole closes: cum jumps over 3..5
		{seq: 6 + testLimit, want: rxTooFar, cum: 6},
	}
	for i, s := range steps {
		if v := w.receive(s.seq, s.floor, s.seq+100, testLimit); v != s.want {
			t.Fatalf("step %d (seq %d): verdict %d, want %d", i, s.seq, v, s.want)
		}
		if w.cum != s.cum {
			t.Fatalf("step %d (seq %d): cum %d, want %d", i, s.seq, w.cum, s.cum)
		}
	}
	if w.largest != 5 || w.lastTs != 105 {
		t.Fatalf("largest %d ts %d, want 5 105 (a fill never moves the largest)", w.largest, w.lastTs)
	}
}

func TestRecvWindowFloorAdvancesCum(t *testing.T) {
	var w recvWindow
	w.receive(0, 0, 1, testLimit)
	w.receive(3, 0, 1, testLimit) // 1, 2 missing
	w.receive(5, 0, 1, testLimit) // 4 missing
	if w.cum != 1 {
		t.Fatalf("cum %d, want 1", w.cum)
	}
	// The sender gave up 1 and 2 (resent elsewhere): the floor in its next
	// DATA lets cum pass them and then 3, stopping at the missing 4.
	if v := w.receive(6, 3, 1, testLimit); v != rxInOrder {
		t.Fatalf("verdict %d", v)
	}
	if w.cum != 4 {
		t.Fatalf("cum %d, want 4", w.cum)
	}
	// A floor far beyond the bitmap clears it.
	if v := w.receive(100000, 100000, 1, testLimit); v != rxGap {
		t.Fatalf("verdict %d, want gap", v)
	}
	if w.cum != 100001 || w.get(5) {
		t.Fatalf("cum %d, want 100001", w.cum)
	}
	// The floor moves cum even when the packet is refused as a duplicate.
	var d recvWindow
	d.receive(0, 0, 1, testLimit)
	d.receive(2, 0, 1, testLimit)
	if v := d.receive(2, 2, 1, testLimit); v != rxDuplicate || d.cum != 3 {
		t.Fatalf("verdict %d cum %d, want duplicate, 3", v, d.cum)
	}
}

func TestRecvWindowGrowsKeepingBits(t *testing.T) {
	var w recvWindow
	w.receive(1, 0, 1, testLimit) // 0 missing: cum stays 0
	w.receive(300, 0, 1, testLimit)
	if w.capBits() != 512 {
		t.Fatalf("bitmap of %d bits, want 512", w.capBits())
	}
	w.receive(3000, 0, 1, testLimit)
	if w.capBits() != 4096 {
		t.Fatalf("bitmap of %d bits, want 4096", w.capBits())
	}
	for _, s := range []uint64{1, 300, 3000} {
		if !w.get(s) {
			t.Fatalf("seq %d lost when the bitmap grew", s)
		}
	}
	if w.get(2) || w.get(299) {
		t.Fatal("a sequence never received reads as received")
	}
	if v := w.receive(0, 0, 1, testLimit); v != rxFill || w.cum != 2 {
		t.Fatalf("verdict %d cum %d, want fill, 2", v, w.cum)
	}
}

func TestRecvWindowFillAck(t *testing.T) {
	var w recvWindow
	for _, s := range []uint64{0, 1, 3, 6} {
		w.receive(s, 0, 10+s, testLimit)
	}
	var a Ack
	w.fillAck(&a, true, false)
	if a.Cum != 2 || a.Largest != 6 || a.EchoTimestamp != 16 {
		t.Fatalf("cum %d largest %d echo %d", a.Cum, a.Largest, a.EchoTimestamp)
	}
	for s := uint64(0); s < 10; s++ {
		want := s < 2 || s == 3 || s == 6
		if a.Acked(s) != want {
			t.Errorf("seq %d acked %v, want %v", s, a.Acked(s), want)
		}
	}
	// Without SACK (RoCEv2) only the cumulative point is reported.
	var b Ack
	w.fillAck(&b, false, false)
	if b.Acked(3) || b.Cum != 2 {
		t.Fatalf("no-SACK ack reports 3 (cum %d)", b.Cum)
	}
}

func TestRecvWindowFillAckWindowsTheSack(t *testing.T) {
	var w recvWindow
	for s := uint64(1); s < 400; s++ { // 0 never arrives
		w.receive(s, 0, 1, testLimit)
	}
	var a Ack
	w.fillAck(&a, true, false)
	if a.Cum != 0 || a.SackBase() != 400-SackBits {
		t.Fatalf("cum %d base %d", a.Cum, a.SackBase())
	}
	// What lies between the cumulative point and the SACK window is not
	// reported: the sender keeps it in flight (PROTOCOL.md §3, "Loss").
	if a.Acked(100) || !a.Acked(399) || !a.Acked(400-SackBits) {
		t.Fatal("SACK window wrong")
	}
	// Anchored, the report is the window at the cumulative point: 0
	// missing, 1..255 received, nothing said of what lies beyond.
	var b Ack
	if !w.fillAck(&b, true, true) {
		t.Fatal("fillAck: largest not reported as a window or more ahead")
	}
	if b.Cum != 0 || b.Largest != SackBits-1 || b.SackBase() != 0 || b.Acked(0) || !b.Acked(1) || !b.Acked(SackBits-1) {
		t.Fatalf("anchored ACK: cum %d largest %d base %d", b.Cum, b.Largest, b.SackBase())
	}
	// Within a window of the cumulative point, anchor changes nothing.
	var n, m Ack
	var near recvWindow
	for s := uint64(1); s < 100; s++ {
		near.receive(s, 0, 1, testLimit)
	}
	if near.fillAck(&n, true, false) || near.fillAck(&m, true, true) || n != m {
		t.Fatalf("near: %+v and %+v differ", n, m)
	}
}

func TestRecvWindowInOrder(t *testing.T) {
	var w recvWindow
	w.inOrder(0, 5)
	w.inOrder(1, 6)
	if w.cum != 2 || w.largest != 1 || w.lastTs != 6 || !w.any {
		t.Fatalf("%+v", w)
	}
}

func TestRecvWindowAllocs(t *testing.T) {
	var w recvWindow
	w.receive(0, 0, 1, testLimit) // allocate the bitmap
	seq := uint64(1)
	var a Ack
	allocs := testing.AllocsPerRun(1000, func() {
		w.receive(seq+1, 0, 1, testLimit) // one out of order...
		w.receive(seq, 0, 1, testLimit)   // ...then the hole
		seq += 2
		w.fillAck(&a, true, false)
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per packet, want 0", allocs)
	}
}
