package metaroce

import (
	"testing"
	"time"

	"github.com/mrgw/mrgw/cc"
	"github.com/mrgw/mrgw/pathmgr"
	"github.com/mrgw/mrgw/units"
)

// TestHoleFarBehindResendsOnlyWhatWasDropped: a run of a path's datagrams
// is dropped (a full socket buffer drops a coalesced GRO run at once), and
// the ACKs that would have reported the hole at once are lost, so that the
// first ACK the sender gets has its largest more than a SACK window (256
// packets) past the hole, as when a receiver off the CPU reads its whole
// backlog before it acknowledges anything. The sender must resend the
// dropped datagrams and nothing else: received packets between the
// cumulative point and the SACK window are unreported, not lost, and the
// receiver's ACKs of the window at its cumulative point (FlagAckAtCum)
// report the run's holes at once.
func TestHoleFarBehindResendsOnlyWhatWasDropped(t *testing.T) {
	// A probe timeout well above the ACKs' blackout: what is resent is
	// what the ACKs say, not what a timer guessed.
	pc := pathmgr.DefaultConfig()
	pc.MinPTO = 100 * time.Millisecond
	f := newWedgeFlowPaths(t, cc.NewFixed(32<<20, units.ByteRate(2e9)), pc)
	n, c := f.n, f.c
	rx := n.eps[1].Conns()[0]
	const episodes, run, blackout = 3, 10, 8 * time.Millisecond
	// Per episode: drop the next run DATA datagrams of path 0, then the
	// receiver's ACKs of path 0 for blackout from when the hole reaches
	// it (the one-way delay later).
	dropped, toDrop := 0, 0
	start, until := time.Duration(-1), time.Duration(-1)
	var far, atCum uint64 // ACKs with the largest a window past cum; ACKs at cum
	n.drop = func(from int, tx Transmit, b []byte) bool {
		switch {
		case from == 0 && !tx.Reply && tx.Path == 0 && PacketType(b[1]) == TypeData && toDrop > 0:
			toDrop--
			dropped++
			if toDrop == 0 {
				start = n.now + n.delay[0]
				until = start + blackout
			}
			return true
		case from == 1 && tx.Reply && tx.Path == 0 && PacketType(b[1]) == TypeAck:
			var a Ack
			if err := DecodeAck(b, &a); err != nil {
				t.Fatal(err)
			}
			if a.Largest >= a.Cum && a.Largest-a.Cum >= SackBits {
				far++
			}
			if a.Flags&FlagAckAtCum != 0 {
				atCum++
			}
			return n.now >= start && n.now < until
		}
		return false
	}
	// 32 MiB queued: the window, not the writer, limits what is in flight.
	runFull := func(until time.Duration, cond func() bool) {
		n.run(until, func() bool {
			drain(n.eps[0])
			drain(n.eps[1])
			for c.Established() && c.Queued() < 32 {
				if _, err := c.Write(n.now, 1, 7, 0, f.src); err != nil {
					t.Fatal(err)
				}
			}
			return cond != nil && cond()
		})
	}
	dup0, lost0, pto0 := rx.Stats.Duplicates, c.Stats.PacketsLost, c.Stats.RetransmitsTimeout
	for range episodes {
		toDrop = run
		runFull(n.now+60*time.Millisecond, nil)
	}
	runFull(n.now+time.Second, func() bool { return c.Stats.PacketsLost-lost0 >= uint64(dropped) })
	dup, lost, pto := rx.Stats.Duplicates-dup0, c.Stats.PacketsLost-lost0, c.Stats.RetransmitsTimeout-pto0
	t.Logf("%d episodes: %d datagrams dropped, %d declared lost, %d resent on timeouts, %d received twice; %d ACKs a window or more past the cumulative point, %d at it",
		episodes, dropped, lost, pto, dup, far, atCum)
	if dropped != episodes*run || far == 0 {
		t.Fatalf("%d dropped, %d ACKs a window past the cumulative point: the test did not reach a receiver far behind a hole", dropped, far)
	}
	if dup != 0 || lost != uint64(dropped) || pto != 0 {
		t.Errorf("%d dropped: %d declared lost, %d resent on timeouts, %d received twice; want %d, 0, 0", dropped, lost, pto, dup, dropped)
	}
}

// TestFloorNewsGoesOnItsPath: a path whose floor passed a lost packet
// while packets after it are unreported (sentHistory.owesFloor) takes the
// connection's next chunk even when its window is full: only its own DATA
// can tell the receiver to let its cumulative point pass them, and the
// packets that fill the window are acknowledged only after that.
func TestFloorNewsGoesOnItsPath(t *testing.T) {
	f := newWedgeFlow(t, cc.NewFixed(1<<20, units.ByteRate(50e6)))
	n, c := f.n, f.c
	if !n.run(n.now+time.Second, func() bool { drain(n.eps[0]); drain(n.eps[1]); return c.InflightBytes() == 0 }) {
		t.Fatal("the flow did not settle")
	}
	const path = 3
	h, ps := &c.tx[path], &c.paths.Paths[path]
	// The path's state after an ACK that lost its cumulative point and
	// left packets unreported: the floor has moved past what its last
	// DATA said, and its window is full.
	h.unreported++
	h.floorSent = h.floor - 1
	c.newsOwed = true
	full := c.window(path)
	ps.InflightBytes += full
	if _, err := c.Write(n.now, 1, 7, 0, f.src[:4096]); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 0, 70000)
	for {
		tx, ok := n.eps[0].Poll(n.now, buf)
		if !ok {
			t.Fatal("no DATA polled")
		}
		if tx.Reply || PacketType(buf[:tx.Len][1]) != TypeData {
			continue
		}
		if tx.Path != path {
			t.Fatalf("the chunk went on path %d, want %d (the path that owes its floor)", tx.Path, path)
		}
		break
	}
	if h.owesFloor() {
		t.Fatal("the path still owes its floor after its DATA")
	}
	ps.InflightBytes -= full
	h.unreported--
}
