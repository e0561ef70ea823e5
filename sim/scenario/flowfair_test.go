package scenario

import (
	"testing"
	"time"

	"github.com/mrgw/mrgw/internal/report"
	"github.com/mrgw/mrgw/units"
)

// Flows of equal demand through one WAN connection, one stream each as the
// relay gives them, get equal shares of it: Jain's index at least 0.98
// over 8 and over 64 flows, without loss and at 1% random loss (the
// relay scenario's planes: 4 of 50 Mbit/s, 50 ms, 20 ms drop-tail queues).
func TestFlowsThroughOneConnectionShareEqually(t *testing.T) {
	rtt := 50 * time.Millisecond
	rate := 50e6
	for _, flows := range []int{8, 64} {
		for _, loss := range []float64{0, 0.01} {
			f, err := factory(CCHTCP, 4*rate, rtt)
			if err != nil {
				t.Fatal(err)
			}
			s := Setup{Planes: 4, RateBps: rate, RTT: rtt, Loss: loss, Flows: 1, Paths: 16, MTU: 1400, CC: f,
				QueueBytes: int(units.BitRate(rate).Bytes().BytesIn(20 * time.Millisecond)),
				Streams:    flows, StreamWindow: max(2, 64/flows), MsgSize: 1 << 20,
				Duration: 12 * time.Second, Warmup: 4 * time.Second, Seed: 11}
			r, err := Run(s)
			if err != nil {
				t.Fatal(err)
			}
			shares := make([]float64, flows)
			for i, b := range r.StreamBytes[0] {
				shares[i] = float64(b)
			}
			j := report.Jain(shares)
			lo, hi := shares[0], shares[0]
			for _, x := range shares {
				lo, hi = min(lo, x), max(hi, x)
			}
			t.Logf("%d flows, loss %.2f: goodput %.3f of capacity, Jain %.4f, smallest/largest share %.3f",
				flows, loss, r.GoodputBps/r.CapacityBps, j, lo/hi)
			if j < 0.98 {
				t.Errorf("%d flows, loss %.2f: Jain %.4f over the flows' shares, want at least 0.98", flows, loss, j)
			}
		}
	}
}
