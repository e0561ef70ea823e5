package metaroce

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/mrgw/mrgw/pathmgr"
)

// sentLog is a sentHandler that records what it is told.
type sentLog struct {
	acked, lost []uint32 // chunk indexes (the tests send chunk i as sequence i)
}

func (l *sentLog) packetAcked(_ time.Duration, r *txRecord) {
	if r.state != recAcked {
		panic("packetAcked on a record not marked acked")
	}
	l.acked = append(l.acked, r.idx)
}

func (l *sentLog) packetLost(r *txRecord) {
	if r.state != recLost {
		panic("packetLost on a record not marked lost")
	}
	l.lost = append(l.lost, r.idx)
}

// sendN records n packets of size bytes, sent 1 µs apart from start;
// packet i carries chunk i.
func sendN(t *testing.T, h *sentHistory, ps *pathmgr.Path, m *txMessage, start time.Duration, n, size int) {
	t.Helper()
	for i := 0; i < n; i++ {
		if !h.reserve(1 << 16) {
			t.Fatalf("reserve failed at %d", h.next)
		}
		idx := int(h.next)
		if seq := h.add(start+time.Duration(i)*time.Microsecond, ps, m, idx, size); seq != uint64(idx) {
			t.Fatalf("add returned seq %d, want %d", seq, idx)
		}
	}
}

// sackAck builds an ACK with cum and largest whose SACK vector marks seqs.
// seqRange returns the sequences [lo, hi).
func seqRange(lo, hi uint64) []uint64 {
	seqs := make([]uint64, 0, hi-lo)
	for s := lo; s < hi; s++ {
		seqs = append(seqs, s)
	}
	return seqs
}

func sackAck(cum, largest uint64, seqs ...uint64) *Ack {
	a := &Ack{Cum: cum, Largest: largest}
	base := a.SackBase()
	for _, s := range seqs {
		if s >= base && s-base < SackBits {
			a.Sack[(s-base)/8] |= 1 << ((s - base) % 8)
		}
	}
	return a
}

func TestSentHistoryAddCountsInflight(t *testing.T) {
	var h sentHistory
	ps := &pathmgr.Path{}
	m := &txMessage{}
	sendN(t, &h, ps, m, 5*time.Millisecond, 3, 100)
	if h.floor != 0 || h.next != 3 || h.span() != 3 {
		t.Fatalf("floor %d next %d span %d, want 0 3 3", h.floor, h.next, h.span())
	}
	if ps.InflightBytes != 300 || ps.SentPackets != 3 {
		t.Fatalf("inflight %d sent %d, want 300 3", ps.InflightBytes, ps.SentPackets)
	}
	// The PTO clock starts with the first packet in flight, not the later ones.
	if ps.LastProgress != 5*time.Millisecond {
		t.Fatalf("LastProgress %v, want 5ms", ps.LastProgress)
	}
	if r := h.rec(2); r.state != recInflight || r.size != 100 || r.sent != 5*time.Millisecond+2*time.Microsecond || r.msg != m {
		t.Fatalf("record 2 is %+v", *r)
	}
}

func TestSentHistoryReserveGrowsKeepingRecordsAndStopsAtLimit(t *testing.T) {
	var h sentHistory
	ps := &pathmgr.Path{}
	m := &txMessage{}
	sendN(t, &h, ps, m, 0, 10, 1)
	// Acknowledge 0..4 so the floor is not at 0 when the ring grows.
	var log sentLog
	h.onAck(0, &Ack{Cum: 5, Largest: 4}, ps, &log)
	sendN(t, &h, ps, m, 0, 100, 1) // 5..109 in flight: past the first ring of 64
	if len(h.ring) != 128 {
		t.Fatalf("ring of %d, want 128", len(h.ring))
	}
	for s := h.floor; s < h.next; s++ {
		if r := h.rec(s); r.state != recInflight || r.idx != uint32(s) {
			t.Fatalf("record %d after growth: %+v", s, *r)
		}
	}
	// The limit bounds growth: with the ring full, a span of 129 needs
	// a larger ring, which a limit of 128 refuses.
	sendN(t, &h, ps, m, 0, 128-int(h.span()), 1)
	if h.span() != 128 {
		t.Fatalf("span %d, want 128", h.span())
	}
	if h.reserve(128) {
		t.Fatal("reserve beyond the limit succeeded")
	}
	if !h.reserve(129) || len(h.ring) != 256 {
		t.Fatalf("reserve within the limit: ring of %d, want 256", len(h.ring))
	}
}

