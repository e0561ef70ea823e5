package netiotest

import (
	"context"
	"testing"
	"time"
)

func TestRecorder(t *testing.T) {
	r := NewRecorder[int]()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	go func() {
		for i := range 5 {
			r.On(0, i)
		}
	}()
	r.Wait(t, ctx, "five events", func(evs []int) bool { return len(evs) == 5 })
	if e := r.WaitFor(t, ctx, "an even event above 2", func(e int) bool { return e > 2 && e%2 == 0 }); e != 4 {
		t.Errorf("WaitFor returned %d, want 4", e)
	}
	if n := r.Count(func(e int) bool { return e%2 == 1 }); n != 2 {
		t.Errorf("Count of odd events %d, want 2", n)
	}
	evs, at := r.Snapshot()
	if len(evs) != 5 || len(at) != 5 || at[4].Before(at[0]) {
		t.Errorf("Snapshot: %v at %v", evs, at)
	}
	r.Reset()
	if len(r.Events()) != 0 {
		t.Errorf("events after Reset: %v", r.Events())
	}
}
