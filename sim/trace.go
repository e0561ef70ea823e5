package sim

import "time"

// QueueSample is the occupancy of a link's queue at one instant.
type QueueSample struct {
	At    time.Duration
	Bytes int
}

// QueueTrace collects periodic samples of a link's queue; see Link.TraceQueue.
type QueueTrace struct {
	Samples []QueueSample
	stopped bool
}

// Stop ends the sampling (the samples taken so far stay).
func (t *QueueTrace) Stop() { t.stopped = true }

// TraceQueue samples the link's queue occupancy at first, first+period, ... until the
// trace is stopped. For the peak between samples, see LinkStats.MaxQueueBytes.
func (l *Link) TraceQueue(first, period time.Duration) *QueueTrace {
	t := &QueueTrace{}
	l.sim.Every(first, period, func(now time.Duration) bool {
		if t.stopped {
			return false
		}
		t.Samples = append(t.Samples, QueueSample{At: now, Bytes: l.qbytes})
		return true
	})
	return t
}