func TestSentHistoryAckAcknowledgesAndLosesBelowLargest(t *testing.T) {
	var h sentHistory
	ps := &pathmgr.Path{}
	sendN(t, &h, ps, &txMessage{}, 0, 8, 10)
	var log sentLog
	// 0 and 1 cumulatively, 4 and 6 selectively: 2, 3 and 5 lie below the
	// largest unacknowledged and are lost; 7 is beyond the largest and
	// stays in flight (it may still be on the wire).
	acked, lost := h.onAck(0, sackAck(2, 6, 4, 6), ps, &log)
	if !slices.Equal(log.acked, []uint32{0, 1, 4, 6}) || !slices.Equal(log.lost, []uint32{2, 3, 5}) {
		t.Fatalf("acked %v lost %v", log.acked, log.lost)
	}
	if acked != 40 || lost != 30 {
		t.Fatalf("acked %d lost %d bytes, want 40 30", acked, lost)
	}
	if ps.InflightBytes != 10 || ps.AckedPackets != 4 || ps.LostPackets != 3 {
		t.Fatalf("inflight %d acked %d lost %d", ps.InflightBytes, ps.AckedPackets, ps.LostPackets)
	}
	if h.floor != 7 {
		t.Fatalf("floor %d, want 7 (the oldest in flight)", h.floor)
	}
	// A repeat of the same ACK changes nothing: lost stays lost, acked stays acked.
	log = sentLog{}
	if a, l := h.onAck(0, sackAck(2, 6, 4, 6), ps, &log); a != 0 || l != 0 || len(log.acked)+len(log.lost) != 0 {
		t.Fatalf("repeated ack: acked %d lost %d %+v", a, l, log)
	}
}

func TestSentHistoryFloorWaitsForOldestInflight(t *testing.T) {
	var h sentHistory
	ps := &pathmgr.Path{}
	sendN(t, &h, ps, &txMessage{}, 0, 4, 10)
	var log sentLog
	// Only 0 is acknowledged; 1..3 are beyond the largest: no loss.
	h.onAck(0, &Ack{Cum: 1, Largest: 0}, ps, &log)
	if h.floor != 1 || len(log.lost) != 0 {
		t.Fatalf("floor %d lost %v, want 1 and none", h.floor, log.lost)
	}
	// 3 acknowledged selectively: 1 and 2 lost; the floor passes all three.
	h.onAck(0, sackAck(1, 3, 3), ps, &log)
	if h.floor != 4 || !slices.Equal(log.lost, []uint32{1, 2}) {
		t.Fatalf("floor %d lost %v, want 4 and [1 2]", h.floor, log.lost)
	}
	if h.span() != 0 || ps.InflightBytes != 0 {
		t.Fatalf("span %d inflight %d, want 0 0", h.span(), ps.InflightBytes)
	}
}

