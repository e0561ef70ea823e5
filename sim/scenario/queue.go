package scenario

import (
	"fmt"
	"time"

	"github.com/mrgw/mrgw/internal/report"

	"github.com/mrgw/mrgw/units"
)

// The standing-queue scenario: n connections share one
// bottleneck in the fabric (receiver hints off, so only the sender loop
// can share it) that marks CE above a tenth of its bandwidth-delay
// product, with a drop-tail limit of four BDPs. The question is whether
// the queue the connections keep standing grows with their number: a
// delay equilibrium alone keeps QueueShare per connection (docs/CC.md §4,
// §7). Reported per n: utilisation, Jain's index over the connections'
// goodput, the peak queue, and in the note the standing queue (the mean of
// the queue over the second half of the run) in ms at the bottleneck's
// rate.

// Queue scenario settings: 1 Gbit/s, 50 ms, 4 paths per connection.
const (
	QueueRateBps = 1e9
	QueueRTT     = 50 * time.Millisecond
	QueuePaths   = 4
	// QueueRTTs is the run length in round trips; the second half is
	// measured. Connections join over the first QueueJoinRTTs.
	QueueRTTs     = 400
	QueueJoinRTTs = 10
)

// QueueCounts is the standing-queue scenario's grid of connection counts.
var QueueCounts = []int{1, 2, 10, 64, 256}

// StandingQueue runs the standing-queue scenario for each long-RTT
// controller (both with the marked-fraction price, cc.AIMDConfig.MarkPrice)
// for each count in QueueCounts.
func StandingQueue(o Options) ([]report.Row, error) {
	return standingQueueRuns(o, LongRTTControllers, QueueCounts)
}

func standingQueueRuns(o Options, names []string, counts []int) ([]report.Row, error) {
	return standingQueueRunsPaths(o, names, counts, QueuePaths)
}

// standingQueueRunsPaths is standingQueueRuns with paths paths per
// connection.
func standingQueueRunsPaths(o Options, names []string, counts []int, paths int) ([]report.Row, error) {
	rate := o.rateOr(QueueRateBps)
	rtt := QueueRTT
	bdp := units.BitRate(rate).Bytes().BytesIn(rtt)
	var rows []report.Row
	var runs []namedRun
	total, i := len(names)*len(counts), 0
	for _, name := range names {
		for _, n := range counts {
			i++
			o.progress(i, total, fmt.Sprintf("standing-queue %s n=%d", name, n))
			f, err := factory(name, rate, rtt)
			if err != nil {
				return nil, err
			}
			// Joins spread over the first round trips, as connections of a
			// fleet do, rather than n searches in lockstep.
			start := make([]time.Duration, n)
			for k := range start {
				start[k] = time.Duration(k) * QueueJoinRTTs * rtt / time.Duration(n)
			}
			d := o.scaleRTTs(QueueRTTs) * rtt
			s := Setup{Planes: 1, RateBps: rate, RTT: rtt, Flows: n, FlowStart: start, CC: f, Paths: paths, NoHints: true,
				ECNThreshold: ecnThreshold(rate, rtt), QueueBytes: int(4 * bdp), MsgSize: 256 << 10,
				Duration: d, Warmup: d / 2, Seed: o.Seed + 30, Sample: rtt / 4}
			r, err := Run(s)
			if err != nil {
				return nil, err
			}
			rw := ccRow("standing-queue", fmt.Sprintf("%d connections", n), s, r)
			rw.CC = name
			rw.Shares = nil
			if n == 1 {
				rw.Jain = 1
			}
			rw.Note = fmt.Sprintf("standing queue %.2f ms", standingQueue(r, s.Warmup)/float64(units.BitRate(rate).Bytes())*1e3)
			rows = append(rows, rw)
			runs = append(runs, namedRun{fmt.Sprintf("%s n=%d", name, n), s, r})
		}
	}
	return rows, o.plot("standing-queue", runs)
}

// standingQueueMs reads the standing queue back from a row's note.
func standingQueueMs(r report.Row) float64 {
	var q float64
	fmt.Sscanf(r.Note, "standing queue %f ms", &q)
	return q
}

func init() { Scenarios["standing-queue"] = StandingQueue }

// QueueBoundMs is the bound on the standing queue the scenario asserts:
// 10 ms, a fifth of the base round trip and twice the marking threshold.
const QueueBoundMs = 10.0
