package cc_test

import (
	"math"
	"testing"
	"time"

	"github.com/mrgw/mrgw/cc"
	_ "github.com/mrgw/mrgw/cc/longrtt" // registers longrtt-htcp and longrtt-scalable

	"github.com/mrgw/mrgw/units"
)

// appSender drives a Controller as the metaroce state machine does, over
// paths with a fixed round trip and no bottleneck (no marks, no loss, no
// queue), from an application that hands it appRate bytes per second
// (0: always has data). Packets are sprayed round robin over the paths with
// window room, paced at the controller's rate, and each is acked one round
// trip after it left.
type appSender struct {
	ctl      cc.Controller
	pkt      int
	rtt      time.Duration
	now      time.Duration
	inflight []int
	acks     []sentPkt
	nextSend time.Duration
	backlog  float64
	rr       int

	// the delivery rate the sender could measure: the bytes acked over the
	// last round trip (a sliding window of ack times), the best so far
	recent    []time.Duration
	delivered float64
}

type sentPkt struct {
	at   time.Duration
	path int
}

func newAppSender(t *testing.T, name string, paths, pkt int, rtt time.Duration) *appSender {
	t.Helper()
	// No line rate (wan.max_rate_bps 0) and, below, no receiver hint.
	f, err := cc.Lookup(name, cc.Params{BaseRTT: rtt})
	if err != nil {
		t.Fatal(err)
	}
	return &appSender{ctl: f(paths, pkt), pkt: pkt, rtt: rtt, inflight: make([]int, paths)}
}

// run advances d of virtual time in steps of step, with the application
// supplying appRate bytes per second (0: unlimited), and calls check after
// every step.
func (s *appSender) run(d, step time.Duration, appRate float64, check func()) {
	end := s.now + d
	for s.now < end {
		s.now += step
		for len(s.acks) > 0 && s.acks[0].at+s.rtt <= s.now {
			a := s.acks[0]
			s.acks = s.acks[1:]
			s.inflight[a.path] -= s.pkt
			s.ctl.OnAck(a.at+s.rtt, a.path, cc.AckSample{AckedBytes: s.pkt, RTT: s.rtt, SRTT: s.rtt, MinRTT: s.rtt, InflightBytes: s.inflight[a.path]})
			s.recent = append(s.recent, a.at+s.rtt)
		}
		for len(s.recent) > 0 && s.recent[0] <= s.now-s.rtt {
			s.recent = s.recent[1:]
		}
		if s.now >= 2*s.rtt {
			s.delivered = math.Max(s.delivered, float64(len(s.recent)*s.pkt)/s.rtt.Seconds())
		}
		if appRate > 0 {
			s.backlog += appRate * step.Seconds()
		} else {
			s.backlog = math.Inf(1)
		}
		for n := 0; s.backlog >= float64(s.pkt) && n < 10000; n++ { // a bound for a runaway rate
			rate := float64(s.ctl.PacingRate())
			if rate > 0 && s.nextSend > s.now {
				break
			}
			path := -1
			for k := range s.inflight {
				i := (s.rr + k) % len(s.inflight)
				if s.inflight[i]+s.pkt <= s.ctl.Window(i) {
					path = i
					break
				}
			}
			if path < 0 {
				break
			}
			s.rr = (path + 1) % len(s.inflight)
			s.inflight[path] += s.pkt
			s.backlog -= float64(s.pkt)
			s.ctl.OnSent(s.now, path, s.pkt)
			s.acks = append(s.acks, sentPkt{at: s.now, path: path})
			if rate > 0 {
				// Pacing: no catch-up beyond one step after a gap.
				s.nextSend = max(s.nextSend, s.now-step) + time.Duration(float64(s.pkt)/rate*1e9)
			}
		}
		if s.backlog > 4*float64(s.pkt) && appRate > 0 {
			s.backlog = 4 * float64(s.pkt) // the application blocks; it does not pile up
		}
		if check != nil {
			check()
		}
	}
}

