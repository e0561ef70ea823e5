package metaroce

import (
	"time"

	"github.com/mrgw/mrgw/pathmgr"
)

// This file is the sender's per-path sent history and loss detection, kept
// apart from the connection as quic-go keeps its ackhandler apart from its
// connection: a sentHistory knows what was sent on one path and what each
// ACK of that path says about it; what a lost or acknowledged packet means
// for the connection (resending a chunk, completing a message) is the
// connection's business, told through a sentHandler.

// Record states.
const (
	recInflight uint8 = iota + 1
	recAcked
	recLost
	// recUnreported: below an ACK's largest, between its cumulative point
	// and its SACK window. Most likely received, so it no longer counts
	// against the path's window (the path must keep sending for the
	// receiver to learn the floor that lets its cumulative point pass
	// it), but not acknowledged either: the floor stays below it until an
	// ACK reports it, or a probe timeout gives it up.
	recUnreported
)

// txRecord is one DATA packet sent on a path.
type txRecord struct {
	msg   *txMessage
	idx   uint32
	size  uint32 // bytes on the wire
	sent  time.Duration
	state uint8
	desc  uint8  // version 2: recDesc, recDescOnly (PROTOCOL.md §12)
	path  uint16 // the path it was sent on
}

// Version-2 record flags.
const (
	// recDesc: the packet carried its message's descriptor.
	recDesc uint8 = 1 << iota
	// recDescOnly: it carried nothing else (a descriptor-only DATA).
	recDescOnly
	// recResent: declared lost, its chunk was queued to be sent again.
	recResent
)

// sentHandler is told what becomes of each packet of a sentHistory. The
// record it gets is already in its new state; it is only valid during the
// call.
type sentHandler interface {
	// packetAcked: the receiver has the packet (PROTOCOL.md §3, SACK).
	packetAcked(now time.Duration, r *txRecord)
	// packetLost: the packet is lost and its chunk must be sent again, as
	// new DATA with a new sequence number (§3 "Loss", "Tail loss").
	packetLost(r *txRecord)
}

// sentHistory is the sender's view of one path's sequence space: a record
// of every DATA packet from the oldest still in flight (the path's ack
// floor, carried in every DATA as the floor gap) to the next sequence to
// send, and the per-path state of ACK processing (the newest RTT echo, the
// ECN counts, the RoCEv2 go-back point).
//
// Loss detection is by sequence, not by time: the fabric keeps one path's
// packets in order, so a sequence below an ACK's largest that the ACK
// reports missing is lost (PROTOCOL.md §3 "Loss"), and when nothing is
// acknowledged for a probe timeout what was sent that long ago is (§3
// "Tail loss"). Sequence numbers are never reused: a lost packet stays lost, and
// the floor passes it.
type sentHistory struct {
	ring        []txRecord // indexed by seq & (len-1)
	floor, next uint64     // records exist for [floor, next); floor is the oldest in flight
	lastEcho    uint64     // newest echo timestamp taken as an RTT sample
	lastCE      uint64     // CE count of the last ACK
	lastRx      uint64     // RX count of the last ACK
	gbnResend   uint64     // RoCEv2: next sequence to resend after a NAK
	// departed: the driver reported every sequence below it as left
	// (Config.DepartureWait; Conn.Departed).
	departed uint64
	// Spurious-loss accounting: below the floor, a record of a resent
	// packet keeps state recLost and, in idx, how far next was past it
	// when the floor passed it (an ACK whose largest is below that saw no
	// DATA telling the receiver to skip it, so its cumulative point is
	// the truth). pending counts such records; lostLo is the lowest.
	pending int
	lostLo  uint64
	// unreported counts the records in state recUnreported.
	unreported int
	// floorSent is the floor the path's last DATA carried.
	floorSent uint64
}

// live reports whether a record is still to be resolved: in flight, or
// unreported.
func (r *txRecord) live() bool { return r.state == recInflight || r.state == recUnreported }

// rec returns the record of seq, which must lie in [floor, next).
func (h *sentHistory) rec(seq uint64) *txRecord { return &h.ring[seq&uint64(len(h.ring)-1)] }

