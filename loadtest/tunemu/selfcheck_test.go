package tunemu

import (
	"strings"
	"testing"
	"time"
)

// TestLatBuckets: a bucket's upper bound is never below a lateness it
// holds (from 4 µs, where buckets are finer than a µs), at most 25% above
// it, and buckets grow with lateness.
func TestLatBuckets(t *testing.T) {
	prev := 0
	for d := time.Duration(0); d < 10*time.Second; d = d*9/8 + 137*time.Nanosecond {
		i := latBucket(d)
		if i < prev {
			t.Fatalf("bucket of %v is %d, below %d of a shorter lateness", d, i, prev)
		}
		prev = i
		up := latUpper(i)
		if d >= 4*time.Microsecond && (up < d || float64(up) > 1.26*float64(d)) {
			t.Fatalf("%v in bucket %d, upper bound %v", d, i, up)
		}
	}
	if latBucket(-time.Second) != 0 || latBucket(time.Hour*100) != latBuckets-1 {
		t.Error("out-of-range lateness not clamped to the end buckets")
	}
}

// TestLatencyQuantiles: percentiles of a known distribution, and a
// window (Sub) that holds only what was added after its start.
func TestLatencyQuantiles(t *testing.T) {
	var h latHist
	for range 980 {
		h.add(10 * time.Microsecond)
	}
	for range 20 {
		h.add(50 * time.Millisecond)
	}
	s0 := h.snapshot()
	if p50 := s0.Quantile(0.5); p50 < 10*time.Microsecond || p50 > 13*time.Microsecond {
		t.Errorf("p50 %v, want 10 µs to within a bucket", p50)
	}
	if p99 := s0.Quantile(0.99); p99 < 50*time.Millisecond || p99 > 63*time.Millisecond {
		t.Errorf("p99 %v, want 50 ms to within a bucket", p99)
	}
	if s0.Max != 50*time.Millisecond || s0.Count() != 1000 {
		t.Errorf("max %v count %d", s0.Max, s0.Count())
	}
	for range 100 {
		h.add(2 * time.Microsecond)
	}
	w := h.snapshot().Sub(s0)
	if w.Count() != 100 || w.Quantile(0.99) > 3*time.Microsecond || w.Mean() != 2*time.Microsecond {
		t.Errorf("window: count %d p99 %v mean %v, want 100 packets of 2 µs", w.Count(), w.Quantile(0.99), w.Mean())
	}
	if (LatencySnapshot{}).Quantile(0.5) != 0 {
		t.Error("empty snapshot has a percentile")
	}
}

// TestHealthCheck: a window passes only when the emulator released on
// time, no loop was saturated and nothing was dropped before the model;
// each failure is named.
func TestHealthCheck(t *testing.T) {
	var on, late latHist
	for range 1000 {
		on.add(50 * time.Microsecond)
		late.add(5 * time.Millisecond)
	}
	base := Health{At: time.Second, Packets: [2]uint64{1000, 500}}
	good := base
	good.Late = [2]LatencySnapshot{on.snapshot(), on.snapshot()}
	good.ReaderBusy = [2]time.Duration{100 * time.Millisecond, 50 * time.Millisecond}
	good.WriterBusy = [2]time.Duration{300 * time.Millisecond, 100 * time.Millisecond}
	if v := good.Check(); !v.OK || v.ReaderBusy != 0.1 || v.WriterBusy != 0.3 || v.Packets != 1500 {
		t.Fatalf("good window: %+v", v)
	}
	cases := []struct {
		name string
		mod  func(*Health)
		why  string
	}{
		{"late", func(h *Health) { h.Late[1] = late.snapshot() }, "released late"},
		{"writer saturated", func(h *Health) { h.WriterBusy[0] = 900 * time.Millisecond }, "writer busy"},
		{"reader saturated", func(h *Health) { h.ReaderBusy[1] = 850 * time.Millisecond }, "reader busy"},
		{"cap", func(h *Health) { h.Overflow = 3 }, "buffer cap"},
		{"tun drops", func(h *Health) { h.TUNDrops = 7 }, "dropped by the TUN"},
		{"tun unknown", func(h *Health) { h.TUNDrops = -1 }, "unknown"},
	}
	for _, c := range cases {
		h := good
		c.mod(&h)
		v := h.Check()
		if v.OK || len(v.Why) != 1 || !strings.Contains(v.Why[0], c.why) {
			t.Errorf("%s: ok %v why %q", c.name, v.OK, v.Why)
		}
	}
	// A window: the later snapshot minus the earlier; unknown drops at
	// either end stay unknown.
	end := good
	end.At, end.TUNDrops, end.Overflow = 3*time.Second, 4, 2
	w := end.Sub(Health{At: time.Second, TUNDrops: 4, Overflow: 2})
	if w.At != 2*time.Second || w.TUNDrops != 0 || w.Overflow != 0 {
		t.Errorf("window %+v", w)
	}
	if w := end.Sub(Health{TUNDrops: -1}); w.TUNDrops != -1 {
		t.Errorf("unknown start: tun drops %d", w.TUNDrops)
	}
}
