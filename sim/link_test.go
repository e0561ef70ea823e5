package sim

import (
	"slices"
	"testing"
	"time"
)

func oneLink(cfg LinkConfig) NetworkConfig { return NetworkConfig{Planes: 1, AtoB: cfg, BtoA: cfg} }

func TestSerializationAndPropagationExact(t *testing.T) {
	// 1000 bytes at 1 Gbit/s take 8 µs; back-to-back datagrams queue behind each other.
	s, _, snk := pair(1, oneLink(LinkConfig{Rate: 1e9, Delay: 5 * ms}),
		&burst{dst: 2, size: 1000, count: 3})
	s.Run(time.Second)
	want := []time.Duration{5*ms + 8*us, 5*ms + 16*us, 5*ms + 24*us}
	if len(snk.got) != len(want) {
		t.Fatalf("got %d datagrams, want %d", len(snk.got), len(want))
	}
	for i, r := range snk.got {
		if r.at != want[i] || r.seq != uint64(i) || r.n != 1000 || r.src != 1 {
			t.Errorf("datagram %d: %+v, want arrival %v", i, r, want[i])
		}
	}
}

func TestSerializationRemainderCarried(t *testing.T) {
	// 8000 bits at 3 Gbit/s is 2666.67 ns: whole nanoseconds with the remainder carried, so
	// the k-th datagram ends at floor(k*8000/3) ns and the long-run rate is exact.
	s, _, snk := pair(1, oneLink(LinkConfig{Rate: 3e9, Delay: 1 * ms}),
		&burst{dst: 2, size: 1000, count: 30})
	s.Run(time.Second)
	if len(snk.got) != 30 {
		t.Fatalf("got %d datagrams", len(snk.got))
	}
	for i, r := range snk.got {
		k := int64(i + 1)
		if want := 1*ms + time.Duration(k*8000/3); r.at != want {
			t.Errorf("datagram %d arrived at %v, want %v", i, r.at, want)
		}
	}
}

func TestOverheadCountsOnTheWire(t *testing.T) {
	nc := oneLink(LinkConfig{Rate: 1e9})
	nc.Overhead = 50 // 950 + 50 = 1000 bytes on the wire: 8 µs
	s, n, snk := pair(1, nc, &burst{dst: 2, size: 950, count: 1})
	s.Run(time.Second)
	if len(snk.got) != 1 || snk.got[0].at != 8*us || snk.got[0].n != 950 {
		t.Fatalf("got %+v, want one 950-byte datagram at 8µs", snk.got)
	}
	if b := n.Plane(0).AtoB().Stats().BytesDelivered; b != 1000 {
		t.Errorf("BytesDelivered = %d, want 1000", b)
	}
}

func TestDropTail(t *testing.T) {
	// The first datagram goes straight to the serializer; 3000 bytes may wait; the rest drop.
	s, n, snk := pair(1, oneLink(LinkConfig{Rate: 1e9, QueueLimit: 3000}),
		&burst{dst: 2, size: 1000, count: 10})
	s.Run(time.Second)
	if got := snk.seqs(); !slices.Equal(got, []uint64{0, 1, 2, 3}) {
		t.Errorf("delivered %v, want [0 1 2 3]", got)
	}
	st := n.Plane(0).AtoB().Stats()
	want := LinkStats{Enqueued: 4, DroppedQueue: 6, Delivered: 4, BytesDelivered: 4000, MaxQueueBytes: 3000}
	if st != want {
		t.Errorf("stats %+v, want %+v", st, want)
	}
	if a := s.Stats().DatagramsAlive; a != 0 {
		t.Errorf("%d datagrams still alive after the run", a)
	}
}