func TestSentHistoryBelowSackWindowIsUnreported(t *testing.T) {
	var h sentHistory
	ps := &pathmgr.Path{}
	sendN(t, &h, ps, &txMessage{}, 0, 300, 1)
	// The receiver lacks 0 (its cumulative point) and 30, and has the
	// rest; its SACK covers only 44..299. 0 is known lost; 1..43 are not
	// reported either way, 30 among them: neither acked nor lost, they
	// hold the floor but leave the path's window free, so that its next
	// DATA can carry the floor to the receiver.
	a := sackAck(0, 299, seqRange(44, 300)...)
	if a.SackBase() != 44 {
		t.Fatalf("SACK base %d, want 44", a.SackBase())
	}
	var log sentLog
	acked, lost := h.onAck(0, a, ps, &log)
	if acked != 256 || lost != 1 || log.lost[0] != 0 {
		t.Fatalf("acked %d lost %d %v, want 256, 1 [0]", acked, lost, log.lost)
	}
	if h.floor != 1 || ps.InflightBytes != 0 || h.unreported != 43 {
		t.Fatalf("floor %d inflight %d unreported %d, want 1, 0 and 43", h.floor, ps.InflightBytes, h.unreported)
	}
	if _, ok := h.ptoDeadline(ps, &pathmgr.Config{}); !ok {
		t.Fatal("no probe timeout while records are unreported")
	}
	// The sender's floor (1) reached the receiver, whose cumulative point
	// ran to 30: 1..29 are acknowledged below it, 30 is lost, 31..43 are
	// still below the window.
	log = sentLog{}
	acked, lost = h.onAck(0, sackAck(30, 299, seqRange(44, 300)...), ps, &log)
	if acked != 29 || lost != 1 || log.lost[0] != 30 {
		t.Fatalf("second ACK: acked %d lost %d %v, want 29, 1 [30]", acked, lost, log.lost)
	}
	if h.floor != 31 || h.unreported != 13 {
		t.Fatalf("floor %d unreported %d, want 31 and 13", h.floor, h.unreported)
	}
	// Told to skip 30, the receiver's cumulative point passes everything.
	log = sentLog{}
	if acked, lost = h.onAck(0, &Ack{Cum: 300, Largest: 299}, ps, &log); acked != 13 || lost != 0 {
		t.Fatalf("third ACK: acked %d lost %d, want 13 and 0", acked, lost)
	}
	if h.floor != 300 || ps.InflightBytes != 0 || h.unreported != 0 {
		t.Fatalf("floor %d inflight %d unreported %d, want 300, 0, 0", h.floor, ps.InflightBytes, h.unreported)
	}
	if len(log.lost) != 0 {
		t.Fatalf("lost %v after the window passed", log.lost)
	}
}

func TestSentHistoryUnreportedLostAtTimeout(t *testing.T) {
	// A path that goes silent with records unreported gives them up at
	// its probe timeout like the ones in flight: no DATA may reach the
	// receiver to let an ACK report them.
	var h sentHistory
	ps := &pathmgr.Path{}
	sendN(t, &h, ps, &txMessage{}, 0, 301, 1)
	var log sentLog
	h.onAck(0, sackAck(0, 299, seqRange(44, 300)...), ps, &log)
	if h.unreported != 43 || ps.InflightBytes != 1 {
		t.Fatalf("unreported %d inflight %d, want 43 and 1 (300)", h.unreported, ps.InflightBytes)
	}
	log = sentLog{}
	if lost := h.loseSentBy(time.Hour, ps, &log); lost != 44 || len(log.lost) != 44 || log.lost[0] != 1 || log.lost[43] != 300 {
		t.Fatalf("timeout lost %d %v, want 1..43 and 300", lost, log.lost)
	}
	if h.unreported != 0 || ps.InflightBytes != 0 || h.floor != 301 {
		t.Fatalf("unreported %d inflight %d floor %d, want 0 0 301", h.unreported, ps.InflightBytes, h.floor)
	}
}

func TestSentHistoryCumBeyondLargestAcknowledges(t *testing.T) {
	// The receiver's cumulative point may pass its largest when the floor
	// moved it: everything below cum is acknowledged.
	var h sentHistory
	ps := &pathmgr.Path{}
	sendN(t, &h, ps, &txMessage{}, 0, 5, 1)
	var log sentLog
	h.onAck(0, &Ack{Cum: 4, Largest: 1}, ps, &log)
	if !slices.Equal(log.acked, []uint32{0, 1, 2, 3}) || h.floor != 4 {
		t.Fatalf("acked %v floor %d", log.acked, h.floor)
	}
}