// span is the number of sequences between the floor and the next: what
// the receiver's window for the path must cover.
func (h *sentHistory) span() uint64 { return h.next - h.floor }

// reserve makes room in the ring for sequence next, growing it to a power
// of two; it fails when the span would exceed limit (MaxPathInflight).
func (h *sentHistory) reserve(limit int) bool {
	need := h.next - h.floor + 1
	if need <= uint64(len(h.ring)) {
		return true
	}
	if need > uint64(limit) {
		return false
	}
	n := 64
	for uint64(n) < need {
		n *= 2
	}
	ring := make([]txRecord, n)
	// Copy every slot, not only those in flight: a slot below the floor
	// still holds its send time (sentStamp).
	for s := h.next - min(h.next, uint64(len(h.ring))); s < h.next; s++ {
		ring[s&uint64(n-1)] = *h.rec(s)
	}
	h.ring = ring
	return true
}

// add records the packet sent as sequence next (reserve must have
// succeeded) and returns its sequence. The path's bytes in flight grow by
// its size; the probe-timeout clock starts with the first packet in flight.
func (h *sentHistory) add(now time.Duration, ps *pathmgr.Path, m *txMessage, idx, size int) uint64 {
	seq := h.next
	h.next++
	// Every field, one by one: a composite literal is built on the stack
	// and copied with wide loads that stall on its narrow stores, once
	// per datagram.
	r := h.rec(seq)
	r.msg, r.idx, r.size, r.sent = m, uint32(idx), uint32(size), now
	r.state, r.desc, r.path = recInflight, 0, 0
	h.floorSent = h.floor
	if ps.InflightBytes == 0 {
		ps.LastProgress = now
	}
	ps.InflightBytes += size
	ps.SentPackets++
	return seq
}

// plausible reports whether a only names sequences that were sent.
func (h *sentHistory) plausible(a *Ack) bool {
	return a.Largest < h.next && a.Cum <= h.next
}

// onAck applies ACK a (plausible) to the records in flight: each one it
// acknowledges is acked; each one below a.Largest whose SACK bit is clear
// is lost, and so is the cumulative point itself, the first sequence the
// receiver lacks. What lies between the cumulative point and the SACK
// window is unreported and stays in flight until an ACK reports it
// (PROTOCOL.md §3 "Loss"): a receiver whose cumulative point waits on a
// hole for longer than the window's 256 packets (the sender's news that
// the hole was given up is a round trip away) has most of it. Then the
// floor moves past every record no longer in flight. It returns the bytes
// acknowledged and lost.
func (h *sentHistory) onAck(now time.Duration, a *Ack, ps *pathmgr.Path, hd sentHandler) (acked, lost int) {
	end := min(max(a.Largest+1, a.Cum), h.next)
	seq := h.floor
	// Below the cumulative point everything is acknowledged: no bit to
	// test. Then the SACK vector, its base computed once, not per record.
	for cum := min(a.Cum, end); seq < cum; seq++ {
		if r := h.rec(seq); r.live() {
			acked += h.ack(now, r, ps, hd)
		}
	}
	base := a.SackBase()
	for ; seq < end; seq++ {
		r := h.rec(seq)
		if !r.live() {
			continue
		}
		switch i := seq - base; {
		case seq >= base && i < SackBits && a.Sack[i/8]&(1<<(i%8)) != 0:
			acked += h.ack(now, r, ps, hd)
		case seq >= a.Largest:
		case seq >= base || seq == a.Cum:
			h.lose(r, ps, hd)
			lost += int(r.size)
		case r.state == recInflight:
			r.state = recUnreported
			h.unreported++
			ps.InflightBytes -= int(r.size)
		}
	}
	h.advanceFloor()
	return acked, lost
}

// ack marks r acknowledged and returns its size.
func (h *sentHistory) ack(now time.Duration, r *txRecord, ps *pathmgr.Path, hd sentHandler) int {
	h.leave(r, ps)
	r.state = recAcked
	ps.AckedPackets++
	hd.packetAcked(now, r)
	return int(r.size)
}