func TestECNMarksOnlyECTAboveThreshold(t *testing.T) {
	// Datagram k of a burst finds (k-1)*1000 bytes waiting (k >= 1). With a 1500-byte
	// threshold, k >= 3 find more; only the ECT ones (even k) may be marked: 4 and 6.
	ect := func(i int) bool { return i%2 == 0 }
	s, n, snk := pair(1, oneLink(LinkConfig{Rate: 1e9, ECNThreshold: 1500}),
		&burst{dst: 2, size: 1000, count: 8, ect: ect})
	s.Run(time.Second)
	var marked []uint64
	for _, r := range snk.got {
		if r.ce {
			marked = append(marked, r.seq)
		}
	}
	if !slices.Equal(marked, []uint64{4, 6}) {
		t.Errorf("CE on %v, want [4 6]", marked)
	}
	if m := n.Plane(0).AtoB().Stats().MarkedCE; m != 2 {
		t.Errorf("MarkedCE = %d, want 2", m)
	}

	// Threshold 0 never marks.
	s, n, snk = pair(1, oneLink(LinkConfig{Rate: 1e9}), &burst{dst: 2, size: 1000, count: 8, ect: ect})
	s.Run(time.Second)
	for _, r := range snk.got {
		if r.ce {
			t.Errorf("datagram %d marked with no threshold", r.seq)
		}
	}
	if m := n.Plane(0).AtoB().Stats().MarkedCE; m != 0 {
		t.Errorf("MarkedCE = %d with no threshold", m)
	}
}

func TestLossRate(t *testing.T) {
	// 100k datagrams paced at line rate through 1% loss: the count lost is within ±0.2%
	// of the traffic (6 standard deviations), and survivors keep exact timings.
	const count = 100_000
	p := &pacer{dst: 2, srcPort: 1, dstPort: 2, size: 1000, interval: 8 * us, count: count}
	s, n, snk := pair(42, oneLink(LinkConfig{Rate: 1e9, Delay: 100 * us, Loss: 0.01}), p)
	s.Run(time.Second)
	st := n.Plane(0).AtoB().Stats()
	if st.DroppedLoss < 800 || st.DroppedLoss > 1200 {
		t.Errorf("lost %d of %d, want 1000±200", st.DroppedLoss, count)
	}
	if st.DroppedLoss+st.Delivered != count || uint64(len(snk.got)) != st.Delivered {
		t.Errorf("lost %d + delivered %d (sink saw %d) != sent %d", st.DroppedLoss, st.Delivered, len(snk.got), count)
	}
	for _, r := range snk.got {
		if r.at != r.sent+8*us+100*us {
			t.Fatalf("datagram %d sent at %v arrived at %v", r.seq, r.sent, r.at)
		}
	}
}

func TestLossHappensAfterSerialization(t *testing.T) {
	// In a back-to-back burst at 50% loss, survivor k still arrives at (k+1)*8µs + delay:
	// the lost datagrams before it used the link's capacity.
	s, n, snk := pair(7, oneLink(LinkConfig{Rate: 1e9, Delay: 1 * ms, Loss: 0.5}),
		&burst{dst: 2, size: 1000, count: 200})
	s.Run(time.Second)
	if l := n.Plane(0).AtoB().Stats().DroppedLoss; l < 60 || l > 140 {
		t.Errorf("lost %d of 200 at 50%%", l)
	}
	for _, r := range snk.got {
		if want := time.Duration(r.seq+1)*8*us + 1*ms; r.at != want {
			t.Errorf("datagram %d arrived at %v, want %v", r.seq, r.at, want)
		}
	}
}

func TestRateChangeAppliesToNextDatagram(t *testing.T) {
	// 3 × 1000 bytes at 1 Gbit/s; at 4µs the rate doubles: the first still ends at 8µs,
	// the others take 4µs each.
	s, n, snk := pair(1, oneLink(LinkConfig{Rate: 1e9}), &burst{dst: 2, size: 1000, count: 3})
	n.Plane(0).AtoB().ScheduleRate(4*us, 2e9)
	s.Run(time.Second)
	var at []time.Duration
	for _, r := range snk.got {
		at = append(at, r.at)
	}
	if want := []time.Duration{8 * us, 12 * us, 16 * us}; !slices.Equal(at, want) {
		t.Errorf("arrivals %v, want %v", at, want)
	}
}

