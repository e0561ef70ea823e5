package sim

import (
	"testing"
	"time"
)

// windowSender keeps window datagrams of size bytes in flight to dst; each ack frees one.
type windowSender struct {
	dst              HostID
	window, inflight int
	size             int
}

func (w *windowSender) Receive(time.Duration, *Datagram) { w.inflight-- }
func (w *windowSender) Poll(_ time.Duration, d *Datagram) bool {
	if w.inflight >= w.window {
		return false
	}
	w.inflight++
	d.Dst, d.SrcPort, d.DstPort, d.ECT = w.dst, 49152, 4791, true
	d.Data = d.Data[:w.size]
	return true
}
func (w *windowSender) NextTimeout() time.Duration  { return -1 }
func (w *windowSender) HandleTimeout(time.Duration) {}

// acker answers every datagram with a 64-byte ack and stops the Sim after stopAt datagrams.
type acker struct {
	sim     *Sim
	peer    HostID
	pending int
	got     int
	stopAt  int
}

func (a *acker) Receive(_ time.Duration, d *Datagram) {
	a.peer = d.Src
	a.pending++
	a.got++
	if a.got == a.stopAt {
		a.sim.Stop()
	}
}
func (a *acker) Poll(_ time.Duration, d *Datagram) bool {
	if a.pending == 0 {
		return false
	}
	a.pending--
	d.Dst, d.SrcPort, d.DstPort = a.peer, 4791, 49152
	d.Data = d.Data[:64]
	return true
}
func (a *acker) NextTimeout() time.Duration  { return -1 }
func (a *acker) HandleTimeout(time.Duration) {}

// benchSize is a 4 KiB protocol payload plus 80 bytes of headers.
const benchSize = 4096 + 80

// newBench builds one 100 Gbit/s plane with 1ms each way, a sender at A keeping 8192
// datagrams in flight (more than the ~6000 of the bandwidth-delay product, so the link
// stays busy) and an acking receiver at B.
func newBench() (*Sim, *Network, *acker) {
	s := New(Config{Seed: 1, MaxDatagramSize: benchSize})
	link := LinkConfig{Rate: 100e9, Delay: 1 * time.Millisecond}
	n := NewNetwork(s, NetworkConfig{Planes: 1, AtoB: link, BtoA: link})
	n.AddHost(SiteA, &windowSender{dst: 2, window: 8192, size: benchSize}, HostConfig{})
	a := &acker{sim: s}
	n.AddHost(SiteB, a, HostConfig{})
	return s, n, a
}

func TestSteadyStateDoesNotAllocate(t *testing.T) {
	s, n, a := newBench()
	s.Run(10 * time.Millisecond) // warm up: buffers, rings and the heap reach their size
	allocs := testing.AllocsPerRun(5, func() { s.Run(s.Now() + time.Millisecond) })
	if allocs != 0 {
		t.Errorf("%.1f allocations per simulated millisecond in steady state", allocs)
	}
	// And the link really is saturated: 1ms at 100 Gbit/s is ~2993 datagrams of 4176 bytes.
	got := a.got
	s.Run(s.Now() + time.Millisecond)
	if d := a.got - got; d < 2990 || d > 2996 {
		t.Errorf("%d datagrams delivered in 1ms, want ~2993", d)
	}
	if q := n.Plane(0).AtoB().QueueBytes(); q == 0 {
		t.Error("the window does not keep the link busy")
	}
}

// BenchmarkLinkThroughput pushes 4176-byte datagrams through one 100 Gbit/s plane (and their
// acks back); one op is one data datagram delivered.
func BenchmarkLinkThroughput(b *testing.B) {
	s, _, a := newBench()
	s.Run(10 * time.Millisecond)
	a.stopAt = a.got + b.N
	ev0, t0 := s.Stats().Events, s.Now()
	b.ReportAllocs()
	b.ResetTimer()
	s.Run(time.Hour)
	b.StopTimer()
	if a.got != a.stopAt {
		b.Fatalf("delivered %d, want %d", a.got, a.stopAt)
	}
	sec := b.Elapsed().Seconds()
	b.ReportMetric(float64(b.N)/sec, "pkts/s")
	b.ReportMetric(float64(s.Stats().Events-ev0)/sec, "events/s")
	b.ReportMetric((s.Now()-t0).Seconds()/sec, "simsec/s")
}

// BenchmarkOneSimSecond100G runs one simulated second of a saturated 100 Gbit/s plane:
// ~3 million data datagrams and as many acks. One op is the whole second.
func BenchmarkOneSimSecond100G(b *testing.B) {
	b.ReportAllocs()
	var pkts, events uint64
	for b.Loop() {
		s, _, a := newBench()
		s.Run(time.Second)
		pkts += uint64(a.got)
		events += s.Stats().Events
	}
	sec := b.Elapsed().Seconds()
	b.ReportMetric(float64(pkts)/float64(b.N), "datapkts/op")
	b.ReportMetric(float64(pkts)/sec, "pkts/s")
	b.ReportMetric(float64(events)/sec, "events/s")
}

// BenchmarkEventQueue is one push and one pop on a heap holding 64 events.
func BenchmarkEventQueue(b *testing.B) {
	var q eventQueue
	for i := 0; i < 64; i++ {
		q.push(event{at: time.Duration(i * 1000)})
	}
	b.ReportAllocs()
	for b.Loop() {
		e := q.pop()
		e.at += 64 * 1000
		q.push(e)
	}
}

func BenchmarkPlaneOf(b *testing.B) {
	n := NewNetwork(New(Config{}), NetworkConfig{Planes: 8})
	b.ReportAllocs()
	var sink int
	port := uint16(0)
	for b.Loop() {
		sink += n.PlaneOf(1, 2, port, 4791)
		port++
	}
	_ = sink
}
