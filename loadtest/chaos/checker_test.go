//go:build linux

package chaos

import (
	"testing"
	"time"

	"github.com/mrgw/mrgw/host"
	"github.com/mrgw/mrgw/metaroce"
)

// TestCheckerCatches feeds the checker deliveries as the receivers would:
// intact, duplicated, corrupted, misplaced, and completions never delivered,
// and checks that each is counted as what it is (the scenario's zeros mean
// something only if the checker can count).
func TestCheckerCatches(t *testing.T) {
	lay := layout{size: 256, slots: 16, window: 4}
	c := newChecker(lay)
	const flow = 0xf10
	msg := func(id int, n uint64) []byte {
		b := make([]byte, lay.size)
		fill(b, id, n, flow)
		return b
	}
	deliver := func(id int, n, seq uint64, b []byte) {
		c.check(host.Delivery{Flow: flow, Seq: seq, Op: metaroce.OpWrite, Key: memoryKey, Addr: lay.addr(id, n), Len: uint64(len(b))}, b, nil, time.Now())
	}
	now := time.Now()
	// Messages 0..3 of writer 1: completed at the source and delivered.
	for n := range uint64(4) {
		c.completed(1, flow, n, n)
		deliver(1, n, n, msg(1, n))
	}
	if len(c.dups)+len(c.corrupt) != 0 {
		t.Fatalf("intact messages flagged: dups %v corrupt %v", c.dups, c.corrupt)
	}
	// A duplicate of seq 2.
	deliver(1, 2, 2, msg(1, 2))
	// A flipped bit in message 4's body.
	b := msg(1, 4)
	b[100] ^= 1
	c.completed(1, flow, 4, 4)
	deliver(1, 4, 4, b)
	// Message 5 of writer 2 found in writer 1's area.
	deliver(1, 5, 5, msg(2, 5))
	// The source completed seq 6 as message 6, memory holds message 7.
	c.completed(1, flow, 6, 6)
	deliver(1, 7, 6, msg(1, 7))
	// The source completed seq 8, never delivered.
	c.completed(1, flow, 8, 8)
	// The slot of seq 9 was rewritten by message 9+slots before the read:
	// not an error.
	c.completed(1, flow, 9, 9)
	deliver(1, 9+16, 9, msg(1, 9+16))

	c.checkLost(time.Now())
	if len(c.dups) != 1 {
		t.Errorf("duplicates %d, want 1: %v", len(c.dups), c.dups)
	}
	if len(c.corrupt) != 3 {
		t.Errorf("corrupted %d, want 3 (bit flip, wrong area, wrong message): %v", len(c.corrupt), c.corrupt)
	}
	if l := c.lost(); len(l) != 1 {
		t.Errorf("lost %d, want 1", len(l))
	}
	if c.overwrote != 1 {
		t.Errorf("overwritten %d, want 1", c.overwrote)
	}
	// Stalls: writer 1 delivered at once; writer 3 never.
	if s, ok := c.stall(3, now, now.Add(time.Second)); ok || s != time.Second {
		t.Errorf("stall of a silent writer: %v, recovered %v", s, ok)
	}
	if s, ok := c.stall(1, now.Add(-time.Millisecond), time.Now()); !ok || s > time.Second {
		t.Errorf("stall of a delivering writer: %v, recovered %v", s, ok)
	}
}
