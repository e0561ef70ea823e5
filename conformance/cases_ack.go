package conformance

import (
	"fmt"
	"slices"

	"github.com/mrgw/mrgw/internal/ecn"
)

// sackPattern sends one-chunk WRITEs on path p as sequences 0..n-1 except
// skip, and waits for an ACK that acknowledges every one sent.
func sackPattern(s *session, c *client, p int, n uint64, skip []uint64) (*ackPkt, map[uint64]bool, error) {
	sent := map[uint64]bool{}
	var seqs []uint64
	base := s.r.area(int(n) * 16)
	for q := uint64(0); q < n; q++ {
		m := c.write(1, base+q*16, s.r.pattern(16))
		if slices.Contains(skip, q) {
			c.paths[p].next++ // this sequence is "lost"
			continue
		}
		sent[c.send(p, c.chunk(m, 0))] = true
		seqs = append(seqs, q)
		// Pace: let the target acknowledge each burst, so that no socket
		// buffer on the way overflows and turns a sent packet into a loss.
		if len(seqs)%32 == 0 {
			c.pump(s.r.opts.Timeout, func() bool { return c.ackSince(0, p, func(a *ackPkt) bool { return a.Largest >= q }) != nil })
		}
	}
	// Only the tail needs checking: an ACK acknowledging the tail and
	// reporting Largest = n-1 is the final word (of the ACKs at the
	// largest; one of the window at the cumulative point may follow).
	var last *ackPkt
	ok := c.pump(s.r.opts.Timeout, func() bool {
		last = c.ackSince(0, p, func(a *ackPkt) bool { return a.Largest == n-1 })
		return last != nil
	})
	if !ok {
		l := "none"
		if a := c.lastAck(p); a != nil {
			l = describeAck(a)
		}
		return nil, sent, fmt.Errorf("no ACK with largest %d on path %d within %v (last: %s)", n-1, p, s.r.opts.Timeout, l)
	}
	c.settle(10 * s.r.opts.Quiet / 150) // let any later ACK arrive
	return c.lastAckWhere(p, func(a *ackPkt) bool { return !a.atCum() }), sent, nil
}

// checkSack compares the ACK's report of [lo, hi] with what was sent.
func checkSack(a *ackPkt, lo, hi uint64, sent map[uint64]bool) error {
	for q := lo; q <= hi; q++ {
		if a.acked(q) != sent[q] {
			if sent[q] {
				return fmt.Errorf("seq %d was sent but the ACK does not report it (%s)", q, describeAck(a))
			}
			return fmt.Errorf("seq %d was never sent but the ACK reports it received (%s)", q, describeAck(a))
		}
	}
	return nil
}

func caseSackExact(s *session) error {
	c, err := s.connect()
	if err != nil {
		return err
	}
	p := c.pathOf(1)
	skip := []uint64{5, 6, 17, 30, 31, 32, 33, 38}
	a, sent, err := sackPattern(s, c, p, 40, skip)
	if err != nil {
		return err
	}
	if a.Cum != 5 {
		return fmt.Errorf("cum %d, want 5 (the first missing sequence): %s", a.Cum, describeAck(a))
	}
	if err := checkSack(a, 0, 39, sent); err != nil {
		return err
	}
	// Every ACK along the way must report only what was sent.
	for _, x := range c.acks {
		if int(x.Path) != p {
			continue
		}
		for q := uint64(0); q <= x.Largest; q++ {
			if x.acked(q) && !sent[q] {
				return fmt.Errorf("an intermediate ACK reports never-sent seq %d (%s)", q, describeAck(x))
			}
		}
	}
	s.passf("gaps %v reported exactly: %s", skip, describeAck(a))
	return nil
}

func caseSackWindow(s *session) error {
	c, err := s.connect()
	if err != nil {
		return err
	}
	p := c.pathOf(1)
	skip := []uint64{3, 100, 200, 280, 298}
	a, sent, err := sackPattern(s, c, p, 300, skip)
	if err != nil {
		return err
	}
	if a.Cum != 3 {
		return fmt.Errorf("cum %d, want 3: %s", a.Cum, describeAck(a))
	}
	if b := a.base(); b != 300-256 {
		return fmt.Errorf("window base %d, want %d", b, 300-256)
	}
	// Bit 0 of the vector is seq 44; bit 255 is Largest (299).
	if a.Sack[31]&0x80 == 0 {
		return fmt.Errorf("bit 255 (seq 299 = largest) not set in %x", a.Sack)
	}
	if err := checkSack(a, 44, 299, sent); err != nil {
		return err
	}
	// With the largest 256 or more past the cumulative point, ACKs of the
	// window at the cumulative point report what lies below the other.
	at := c.lastAckWhere(p, (*ackPkt).atCum)
	if at == nil {
		return fmt.Errorf("no ACK of the window at the cumulative point (flag bit 1) while largest %d is 256 or more past cum %d", a.Largest, a.Cum)
	}
	if at.Cum != 3 || at.Largest != 3+255 {
		return fmt.Errorf("ACK at the cumulative point: cum %d largest %d, want 3 and 258: %s", at.Cum, at.Largest, describeAck(at))
	}
	if err := checkSack(at, 4, 258, sent); err != nil {
		return fmt.Errorf("ACK at the cumulative point: %w", err)
	}
	s.passf("window ends at largest 299, starts at 44; gaps %v inside it exact; the window at cum 3 (to 258) exact too", skip[1:])
	return nil
}