// loseAll declares every record in flight lost (a probe timeout, or a path
// taken down) and returns the bytes lost.
func (h *sentHistory) loseAll(ps *pathmgr.Path, hd sentHandler) (lost int) {
	for seq := h.floor; seq < h.next; seq++ {
		if r := h.rec(seq); r.live() {
			h.lose(r, ps, hd)
			lost += int(r.size)
		}
	}
	h.advanceFloor()
	return lost
}

// loseSentBy declares lost every record in flight sent at or before
// cutoff, and the oldest in flight whenever it was sent (a probe timeout:
// the oldest is overdue by definition, even if a driver's departure report
// moved its send time), and returns the bytes lost.
func (h *sentHistory) loseSentBy(cutoff time.Duration, ps *pathmgr.Path, hd sentHandler) (lost int) {
	first := true
	for seq := h.floor; seq < h.next; seq++ {
		r := h.rec(seq)
		if !r.live() {
			continue
		}
		if !first && r.sent > cutoff {
			break // sent in order: the rest are later still
		}
		first = false
		h.lose(r, ps, hd)
		lost += int(r.size)
	}
	h.advanceFloor()
	return lost
}

func (h *sentHistory) lose(r *txRecord, ps *pathmgr.Path, hd sentHandler) {
	h.leave(r, ps)
	r.state = recLost
	ps.LostPackets++
	hd.packetLost(r)
}

// owesFloor reports whether the receiver must hear the path's floor before
// it can report what is unreported: its cumulative point waits on a
// packet the sender gave up, and only the path's next DATA says so. A
// path whose unreported packets left its window may carry nothing more
// for a while (what it sent is not acknowledged, so a relay has no room
// to take more): the connection sends its next chunk there (floorPath).
func (h *sentHistory) owesFloor() bool { return h.unreported > 0 && h.floor > h.floorSent }

// leave takes live record r out of the path's bytes in flight (an
// unreported one is out already) before it is acked or lost.
func (h *sentHistory) leave(r *txRecord, ps *pathmgr.Path) {
	if r.state == recUnreported {
		h.unreported--
		return
	}
	ps.InflightBytes -= int(r.size)
}

// advanceFloor moves the floor over every record no longer in flight: the
// sender has seen it acknowledged or given it up, and tells the receiver
// so in the floor gap of its next DATA (PROTOCOL.md §3, "the cumulative
// point").
func (h *sentHistory) advanceFloor() {
	for h.floor < h.next && !h.rec(h.floor).live() {
		r := h.rec(h.floor)
		if r.state == recLost && r.desc&recResent != 0 {
			if h.pending == 0 {
				h.lostLo = h.floor
			}
			h.pending++
			*r = txRecord{sent: r.sent, state: recLost, idx: uint32(min(h.next-h.floor, 1<<32-1))}
		} else {
			*r = txRecord{sent: r.sent} // the send time stays for sentStamp
		}
		h.floor++
	}
}

