package hrtimer

import (
	"slices"
	"testing"
	"time"
)

// TestTimerFiresOnce: an armed timer fires once, after its deadline.
func TestTimerFiresOnce(t *testing.T) {
	tm, err := New()
	if err != nil {
		t.Fatal(err)
	}
	defer tm.Close()
	begin := time.Now()
	tm.Reset(2 * time.Millisecond)
	<-tm.C()
	if took := time.Since(begin); took < 2*time.Millisecond {
		t.Errorf("fired after %v, before its 2 ms deadline", took)
	}
	// One-shot: nothing more arrives before a reference timer armed
	// afterwards for 5 ms fires.
	ref, err := New()
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	ref.Reset(5 * time.Millisecond)
	select {
	case <-tm.C():
		t.Error("a one-shot timer fired twice")
	case <-ref.C():
	}
}

// TestTimerResetReplaces: Reset replaces the earlier deadline (a timer
// re-armed for later does not fire at the earlier one), and Stop keeps it
// from firing. Ordering, not durations, is asserted: a reference timer
// armed for a deadline between the two fires first.
func TestTimerResetReplaces(t *testing.T) {
	tm, err := New()
	if err != nil {
		t.Fatal(err)
	}
	defer tm.Close()
	ref, err := New()
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()

	tm.Reset(time.Millisecond)
	tm.Reset(50 * time.Millisecond) // replaces the 1 ms deadline
	ref.Reset(10 * time.Millisecond)
	var order []string
	for len(order) < 2 {
		select {
		case <-tm.C():
			order = append(order, "reset")
		case <-ref.C():
			order = append(order, "ref")
		}
	}
	if !slices.Equal(order, []string{"ref", "reset"}) {
		t.Errorf("firing order %v: the replaced 1 ms deadline fired", order)
	}

	tm.Reset(time.Millisecond)
	tm.Stop()
	ref.Reset(20 * time.Millisecond)
	select {
	case <-tm.C():
		t.Error("a stopped timer fired")
	case <-ref.C():
	}
}

// TestCloseEndsTheRelay: Close returns only once the relay goroutine has
// ended (it waits for it), also while the timer is armed.
func TestCloseEndsTheRelay(t *testing.T) {
	tm, err := New()
	if err != nil {
		t.Fatal(err)
	}
	tm.Reset(time.Hour)
	if err := tm.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-tm.done:
	default:
		t.Error("Close returned before the relay ended")
	}
}

// BenchmarkLateness reports how late each kind of timer fires after a
// 200 µs deadline (p50 and p99 in µs): this package's Timer against
// time.Timer, in one run.
func BenchmarkLateness(b *testing.B) {
	const wait = 200 * time.Microsecond
	report := func(b *testing.B, late []time.Duration) {
		slices.Sort(late)
		b.ReportMetric(float64(late[len(late)/2].Microseconds()), "p50-late-µs")
		b.ReportMetric(float64(late[len(late)*99/100].Microseconds()), "p99-late-µs")
	}
	b.Run("hrtimer", func(b *testing.B) {
		tm, err := New()
		if err != nil {
			b.Fatal(err)
		}
		defer tm.Close()
		late := make([]time.Duration, 0, b.N)
		for b.Loop() {
			s := time.Now()
			tm.Reset(wait)
			<-tm.C()
			late = append(late, time.Since(s)-wait)
		}
		report(b, late)
	})
	b.Run("time.Timer", func(b *testing.B) {
		tm := time.NewTimer(time.Hour)
		late := make([]time.Duration, 0, b.N)
		for b.Loop() {
			s := time.Now()
			tm.Reset(wait)
			<-tm.C
			late = append(late, time.Since(s)-wait)
		}
		report(b, late)
	})
}
