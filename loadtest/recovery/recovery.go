// Package recovery measures how goodput comes back after a fault from a
// cumulative byte count sampled over time: the goodput before the fault,
// the recovery time (in round trips) until it is back to a fraction of
// that, and what is sustained afterwards; with a sampler of such counts and
// a check that messages complete once each, in order. The tunnel's
// plane-failure test and `mrgw-lab loadtest datapath --plane-failure` share it.
//
// This package imports nothing from mrgw but the unit types (units).
package recovery

import (
	"sort"
	"sync"
	"time"

	"github.com/mrgw/mrgw/units"
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
	return float64(units.Throughput(s.bytesAt(to)-s.bytesAt(from), to.Sub(from).Seconds()))
}

// Sampler calls a counter at a fixed interval on its own goroutine and
// records what it returns.
type Sampler struct {
	mu   sync.Mutex
	s    Series
	quit chan struct{}
	done chan struct{}
	once sync.Once
}

// Sample starts sampling count every interval until Stop, or until count
// reports false (the thing counted is gone).
func Sample(every time.Duration, count func() (uint64, bool)) *Sampler {
	s := &Sampler{quit: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-s.quit:
				return
			case <-tick.C:
			}
			n, ok := count()
			if !ok {
				return
			}
			s.mu.Lock()
			s.s.Add(time.Now(), n)
			s.mu.Unlock()
		}
	}()
	return s
}

// Stop ends the sampling and waits for it; it may be called more than once.
func (s *Sampler) Stop() {
	s.once.Do(func() { close(s.quit) })
	<-s.done
}

// Series returns the samples so far.
func (s *Sampler) Series() Series {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Series{At: s.s.At[:len(s.s.At):len(s.s.At)], Bytes: s.s.Bytes[:len(s.s.Bytes):len(s.s.Bytes)]}
}

// Last returns the latest sample's count (0 before the first).
func (s *Sampler) Last() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := len(s.s.Bytes); n > 0 {
		return s.s.Bytes[n-1]
	}
	return 0
}

// Seq checks that completions arrive once each, in order.
type Seq struct {
	next       uint64
	Dups, Gaps int
}

// See records the completion of message seq: a duplicate (already seen)
// reports false; a completion that skips messages counts a gap.
func (q *Seq) See(seq uint64) bool {
	switch {
	case seq < q.next:
		q.Dups++
		return false
	case seq > q.next:
		q.Gaps++
	}
	q.next = seq + 1
	return true
}

// Next is the sequence number expected next: the count of messages seen.
func (q *Seq) Next() uint64 { return q.next }
