package scenario

import (
	"testing"
	"time"
)

// BenchmarkWANSecond simulates 0.2 s of one 100 Gbit/s plane at 50 ms RTT with
// 1% loss and reports simulated packets per wall-clock second.
func BenchmarkWANSecond(b *testing.B) {
	for b.Loop() {
		r, err := Run(Setup{RateBps: 100e9, RTT: 50 * time.Millisecond, Loss: 0.01, Duration: 200 * time.Millisecond, Warmup: 100 * time.Millisecond, Seed: 1})
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(r.SimPackets)/r.Wall.Seconds(), "simpkts/s")
	}
}