// TestAppLimitedRateStaysBounded (runaway rates): with no line
// rate and no receiver hint, a sender whose application supplies less than
// its rate allows must not grow that rate: every controller's pacing rate
// stays within a small multiple of the best delivery rate (acked bytes per
// round trip) the sender measured so far, or of its own starting rate. Before, the rate grew for every
// ack, without bound (1e22 and 1e47 bytes/s after one transfer). When the
// application then has unlimited data, the rate still grows.
func TestAppLimitedRateStaysBounded(t *testing.T) {
	const (
		pkt     = 9000
		appRate = 100e6 // bytes/s
		// A round counts as used down to UseFraction (1/2) of its
		// allowance (×2); one more round of growth, a doubling in the
		// search, follows the last round that counted as used (×2); Reno
		// paces at twice its window in slow start (×2). Measured: 5.3
		// (the AIMD controllers), 6.2 (reno).
		bound = 8.0
	)
	for _, name := range cc.Names() {
		for _, rtt := range []time.Duration{time.Millisecond, 50 * time.Millisecond} {
			s := newAppSender(t, name, 2, pkt, rtt)
			start := float64(s.ctl.PacingRate())
			worst, at := 0.0, time.Duration(0)
			check := func() {
				lim := bound * math.Max(start, s.delivered)
				if r := float64(s.ctl.PacingRate()); r > lim && r/lim > worst {
					worst, at = r/lim, s.now
				}
			}
			// A long application-limited run: 600 round trips at 50 ms,
			// 20,000 at 1 ms.
			s.run(30*time.Second, 50*time.Microsecond, appRate, check)
			t.Logf("%s, rtt %v: %.3g B/s at the end, best delivery %.3g B/s", name, rtt, s.ctl.PacingRate(), s.delivered)
			if worst > 0 {
				t.Errorf("%s, rtt %v, application-limited at %.3g B/s: pacing rate %.3g× the bound (%g × the best measured delivery rate %.3g B/s or the start %.3g B/s) at %v; at the end %.3g B/s",
					name, rtt, float64(appRate), worst, bound, s.delivered, start, at, s.ctl.PacingRate())
				continue
			}
			if w := s.ctl.Window(0); w <= 0 {
				t.Errorf("%s, rtt %v: window %d", name, rtt, w)
			}
			if name == "fixed" || name == "dcqcn" {
				continue // constant, or starts at its line rate
			}
			// The application now has unlimited data: the sender uses its
			// rate, and the rate grows again (nothing here congests).
			before := s.ctl.PacingRate()
			s.run(10*rtt, rtt/50, 0, nil)
			if after := s.ctl.PacingRate(); after < 1.2*before {
				t.Errorf("%s, rtt %v: bulk data after the application-limited run: rate %.3g B/s, was %.3g: stuck", name, rtt, after, before)
			}
		}
	}
}

// TestWindowNeverOverflows: Window converts rate × round trip to bytes; for
// extreme rates (the largest hint an ack can carry, a line rate of 1e30
// bit/s, a window grown by absurd acks) and extreme round trips it must
// stay positive and cover at least the rate over a round trip (up to a very
// large bound), never wrap to a negative number that the floor turns into a
// few packets while pacing is unlimited.
func TestWindowNeverOverflows(t *testing.T) {
	const pkt = 4172
	const huge = 1 << 40 // bytes: above any real window
	rtts := []time.Duration{time.Microsecond, time.Second, 100 * time.Second, 1 << 62}
	for _, name := range cc.Names() {
		for _, rtt := range rtts {
			for _, drive := range []string{"hint", "acks", "line"} {
				p := cc.Params{BaseRTT: time.Millisecond}
				if drive == "line" {
					p.LineRate = 1e30
				}
				f, err := cc.Lookup(name, p)
				if err != nil {
					t.Fatal(err)
				}
				c := f(1, pkt)
				now := time.Duration(0)
				switch drive {
				case "hint":
					c.OnRateHint(now, units.BitRate(math.MaxUint64).Bytes()) // the largest RateHintBps
				case "acks": // one absurd ack: Reno's slow start adds it to its window
					now += time.Microsecond
					c.OnAck(now, 0, cc.AckSample{AckedBytes: math.MaxInt - 1000, RTT: time.Millisecond, SRTT: time.Millisecond, MinRTT: time.Millisecond})
				}
				now += time.Microsecond
				c.OnAck(now, 0, cc.AckSample{AckedBytes: pkt, RTT: rtt, SRTT: rtt, MinRTT: rtt})
				w, r := c.Window(0), float64(c.PacingRate())
				if w <= 0 {
					t.Errorf("%s, %s, srtt %v: window %d", name, drive, rtt, w)
					continue
				}
				if math.IsNaN(r) || math.IsInf(r, 0) || r < 0 {
					t.Errorf("%s, %s, srtt %v: pacing rate %g", name, drive, rtt, r)
				}
				if name == "fixed" {
					continue // its window is what it was configured with
				}
				if want := math.Min(huge, r*min(rtt, time.Hour).Seconds()/2); float64(w) < want {
					t.Errorf("%s, %s, srtt %v: window %d bytes below half the pacing rate %.3g B/s over a round trip (%.3g)", name, drive, rtt, w, r, want)
				}
			}
		}
	}
}
