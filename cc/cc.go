// Package cc defines the congestion-control interface that the MetaRoCE state
// machine calls, and the controllers that live in a data center.
//
// The sender loop is one Controller per connection, fed per path: the state
// machine reports every packet sent, every ack (acked bytes, ECN-marked bytes,
// RTT), every loss and every receiver rate hint, and asks the controller for
// each path's window and the connection's pacing rate. The receiver loop is
// FairShare: it computes each sender's share of the receiver's inbound
// capacity, which the state machine returns to the sender in every ack.
//
// Controllers take time as an argument and do no I/O, so they run unchanged in
// the simulator, in load tests and in production. This package must not import
// anything else from this repository but the unit types (package units):
// rates cross its boundary as units.ByteRate (what a controller paces at,
// what a receiver's hint allows) and units.BitRate (a line rate, a
// receiver's capacity).
package cc

import (
	"time"

	"github.com/mrgw/mrgw/units"
)

// AckSample is what one ack told the sender about one path.
type AckSample struct {
	// AckedBytes is the number of payload-carrying bytes newly acknowledged.
	AckedBytes int
	// MarkedBytes is the part of AckedBytes that the receiver saw marked
	// ECN-CE (estimated from the ack's cumulative CE count).
	MarkedBytes int
	// RTT is the round-trip sample this ack produced, or 0 if it produced none.
	RTT time.Duration
	// SRTT and MinRTT are the path's smoothed and minimum round-trip times.
	SRTT, MinRTT time.Duration
	// InflightBytes is what remains in flight on the path after this ack.
	InflightBytes int
}

// Controller is a connection's sender-side congestion controller. Paths are
// numbered 0..n-1 as in the connection. Implementations are not safe for
// concurrent use: the state machine that owns them is single-threaded.
type Controller interface {
	// Name identifies the algorithm in reports and metrics.
	Name() string
	// Window is the number of bytes path may have in flight.
	Window(path int) int
	// PacingRate is the connection's sending rate in bytes per second;
	// 0 means unpaced (window-limited only).
	PacingRate() units.ByteRate
	// OnSent is called for every data packet handed to the network.
	OnSent(now time.Duration, path int, bytes int)
	// OnAck is called once per ack that acknowledged something on path.
	OnAck(now time.Duration, path int, s AckSample)
	// OnLoss is called when bytes sent on path are declared lost.
	OnLoss(now time.Duration, path int, bytes int)
	// OnRateHint passes on the receiver's allocated share for this sender,
	// in bytes per second; the controller must never pace above it. 0 means
	// the receiver gave no hint.
	OnRateHint(now time.Duration, hint units.ByteRate)
	// OnPathState tells the controller that path became usable or not
	// (down paths get no window; a path coming back starts afresh).
	OnPathState(now time.Duration, path int, usable bool)
}

// Splitter is implemented by a Controller that sets how the connection's
// sending divides over its paths (cc.AIMD with a queue share: balance). The
// state machine then sprays each path in proportion to its weight
// (pathmgr.Set.PickWeighted) instead of round robin, so that the split the
// controller computes from each path's own signals is the split on the wire.
type Splitter interface {
	// Splits reports whether the sender should follow SplitWeight (it is
	// asked once, when the connection is made).
	Splits() bool
	// SplitWeight is path's part of the connection's sending relative to
	// an equal split over the usable paths (1: the mean).
	SplitWeight(path int) float64
}

// SendLateObserver is implemented by a controller that wants to know how
// late its driver came back for a paced send: the state machine's pacer
// reports, when a connection that was waiting for its next pacing slot
// sends more than a few packets' gaps after it fell due, how late it was.
// On a busy host that is the time the sender was descheduled (the owner
// goroutine stalls for milliseconds, docs/CC.md §7), during which only a
// queue at the bottleneck keeps the link busy. Optional: a controller
// without it is never told.
type SendLateObserver interface {
	OnSendLate(now, late time.Duration)
}

// Factory builds a Controller for a connection with the given number of paths
// and maximum packet size (payload plus header, in bytes).
type Factory func(paths int, packetSize int) Controller

// TimeoutLossObserver is implemented by a controller that wants to know
// which of the losses it is told of (OnLoss) were declared by a probe
// timeout rather than by a gap in the acknowledgements: the sender calls
// OnTimeoutLoss just before that OnLoss, with the same bytes. A path
// whose plane failed loses its packets to timeouts; a queue that
// overflows, mostly to gaps (AIMD's overflow rule counts only those).
type TimeoutLossObserver interface {
	OnTimeoutLoss(now time.Duration, path int, bytes int)
}
