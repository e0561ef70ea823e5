package metaroce

import (
	"testing"
	"time"
)

// TestDepartedRunsProbeTimeoutFromDeparture: with Config.DepartureWait a
// datagram the driver has not reported as left does not start its path's
// probe timeout, on that path only; once reported, the probe timeout runs
// from when it left (a driver's stall is not the path's silence) and
// another path, whose datagram left at once into a silent network, times
// out on its own schedule.
func TestDepartedRunsProbeTimeoutFromDeparture(t *testing.T) {
	const wait = 500 * time.Millisecond
	n, c, _ := establish(t, Config{MTU: 1000, Paths: 2, DepartureWait: wait})
	now := n.now
	if _, err := c.Write(now, 0, 1, 0, make([]byte, 2000)); err != nil {
		t.Fatal(err)
	}
	// Poll both chunks; nothing is delivered from here on (silence).
	buf := make([]byte, 4096)
	var sent []Transmit
	for {
		tx, ok := n.eps[0].Poll(now, buf)
		if !ok {
			break
		}
		if tx.Tracked {
			sent = append(sent, tx)
		}
	}
	paths := map[int]Transmit{}
	for _, tx := range sent {
		paths[tx.Path] = tx
	}
	if len(paths) != 2 {
		t.Fatalf("DATA on paths %v, want both paths", paths)
	}
	left, held := paths[0], paths[1]
	cfg := c.paths.Config()
	pto := c.paths.Paths[left.Path].PTO(cfg)
	// Path 0's datagram left at once; path 1's is still with the driver.
	c.Departed(left.Path, left.Seq+1, now)
	if d, ok := c.ptoDeadline(left.Path); !ok || d != now+pto {
		t.Fatalf("path %d (left at once): deadline %v %v, want %v", left.Path, d, ok, now+pto)
	}
	heldPTO := c.paths.Paths[held.Path].PTO(cfg)
	if d, ok := c.ptoDeadline(held.Path); !ok || d != now+wait+heldPTO {
		t.Fatalf("path %d (with the driver): deadline %v %v, want %v (the wait bound)", held.Path, d, ok, now+wait+heldPTO)
	}
	// Past path 0's probe timeout: path 0 times out, path 1 does not.
	at := now + pto + time.Millisecond
	n.eps[0].HandleTimeout(at)
	if c.paths.Paths[left.Path].Timeouts != 1 || c.paths.Paths[held.Path].Timeouts != 0 {
		t.Fatalf("timeouts %d on the silent path and %d on the held one, want 1 and 0",
			c.paths.Paths[left.Path].Timeouts, c.paths.Paths[held.Path].Timeouts)
	}
	// Path 1's datagram leaves now, long after its poll: its probe timeout
	// runs from here, not from the poll.
	c.Departed(held.Path, held.Seq+1, at)
	if d, ok := c.ptoDeadline(held.Path); !ok || d != at+heldPTO {
		t.Fatalf("path %d after leaving late: deadline %v %v, want %v", held.Path, d, ok, at+heldPTO)
	}
	n.eps[0].HandleTimeout(at + heldPTO - time.Millisecond)
	if c.paths.Paths[held.Path].Timeouts != 0 {
		t.Fatal("the late datagram's path timed out before a probe timeout after it left")
	}
	n.eps[0].HandleTimeout(at + heldPTO)
	if c.paths.Paths[held.Path].Timeouts != 1 {
		t.Fatal("the late datagram's path did not time out a probe timeout after it left")
	}
}

// TestNoDepartureWaitIsPollTime: without Config.DepartureWait (the
// simulator, a driver that writes at once) a datagram leaves when polled,
// and Departed changes nothing.
func TestNoDepartureWaitIsPollTime(t *testing.T) {
	n, c, _ := establish(t, Config{MTU: 1000, Paths: 1})
	now := n.now
	if _, err := c.Write(now, 0, 1, 0, make([]byte, 500)); err != nil {
		t.Fatal(err)
	}
	tx, ok := n.eps[0].Poll(now, make([]byte, 4096))
	if !ok || !tx.Tracked {
		t.Fatalf("no DATA polled: %+v", tx)
	}
	pto := c.paths.Paths[tx.Path].PTO(c.paths.Config())
	if d, _ := c.ptoDeadline(tx.Path); d != now+pto {
		t.Fatalf("deadline %v, want %v", d, now+pto)
	}
	c.Departed(tx.Path, tx.Seq+1, now+time.Second) // ignored: not asked for
	if d, _ := c.ptoDeadline(tx.Path); d != now+pto {
		t.Fatalf("deadline after an unasked report %v, want %v", d, now+pto)
	}
}