func TestRateBecomingInfiniteDrainsQueue(t *testing.T) {
	s, n, snk := pair(1, oneLink(LinkConfig{Rate: 1e9}), &burst{dst: 2, size: 1000, count: 3})
	n.Plane(0).AtoB().ScheduleRate(4*us, 0)
	s.Run(time.Second)
	for _, r := range snk.got {
		if r.at != 8*us {
			t.Errorf("datagram %d arrived at %v, want 8µs", r.seq, r.at)
		}
	}
	if len(snk.got) != 3 || !slices.IsSorted(snk.seqs()) {
		t.Errorf("delivered %v, want [0 1 2]", snk.seqs())
	}
}

func TestLossChanges(t *testing.T) {
	// Loss 1 from 1ms to 2ms, 0 otherwise: exactly the datagrams that finish serialization
	// in [1ms, 2ms) are lost.
	p := &pacer{dst: 2, srcPort: 1, dstPort: 2, size: 1000, interval: 100 * us, count: 30}
	s, n, snk := pair(1, oneLink(LinkConfig{Rate: 1e9, Delay: 10 * us}), p)
	l := n.Plane(0).AtoB()
	l.ScheduleLoss(1*ms, 1)
	l.ScheduleLoss(2*ms, 0)
	s.Run(time.Second)
	for _, r := range snk.got {
		if end := r.sent + 8*us; end >= 1*ms && end < 2*ms {
			t.Errorf("datagram %d serialized at %v got through a loss-1 link", r.seq, end)
		}
	}
	if len(snk.got) != 20 || l.Stats().DroppedLoss != 10 {
		t.Errorf("delivered %d lost %d, want 20 and 10", len(snk.got), l.Stats().DroppedLoss)
	}
}

func TestDelayReductionKeepsFIFO(t *testing.T) {
	// Datagrams on the wire when the delay drops from 1ms to 0 are not overtaken.
	p := &pacer{dst: 2, srcPort: 1, dstPort: 2, size: 1000, interval: 100 * us, count: 20}
	s, n, snk := pair(1, oneLink(LinkConfig{Rate: 1e9, Delay: 1 * ms}), p)
	s.At(550*us, func() { n.Plane(0).AtoB().SetDelay(0) })
	s.Run(time.Second)
	if !slices.IsSorted(snk.seqs()) || len(snk.got) != 20 {
		t.Fatalf("delivered %v", snk.seqs())
	}
	for i := 1; i < len(snk.got); i++ {
		if snk.got[i].at < snk.got[i-1].at {
			t.Errorf("datagram %d arrived before %d", i, i-1)
		}
	}
	// Sent at 600µs after the change: with no delay it would arrive at 608µs, but the one
	// sent at 500µs is still on the wire until 1508µs.
	if r := snk.got[6]; r.at != 1508*us {
		t.Errorf("datagram 6 arrived at %v, want 1.508ms", r.at)
	}
	if r := snk.got[19]; r.at != 1908*us {
		t.Errorf("datagram 19 arrived at %v, want 1.908ms", r.at)
	}
}

func TestQueueTrace(t *testing.T) {
	s, n, _ := pair(1, oneLink(LinkConfig{Rate: 1e9}), &burst{dst: 2, size: 1000, count: 5})
	tr := n.Plane(0).AtoB().TraceQueue(4*us, 8*us)
	s.At(40*us, tr.Stop)
	s.Run(time.Second)
	want := []QueueSample{{4 * us, 4000}, {12 * us, 3000}, {20 * us, 2000}, {28 * us, 1000}, {36 * us, 0}}
	if !slices.Equal(tr.Samples, want) {
		t.Errorf("samples %v, want %v", tr.Samples, want)
	}
	if m := n.Plane(0).AtoB().Stats().MaxQueueBytes; m != 4000 {
		t.Errorf("MaxQueueBytes = %d, want 4000", m)
	}
}

func TestLinkConfigValidate(t *testing.T) {
	bad := []LinkConfig{{Rate: -1}, {Delay: -1}, {QueueLimit: -1}, {ECNThreshold: -1}, {Loss: 1.5}, {Loss: -0.1}}
	for _, c := range bad {
		if c.Validate() == nil {
			t.Errorf("%+v validated", c)
		}
	}
	if err := (LinkConfig{Rate: 1e9, Loss: 1}).Validate(); err != nil {
		t.Errorf("valid config rejected: %v", err)
	}
}
