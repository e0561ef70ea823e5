// Package liveness tells a dead peer from a live one by its silence: a
// peer that has answered nothing (no acknowledgement, no data) for a
// dead-after while something sent to it was waiting for an answer is gone.
//
// metaroce closes a connection once every path has been down for its
// DeadAfter. Paths go down one by one, each after timeouts of its own
// (three in a row, or six unanswered probes of an idle suspect path, each
// a probe timeout long), and an idle path that is still up never times
// out at all; so that rule is two timers in series, and the first of
// them scales with the paths' RTT variance. In the chaos scenario
// (docs/results/reliability.md) the last path to a killed gateway went
// down 0.3 to 1.7 s after the kill and the connection closed DeadAfter
// later: flows stalled 0.7 to 2.3 s for a DeadAfter of 500 ms. Hosts and
// gateways PING their peers every DeadAfter/4, so a live peer answers
// something well within DeadAfter whatever the flows do, and silence for
// DeadAfter is the evidence itself: the peer's death is found DeadAfter
// after it, plus an observation period.
//
// A Watch only reads counters the caller samples from the connection, on
// the goroutine that owns it; it does no I/O and takes time as an
// argument.
package liveness

import "time"

// Sample is what a connection shows at one observation.
type Sample struct {
	// Heard counts the packets received from the peer that prove it
	// alive (acknowledgements of what was sent to it, and its data);
	// cumulative, only its changes matter.
	Heard uint64
	// Waiting: something sent to the peer is not acknowledged yet.
	Waiting bool
	// Timeouts counts the connection's probe timeouts; cumulative.
	Timeouts uint64
}

// Watch follows one connection's peer. The zero value is ready to use.
type Watch struct {
	started  bool
	heard    uint64
	timeouts uint64 // Timeouts when the peer was last heard
	// waitSince is the first observation, since the peer was last heard,
	// at which something was waiting for it; -1 while nothing has been.
	waitSince time.Duration
	// over: the previous observation found the peer dead already.
	over bool
}

// Observe records s, sampled at now, and returns how long the peer has
// been silent while waited on (0 if it was heard since the last
// observation, or nothing waits for it) and whether it is dead: silent for
// at least deadAfter, with a probe timeout since it was last heard, at
// this observation and at the one before.
//
// The timeout and the second observation guard against a stalled
// observer, not a silent peer: after this process was descheduled, the
// first observation may run before the answers that arrived meanwhile
// were read (its clock has moved on, its counters not yet). The driver
// reads what arrived before it runs the probe timers, so a timeout counted
// proves an answer overdue, and the observation after the next one runs
// behind the queued datagrams.
func (w *Watch) Observe(now time.Duration, s Sample, deadAfter time.Duration) (silent time.Duration, dead bool) {
	if !w.started || s.Heard != w.heard {
		w.started = true
		w.heard, w.timeouts = s.Heard, s.Timeouts
		w.waitSince, w.over = -1, false
		return 0, false
	}
	if w.waitSince < 0 {
		if s.Waiting {
			w.waitSince = now
		}
		return 0, false
	}
	silent = now - w.waitSince
	over := silent >= deadAfter && s.Timeouts != w.timeouts
	dead = over && w.over
	w.over = over
	return silent, dead
}

// Silent returns how long the peer had been silent while waited on at the
// last observation, as of now (0: heard, or nothing waits for it).
func (w *Watch) Silent(now time.Duration) time.Duration {
	if !w.started || w.waitSince < 0 || now < w.waitSince {
		return 0
	}
	return now - w.waitSince
}
