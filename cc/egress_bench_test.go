package cc

import (
	"testing"
	"time"
)

// BenchmarkEgressSent is the per-packet cost of the egress share: one
// call per data packet a WAN connection sends (AIMD.OnSent). Each packet
// advances the clock by 1 µs, so the 20 ms window closes every 20,000
// packets, as it would at 1400-byte packets and ~11 Gbit/s.
func BenchmarkEgressSent(b *testing.B) {
	e := NewEgress(10e9, 20*time.Millisecond)
	c := e.join()
	b.ReportAllocs()
	var now time.Duration
	for b.Loop() {
		now += time.Microsecond
		e.sent(now, c, 1400)
	}
}

// BenchmarkEgressSentParallel: connections on several goroutines (a
// gateway's WAN endpoints) sending at once through one Egress, each on
// its own connection. A shared lock per packet makes them contend.
func BenchmarkEgressSentParallel(b *testing.B) {
	e := NewEgress(10e9, 20*time.Millisecond)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		c := e.join()
		var now time.Duration // each goroutine's own clock: no shared write but the Egress's
		for pb.Next() {
			now += time.Microsecond
			e.sent(now, c, 1400)
		}
	})
}
