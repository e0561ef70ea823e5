package recovery

import (
	"math"
	"testing"
	"time"
)

// steady builds a series sampled every 10 ms: rate(t) bits per second.
func steady(t0 time.Time, d time.Duration, rate func(t time.Duration) float64) Series {
	var s Series
	var bytes float64
	const step = 10 * time.Millisecond
	for t := time.Duration(0); t <= d; t += step {
		s.Add(t0.Add(t), uint64(bytes))
		bytes += rate(t) * step.Seconds() / 8
	}
	return s
}

func TestMeasure(t *testing.T) {
	t0 := time.Unix(1000, 0)
	rtt := 40 * time.Millisecond
	fail := 2 * time.Second
	cases := []struct {
		name       string
		rate       func(time.Duration) float64
		wantRTTs   float64 // -1: never
		wantAfter  float64 // fraction of before
		wantBelow0 bool    // Below == 0
	}{
		{"no dip", func(time.Duration) float64 { return 100e6 }, 4, 1, true},
		{"drop to 3/4 at once", func(t time.Duration) float64 {
			if t >= fail {
				return 75e6
			}
			return 100e6
		}, 4, 0.75, true},
		{"outage of 10 RTTs, then 3/4", func(t time.Duration) float64 {
			switch {
			case t < fail:
				return 100e6
			case t < fail+10*rtt:
				return 0
			}
			return 75e6
		}, 14, 0.75, true},
		{"never back", func(t time.Duration) float64 {
			if t >= fail {
				return 50e6
			}
			return 100e6
		}, -1, 0, false},
	}
	for _, c := range cases {
		s := steady(t0, 5*time.Second, c.rate)
		rep := s.Measure(t0.Add(fail), t0.Add(5*time.Second), rtt, 0.75)
		if math.Abs(rep.Before-100e6) > 1e6 {
			t.Errorf("%s: before %.1f Mbit/s, want 100", c.name, rep.Before/1e6)
		}
		if math.Abs(rep.RTTs-c.wantRTTs) > 0.2 {
			t.Errorf("%s: recovered after %.2f RTTs, want %.0f", c.name, rep.RTTs, c.wantRTTs)
		}
		if c.wantRTTs >= 0 && math.Abs(rep.After/rep.Before-c.wantAfter) > 0.02 {
			t.Errorf("%s: after %.3f of before, want %.2f", c.name, rep.After/rep.Before, c.wantAfter)
		}
		if c.wantBelow0 && rep.Below != 0 {
			t.Errorf("%s: %.2f of the windows below target, want 0", c.name, rep.Below)
		}
	}
}

func TestMeasureDegenerate(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var empty Series
	if rep := empty.Measure(t0, t0.Add(time.Second), 40*time.Millisecond, 0.75); rep.RTTs != -1 || rep.Before != 0 {
		t.Errorf("empty series: %+v", rep)
	}
	s := steady(t0, time.Second, func(time.Duration) float64 { return 1e6 })
	// A fault before the first sample has no "before".
	if rep := s.Measure(t0.Add(-time.Second), t0.Add(time.Second), 40*time.Millisecond, 0.75); rep.RTTs != -1 {
		t.Errorf("fault before the samples: %+v", rep)
	}
}

func TestSeq(t *testing.T) {
	var q Seq
	for _, s := range []uint64{0, 1, 1, 3, 4, 2} {
		q.See(s)
	}
	if q.Dups != 2 || q.Gaps != 1 || q.Next() != 5 {
		t.Errorf("dups %d gaps %d next %d, want 2, 1, 5", q.Dups, q.Gaps, q.Next())
	}
}

func TestSampler(t *testing.T) {
	var n uint64
	s := Sample(time.Millisecond, func() (uint64, bool) {
		n += 10
		return n, n < 50 // the thing counted goes away after 4 samples
	})
	deadline := time.Now().Add(10 * time.Second)
	for s.Last() < 40 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	s.Stop()
	s.Stop() // idempotent
	got := s.Series()
	if len(got.Bytes) != 4 || got.Bytes[3] != 40 || len(got.At) != 4 {
		t.Errorf("samples %v, want 10..40", got.Bytes)
	}
}