func TestSentHistoryPlausible(t *testing.T) {
	var h sentHistory
	sendN(t, &h, &pathmgr.Path{}, &txMessage{}, 0, 3, 1)
	for _, tc := range []struct {
		cum, largest uint64
		want         bool
	}{{0, 0, true}, {3, 2, true}, {0, 3, false}, {4, 2, false}} {
		if got := h.plausible(&Ack{Cum: tc.cum, Largest: tc.largest}); got != tc.want {
			t.Errorf("cum %d largest %d: plausible %v, want %v", tc.cum, tc.largest, got, tc.want)
		}
	}
}

func TestSentHistoryLoseAll(t *testing.T) {
	var h sentHistory
	ps := &pathmgr.Path{}
	sendN(t, &h, ps, &txMessage{}, 0, 4, 10)
	var log sentLog
	h.onAck(0, sackAck(0, 2, 2), ps, &log) // 0, 1 lost; 2 acked; 3 in flight
	log = sentLog{}
	if lost := h.loseAll(ps, &log); lost != 10 || !slices.Equal(log.lost, []uint32{3}) {
		t.Fatalf("loseAll lost %d bytes %v, want 10 [3]", lost, log.lost)
	}
	if h.floor != 4 || ps.InflightBytes != 0 || ps.LostPackets != 3 {
		t.Fatalf("floor %d inflight %d lost %d", h.floor, ps.InflightBytes, ps.LostPackets)
	}
	if lost := h.loseAll(ps, &log); lost != 0 {
		t.Fatalf("second loseAll lost %d", lost)
	}
}

func TestSentHistoryPTODeadline(t *testing.T) {
	cfg := pathmgr.DefaultConfig() // no RTT sample: PTO = 100 + 4·50 + 10 µs
	const pto = 310 * time.Microsecond
	var h sentHistory
	ps := &pathmgr.Path{}
	if _, ok := h.ptoDeadline(ps, &cfg); ok {
		t.Fatal("deadline with nothing in flight")
	}
	sendN(t, &h, ps, &txMessage{}, time.Millisecond, 3, 10) // sent at 1000, 1001, 1002 µs
	if d, ok := h.ptoDeadline(ps, &cfg); !ok || d != time.Millisecond+pto {
		t.Fatalf("deadline %v %v, want %v", d, ok, time.Millisecond+pto)
	}
	// Packet 0 acknowledged: the clock runs from the oldest still in flight.
	var log sentLog
	h.onAck(0, &Ack{Cum: 1, Largest: 0}, ps, &log)
	if d, _ := h.ptoDeadline(ps, &cfg); d != time.Millisecond+time.Microsecond+pto {
		t.Fatalf("deadline %v, want %v", d, time.Millisecond+time.Microsecond+pto)
	}
	// Progress after that packet was sent restarts the clock.
	ps.LastProgress = 2 * time.Millisecond
	if d, _ := h.ptoDeadline(ps, &cfg); d != 2*time.Millisecond+pto {
		t.Fatalf("deadline %v, want %v", d, 2*time.Millisecond+pto)
	}
	// With an RTT sample the PTO is srtt + 4·rttvar + max ack delay.
	ps.OnRTTSample(400 * time.Microsecond) // srtt 400, rttvar 200
	if d, _ := h.ptoDeadline(ps, &cfg); d != 2*time.Millisecond+(400+800+10)*time.Microsecond {
		t.Fatalf("deadline %v with an RTT sample", d)
	}
}

func TestSentHistoryRTTSampleOnlyFromNewerEchoes(t *testing.T) {
	var h sentHistory
	now := 10 * time.Millisecond
	if rtt, ok := h.rttSample(now, uint64(7*time.Millisecond)+1); !ok || rtt != 3*time.Millisecond {
		t.Fatalf("rtt %v %v, want 3ms", rtt, ok)
	}
	if _, ok := h.rttSample(now, uint64(6*time.Millisecond)+1); ok {
		t.Fatal("an older echo gave a sample")
	}
	if _, ok := h.rttSample(now, uint64(11*time.Millisecond)+1); ok {
		t.Fatal("an echo from the future gave a sample")
	}
	if _, ok := h.rttSample(now, 0); ok {
		t.Fatal("no echo gave a sample")
	}
}

