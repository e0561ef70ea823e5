package metaroce

import (
	"testing"
	"time"

	"github.com/mrgw/mrgw/cc"
	"github.com/mrgw/mrgw/units"
)

// TestLateAckProcessingIsNoLoss: a sender whose host leaves it off the
// CPU for longer than a round trip (a 2-core machine running gateways,
// hosts and an emulator) reads the acks that came meanwhile only after its
// timers ran. The first such stall times out every path that had data in
// flight: the acks waiting in its socket say none of it was lost. The
// acks it then reads late measure the stall in their round trips, and the
// probe timeout covers the largest of them (Conn.ptoDeadline): the stalls
// that follow, of the same length, time nothing out and resend nothing
// the receiver had. The gateway's WAN timers (pathmgr.DefaultConfig:
// 10 µs of ack delay) gave no such margin, and every stall resent a whole
// window.
func TestLateAckProcessingIsNoLoss(t *testing.T) {
	f := newWedgeFlow(t, cc.NewFixed(256<<10, units.ByteRate(50e6)))
	n, c := f.n, f.c
	const stall, every, stalls = 25 * time.Millisecond, 200 * time.Millisecond, 10
	var afterFirst, spuriousFirst uint64
	timeouts := func() (s uint64) {
		for i := range c.paths.Paths {
			s += c.paths.Paths[i].Timeouts
		}
		return s
	}
	t0, sp0 := timeouts(), c.Stats.RetransmitsSpurious
	for i := range stalls {
		n.stall(0, n.now+stall)
		f.run(n.now+every, nil)
		if i == 0 {
			afterFirst, spuriousFirst = timeouts()-t0, c.Stats.RetransmitsSpurious-sp0
			if afterFirst == 0 {
				t.Fatal("the first stall timed no path out: the test does not reach late ack processing")
			}
		}
	}
	later, spuriousLater := timeouts()-t0-afterFirst, c.Stats.RetransmitsSpurious-sp0-spuriousFirst
	t.Logf("first stall: %d path timeouts, %d spurious retransmissions; the %d after it: %d and %d; stats %+v",
		afterFirst, spuriousFirst, stalls-1, later, spuriousLater, c.Stats)
	if later != 0 || spuriousLater != 0 {
		t.Errorf("%d stalls of %v after the first: %d path timeouts and %d spurious retransmissions, want none",
			stalls-1, stall, later, spuriousLater)
	}
}
