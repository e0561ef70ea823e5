package scenario

import (
	"testing"
	"time"

	"github.com/mrgw/mrgw/units"
)

// wanRelay runs the WAN hop of a relay between two gateways: one
// connection of the long-RTT controller over 4 planes of rate bit/s each,
// 50 ms round trip, drop-tail queues of 20 ms, marking at ecn bytes (0:
// none), random loss.
func wanRelay(t *testing.T, rate float64, ecn int, loss float64, mod func(*Setup)) Result {
	t.Helper()
	rtt := 50 * time.Millisecond
	f, err := factory(CCHTCP, 4*rate, rtt)
	if err != nil {
		t.Fatal(err)
	}
	s := Setup{Planes: 4, RateBps: rate, RTT: rtt, Loss: loss, Flows: 1, Paths: 16, MTU: 1400, CC: f,
		QueueBytes: int(units.BitRate(rate).Bytes().BytesIn(20 * time.Millisecond)), ECNThreshold: ecn,
		Duration: 10 * time.Second, Warmup: 3 * time.Second, Seed: 7}
	if mod != nil {
		mod(&s)
	}
	r, err := Run(s)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("rate %.0f Mbit/s ecn %d loss %.2f: goodput %.3f of capacity, data %d, retx %d (gap %d, timeout %d, spurious %d) = %.2f%%, queue drops %d, wire lost %d",
		rate/1e6, ecn, loss, r.GoodputBps/r.CapacityBps, r.DataSent, r.Retransmits, r.RetxGap, r.RetxTimeout, r.RetxSpurious,
		100*float64(r.Retransmits)/float64(max(r.DataSent, 1)), r.QueueDrops, r.WireLost)
	return r
}

// wanRelayRates are the planes' rates of the relay scenario, bit/s.
var wanRelayRates = []float64{25e6, 50e6, 100e6, 400e6}

// Without random loss a relay resends only what the queues dropped: at
// most 1% of its DATA packets, with drop-tail planes and with ECN-marking
// ones. Retransmissions cost WAN capacity and both gateways' CPU.
func TestWANRelayRetransmitsAtZeroLoss(t *testing.T) {
	for _, rate := range wanRelayRates {
		queue := int(units.BitRate(rate).Bytes().BytesIn(20 * time.Millisecond))
		for _, ecn := range []int{0, queue / 4} {
			r := wanRelay(t, rate, ecn, 0, nil)
			if f := float64(r.Retransmits) / float64(r.DataSent); r.DataSent == 0 || f > 0.01 {
				t.Errorf("rate %.0f Mbit/s, ECN at %d bytes: %.2f%% of %d DATA packets retransmitted (gap %d, timeout %d, spurious %d; queue drops %d), want at most 1%%",
					rate/1e6, ecn, 100*f, r.DataSent, r.RetxGap, r.RetxTimeout, r.RetxSpurious, r.QueueDrops)
			}
			if r.RetxGap+r.RetxTimeout != r.Retransmits {
				t.Errorf("causes %d + %d do not sum to %d retransmissions", r.RetxGap, r.RetxTimeout, r.Retransmits)
			}
		}
	}
}

// Under 1% random loss a relay resends what the links lost and little
// more: at most 1.2 times the datagrams lost on the wire or in a queue.
func TestWANRelayRetransmitsUnderLoss(t *testing.T) {
	for _, rate := range wanRelayRates {
		r := wanRelay(t, rate, 0, 0.01, nil)
		lost := r.WireLost + r.QueueDrops
		if lost == 0 || float64(r.Retransmits) > 1.2*float64(lost) {
			t.Errorf("rate %.0f Mbit/s: %d retransmissions (gap %d, timeout %d, spurious %d) for %d datagrams lost, want at most 1.2 times",
				rate/1e6, r.Retransmits, r.RetxGap, r.RetxTimeout, r.RetxSpurious, lost)
		}
	}
}

