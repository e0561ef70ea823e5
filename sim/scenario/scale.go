package scenario

import (
	"fmt"
	"time"

	"github.com/mrgw/mrgw/internal/report"
)

// ConnectionCounts is the connections scenario's grid.
var ConnectionCounts = []int{1, 100, 1000, 4000, 10000}

// Connections runs N concurrent connections (N senders, one receiver) over 8
// planes behind ECMP at data-center RTT, each paced at the receiver's rate
// hint, and reports aggregate goodput, Jain's index over the connections and
// the protocol state held per connection. The published MetaRoCE result is
// 4,000 concurrent connections.
func Connections(o Options) ([]report.Row, error) {
	var rows []report.Row
	rate := o.rate() / 10 // 10 Gbit/s planes by default: 80 Gbit/s in all, so 10,000 flows fit in seconds of wall time
	for i, n := range ConnectionCounts {
		if o.Progress != nil {
			o.Progress(i+1, len(ConnectionCounts), fmt.Sprintf("connections %d", n))
		}
		// Few connections spray over many paths to cover the 8 planes; many
		// connections cover them by their number, so each needs fewer.
		paths := 16
		if n >= 1000 {
			paths = 4
		}
		s := Setup{
			Planes: 8, RateBps: rate, RTT: 10 * time.Microsecond, Flows: n, Paths: paths,
			MsgSize: 64 << 10, WindowBDPs: 3, QueueBytes: 4 << 20,
			Duration: o.scale(60 * time.Millisecond), Warmup: o.scale(20 * time.Millisecond),
			Seed: o.Seed + 5, MeasureState: true,
		}
		r, err := Run(s)
		if err != nil {
			return nil, err
		}
		s = s.withDefaults()
		rw := row("connections", s, "mrgw", r)
		rw.Jain = report.Jain(r.PerFlowBps)
		rw.StateBytesPerConn = float64(r.StateBytes) / float64(2*n)
		rw.Note = "state per connection counts both ends"
		rows = append(rows, rw)
	}
	return rows, nil
}

func init() { Scenarios["connections"] = Connections }
