package metaroce

// This file is the receiver's per-path record of which sequence numbers
// arrived: the counterpart of sent.go, and like it unaware of messages,
// memory and the connection. What a packet carries is placement's business
// (placement.go); when the acknowledgement goes out is rxPath's (rx.go).

// rxVerdict is what a recvWindow makes of a DATA packet's sequence.
type rxVerdict uint8

const (
	// rxInOrder: first arrival, next to what arrived before (or the first
	// packet of the path).
	rxInOrder rxVerdict = iota
	// rxGap: first arrival, beyond a sequence that is missing: the sender
	// must hear at once (PROTOCOL.md §3, "When ACKs are sent").
	rxGap
	// rxFill: first arrival below the largest seen (a resent packet never
	// does this, since sequences are not reused; a reordering fabric does).
	rxFill
	// rxDuplicate: already received, or below the cumulative point.
	rxDuplicate
	// rxTooFar: beyond the window a sender may have in flight
	// (MaxPathInflight); not recorded.
	rxTooFar
)

// recvWindow is the receiver's view of one path's sequence space: the
// cumulative point (every sequence below it arrived or lies below the
// sender's ack floor), the largest sequence received with its timestamp,
// and a bitmap of what arrived from the cumulative point on. It is what an
// ACK reports (PROTOCOL.md §3).
type recvWindow struct {
	cum, largest uint64
	any          bool     // something arrived (largest is valid)
	bits         []uint64 // ring bitmap of received sequences in [cum, cum+len*64)
	lastTs       uint64   // the timestamp of DATA largest, echoed in ACKs
}

func (w *recvWindow) capBits() uint64 { return uint64(len(w.bits)) * 64 }

// get reports whether seq, at or above the cumulative point, arrived.
func (w *recvWindow) get(seq uint64) bool {
	if seq < w.cum || seq-w.cum >= w.capBits() {
		return false
	}
	i := seq & (w.capBits() - 1)
	return w.bits[i/64]&(1<<(i%64)) != 0
}

func (w *recvWindow) set(seq uint64) {
	i := seq & (w.capBits() - 1)
	w.bits[i/64] |= 1 << (i % 64)
}

func (w *recvWindow) clearBit(seq uint64) {
	i := seq & (w.capBits() - 1)
	w.bits[i/64] &^= 1 << (i % 64)
}

// grow makes the bitmap cover seq.
func (w *recvWindow) grow(seq uint64) {
	need := seq - w.cum + 1
	n := uint64(512)
	for n < need {
		n *= 2
	}
	old := *w
	w.bits = make([]uint64, n/64)
	if old.bits != nil && old.any {
		for s := w.cum; s <= old.largest; s++ {
			if old.get(s) {
				w.set(s)
			}
		}
	}
}

// advanceTo moves the cumulative point to at least floor (the sender gave up
// on everything below it), then over every contiguous received sequence
// (PROTOCOL.md §3, "The cumulative point").
func (w *recvWindow) advanceTo(floor uint64) {
	if floor > w.cum {
		if floor-w.cum >= w.capBits() {
			clear(w.bits)
		} else {
			for s := w.cum; s < floor; s++ {
				w.clearBit(s)
			}
		}
		w.cum = floor
	}
	for w.capBits() > 0 && w.get(w.cum) {
		w.clearBit(w.cum)
		w.cum++
	}
}

// expected is the sequence the path expects next: one past the largest
// received, or the cumulative point before anything arrived. A version-2
// DATA's 32-bit sequence is unwrapped against it (PROTOCOL.md §12).
func (w *recvWindow) expected() uint64 {
	if w.any {
		return w.largest + 1
	}
	return w.cum
}

// receive records the arrival of DATA seq, sent when the path's ack floor
// was floor and stamped ts; limit is the most sequences a sender may have
// in flight on a path. The floor moves the cumulative point first, even if
// the packet itself is a duplicate or too far ahead.
func (w *recvWindow) receive(seq, floor, ts, limit uint64) rxVerdict {
	w.advanceTo(floor)
	if seq < w.cum || w.get(seq) {
		return rxDuplicate
	}
	if seq-w.cum >= limit {
		return rxTooFar
	}
	if seq-w.cum >= w.capBits() {
		w.grow(seq)
	}
	v := rxInOrder
	switch {
	case w.any && seq > w.largest+1:
		v = rxGap
	case w.any && seq < w.largest:
		v = rxFill
	}
	w.set(seq)
	if !w.any || seq > w.largest {
		w.largest = seq
		w.lastTs = ts
	}
	w.any = true
	w.advanceTo(w.cum)
	return v
}

// inOrder (RoCEv2) records seq, which is the cumulative point: the baseline
// accepts nothing else.
func (w *recvWindow) inOrder(seq, ts uint64) {
	w.cum = seq + 1
	w.largest = seq
	w.lastTs = ts
	w.any = true
}

// fillAck writes the window's report into a: the cumulative point, the
// largest sequence and its timestamp, and, if sack, the SACK vector from
// a.SackBase() on. With anchor, when the largest is a SACK window or more
// beyond the cumulative point, it reports the window that starts at the
// cumulative point instead, as its largest the window's last sequence
// (PROTOCOL.md §3, "Loss"). It returns whether the largest was that far
// ahead.
func (w *recvWindow) fillAck(a *Ack, sack, anchor bool) (far bool) {
	a.Cum = w.cum
	a.Largest = w.largest
	a.EchoTimestamp = w.lastTs
	if !sack {
		return false
	}
	far = w.largest >= w.cum && w.largest-w.cum >= SackBits
	if far && anchor {
		a.Largest = w.cum + SackBits - 1
		a.EchoTimestamp = 0
		a.Flags |= FlagAckAtCum
	}
	base := a.SackBase()
	for s := base; s <= w.largest && s-base < SackBits; s++ {
		if w.get(s) {
			j := s - base
			a.Sack[j/8] |= 1 << (j % 8)
		}
	}
	return far
}
