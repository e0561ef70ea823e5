package netem

import (
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/ipv4"
)

// pump sends n datagrams of size bytes from src to `to` in sendmmsg
// batches, keeping at most window of them unreceived at dst (a closed loop,
// so the measured rate is what the path sustains, not what the kernel
// drops), and returns how many arrived and how long that took.
func pump(tb testing.TB, src, dst *net.UDPConn, to netip.AddrPort, n, size int) (int64, time.Duration) {
	const batch, window = 64, 2048
	var got atomic.Int64
	progress := make(chan struct{}, 1)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		pc := ipv4.NewPacketConn(dst)
		msgs := make([]ipv4.Message, batch)
		for i := range msgs {
			msgs[i].Buffers = [][]byte{make([]byte, 2048)}
		}
		for {
			select {
			case <-stop:
				return
			default:
			}
			_ = dst.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
			k, err := pc.ReadBatch(msgs, 0)
			if k > 0 {
				got.Add(int64(k))
				select {
				case progress <- struct{}{}:
				default:
				}
			}
			if err != nil && !isTimeout(err) {
				return
			}
		}
	}()
	defer func() { close(stop); <-done }()

	pc := ipv4.NewPacketConn(src)
	payload := make([]byte, size)
	dstAddr := net.UDPAddrFromAddrPort(to)
	msgs := make([]ipv4.Message, batch)
	for i := range msgs {
		msgs[i] = ipv4.Message{Buffers: [][]byte{payload}, Addr: dstAddr}
	}
	// stalled gives up on datagrams that will never come (kernel drops),
	// so a lossy run ends instead of hanging.
	var lost int64
	stalled := func() bool {
		select {
		case <-progress:
			return false
		case <-time.After(time.Second):
			return true
		}
	}
	begin := time.Now()
	sent := 0
	for sent < n {
		for int64(sent)-got.Load()-lost > window {
			if stalled() {
				lost = int64(sent) - got.Load()
			}
		}
		k := min(batch, n-sent)
		w, err := pc.WriteBatch(msgs[:k], 0)
		if err != nil {
			tb.Fatal(err)
		}
		sent += w
	}
	for got.Load()+lost < int64(sent) {
		if stalled() {
			break
		}
	}
	return got.Load(), time.Since(begin)
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

func reportRate(b *testing.B, got int64, el time.Duration, size int) {
	pps := float64(got) / el.Seconds()
	b.ReportMetric(pps, "dgrams/s")
	b.ReportMetric(pps*float64(size)*8/1e9, "Gbit/s")
	b.ReportMetric(1-float64(got)/float64(b.N), "lossfrac")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkThroughput measures the emulator's own ceiling: one plane with
// no rate limit, 1400-byte datagrams, one sender and one receiver (on the
// same two cores as the emulator, as in the tests that use it). With a
// delay, every datagram has its own deadline, which costs batching.
func BenchmarkThroughput(b *testing.B) {
	for _, delay := range []time.Duration{0, 5 * time.Millisecond} {
		b.Run("delay="+delay.String(), func(b *testing.B) {
			const size = 1400
			em := start(b, Config{Link: LinkConfig{Delay: delay}})
			src, dst := udpSock(b), udpSock(b)
			front := expose(b, em, SiteB, dst)
			b.SetBytes(size)
			b.ResetTimer()
			got, el := pump(b, src, dst, front, b.N, size)
			b.StopTimer()
			reportRate(b, got, el, size)
			late := em.Stats().Late[AtoB]
			b.ReportMetric(float64(late.Mean.Microseconds()), "late-mean-µs")
		})
	}
}

// BenchmarkLoopbackBaseline is the same harness without the emulator: the
// ratio to BenchmarkThroughput is the emulator's cost.
func BenchmarkLoopbackBaseline(b *testing.B) {
	const size = 1400
	src, dst := udpSock(b), udpSock(b)
	b.SetBytes(size)
	b.ResetTimer()
	got, el := pump(b, src, dst, addrOf(dst), b.N, size)
	b.StopTimer()
	reportRate(b, got, el, size)
}

// BenchmarkDelayAccuracy sends b.N (at least 200) datagrams through a
// 20 ms one-way link, one every ~0.5 ms, and reports how much later than
// configured they arrive.
func BenchmarkDelayAccuracy(b *testing.B) {
	const delay = 20 * time.Millisecond
	ds, em := measureDelay(b, LinkConfig{Delay: delay}, max(b.N, 200), 500*time.Microsecond)
	mean, p50, p99, worst := summary(ds)
	us := func(d time.Duration) float64 { return float64(d-delay) / float64(time.Microsecond) }
	b.ReportMetric(us(ds[0]), "min-over-µs")
	b.ReportMetric(us(mean), "mean-over-µs")
	b.ReportMetric(us(p50), "p50-over-µs")
	b.ReportMetric(us(p99), "p99-over-µs")
	b.ReportMetric(us(worst), "max-over-µs")
	b.ReportMetric(float64(em.Stats().Late[AtoB].Mean.Microseconds()), "late-mean-µs")
	b.ReportMetric(0, "ns/op")
}
