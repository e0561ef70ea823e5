// Package recovery measures how goodput comes back after a fault from a
// cumulative byte count sampled over time: the goodput before the fault,
// the recovery time (in round trips) until it is back to a fraction of
// that, and what is sustained afterwards. The tunnel's plane-failure test
// and `mrgw loadtest datapath --plane-failure` share it.
//
// This package imports nothing from mrgw.
package recovery

import (
	"sort"
	"time"
)

// Series is a cumulative byte count: Bytes[i] bytes by time At[i], both in
// time order.
type Series struct {
	At    []time.Time
	Bytes []uint64
}

// Add appends a sample.
func (s *Series) Add(at time.Time, bytes uint64) {
	s.At = append(s.At, at)
	s.Bytes = append(s.Bytes, bytes)
}

// Report is what Measure finds. Rates are in bits per second.
type Report struct {
	// Before is the goodput in the second before the fault (or since the
	// first sample, if that is later).
	Before float64
	// Target is the fraction of Before that counts as recovered.
	Target float64
	// Window is the averaging window: four round trips.
	Window time.Duration
	// RTTs is the time from the fault to the end of the first window whose
	// goodput reaches Target × Before, in round trips (the window's length
	// included: a conservative figure); -1 if none did before the end.
	RTTs float64
	// After is the goodput from recovery to the end; 0 if less than one
	// window was left.
	After float64
	// Below is the fraction of the windows from recovery to the end (laid
	// end to end) whose goodput was under Target × Before.
	Below float64
}

// Measure analyses s around a fault at tFail, up to end (the end of the
// steady part of the transfer), with round trip rtt and recovery target
// the fraction target of the goodput before (for a plane failure among P
// planes: (P-1)/P).
func (s Series) Measure(tFail, end time.Time, rtt time.Duration, target float64) Report {
	rep := Report{RTTs: -1, Window: 4 * rtt, Target: target}
	if len(s.At) < 2 || rtt <= 0 {
		return rep
	}
	from := tFail.Add(-time.Second)
	if first := s.At[0]; first.After(from) {
		from = first
	}
	if !from.Before(tFail) {
		return rep
	}
	rep.Before = s.rate(from, tFail)
	goal := target * rep.Before
	step := rtt / 8
	var ok time.Time
	for w := tFail; !w.Add(rep.Window).After(end); w = w.Add(step) {
		if s.rate(w, w.Add(rep.Window)) >= goal {
			ok = w.Add(rep.Window)
			break
		}
	}
	if ok.IsZero() {
		return rep
	}
	rep.RTTs = ok.Sub(tFail).Seconds() / rtt.Seconds()
	if end.Sub(ok) < rep.Window {
		return rep
	}
	rep.After = s.rate(ok, end)
	n, low := 0, 0
	for w := ok; !w.Add(rep.Window).After(end); w = w.Add(rep.Window) {
		n++
		if s.rate(w, w.Add(rep.Window)) < goal {
			low++
		}
	}
	rep.Below = float64(low) / float64(n)
	return rep
}

// bytesAt is the count at t, interpolated linearly between samples (0
// before the first, the last after the last).
func (s Series) bytesAt(t time.Time) float64 {
	i := sort.Search(len(s.At), func(i int) bool { return !s.At[i].Before(t) })
	switch {
	case i == 0:
		if len(s.At) > 0 && s.At[0].Equal(t) {
			return float64(s.Bytes[0])
		}
		return 0
	case i == len(s.At):
		return float64(s.Bytes[len(s.Bytes)-1])
	}
	a, b := s.At[i-1], s.At[i]
	f := float64(t.Sub(a)) / float64(b.Sub(a))
	return float64(s.Bytes[i-1]) + f*(float64(s.Bytes[i])-float64(s.Bytes[i-1]))
}

// rate is the goodput between two times, in bits per second.
func (s Series) rate(from, to time.Time) float64 {
	return (s.bytesAt(to) - s.bytesAt(from)) * 8 / to.Sub(from).Seconds()
}
