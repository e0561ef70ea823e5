package netiotest

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"
)

// Recorder collects the events a goroutine under test reports (an
// endpoint's owner, a control session) for a test to read and wait on.
type Recorder[E any] struct {
	mu     sync.Mutex
	events []E
	at     []time.Time
	notify chan struct{}
}

// NewRecorder returns an empty Recorder.
func NewRecorder[E any]() *Recorder[E] { return &Recorder[E]{notify: make(chan struct{}, 1)} }

// Add records e, now.
func (r *Recorder[E]) Add(e E) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.at = append(r.at, time.Now())
	r.mu.Unlock()
	select {
	case r.notify <- struct{}{}:
	default:
	}
}

// On records e: the shape of an endpoint's event handler (netio.Config.OnEvent).
func (r *Recorder[E]) On(_ time.Duration, e E) { r.Add(e) }

// Events returns the events recorded so far.
func (r *Recorder[E]) Events() []E {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

// Snapshot returns the events recorded so far and when each was.
func (r *Recorder[E]) Snapshot() ([]E, []time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events), slices.Clone(r.at)
}

// Count returns how many of the events recorded so far match.
func (r *Recorder[E]) Count(match func(E) bool) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, e := range r.events {
		if match(e) {
			n++
		}
	}
	return n
}

// Reset forgets every event recorded so far.
func (r *Recorder[E]) Reset() {
	r.mu.Lock()
	r.events, r.at = nil, nil
	r.mu.Unlock()
}

// Wait blocks until pred holds over the events recorded so far, and fails
// the test (naming what) if ctx ends first.
func (r *Recorder[E]) Wait(t testing.TB, ctx context.Context, what string, pred func([]E) bool) {
	t.Helper()
	for {
		r.mu.Lock()
		ok := pred(r.events)
		r.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-r.notify:
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// WaitFor blocks until an event that matches is recorded and returns the
// first such, failing the test (naming what) if ctx ends first.
func (r *Recorder[E]) WaitFor(t testing.TB, ctx context.Context, what string, match func(E) bool) E {
	t.Helper()
	for {
		r.mu.Lock()
		for _, e := range r.events {
			if match(e) {
				r.mu.Unlock()
				return e
			}
		}
		r.mu.Unlock()
		select {
		case <-r.notify:
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, ctx.Err())
		}
	}
}
