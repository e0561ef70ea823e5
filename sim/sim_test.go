package sim

import (
	"cmp"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func TestEqualTimeEventsRunFIFO(t *testing.T) {
	s := New(Config{})
	var order []int
	add := func(at time.Duration, id int) { s.At(at, func() { order = append(order, id) }) }
	// Interleave three instants; within each, the insertion order must be kept.
	for i := 0; i < 30; i++ {
		add(time.Duration(7-2*(i%3))*ms, i)
	}
	// An event scheduled for its own instant runs after everything already due then.
	s.At(5*ms, func() { add(5*ms, 100) })
	s.Run(time.Second)
	var want []int
	for _, r := range []int{2, 1, 0} { // 3ms, 5ms, 7ms
		for i := r; i < 30; i += 3 {
			want = append(want, i)
		}
		if r == 1 {
			want = append(want, 100)
		}
	}
	if !slices.Equal(order, want) {
		t.Errorf("order %v\nwant  %v", order, want)
	}
}

func TestEventQueueMatchesSort(t *testing.T) {
	// Random pushes and pops against a naive model: a slice sorted by (at, seq).
	type key struct {
		at  time.Duration
		seq uint64
	}
	var q eventQueue
	var model []key
	r := rand.New(rand.NewPCG(1, 2))
	for step := 0; step < 20000; step++ {
		// Grow to a few hundred events first, then push and pop at random.
		if step < 400 || r.IntN(2) > 0 || len(model) == 0 {
			at := time.Duration(r.IntN(50))
			model = append(model, key{at, q.seq})
			q.push(event{at: at})
			continue
		}
		first := slices.MinFunc(model, func(a, b key) int { return cmp.Or(cmp.Compare(a.at, b.at), cmp.Compare(a.seq, b.seq)) })
		e := q.pop()
		if got := (key{e.at, e.seq}); got != first {
			t.Fatalf("step %d: popped %+v, want %+v", step, got, first)
		}
		model = slices.DeleteFunc(model, func(k key) bool { return k == first })
	}
	if q.len() != len(model) {
		t.Fatalf("queue holds %d, model %d", q.len(), len(model))
	}
}

func TestRunClockAndStop(t *testing.T) {
	s := New(Config{})
	var ran []time.Duration
	for _, at := range []time.Duration{1 * ms, 2 * ms, 3 * ms} {
		s.At(at, func() { ran = append(ran, s.Now()) })
	}
	s.Run(2 * ms) // runs events at exactly until
	if !slices.Equal(ran, []time.Duration{1 * ms, 2 * ms}) || s.Now() != 2*ms {
		t.Fatalf("ran %v, now %v", ran, s.Now())
	}
	s.Run(10 * ms) // the clock moves to until when idle
	if s.Now() != 10*ms || len(ran) != 3 {
		t.Fatalf("ran %v, now %v", ran, s.Now())
	}
	// A time in the past runs at Now.
	s.At(1*ms, func() { ran = append(ran, s.Now()) })
	s.Run(10 * ms)
	if ran[3] != 10*ms {
		t.Errorf("past event ran at %v, want 10ms", ran[3])
	}
	// Stop returns at the stopping event, and Run continues afterwards.
	s.At(11*ms, s.Stop)
	s.At(12*ms, func() { ran = append(ran, s.Now()) })
	s.Run(time.Second)
	if s.Now() != 11*ms || len(ran) != 4 {
		t.Fatalf("after Stop: now %v, ran %v", s.Now(), ran)
	}
	s.Run(time.Second)
	if len(ran) != 5 || s.Now() != time.Second {
		t.Fatalf("after resuming: now %v, ran %v", s.Now(), ran)
	}
	if st := s.Stats(); st.Events != 6 {
		t.Errorf("Events = %d, want 6", st.Events)
	}
}

func TestEvery(t *testing.T) {
	s := New(Config{})
	var at []time.Duration
	s.Every(1*ms, 2*ms, func(now time.Duration) bool {
		at = append(at, now)
		return len(at) < 4
	})
	s.Run(time.Second)
	if want := []time.Duration{1 * ms, 3 * ms, 5 * ms, 7 * ms}; !slices.Equal(at, want) {
		t.Errorf("ticks %v, want %v", at, want)
	}
}

func TestRandIsSeeded(t *testing.T) {
	a, b, c := New(Config{Seed: 9}), New(Config{Seed: 9}), New(Config{Seed: 10})
	x, y, z := a.Rand().Uint64(), b.Rand().Uint64(), c.Rand().Uint64()
	if x != y {
		t.Errorf("same seed, different draws: %x %x", x, y)
	}
	if x == z {
		t.Errorf("different seeds, same draw %x", x)
	}
}
