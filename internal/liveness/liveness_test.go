package liveness

import (
	"testing"
	"time"
)

const ms = time.Millisecond

// run observes every 10 ms from start to end with sample(t) and returns
// the first time the watch says dead (-1: never).
func run(w *Watch, start, end time.Duration, deadAfter time.Duration, sample func(t time.Duration) Sample) time.Duration {
	for t := start; t <= end; t += 10 * ms {
		if _, dead := w.Observe(t, sample(t), deadAfter); dead {
			return t
		}
	}
	return -1
}

// A peer that goes silent while a PING is in flight is dead DeadAfter after
// the first observation that saw it waited on, plus one observation.
func TestSilentPeerIsDead(t *testing.T) {
	var w Watch
	heard := uint64(0)
	sample := func(t time.Duration) Sample {
		s := Sample{Heard: heard, Waiting: true}
		if t < 200*ms {
			heard++ // answering
			s.Heard = heard
		} else {
			s.Timeouts = 1 // a probe timeout fired after it fell silent
		}
		return s
	}
	got := run(&w, 0, 2*time.Second, 500*ms, sample)
	// Last heard at 190 ms; waited on from 200 ms; over at 700 ms and
	// confirmed at the next observation.
	if got != 710*ms {
		t.Fatalf("dead at %v, want 710ms", got)
	}
}

// A peer that answers keeps the watch quiet however long the connection
// has something in flight.
func TestAnsweringPeerIsAlive(t *testing.T) {
	var w Watch
	n := uint64(0)
	if got := run(&w, 0, 10*time.Second, 100*ms, func(t time.Duration) Sample {
		if t%(90*ms) == 0 {
			n++ // an answer every 90 ms: never 100 ms of silence
		}
		return Sample{Heard: n, Waiting: true, Timeouts: uint64(t / ms)}
	}); got >= 0 {
		t.Fatalf("dead at %v", got)
	}
	if s := w.Silent(10 * time.Second); s >= 100*ms {
		t.Fatalf("silent %v", s)
	}
}

// Nothing waiting for the peer: its silence is no evidence (a receiver
// with nothing to send, pings switched off).
func TestIdleConnectionIsNotJudged(t *testing.T) {
	var w Watch
	if got := run(&w, 0, 5*time.Second, 100*ms, func(time.Duration) Sample {
		return Sample{Heard: 7, Timeouts: 3}
	}); got >= 0 {
		t.Fatalf("dead at %v", got)
	}
	// Waiting starts the clock at the first observation that sees it.
	if _, dead := w.Observe(6*time.Second, Sample{Heard: 7, Waiting: true, Timeouts: 4}, 100*ms); dead {
		t.Fatal("dead at once")
	}
	if s := w.Silent(6*time.Second + 50*ms); s != 50*ms {
		t.Fatalf("silent %v, want 50ms", s)
	}
}

// Silence without a probe timeout since the peer was last heard is the
// observer's stall (its timers have not run, nor its reads), not the
// peer's: not dead until a timeout is counted.
func TestNoTimeoutNoVerdict(t *testing.T) {
	var w Watch
	w.Observe(0, Sample{Heard: 1, Waiting: true, Timeouts: 5}, 100*ms)
	w.Observe(10*ms, Sample{Heard: 1, Waiting: true, Timeouts: 5}, 100*ms)
	if _, dead := w.Observe(time.Second, Sample{Heard: 1, Waiting: true, Timeouts: 5}, 100*ms); dead {
		t.Fatal("dead without a timeout")
	}
	if _, dead := w.Observe(time.Second+10*ms, Sample{Heard: 1, Waiting: true, Timeouts: 5}, 100*ms); dead {
		t.Fatal("dead without a timeout")
	}
	if _, dead := w.Observe(time.Second+20*ms, Sample{Heard: 1, Waiting: true, Timeouts: 6}, 100*ms); dead {
		t.Fatal("dead on the first observation past the timeout")
	}
	if _, dead := w.Observe(time.Second+30*ms, Sample{Heard: 1, Waiting: true, Timeouts: 6}, 100*ms); !dead {
		t.Fatal("alive after a timeout and 1 s of silence, observed twice")
	}
}

// One observation past DeadAfter is not a verdict: the observer may have
// woken from a stall before reading what arrived meanwhile, and the next
// observation, which does see the answers, clears it.
func TestStalledObserverIsNotFooled(t *testing.T) {
	var w Watch
	w.Observe(0, Sample{Heard: 1, Waiting: true}, 100*ms)
	w.Observe(10*ms, Sample{Heard: 1, Waiting: true}, 100*ms)
	// Descheduled for 500 ms: the first observation after it has not read
	// the answers yet; a timeout from before the stall is counted.
	if _, dead := w.Observe(510*ms, Sample{Heard: 1, Waiting: true, Timeouts: 1}, 100*ms); dead {
		t.Fatal("dead on one observation")
	}
	if s, dead := w.Observe(520*ms, Sample{Heard: 9, Waiting: true, Timeouts: 1}, 100*ms); dead || s != 0 {
		t.Fatalf("silent %v dead %v after the answers were read", s, dead)
	}
	if s := w.Silent(600 * ms); s != 0 {
		t.Fatalf("silent %v while nothing was observed waiting since", s)
	}
}
