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

// Classes share one WAN connection by their weights, within 10% of the
// weighted share: four elephant flows against one mice flow, the streams
// weighted as the gateway weighs them (gateway/classes.go: a class's
// weight divided among its active flows, scaled so that the smallest
// per-flow share is 8 packets per round). With weights 1 and 3 the mice
// class gets 3/4 of the connection (a per-flow weighting would give it
// 3/7, none at all 1/5); with equal weights 1/2. The gateway's own test
// (TestClassWeightsShareTheWAN) runs the same over real sockets and
// allows ±0.10 of the share; this one is in simulated time.
func TestClassWeightsShareOneConnection(t *testing.T) {
	rtt := 50 * time.Millisecond
	rate := 50e6
	for _, tc := range []struct {
		name           string
		elephant, mice int // stream weights: 4 elephant streams, then the mice stream
		want           float64
	}{{"1:3", 8, 96, 0.75}, {"1:1", 8, 32, 0.5}} {
		for _, loss := range []float64{0, 0.01} {
			f, err := factory(CCHTCP, 4*rate, rtt)
			if err != nil {
				t.Fatal(err)
			}
			s := Setup{Planes: 4, RateBps: rate, RTT: rtt, Loss: loss, Flows: 1, Paths: 16, MTU: 1400, CC: f,
				QueueBytes: int(units.BitRate(rate).Bytes().BytesIn(20 * time.Millisecond)),
				Streams:    5, StreamWindow: 8, MsgSize: 1 << 20,
				StreamWeights: []int{tc.elephant, tc.elephant, tc.elephant, tc.elephant, tc.mice},
				Duration:      12 * time.Second, Warmup: 4 * time.Second, Seed: 11}
			r, err := Run(s)
			if err != nil {
				t.Fatal(err)
			}
			var total float64
			for _, b := range r.StreamBytes[0] {
				total += float64(b)
			}
			share := float64(r.StreamBytes[0][4]) / total
			t.Logf("weights %s, loss %.2f: goodput %.3f of capacity, mice class share %.3f (want %.3f)",
				tc.name, loss, r.GoodputBps/r.CapacityBps, share, tc.want)
			if share < 0.9*tc.want || share > 1.1*tc.want {
				t.Errorf("weights %s, loss %.2f: mice class share %.3f, want %.3f within 10%%", tc.name, loss, share, tc.want)
			}
		}
	}
}