func caseCumContiguous(s *session) error {
	c, err := s.connect()
	if err != nil {
		return err
	}
	p := c.pathOf(1)
	base := s.r.area(4 * 32)
	var ms []*msg
	for i := 0; i < 4; i++ {
		ms = append(ms, c.write(1, base+uint64(i)*32, s.r.pattern(32)))
	}
	c.send(p, c.chunk(ms[0], 0))
	c.send(p, c.chunk(ms[1], 0))
	if a, err := c.waitAcked(p, 0, 1); err != nil {
		return err
	} else if a.Cum != 2 {
		return fmt.Errorf("after seqs 0,1: cum %d, want 2 (%s)", a.Cum, describeAck(a))
	}
	c.paths[p].next++ // seq 2 held back
	mark := len(c.acks)
	c.send(p, c.chunk(ms[3], 0)) // seq 3
	var a *ackPkt
	if !c.pump(s.r.opts.Timeout, func() bool { a = c.ackSince(mark, p, func(x *ackPkt) bool { return x.Largest >= 3 }); return a != nil }) {
		return fmt.Errorf("no ACK for seq 3 sent after a gap within %v (gaps are acknowledged at once)", s.r.opts.Timeout)
	}
	if a.Cum != 2 || a.acked(2) || !a.acked(3) {
		return fmt.Errorf("with seq 2 missing: want cum 2, seq 3 in SACK; got %s", describeAck(a))
	}
	// Fill the hole: seq 2 is sent now (sequence numbers are never reused;
	// the suite plays a sender whose seq 2 was only delayed).
	c.paths[p].next = 2
	c.send(p, c.chunk(ms[2], 0), withFloor(2))
	c.paths[p].next = 4
	if a, err = c.waitAcked(p, 2, 3); err != nil {
		return err
	}
	if a.Cum != 4 {
		return fmt.Errorf("after the hole at 2 filled: cum %d, want 4 (%s)", a.Cum, describeAck(a))
	}
	s.passf("cum 2 with seq 3 beyond a gap; cum 4 once seq 2 arrived")
	return nil
}

func caseCumFloor(s *session) error {
	c, err := s.connect()
	if err != nil {
		return err
	}
	p := c.pathOf(1)
	base := s.r.area(4 * 32)
	m0 := c.write(1, base, s.r.pattern(32))
	c.send(p, c.chunk(m0, 0)) // seq 0
	c.paths[p].next++         // seq 1 lost
	m2 := c.write(2, base+32, s.r.pattern(32))
	c.send(p, c.chunk(m2, 0)) // seq 2
	if a, err := c.waitAcked(p, 0, 2); err != nil {
		return err
	} else if a.Cum != 1 {
		return fmt.Errorf("seq 1 missing: cum %d, want 1 (%s)", a.Cum, describeAck(a))
	}
	// The sender gives up on seq 1: its floor moves to 2.
	c.abandon(p, 1)
	m3 := c.write(3, base+64, s.r.pattern(32))
	seq := c.send(p, c.chunk(m3, 0)) // seq 3, floor gap 1 (floor = 2)
	a, err := c.waitAcked(p, seq)
	if err != nil {
		return err
	}
	if a.Cum != 4 {
		return fmt.Errorf("after DATA seq 3 with ack floor 2: cum %d, want 4 (floor 2, then 2 and 3 received) (%s)", a.Cum, describeAck(a))
	}
	s.passf("cum moved to the ack floor over the abandoned seq 1, then over 2 and 3")
	return nil
}

func caseDuplicate(s *session) error {
	c, err := s.connect()
	if err != nil {
		return err
	}
	p, q := c.pathOf(1), c.pathOf(2)
	data := s.r.pattern(300)
	m := c.write(1, s.r.area(len(data)), data)
	d := c.chunk(m, 0)
	d.Conn, d.Path, d.Seq, d.Timestamp = c.id, uint16(p), c.paths[p].next, c.ts()
	d.FloorGap = uint32(d.Seq - c.paths[p].floor)
	raw := d.encode()
	c.paths[p].next++
	c.sendRaw(c.paths[p].sock, raw, ecn.ECT0)
	if err := c.waitComplete(m); err != nil {
		return err
	}
	if _, err := c.waitAcked(p, d.Seq); err != nil {
		return err
	}
	c.settle(s.r.opts.Quiet / 3) // nothing else is owed on path p now
	// The same datagram again: acknowledged at once, not delivered again.
	mark := len(c.acks)
	c.sendRaw(c.paths[p].sock, raw, ecn.ECT0)
	if !c.pump(s.r.opts.Timeout, func() bool {
		return c.ackSince(mark, p, func(a *ackPkt) bool { return a.acked(d.Seq) }) != nil
	}) {
		return fmt.Errorf("duplicate DATA (path %d seq %d) not acknowledged within %v", p, d.Seq, s.r.opts.Timeout)
	}
	// A retransmission of the completed chunk under a new sequence number,
	// with other bytes: acknowledged, never written, never re-delivered.
	rt := c.chunk(m, 0)
	rt.Flags = 1
	rt.Payload = invert(data)
	seq := c.send(q, rt)
	if _, err := c.waitAcked(q, seq); err != nil {
		return fmt.Errorf("retransmitted chunk of a completed message: %w", err)
	}
	c.settle(s.r.opts.Quiet)
	if n := c.countReports(m.stream, m.seq); n != 1 {
		return fmt.Errorf("%v delivered %d times", m, n)
	}
	if err := c.expectBytes(0, m.addr, data, "a duplicate of a completed WRITE was written"); err != nil {
		return err
	}
	s.passf("duplicate and late retransmission acknowledged, delivered once, memory untouched")
	return nil
}