// spurious returns how many resent packets below the floor ACK a shows
// were received after all: a packet counts once, and is forgotten once an
// ACK could no longer tell (the receiver was told to skip it) or the ring
// reuses its slot.
//
// The cost per ACK is what its cumulative point and SACK vector cover, not
// the path's window: the marks grow with the sequence (the floor passes
// records in order while next only grows), so the records an ACK can no
// longer judge are a prefix, those below its cumulative point another,
// and the rest can only be acknowledged by a SACK bit.
func (h *sentHistory) spurious(a *Ack) (n int) {
	if h.pending <= 0 || a.Flags&FlagAckAtCum != 0 {
		// An ACK of the window at the cumulative point does not say how
		// far the receiver has read: the marks wait for the next ACK.
		return 0
	}
	if lo := h.next - min(h.next, uint64(len(h.ring))); h.lostLo < lo {
		h.lostLo = lo // older marks were overwritten
	}
	base := a.SackBase()
	sacked := func(seq uint64) bool {
		return seq >= base && seq-base < SackBits && a.Sack[(seq-base)/8]&(1<<((seq-base)%8)) != 0
	}
	resolve := func(r *txRecord, acked bool) {
		if acked {
			n++
		}
		r.state = 0
		h.pending--
	}
	seq := h.lostLo
	// Marks at or below the ACK's largest: the ACK may follow DATA that let
	// the receiver skip them; only a SACK bit still proves receipt.
	for ; seq < h.floor; seq++ {
		r := h.rec(seq)
		if r.state != recLost {
			continue
		}
		if a.Largest < seq+uint64(r.idx) {
			break
		}
		resolve(r, sacked(seq))
	}
	first := seq
	// Below the cumulative point of a truthful ACK: received.
	for ; seq < min(a.Cum, h.floor); seq++ {
		if r := h.rec(seq); r.state == recLost {
			resolve(r, true)
		}
	}
	// Within the SACK vector: received where the bit is set.
	for s := max(seq, base); s < min(h.floor, base+SackBits); s++ {
		if r := h.rec(s); r.state == recLost && sacked(s) {
			resolve(r, true)
		}
	}
	for first < h.floor && h.rec(first).state != recLost {
		first++
	}
	h.lostLo = first
	if first >= h.floor {
		h.pending = 0
	}
	return n
}

// sentStamp returns when sequence seq (< next) was sent, as a version-1
// DATA's timestamp would have said it (ns + 1), or 0 when the ring no
// longer holds it. A version-2 DATA carries no timestamp: the sender times
// the ACK's largest from its own history (PROTOCOL.md §12).
func (h *sentHistory) sentStamp(seq uint64) uint64 {
	if seq >= h.next || h.next-seq > uint64(len(h.ring)) {
		return 0
	}
	return uint64(h.rec(seq).sent) + 1
}

// ptoDeadline returns when the path's oldest packet in flight times out: a
// probe timeout after it was sent or after the path last made progress,
// whichever is later (PROTOCOL.md §3 "Tail loss and dead paths").
func (h *sentHistory) ptoDeadline(ps *pathmgr.Path, cfg *pathmgr.Config) (time.Duration, bool) {
	if h.floor >= h.next || ps.InflightBytes <= 0 && h.unreported == 0 {
		return 0, false
	}
	start := ps.LastProgress
	if sent := h.rec(h.floor).sent; sent > start {
		start = sent
	}
	return start + ps.PTO(cfg), true
}

// rttSample returns the round trip an echo timestamp measures (the ACK's,
// or in version 2 sentStamp of its largest), if it echoes a packet newer
// than any echo seen before and not from the future.
func (h *sentHistory) rttSample(now time.Duration, echo uint64) (time.Duration, bool) {
	if echo > h.lastEcho && echo-1 <= uint64(now) {
		h.lastEcho = echo
		return now - time.Duration(echo-1), true
	}
	return 0, false
}

// ecn returns the packets an ACK reports received and CE-marked since the
// previous ACK (PROTOCOL.md §9): its counts are cumulative. Counts that go
// backwards (a reordered ACK) report nothing.
func (h *sentHistory) ecn(a *Ack) (dRx, dCE uint64, ok bool) {
	if a.RxCount <= h.lastRx {
		return 0, 0, false
	}
	dRx = a.RxCount - h.lastRx
	if a.CECount > h.lastCE {
		dCE = a.CECount - h.lastCE
	}
	if dCE > dRx {
		dCE = dRx
	}
	h.lastRx, h.lastCE = a.RxCount, a.CECount
	return dRx, dCE, true
}

// ackBelow (RoCEv2) acknowledges every record below cum, which the
// receiver accepted in order, and moves the floor to cum. It returns the
// bytes acknowledged.
func (h *sentHistory) ackBelow(now time.Duration, cum uint64, ps *pathmgr.Path, hd sentHandler) (acked int) {
	for h.floor < cum {
		r := h.rec(h.floor)
		if r.state == recInflight {
			acked += h.ack(now, r, ps, hd)
		}
		*r = txRecord{sent: r.sent}
		h.floor++
	}
	return acked
}
