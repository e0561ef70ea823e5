package metaroce

import (
	"testing"
	"time"

	"github.com/mrgw/mrgw/cc"
)

// TestPacerCatchesUpAfterALateDriver: a connection waiting for its next
// pacing slot whose driver comes back late sends what fell due meanwhile,
// up to half its smallest round trip, and counts only what lies beyond as
// forfeit; after an idle spell it allows only the small slack and counts
// nothing.
func TestPacerCatchesUpAfterALateDriver(t *testing.T) {
	const rate = 25e6 // bytes/s: 200 Mbit/s
	const size = 1500
	gap := time.Duration(float64(size) / rate * 1e9) // 60 µs
	cfg := Config{PacingSlack: 2 * time.Millisecond, PacingCatchUp: 0.5}
	c := &Conn{ep: &Endpoint{cfg: cfg}, minRTT: 50 * time.Millisecond}

	// Waiting for the pacer, the driver comes back 30 ms late: 25 ms
	// (RTT/2) may be caught up, 5 ms are forfeit.
	c.nextSend = 10 * time.Millisecond
	c.paceWait = true
	now := 40 * time.Millisecond
	c.pace(now, size, rate)
	if want := now - 25*time.Millisecond + gap; c.nextSend != want {
		t.Errorf("after a late wake-up nextSend = %v, want %v", c.nextSend, want)
	}
	if got := time.Duration(c.Stats.PacingForfeitNs); got != 5*time.Millisecond {
		t.Errorf("forfeit %v, want 5ms", got)
	}
	// Everything due is sent at once: count the packets the pacer lets
	// through at this instant.
	n := 1
	for c.nextSend <= now && n < 10000 {
		c.pace(now, size, rate)
		n++
	}
	if want := int(25*time.Millisecond/gap) + 1; n < want-1 || n > want+1 {
		t.Errorf("caught up %d packets at once, want about %d (25 ms at the rate)", n, want)
	}

	// After an idle spell (the last poll did not stop for the pacer), only
	// the small slack applies and nothing is counted as forfeit.
	before := c.Stats.PacingForfeitNs
	c.paceWait = false
	now = time.Second
	c.pace(now, size, rate)
	if want := now - 2*time.Millisecond + gap; c.nextSend != want {
		t.Errorf("after idle nextSend = %v, want %v", c.nextSend, want)
	}
	if c.Stats.PacingForfeitNs != before {
		t.Errorf("idle time counted as forfeit: %d ns", c.Stats.PacingForfeitNs-before)
	}

	// Without an RTT sample yet, a late driver gets the configured slack.
	d := &Conn{ep: &Endpoint{cfg: cfg}}
	d.nextSend, d.paceWait = 0, true
	d.pace(10*time.Millisecond, size, rate)
	if want := 8*time.Millisecond + gap; d.nextSend != want {
		t.Errorf("no RTT yet: nextSend = %v, want %v", d.nextSend, want)
	}

	// Without PacingCatchUp (the default) a late driver gets PacingSlack
	// only, and the rest is forfeit.
	e := &Conn{ep: &Endpoint{cfg: Config{PacingSlack: 2 * time.Millisecond}}, minRTT: 50 * time.Millisecond}
	e.nextSend, e.paceWait = 0, true
	e.pace(30*time.Millisecond, size, rate)
	if want := 28*time.Millisecond + gap; e.nextSend != want {
		t.Errorf("catch-up off: nextSend = %v, want %v", e.nextSend, want)
	}
	if got := time.Duration(e.Stats.PacingForfeitNs); got != 28*time.Millisecond {
		t.Errorf("catch-up off: forfeit %v, want 28ms", got)
	}
}

// lateRecorder is a controller that records what the pacer reports of a
// late driver (cc.SendLateObserver); nothing else of it is called.
type lateRecorder struct {
	cc.Controller
	late []time.Duration
}

func (l *lateRecorder) OnSendLate(_, late time.Duration) { l.late = append(l.late, late) }

// TestPacerReportsLateness: a connection that waited for its pacing slot
// and whose driver came back late tells a controller that observes it how
// late (cc.SendLateObserver: the delay equilibrium keeps a queue that
// covers the host's stalls); a send on time, or after an idle spell, is
// not reported.
func TestPacerReportsLateness(t *testing.T) {
	const rate = 25e6
	const size = 1500
	rec := &lateRecorder{}
	c := &Conn{ep: &Endpoint{cfg: Config{PacingSlack: 2 * time.Millisecond, PacingCatchUp: 0.5}}, minRTT: 50 * time.Millisecond, ctl: rec}

	c.nextSend, c.paceWait = 10*time.Millisecond, true
	c.pace(10*time.Millisecond, size, rate) // on time
	c.pace(c.nextSend+time.Microsecond, size, rate)
	if len(rec.late) != 0 {
		t.Fatalf("on-time sends reported late: %v", rec.late)
	}
	due := c.nextSend
	c.pace(due+12*time.Millisecond, size, rate) // a 12 ms stall
	if len(rec.late) != 1 || rec.late[0] != 12*time.Millisecond {
		t.Fatalf("after a 12 ms stall reported %v, want [12ms]", rec.late)
	}
	c.paceWait = false // idle: not a stall
	c.pace(time.Second, size, rate)
	if len(rec.late) != 1 {
		t.Fatalf("a send after an idle spell reported late: %v", rec.late)
	}
}

// TestPacerBursts: with Config.PacingBurst, a driver that wakes at the
// pacing slots sends bursts of PacingBurst bytes (or a millisecond of the
// rate, whichever is less), sends nothing when it polls between them, and
// keeps the rate; without it, one packet per slot and none early.
func TestPacerBursts(t *testing.T) {
	const size = 1344
	for _, k := range []struct {
		name   string
		rate   float64 // bytes/s
		burst  int
		expect int // packets per burst
	}{
		{"64KiB at 2 Gbit/s", 250e6, 64 << 10, 64<<10/size + 1},
		{"a millisecond at 200 Mbit/s", 25e6, 64 << 10, 25000/size + 1},
		{"off", 250e6, 0, 1},
	} {
		t.Run(k.name, func(t *testing.T) {
			c := &Conn{ep: &Endpoint{cfg: Config{PacingSlack: 2 * time.Millisecond, PacingBurst: k.burst}}}
			gap := time.Duration(size / k.rate * 1e9)
			now := time.Second
			c.nextSend = now
			sent, bursts := 0, 0
			var first time.Duration
			for bursts < 200 {
				// The driver wakes at the slot...
				now = max(now, c.nextSend)
				n := 0
				for !c.paceHeld(now, k.rate) && n < 10000 {
					c.pace(now, size, k.rate)
					n++
				}
				if bursts == 0 {
					first = now
				} else if n < k.expect-1 || n > k.expect+1 {
					t.Fatalf("burst %d: %d packets, want about %d", bursts, n, k.expect)
				}
				sent += n
				bursts++
				// ...and polls again before the next slot (acknowledgements,
				// a sender handing a batch back): nothing leaves.
				for _, d := range []time.Duration{gap / 2, 3 * gap / 2} {
					if at := now + d; at < c.nextSend && !c.paceHeld(at, k.rate) {
						t.Fatalf("burst %d: a packet would leave %v after the burst, %v before its slot", bursts, d, c.nextSend-at)
					}
				}
			}
			// The rate is kept: what was sent took its gaps' worth of time.
			span := now - first
			if want := time.Duration(sent-k.expect) * gap; span < want-2*gap || span > want+2*gap {
				t.Errorf("%d packets over %v, want %v at the rate", sent, span, want)
			}
		})
	}
}
