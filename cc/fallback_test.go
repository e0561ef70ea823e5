package cc_test

import (
	"math"
	"testing"
	"time"

	"github.com/mrgw/mrgw/cc"
	_ "github.com/mrgw/mrgw/cc/longrtt" // registers longrtt-htcp

	"github.com/mrgw/mrgw/units"
)

// fallbackDriver acks a long-RTT controller's rate back to it every
// millisecond over four paths with a fixed 50 ms round trip and no queue,
// under a receiver hint of 25 MB/s, as a gateway's receiver loop does.
type fallbackDriver struct {
	ctl  *cc.AIMD
	now  time.Duration
	path int
}

const (
	fbHint = 25e6 // bytes/s
	fbRTT  = 50 * time.Millisecond
	fbPkt  = 1400
)

func newFallbackDriver(t *testing.T, on bool) *fallbackDriver {
	t.Helper()
	f, err := cc.Lookup("longrtt-htcp", cc.Params{LineRate: units.BitRate(8 * fbHint), BaseRTT: fbRTT, ClassicFallback: on})
	if err != nil {
		t.Fatal(err)
	}
	ctl, ok := f(4, fbPkt).(*cc.AIMD)
	if !ok {
		t.Fatal("longrtt-htcp is not an AIMD")
	}
	d := &fallbackDriver{ctl: ctl}
	d.ctl.OnRateHint(0, units.ByteRate(fbHint))
	return d
}

// step advances a millisecond and acks what the rate sent in it; marked
// makes that ack carry ECN marks on all of its bytes.
func (d *fallbackDriver) step(marked bool) {
	d.now += time.Millisecond
	b := max(int(d.ctl.Rate()*time.Millisecond.Seconds()), 1)
	s := cc.AckSample{AckedBytes: b, RTT: fbRTT, SRTT: fbRTT, MinRTT: fbRTT, InflightBytes: b * 50}
	if marked {
		s.MarkedBytes = b
	}
	d.ctl.OnSent(d.now, d.path, b)
	d.ctl.OnAck(d.now, d.path, s)
	d.ctl.OnRateHint(d.now, units.ByteRate(fbHint))
	d.path = (d.path + 1) % 4
}

func (d *fallbackDriver) run(dur time.Duration) {
	for end := d.now + dur; d.now < end; {
		d.step(false)
	}
}

// TestClassicFallbackFollowsTheCubicCurve: with the fallback on, a marked
// ack cuts the rate to 0.7 of itself, the rate then grows back no faster
// than CUBIC's window curve from that cut (W(t) = C·(t−K)³ + Wmax, K =
// ∛(Wmax·0.3/C), in packets per round trip), and the fallback ends
// fallbackMemory after the last mark. Without it the same mark costs a
// few percent for a round trip or two and the rate is back within a second:
// the pace at which a classic-ECN flow beside it cannot grow (docs/CC.md §7).
func TestClassicFallbackFollowsTheCubicCurve(t *testing.T) {
	on := newFallbackDriver(t, true)
	on.run(3 * time.Second)
	before := on.ctl.Rate()
	if hi, lo := (1-cc.FallbackHeadroom)*fbHint*1.001, 0.9*fbHint; before > hi || before < lo {
		t.Fatalf("before the mark the rate is %.0f B/s; want the hint less the headroom, %.0f (at least %.0f)", before, (1-cc.FallbackHeadroom)*fbHint, lo)
	}
	on.step(true)
	cut := on.ctl.Rate()
	if !on.ctl.FallbackActive() || math.Abs(cut-cc.FallbackBeta*before) > 0.02*before {
		t.Fatalf("after a marked ack the rate is %.0f B/s (active %v); want %.2f of %.0f", cut, on.ctl.FallbackActive(), cc.FallbackBeta, before)
	}
	// The curve in rates: Wmax = before × rtt / pkt packets.
	wmax := before * fbRTT.Seconds() / fbPkt
	k := math.Cbrt(wmax * (1 - cc.FallbackBeta) / cc.FallbackC)
	markAt := on.now
	quarterK := markAt + time.Duration(k/4*float64(time.Second))
	for on.now < markAt+time.Duration(k*float64(time.Second)) {
		on.step(false)
		t0 := (on.now - markAt).Seconds()
		curve := (cc.FallbackC*math.Pow(t0-k, 3) + wmax) * fbPkt / fbRTT.Seconds()
		if r := on.ctl.Rate(); r > curve*1.001 {
			t.Fatalf("%.2f s after the cut the rate is %.0f B/s, above the curve's %.0f", t0, r, curve)
		}
		if on.now == quarterK {
			if r := on.ctl.Rate(); r > 0.95*before {
				t.Fatalf("a quarter of K (%.2f s) after the cut the rate is back at %.3f of what it was", k/4, r/before)
			}
		}
	}
	if r := on.ctl.Rate(); r < 0.97*before {
		t.Errorf("K = %.2f s after the cut the rate is %.3f of what it was; the curve is back at 1", k, r/before)
	}
	on.run(cc.FallbackMemory + time.Second)
	if on.ctl.FallbackActive() {
		t.Errorf("the fallback is still active %v after the last mark", cc.FallbackMemory+time.Second+time.Duration(k*float64(time.Second)))
	}

	off := newFallbackDriver(t, false)
	off.run(3 * time.Second)
	before = off.ctl.Rate()
	if before < 0.99*fbHint {
		t.Fatalf("without the fallback the rate before the mark is %.3f of the hint; want the hint (no headroom)", before/fbHint)
	}
	off.step(true)
	off.run(time.Second)
	if off.ctl.FallbackActive() || off.ctl.Rate() < 0.95*before {
		t.Errorf("without the fallback, a second after a marked ack the rate is %.3f of what it was (active %v); want it back", off.ctl.Rate()/before, off.ctl.FallbackActive())
	}
}

// TestClassicFallbackHeadroomOnALiveLineRate: a live change of the line
// rate (a reload of wan.max_rate_bps) brings the rate down to the new
// ceiling less the fallback's headroom at once, as the ceiling reads it,
// and to the whole new rate without the fallback.
func TestClassicFallbackHeadroomOnALiveLineRate(t *testing.T) {
	for _, on := range []bool{true, false} {
		d := newFallbackDriver(t, on)
		d.run(3 * time.Second)
		lower := units.ByteRate(fbHint / 2)
		d.ctl.SetLineRate(lower)
		want := float64(lower)
		if on {
			want *= 1 - cc.FallbackHeadroom
		}
		if r := d.ctl.Rate(); r > want*1.0001 || r < 0.99*want {
			t.Errorf("fallback %v: after the line rate fell to %.0f B/s the rate is %.0f, want %.0f", on, float64(lower), r, want)
		}
	}
}