func TestSentHistoryECNDeltas(t *testing.T) {
	var h sentHistory
	for i, tc := range []struct {
		rx, ce   uint64
		dRx, dCE uint64
		ok       bool
	}{
		{rx: 10, ce: 2, dRx: 10, dCE: 2, ok: true},
		{rx: 10, ce: 3, ok: false},                // no new packets: nothing to say
		{rx: 8, ce: 1, ok: false},                 // a reordered, older ACK
		{rx: 14, ce: 9, dRx: 4, dCE: 4, ok: true}, // more marks than packets is capped
		{rx: 20, ce: 9, dRx: 6, dCE: 0, ok: true},
	} {
		dRx, dCE, ok := h.ecn(&Ack{RxCount: tc.rx, CECount: tc.ce})
		if dRx != tc.dRx || dCE != tc.dCE || ok != tc.ok {
			t.Errorf("ack %d (rx %d ce %d): %d %d %v, want %d %d %v", i, tc.rx, tc.ce, dRx, dCE, ok, tc.dRx, tc.dCE, tc.ok)
		}
	}
}

func TestSentHistoryAckBelowGoBackN(t *testing.T) {
	var h sentHistory
	ps := &pathmgr.Path{}
	sendN(t, &h, ps, &txMessage{}, 0, 5, 10)
	var log sentLog
	if acked := h.ackBelow(0, 3, ps, &log); acked != 30 || !slices.Equal(log.acked, []uint32{0, 1, 2}) {
		t.Fatalf("acked %d %v", acked, log.acked)
	}
	if h.floor != 3 || ps.InflightBytes != 20 {
		t.Fatalf("floor %d inflight %d", h.floor, ps.InflightBytes)
	}
}

// nopHandler is a sentHandler that does nothing (for allocation counts).
type nopHandler struct{}

func (nopHandler) packetAcked(time.Duration, *txRecord) {}
func (nopHandler) packetLost(*txRecord)                 {}

