package hrtimer

import (
	"slices"
	"testing"
	"time"
)

// waitFor waits on t in a goroutine of its own and reports on the
// returned channel.
func waitFor(t *FD) <-chan bool {
	c := make(chan bool, 1)
	go func() { c <- t.Wait() }()
	return c
}

func newFD(t testing.TB) *FD {
	t.Helper()
	fd, err := NewFD()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fd.Close() })
	return fd
}

// TestFDFiresAfterItsDeadline: an armed timer fires, not before its
// deadline.
func TestFDFiresAfterItsDeadline(t *testing.T) {
	fd := newFD(t)
	begin := time.Now()
	fd.Arm(2 * time.Millisecond)
	if !fd.Wait() {
		t.Fatal("Wait on an open timer returned false")
	}
	if took := time.Since(begin); took < 2*time.Millisecond {
		t.Errorf("fired after %v, before its 2 ms deadline", took)
	}
}

// TestFDArmReplaces: Arm replaces the earlier deadline (a timer re-armed
// for later does not fire at the earlier one), and Disarm keeps it from
// firing. Ordering, not durations, is asserted: a reference timer armed
// for a deadline between the two fires first.
func TestFDArmReplaces(t *testing.T) {
	fd, ref := newFD(t), newFD(t)
	fd.Arm(time.Millisecond)
	fd.Arm(50 * time.Millisecond) // replaces the 1 ms deadline
	ref.Arm(10 * time.Millisecond)
	fired, refFired := waitFor(fd), waitFor(ref)
	select {
	case <-fired:
		t.Error("the replaced 1 ms deadline fired before the 10 ms reference")
	case <-refFired:
	}
	<-fired

	fd.Arm(time.Millisecond)
	fd.Disarm()
	ref.Arm(20 * time.Millisecond)
	fired, refFired = waitFor(fd), waitFor(ref)
	select {
	case <-fired:
		t.Error("a disarmed timer fired")
	case <-refFired:
	}
	fd.Close()
	if ok := <-fired; ok {
		t.Error("Wait on a closed timer returned true")
	}
}

// BenchmarkLateness reports how late each kind of timer fires after a
// 200 µs deadline (p50 and p99 in µs): the timerfd against time.Timer, in
// one run.
func BenchmarkLateness(b *testing.B) {
	const wait = 200 * time.Microsecond
	report := func(b *testing.B, late []time.Duration) {
		slices.Sort(late)
		b.ReportMetric(float64(late[len(late)/2].Microseconds()), "p50-late-µs")
		b.ReportMetric(float64(late[len(late)*99/100].Microseconds()), "p99-late-µs")
	}
	b.Run("timerfd", func(b *testing.B) {
		fd := newFD(b)
		late := make([]time.Duration, 0, b.N)
		for b.Loop() {
			s := time.Now()
			fd.Arm(wait)
			fd.Wait()
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
