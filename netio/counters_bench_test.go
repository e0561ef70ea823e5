//go:build linux

package netio

import (
	"sync"
	"testing"
)

// BenchmarkCounters is the endpoint's hot counters written as the datapath
// writes them, each group by its own goroutine at once: the owner per
// received batch and pass, a sender per write, a reader per read. Where
// the groups share a cache line every add waits for the line to come back
// from another core.
func BenchmarkCounters(b *testing.B) {
	var c counters
	b.ReportAllocs()
	var wg sync.WaitGroup
	start := make(chan struct{})
	run := func(f func()) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for range b.N {
				f()
			}
		}()
	}
	run(func() { c.txDatagrams.Add(47); c.txWrites.Add(1); c.txBytes.Add(47 * 1372) })
	run(func() { c.rxReads.Add(1) })
	b.ResetTimer()
	close(start)
	for range b.N {
		c.ownerPasses.Add(1)
		c.rxDatagrams.Add(52)
		c.rxBytes.Add(52 * 1344)
	}
	wg.Wait()
}