func TestSentHistoryAllocs(t *testing.T) {
	var h sentHistory
	ps := &pathmgr.Path{}
	m := &txMessage{}
	var hd sentHandler = nopHandler{}
	cfg := pathmgr.DefaultConfig()
	sendN(t, &h, ps, m, 0, 64, 10) // grow the ring once
	a := &Ack{}
	allocs := testing.AllocsPerRun(1000, func() {
		h.reserve(1 << 16)
		seq := h.add(0, ps, m, 0, 10)
		*a = Ack{Cum: seq, Largest: seq}
		a.Sack[0] = 1
		h.onAck(0, a, ps, hd)
		h.ptoDeadline(ps, &cfg)
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per packet sent and acknowledged, want 0", allocs)
	}
}

// TestSentHistoryAckMatchesRule checks onAck, which walks the cumulative
// range and the SACK vector separately, against the rule it implements
// taken one sequence at a time (PROTOCOL.md §3 "Loss"): a record in flight
// is acked if the ACK acknowledges it (Ack.Acked), else lost if it lies
// below the ACK's largest and the ACK reports it (in the SACK window, or
// the cumulative point itself); in sequence order. Random flights, earlier
// acks and ACKs (cumulative points above and below the SACK window).
func TestSentHistoryAckMatchesRule(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for trial := 0; trial < 2000; trial++ {
		var h sentHistory
		ps := &pathmgr.Path{}
		n := 1 + rng.IntN(700)
		sendN(t, &h, ps, &txMessage{}, 0, n, 100)
		// Some earlier ACK left records acked or lost in the middle.
		for range rng.IntN(5) {
			seq := h.floor + uint64(rng.IntN(n))
			if seq < h.next && h.rec(seq).state == recInflight {
				h.rec(seq).state = recAcked + uint8(rng.IntN(2))
				ps.InflightBytes -= 100
			}
		}
		largest := uint64(rng.IntN(n))
		cum := uint64(rng.IntN(int(largest) + 2))
		var seqs []uint64
		for s := uint64(0); s <= largest; s++ {
			if rng.IntN(4) != 0 {
				seqs = append(seqs, s)
			}
		}
		a := sackAck(cum, largest, seqs...)

		// The rule, one sequence at a time.
		var want sentLog
		var wantAcked, wantLost int
		for seq := h.floor; seq < min(max(a.Largest+1, a.Cum), h.next); seq++ {
			if h.rec(seq).state != recInflight {
				continue
			}
			if a.Acked(seq) {
				want.acked = append(want.acked, uint32(seq))
				wantAcked += 100
			} else if seq < a.Largest && (seq >= a.SackBase() || seq == a.Cum) {
				want.lost = append(want.lost, uint32(seq))
				wantLost += 100
			}
		}
		var got sentLog
		acked, lost := h.onAck(0, a, ps, &got)
		if acked != wantAcked || lost != wantLost || !slices.Equal(got.acked, want.acked) || !slices.Equal(got.lost, want.lost) {
			t.Fatalf("trial %d (cum %d largest %d): acked %d %v lost %d %v, want %d %v, %d %v", trial, cum, largest,
				acked, got.acked, lost, got.lost, wantAcked, want.acked, wantLost, want.lost)
		}
	}
}

// resendLog marks every lost record resent, as the connection does for a
// chunk it queues again.
type resendLog struct{ sentLog }

func (l *resendLog) packetLost(r *txRecord) {
	l.sentLog.packetLost(r)
	r.desc |= recResent
}

// A resent packet counts as spurious when an ACK sent before the receiver
// could have been told to skip it acknowledges it; an ACK of later DATA,
// whose floor let the receiver's cumulative point pass it unreceived,
// proves nothing.
func TestSentHistorySpuriousOnlyFromTruthfulAcks(t *testing.T) {
	var h sentHistory
	ps := &pathmgr.Path{}
	m := &txMessage{}
	var hd resendLog
	sendN(t, &h, ps, m, 0, 10, 100)
	h.loseAll(ps, &hd) // a probe timeout while the ACKs were queued
	if got := h.spurious(sackAck(6, 5)); got != 6 {
		t.Fatalf("an ACK of 0..5 sent before the timeout: %d spurious, want 6", got)
	}
	if got := h.spurious(sackAck(6, 5)); got != 0 {
		t.Fatalf("the same ACK again: %d spurious, want 0 (each counts once)", got)
	}
	// 10.. carry a floor of 10: the receiver's cumulative point passes
	// 6..9 whether it had them or not.
	sendN(t, &h, ps, m, time.Millisecond, 3, 100)
	if got := h.spurious(sackAck(13, 12)); got != 0 {
		t.Fatalf("an ACK of the DATA after the floor moved: %d spurious, want 0", got)
	}
	if h.pending != 0 {
		t.Fatalf("%d records still pending after an ACK past their floor", h.pending)
	}
}

// A SACK bit proves receipt whatever the ACK's largest: the receiver
// reports only what it holds.
func TestSentHistorySpuriousFromSackBit(t *testing.T) {
	var h sentHistory
	ps := &pathmgr.Path{}
	m := &txMessage{}
	var hd resendLog
	sendN(t, &h, ps, m, 0, 10, 100)
	h.onAck(0, sackAck(0, 9, 1, 2, 3, 4, 5, 6, 7, 8, 9), ps, &hd) // 0 lost on the gap
	sendN(t, &h, ps, m, time.Millisecond, 2, 100)                 // 10, 11 tell the receiver to skip 0
	if got := h.spurious(sackAck(0, 11, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11)); got != 1 {
		t.Fatalf("an ACK with 0's bit set: %d spurious, want 1", got)
	}
}