// overcommitRelay runs the WAN hop of the two-region lab: two gateways
// per region over one fabric of 4 planes, so 4 connections through the
// same queues, each of whose ends shares the whole fabric out as if it
// were alone (each receiver among its two senders, each sender's egress
// among its two peers): every connection is told half the capacity, and
// the hints sum to twice what the fabric carries.
func overcommitRelay(t *testing.T, rate, loss float64, mod func(*Setup)) Result {
	t.Helper()
	rtt := 50 * time.Millisecond
	f, err := factory(CCHTCP, 4*rate, rtt)
	if err != nil {
		t.Fatal(err)
	}
	s := Setup{Planes: 4, RateBps: rate, RTT: rtt, Loss: loss, Flows: 4, Paths: 16, MTU: 4096, CC: f,
		QueueBytes:          int(units.BitRate(rate).Bytes().BytesIn(20 * time.Millisecond)),
		ECNThreshold:        int(units.BitRate(rate).Bytes().BytesIn(2 * time.Millisecond)),
		ReceiverCapacityBps: 2 * 4 * rate,
		Duration:            30 * time.Second, Warmup: 3 * time.Second, Seed: 7}
	if mod != nil {
		mod(&s)
	}
	r, err := Run(s)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("rate %.0f Mbit/s MTU %d ecn %d loss %.2f: goodput %.3f of capacity, data %d, retx %d (gap %d, timeout %d, spurious %d) = %.2f%%, queue drops %d, wire lost %d",
		rate/1e6, s.MTU, s.ECNThreshold, loss, r.GoodputBps/r.CapacityBps, r.DataSent, r.Retransmits, r.RetxGap, r.RetxTimeout, r.RetxSpurious,
		100*float64(r.Retransmits)/float64(max(r.DataSent, 1)), r.QueueDrops, r.WireLost)
	return r
}

// Hints that overcommit the fabric make the delay equilibrium hold more
// queue than the drop-tail buffer has (4 connections × 10 ms at half the
// capacity: the whole 20 ms); the loss that follows must shrink the queue
// share, not be resent for ever: without random loss at most 1% of the
// DATA packets are resent, and at 1% random loss at most 1.2 times the
// datagrams lost; the fabric stays used. Both with planes that mark at
// 2 ms (MTU 4096) and with the lab's, which only drop (MTU 1400). The
// runs are 30 s: the start, where the first hints sum to several times
// the fabric, overflows it for a few round trips whatever follows.
func TestWANRelayRetransmitsWhenHintsOvercommit(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(*Setup)
	}{
		{"ECN at 2 ms, MTU 4096", nil},
		{"no ECN, MTU 1400", func(s *Setup) { s.ECNThreshold, s.MTU = 0, 1400 }},
	} {
		for _, rate := range []float64{25e6, 50e6} {
			r := overcommitRelay(t, rate, 0, tc.mod)
			if f := float64(r.Retransmits) / float64(max(r.DataSent, 1)); r.DataSent == 0 || f > 0.01 {
				t.Errorf("%s, rate %.0f Mbit/s: %.2f%% of %d DATA packets retransmitted (gap %d, timeout %d; queue drops %d), want at most 1%%",
					tc.name, rate/1e6, 100*f, r.DataSent, r.RetxGap, r.RetxTimeout, r.QueueDrops)
			}
			if g := r.GoodputBps / r.CapacityBps; g < 0.8 {
				t.Errorf("%s, rate %.0f Mbit/s: goodput %.3f of capacity, want at least 0.8", tc.name, rate/1e6, g)
			}
			r = overcommitRelay(t, rate, 0.01, tc.mod)
			if lost := r.WireLost + r.QueueDrops; float64(r.Retransmits) > 1.2*float64(lost) {
				t.Errorf("%s, rate %.0f Mbit/s, 1%% loss: %d retransmissions (gap %d, timeout %d, spurious %d) for %d datagrams lost, want at most 1.2 times",
					tc.name, rate/1e6, r.Retransmits, r.RetxGap, r.RetxTimeout, r.RetxSpurious, lost)
			}
			if g := r.GoodputBps / r.CapacityBps; g < 0.8 {
				t.Errorf("%s, rate %.0f Mbit/s, 1%% loss: goodput %.3f of capacity, want at least 0.8", tc.name, rate/1e6, g)
			}
		}
	}
}
