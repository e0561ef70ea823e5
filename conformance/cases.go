package conformance

import (
	"fmt"
	"slices"

	"github.com/mrgw/mrgw/internal/ecn"
)

// cases returns every wire case in the order they run. Sections refer to
// docs/PROTOCOL.md.
func cases() []caseDef {
	return []caseDef{
		{"handshake", "§4", caseHandshake},
		{"handshake-bad-init", "§4", caseBadInit},
		{"close", "§5 §1", caseClose},
		{"version-unknown-refused", "§7 §1", caseVersion},
		{"write-scrambled", "§2", caseWriteScrambled},
		{"send-before-earlier", "§2", caseSendOutOfOrder},
		{"completion-order", "§2 §3", caseCompletionOrder},
		{"sack-exact", "§3", caseSackExact},
		{"sack-window-edge", "§3", caseSackWindow},
		{"cum-contiguous", "§3", caseCumContiguous},
		{"cum-ack-floor", "§3 §2", caseCumFloor},
		{"duplicate-not-redelivered", "§2 §3", caseDuplicate},
		{"path-reorder-no-loss", "§3", casePathReorder},
		{"path-gap-is-loss", "§3", casePathGap},
		{"ecn-ce-echo", "§9 §3", caseECN},
		{"rate-hint-present", "§9 §3", caseRateHint},
		{"rate-hint-falls", "§9", caseRateHintFalls},
		{"bad-truncated", "§1 §2", caseTruncated},
		{"bad-oversized", "§2", caseOversized},
		{"bad-unknown-conn", "§1", caseUnknownConn},
		{"bad-unknown-key", "§2 §8", caseUnknownKey},
		{"bad-out-of-bounds", "§2 §8", caseOutOfBounds},
		{"bad-wrong-version", "§1 §7", caseWrongVersion},
		{"bad-send-buffer", "§2 §8", caseSendErrors},
		{"refused-head-no-stall", "§2", caseRefusedHead},
		{"entropy-change", "§3 §1", caseEntropyChange},
		{"probe-answered", "§6", caseProbe},
		{"version-v1-only-client", "§4", caseV1OnlyClient},
		{"version-v2-offered", "§4 §12", caseV2Offered},
		{"v2-orphan-not-acked", "§12", caseV2Orphan},
	}
}

// unspokenVersion is a wire version no implementation speaks (PROTOCOL.md
// defines 1 and 2): what the version cases send to be refused.
const unspokenVersion = 9

// connect opens a connection for a case.
func (s *session) connect() (*client, error) {
	c, err := s.newClient()
	if err != nil {
		return nil, err
	}
	if err := c.connect(); err != nil {
		return nil, err
	}
	return c, nil
}

// pathOf picks a path for a case: i, or the last one if there are fewer.
func (c *client) pathOf(i int) int { return min(i, len(c.paths)-1) }

func needPaths(c *client, n int) error {
	if len(c.paths) < n {
		return notApplicable("needs %d paths, the target accepted %d", n, len(c.paths))
	}
	return nil
}

func caseHandshake(s *session) error {
	c, err := s.newClient()
	if err != nil {
		return err
	}
	o := s.r.opts
	ts := c.ts()
	c.sendRaw(0, (&hsPkt{Type: tInit, Conn: c.id, MTU: uint16(o.MTU), Paths: uint16(o.Paths), TS: ts}).encode(), ecn.NotECT)
	if !c.pump(o.Timeout, func() bool { return len(c.accepts) > 0 }) {
		if len(c.strangers) > 0 {
			return fmt.Errorf("INIT for conn %#x answered by %s for conn %#x, want ACCEPT for the INIT's conn id", c.id, typeName(c.strangers[0].b[1]), be.Uint64(c.strangers[0].b[4:]))
		}
		return fmt.Errorf("no ACCEPT for INIT(conn %#x, MTU %d, paths %d) within %v", c.id, o.MTU, o.Paths, o.Timeout)
	}
	a := c.accepts[0]
	switch {
	case a.sock != 0:
		return fmt.Errorf("ACCEPT arrived on suite socket %d, want the INIT's source port", a.sock)
	case a.EchoTS != ts:
		return fmt.Errorf("ACCEPT echoes timestamp %d, want the INIT's %d", a.EchoTS, ts)
	case a.MTU < 256:
		return fmt.Errorf("ACCEPT MTU %d, want ≥ 256", a.MTU)
	case a.Paths < 1:
		return fmt.Errorf("ACCEPT paths %d, want ≥ 1", a.Paths)
	}
	// A repeated INIT (our ACCEPT "was lost") gets the same ACCEPT.
	c.sendRaw(0, (&hsPkt{Type: tInit, Conn: c.id, MTU: uint16(o.MTU), Paths: uint16(o.Paths), TS: c.ts()}).encode(), ecn.NotECT)
	if !c.pump(o.Timeout, func() bool { return len(c.accepts) > 1 }) {
		return fmt.Errorf("repeated INIT not answered with ACCEPT within %v", o.Timeout)
	}
	if b := c.accepts[1]; b.MTU != a.MTU || b.Paths != a.Paths || b.Conn != a.Conn {
		return fmt.Errorf("repeated INIT answered with ACCEPT MTU %d paths %d, first ACCEPT said MTU %d paths %d", b.MTU, b.Paths, a.MTU, a.Paths)
	}
	c.accepts = c.accepts[:1]
	if err := c.connect(); err != nil {
		return err
	}
	if err := c.healthy(1); err != nil {
		return err
	}
	s.passf("ACCEPT MTU %d paths %d (offered %d/%d), timestamp echoed, repeat INIT re-answered, data flows", a.MTU, a.Paths, o.MTU, o.Paths)
	return nil
}

func caseBadInit(s *session) error {
	c, err := s.newClient()
	if err != nil {
		return err
	}
	o := s.r.opts
	c.sendRaw(0, (&hsPkt{Type: tInit, Conn: c.id, MTU: 100, Paths: 4, TS: c.ts()}).encode(), ecn.NotECT)
	c.sendRaw(0, (&hsPkt{Type: tInit, Conn: c.id + 1, MTU: 1024, Paths: 0, TS: c.ts()}).encode(), ecn.NotECT)
	c.settle(o.Quiet)
	if len(c.accepts) > 0 {
		return fmt.Errorf("INIT with MTU 100 (< 256) was accepted with MTU %d", c.accepts[0].MTU)
	}
	for _, d := range c.strangers {
		if d.b[1] == tAccept {
			return fmt.Errorf("INIT with 0 paths was accepted")
		}
	}
	// Not a silent target: a valid INIT is accepted.
	if err := c.connect(); err != nil {
		return fmt.Errorf("valid INIT after the bad ones: %w", err)
	}
	s.passf("INIT with MTU < 256 and INIT with 0 paths not accepted; a valid INIT then is")
	return nil
}

func caseClose(s *session) error {
	c, err := s.connect()
	if err != nil {
		return err
	}
	o := s.r.opts
	p := c.pathOf(1)
	c.sendRaw(c.paths[p].sock, (&closePkt{Conn: c.id}).encode(), ecn.NotECT)
	if !c.pump(o.Timeout, c.closeAcked) {
		return fmt.Errorf("CLOSE not answered with a CLOSE-ack (flag bit 0) within %v (got %d CLOSE)", o.Timeout, len(c.closes))
	}
	ack := c.closes[slices.IndexFunc(c.closes, func(x *closePkt) bool { return x.Ack })]
	if ack.sock != c.paths[p].sock {
		return fmt.Errorf("CLOSE-ack arrived on suite socket %d, want the CLOSE's source port (socket %d)", ack.sock, c.paths[p].sock)
	}
	// The connection is gone: its DATA is dropped, not acknowledged.
	n := len(c.acks)
	base := c.r.area(64)
	seq := c.send(0, c.chunk(c.write(1, base, c.r.pattern(64)), 0))
	c.settle(o.Quiet)
	if a := c.ackSince(n, 0, func(a *ackPkt) bool { return a.acked(seq) }); a != nil {
		return fmt.Errorf("DATA after the connection closed was acknowledged: %s", describeAck(a))
	}
	// A CLOSE for a connection the target does not know is answered too.
	other := c.id ^ 0x5a5a5a5a
	c.sendRaw(0, (&closePkt{Conn: other}).encode(), ecn.NotECT)
	found := func() bool {
		for _, d := range c.strangers {
			if x, err := decodeClose(d.b); err == nil && x.Conn == other && x.Ack {
				return true
			}
		}
		return false
	}
	if !c.pump(o.Timeout, found) {
		return fmt.Errorf("CLOSE for unknown conn %#x not answered with a CLOSE-ack within %v", other, o.Timeout)
	}
	c.accept = nil // already closed
	s.passf("CLOSE answered by CLOSE-ack to its source port; later DATA dropped; CLOSE of an unknown connection answered")
	return nil
}

func caseVersion(s *session) error {
	c, err := s.newClient()
	if err != nil {
		return err
	}
	o := s.r.opts
	c.sendRaw(0, (&hsPkt{Version: unspokenVersion, Type: tInit, Conn: c.id, MTU: uint16(o.MTU), Paths: uint16(o.Paths), TS: c.ts()}).encode(), ecn.NotECT)
	if !c.pump(o.Timeout, func() bool { return len(c.versions) > 0 || len(c.accepts) > 0 }) {
		return fmt.Errorf("INIT of version 9 not answered with VERSION within %v", o.Timeout)
	}
	if len(c.accepts) > 0 {
		return fmt.Errorf("INIT of version 9 was answered with ACCEPT, want VERSION")
	}
	v := c.versions[0]
	switch {
	case v.Conn != c.id:
		return fmt.Errorf("VERSION names conn %#x, want the INIT's %#x", v.Conn, c.id)
	case !slices.Contains(v.Versions, 1):
		return fmt.Errorf("VERSION lists %v, which lacks version 1", v.Versions)
	case slices.Contains(v.Versions, unspokenVersion):
		return fmt.Errorf("VERSION lists %v, which claims the refused version 9", v.Versions)
	case v.sock != 0:
		return fmt.Errorf("VERSION arrived on suite socket %d, want the INIT's source port", v.sock)
	}
	c.settle(o.Quiet)
	if len(c.accepts) > 0 {
		return fmt.Errorf("INIT of version 9 was also accepted")
	}
	// Negotiation: retry with a version from the list.
	if err := c.connect(); err != nil {
		return fmt.Errorf("after VERSION %v, INIT of version 1: %w", v.Versions, err)
	}
	s.passf("INIT v9 refused with VERSION %v; INIT v1 then accepted", v.Versions)
	return nil
}

func caseWriteScrambled(s *session) error {
	c, err := s.connect()
	if err != nil {
		return err
	}
	n := 8
	data := s.r.pattern(n*c.mtu - 100)
	m := c.write(1, s.r.area(len(data)), data)
	order := []int{5, 2, 7, 1, 6, 3, 4, 0}
	sent := map[int][]uint64{}
	for k, i := range order[:n-1] {
		p := k % len(c.paths)
		sent[p] = append(sent[p], c.send(p, c.chunk(m, i)))
	}
	for p, seqs := range sent {
		if _, err := c.waitAcked(p, seqs...); err != nil {
			return err
		}
	}
	// Placed as they came: every chunk but 0 is in memory already.
	for _, i := range order[:n-1] {
		d := c.chunk(m, i)
		if err := c.expectBytes(0, m.addr+d.Offset, d.Payload, fmt.Sprintf("chunk %d of an incomplete WRITE not placed on arrival", i)); err != nil {
			return err
		}
	}
	if r := c.findReport(m.stream, m.seq); r != nil {
		return fmt.Errorf("%v reported complete while chunk 0 was never sent", m)
	}
	c.send(0, c.chunk(m, 0))
	if err := c.waitComplete(m); err != nil {
		return err
	}
	if err := c.expectBytes(0, m.addr, data, "completed WRITE"); err != nil {
		return err
	}
	s.passf("%d chunks over %d paths in order %v: placed on arrival, completed once whole", n, len(c.paths), order)
	return nil
}

func caseSendOutOfOrder(s *session) error {
	c, err := s.connect()
	if err != nil {
		return err
	}
	d0, d1 := s.r.pattern(2*c.mtu-7), s.r.pattern(2*c.mtu-9)
	m0 := c.sendTo(1, FirstTag, d0)
	m1 := c.sendTo(1, FirstTag+1, d1)
	p := c.pathOf(1)
	seqs := []uint64{c.send(p, c.chunk(m0, 1)), c.send(p, c.chunk(m1, 1)), c.send(p, c.chunk(m1, 0))}
	if _, err := c.waitAcked(p, seqs...); err != nil {
		return err
	}
	if err := c.expectBytes(m1.addr, 0, d1, "SEND (msg 1) while msg 0 is incomplete: not placed in the buffer of its tag"); err != nil {
		return err
	}
	if err := c.expectBytes(m0.addr, uint64(c.mtu), d0[c.mtu:], "chunk 1 of SEND msg 0"); err != nil {
		return err
	}
	if r := c.findReport(1, 1); r != nil {
		return fmt.Errorf("SEND msg 1 reported complete before msg 0 (completions must be in order per stream)")
	}
	c.send(p, c.chunk(m0, 0))
	if err := c.waitComplete(m0); err != nil {
		return err
	}
	if err := c.waitComplete(m1); err != nil {
		return err
	}
	if i0, i1 := slices.Index(c.reports, c.findReport(1, 0)), slices.Index(c.reports, c.findReport(1, 1)); i1 < i0 {
		return fmt.Errorf("SEND msg 1 reported before msg 0")
	}
	s.passf("SEND msg 1 landed in tag %d's buffer while msg 0 was missing; completions reported 0 then 1", m1.addr)
	return nil
}

func caseCompletionOrder(s *session) error {
	c, err := s.connect()
	if err != nil {
		return err
	}
	const A, B = 1, 2
	var ms []*msg
	for i := 0; i < 3; i++ {
		d := s.r.pattern(100 + i)
		ms = append(ms, c.write(A, s.r.area(len(d)), d))
	}
	db := s.r.pattern(77)
	mb := c.write(B, s.r.area(len(db)), db)
	p := c.pathOf(1)
	seqs := []uint64{c.send(p, c.chunk(ms[2], 0)), c.send(p, c.chunk(ms[1], 0)), c.send(p, c.chunk(mb, 0))}
	if _, err := c.waitAcked(p, seqs...); err != nil {
		return err
	}
	if err := c.waitComplete(mb); err != nil {
		return fmt.Errorf("stream %d blocked by stream %d: %w", B, A, err)
	}
	if r := c.findReport(A, 1); r != nil || c.findReport(A, 2) != nil {
		return fmt.Errorf("stream %d: msg 1 or 2 reported complete while msg 0 is missing", A)
	}
	for _, a := range c.acks {
		if n, ok := a.completed(A); ok && n > 0 {
			return fmt.Errorf("ACK says stream %d completed %d messages while its msg 0 was never sent", A, n)
		}
	}
	mark := len(c.acks)
	c.send(p, c.chunk(ms[0], 0))
	for _, m := range ms {
		if err := c.waitComplete(m); err != nil {
			return err
		}
	}
	var order []uint64
	for _, r := range c.reports {
		if r.Stream == A {
			order = append(order, r.MsgSeq)
		}
	}
	if !slices.Equal(order, []uint64{0, 1, 2}) {
		return fmt.Errorf("stream %d completions reported in order %v, want [0 1 2]", A, order)
	}
	if !c.pump(s.r.opts.Timeout, func() bool {
		return c.ackSince(mark, p, func(a *ackPkt) bool { n, ok := a.completed(A); return ok && n == 3 }) != nil
	}) {
		return fmt.Errorf("no ACK reported stream %d completed = 3 after its msg 0 arrived", A)
	}
	s.passf("stream %d msgs sent 2,1 then 0 complete in order 0,1,2; stream %d not blocked; ACK stream entry 0 then 3", A, B)
	return nil
}

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
	// reporting Largest = n-1 is the final word.
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
	return c.lastAck(p), sent, nil
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
	s.passf("window ends at largest 299, starts at 44; gaps %v inside it exact", skip[1:])
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

func casePathReorder(s *session) error {
	c, err := s.connect()
	if err != nil {
		return err
	}
	if err := needPaths(c, 2); err != nil {
		return err
	}
	A, B := c.pathOf(1), c.pathOf(2)
	if A == B {
		A = 0
	}
	const n = 6
	base := s.r.area(2 * n * 32)
	// The logical send order is A0 B0 A1 B1 ...; path B's packets overtake
	// A's on the way, so they arrive first.
	type pk struct {
		path int
		d    dataPkt
		ts   uint64
	}
	var as, bs []pk
	for i := 0; i < n; i++ {
		ma := c.write(1, base+uint64(2*i)*32, s.r.pattern(32))
		mb := c.write(2, base+uint64(2*i+1)*32, s.r.pattern(32))
		as = append(as, pk{A, c.chunk(ma, 0), c.ts()})
		bs = append(bs, pk{B, c.chunk(mb, 0), c.ts()})
	}
	var sa, sb []uint64
	for _, x := range append(bs, as...) {
		q := c.send(x.path, x.d, withTS(x.ts))
		if x.path == A {
			sa = append(sa, q)
		} else {
			sb = append(sb, q)
		}
	}
	reached := func(p int, last uint64) bool {
		return c.ackSince(0, p, func(a *ackPkt) bool { return a.Largest >= last }) != nil
	}
	if !c.pump(s.r.opts.Timeout, func() bool { return reached(A, sa[n-1]) && reached(B, sb[n-1]) }) {
		return fmt.Errorf("no ACKs up to the last sequence of paths %d and %d within %v", A, B, s.r.opts.Timeout)
	}
	c.settle(s.r.opts.Quiet / 3)
	for _, a := range c.acks {
		if int(a.Path) != A && int(a.Path) != B {
			continue
		}
		for q := uint64(0); q < a.Largest; q++ {
			if !a.acked(q) {
				return fmt.Errorf("cross-path reordering produced a loss signal: %s", describeAck(a))
			}
		}
	}
	if _, err := c.waitAcked(A, sa...); err != nil {
		return err
	}
	if _, err := c.waitAcked(B, sb...); err != nil {
		return err
	}
	s.passf("path %d's packets overtook path %d's: no ACK shows a hole", B, A)
	return nil
}

func casePathGap(s *session) error {
	c, err := s.connect()
	if err != nil {
		return err
	}
	p := c.pathOf(1)
	base := s.r.area(4 * 32)
	var seqs []uint64
	for i := 0; i < 4; i++ {
		m := c.write(1, base+uint64(i)*32, s.r.pattern(32))
		if i == 2 {
			c.paths[p].next++ // lost on the path
			continue
		}
		seqs = append(seqs, c.send(p, c.chunk(m, 0)))
	}
	a, err := c.waitAcked(p, seqs...)
	if err != nil {
		return err
	}
	if a.acked(2) || a.Largest != 3 {
		return fmt.Errorf("a gap at seq 2 on one path must show as a hole below largest 3: %s", describeAck(a))
	}
	s.passf("gap within path %d reported: %s", p, describeAck(a))
	return nil
}

func caseECN(s *session) error {
	c, err := s.connect()
	if err != nil {
		return err
	}
	p := c.pathOf(1)
	base := s.r.area(4 * 32)
	var seqs []uint64
	for i := 0; i < 2; i++ {
		seqs = append(seqs, c.send(p, c.chunk(c.write(1, base+uint64(i)*32, s.r.pattern(32)), 0)))
	}
	a0, err := c.waitAcked(p, seqs...)
	if err != nil {
		return err
	}
	if a0.CE != 0 {
		return fmt.Errorf("no CE mark sent yet, but the ACK counts %d (%s)", a0.CE, describeAck(a0))
	}
	mark := len(c.acks)
	seq := c.send(p, c.chunk(c.write(1, base+64, s.r.pattern(32)), 0), withCE())
	var a *ackPkt
	if !c.pump(s.r.opts.Timeout, func() bool { a = c.ackSince(mark, p, nil); return a != nil }) {
		return fmt.Errorf("CE-marked DATA (path %d seq %d) not acknowledged within %v", p, seq, s.r.opts.Timeout)
	}
	if !a.acked(seq) || a.CE != a0.CE+1 || a.RX != a0.RX+1 {
		return fmt.Errorf("next ACK after one CE-marked DATA: want seq %d acknowledged, CE %d, RX %d; got %s", seq, a0.CE+1, a0.RX+1, describeAck(a))
	}
	seq2 := c.send(p, c.chunk(c.write(1, base+96, s.r.pattern(32)), 0))
	c.send(p, c.chunk(c.write(1, base+96, s.r.pattern(32)), 0))
	a2, err := c.waitAcked(p, seq2, seq2+1)
	if err != nil {
		return err
	}
	if a2.CE != a.CE {
		return fmt.Errorf("ECT(0) DATA counted as CE: CE %d after, %d before", a2.CE, a.CE)
	}
	s.passf("real IP CE mark echoed in the next ACK (CE %d of RX %d); ECT(0) not counted", a.CE, a.RX)
	return nil
}

// hintOf sends two DATA on path 0 and returns the rate hint of the ACK.
func hintOf(s *session, c *client) (uint64, error) {
	base := s.r.area(64)
	q0 := c.send(0, c.chunk(c.write(1, base, s.r.pattern(32)), 0))
	q1 := c.send(0, c.chunk(c.write(1, base+32, s.r.pattern(32)), 0))
	a, err := c.waitAcked(0, q0, q1)
	if err != nil {
		return 0, err
	}
	return a.RateHint, nil
}

func plausibleHint(h uint64) error {
	switch {
	case h == 0:
		return fmt.Errorf("ACK carries no rate hint (0)")
	case h < 1e6 || h > 1e14:
		return fmt.Errorf("rate hint %s outside [1 Mbit/s, 100 Tbit/s]", bps(h))
	}
	return nil
}

func bps(h uint64) string {
	switch {
	case h >= 1e9:
		return fmt.Sprintf("%.2f Gbit/s", float64(h)/1e9)
	case h >= 1e6:
		return fmt.Sprintf("%.2f Mbit/s", float64(h)/1e6)
	}
	return fmt.Sprintf("%d bit/s", h)
}

func caseRateHint(s *session) error {
	c, err := s.connect()
	if err != nil {
		return err
	}
	h, err := hintOf(s, c)
	if err != nil {
		return err
	}
	if err := plausibleHint(h); err != nil {
		return err
	}
	for _, a := range c.acks {
		if err := plausibleHint(a.RateHint); err != nil {
			return fmt.Errorf("ACK on path %d: %w", a.Path, err)
		}
	}
	s.passf("every ACK carries a rate hint (%s)", bps(h))
	return nil
}

func caseRateHintFalls(s *session) error {
	a, err := s.connect()
	if err != nil {
		return err
	}
	h1, err := hintOf(s, a)
	if err != nil {
		return err
	}
	if err := plausibleHint(h1); err != nil {
		return err
	}
	b, err := s.connect()
	if err != nil {
		return err
	}
	hb, err := hintOf(s, b)
	if err != nil {
		return err
	}
	h2, err := hintOf(s, a)
	if err != nil {
		return err
	}
	if h2 >= h1 {
		return fmt.Errorf("rate hint to sender A did not fall when sender B started: %s alone, %s with B (B's hint %s)", bps(h1), bps(h2), bps(hb))
	}
	s.passf("hint to A %s alone, %s with B (ratio %.2f); B's hint %s", bps(h1), bps(h2), float64(h2)/float64(h1), bps(hb))
	return nil
}

// badInput sends each crafted datagram on path p as one sequence number,
// then a valid DATA on the same path, and checks that no bad one was
// acknowledged, that area [addr, addr+len(baseline)) is untouched and that the
// connection still works.
func badInput(s *session, c *client, p int, addr uint64, baseline []byte, what []string, send func(i int) uint64) error {
	var bad []uint64
	for i := range what {
		bad = append(bad, send(i))
	}
	ok := c.write(0x7000, s.r.area(32), s.r.pattern(32))
	seq := c.send(p, c.chunk(ok, 0))
	if _, err := c.waitAcked(p, seq); err != nil {
		return fmt.Errorf("valid DATA after the bad ones: %w", err)
	}
	c.settle(s.r.opts.Quiet / 3)
	a := c.lastAck(p)
	for i, q := range bad {
		if a.acked(q) {
			return fmt.Errorf("%s (path %d seq %d) was acknowledged, want dropped: %s", what[i], p, q, describeAck(a))
		}
	}
	c.abandon(p, bad...)
	if err := c.waitComplete(ok); err != nil {
		return fmt.Errorf("connection no longer healthy: %w", err)
	}
	if err := c.expectBytes(0, addr, baseline, fmt.Sprintf("memory written by a dropped packet (%v)", what)); err != nil {
		return err
	}
	return c.healthy(0x7001)
}

// target returns an area and its current content (the suite never assumes
// what a previous run left there).
func target(c *client, n int) (uint64, []byte, error) {
	addr := c.r.area(n)
	b, err := c.read(0, addr, n)
	return addr, b, err
}

func caseTruncated(s *session) error {
	c, err := s.connect()
	if err != nil {
		return err
	}
	addr, base, err := target(c, 256)
	if err != nil {
		return err
	}
	p := c.pathOf(1)
	m := c.write(1, addr, invert(base))
	cuts := []int{11, 50, dataHdrLen + 255}
	what := []string{"DATA cut to 11 bytes", "DATA cut to 50 bytes", "DATA missing its last payload byte"}
	err = badInput(s, c, p, addr, base, what, func(i int) uint64 {
		return c.send(p, c.chunk(m, 0), withMangle(func(b []byte) []byte { return b[:cuts[i]] }))
	})
	if err != nil {
		return err
	}
	s.passf("%d truncated DATA dropped, unacknowledged, nothing written; connection healthy", len(cuts))
	return nil
}

func caseOversized(s *session) error {
	c, err := s.connect()
	if err != nil {
		return err
	}
	addr, base, err := target(c, 2*c.mtu)
	if err != nil {
		return err
	}
	p := c.pathOf(1)
	what := []string{"DATA with a trailing byte beyond its payload length", "DATA whose payload exceeds the MTU"}
	m1 := c.write(1, addr, invert(base[:256]))
	m2 := c.write(2, addr, invert(base))
	err = badInput(s, c, p, addr, base, what, func(i int) uint64 {
		if i == 0 {
			return c.send(p, c.chunk(m1, 0), withMangle(func(b []byte) []byte { return append(b, 0xEE) }))
		}
		d := c.chunk(m2, 0)
		d.Payload = m2.data[:c.mtu+1]
		return c.send(p, d)
	})
	if err != nil {
		return err
	}
	s.passf("oversized DATA dropped, unacknowledged, nothing written; connection healthy")
	return nil
}

func caseUnknownConn(s *session) error {
	c, err := s.connect()
	if err != nil {
		return err
	}
	addr, base, err := target(c, 128)
	if err != nil {
		return err
	}
	other := c.id ^ 0xA5A5_0000_0000_0001
	m := c.write(1, addr, invert(base))
	d := c.chunk(m, 0)
	d.Conn, d.Seq, d.FloorGap, d.Timestamp = other, 1000, 1000, c.ts()
	c.sendRaw(0, d.encode(), ecn.ECT0)
	c.settle(s.r.opts.Quiet)
	for _, x := range c.strangers {
		if be.Uint64(x.b[4:]) == other {
			return fmt.Errorf("DATA for unknown conn %#x answered with %s, want it dropped", other, typeName(x.b[1]))
		}
	}
	if err := c.expectBytes(0, addr, base, "memory written by DATA of an unknown connection"); err != nil {
		return err
	}
	if err := c.healthy(2); err != nil {
		return err
	}
	s.passf("DATA for an unknown connection dropped silently, nothing written")
	return nil
}

// refused sends m's single chunk and checks the ERROR, the acknowledgement
// and that [addr, addr+len(base)) of region RegionKey is untouched.
func refused(s *session, c *client, p int, m *msg, code uint16, addr uint64, base []byte) error {
	seq := c.send(p, c.chunk(m, 0))
	var e *errorPkt
	if !c.pump(s.r.opts.Timeout, func() bool {
		i := slices.IndexFunc(c.errs, func(e *errorPkt) bool { return e.Stream == m.stream && e.MsgSeq == m.seq })
		if i >= 0 {
			e = c.errs[i]
		}
		return e != nil
	}) {
		return fmt.Errorf("%v not answered with ERROR code %d within %v", m, code, s.r.opts.Timeout)
	}
	if e.Code != code {
		return fmt.Errorf("%v answered with ERROR code %d, want %d", m, e.Code, code)
	}
	if _, err := c.waitAcked(p, seq); err != nil {
		return fmt.Errorf("refused DATA must still be acknowledged on its path: %w", err)
	}
	if base != nil {
		if err := c.expectBytes(0, addr, base, fmt.Sprintf("memory written by a refused %v", m)); err != nil {
			return err
		}
	}
	return nil
}

func caseUnknownKey(s *session) error {
	c, err := s.connect()
	if err != nil {
		return err
	}
	addr, base, err := target(c, 128)
	if err != nil {
		return err
	}
	m := c.newMsg(opWrite, 1, 0x7EAD_BEEF, addr, invert(base))
	if err := refused(s, c, c.pathOf(1), m, 1, addr, base); err != nil {
		return err
	}
	if err := c.healthy(2); err != nil {
		return err
	}
	s.passf("WRITE to unknown key: ERROR code 1, acknowledged, key %d at the same offset untouched, connection healthy", RegionKey)
	return nil
}

func caseOutOfBounds(s *session) error {
	c, err := s.connect()
	if err != nil {
		return err
	}
	const tail = 128
	addr := uint64(RegionSize - tail)
	base, err := c.read(0, addr, tail)
	if err != nil {
		return err
	}
	// A message that starts inside the region and ends outside it.
	m := c.write(1, addr, invert(append(append([]byte(nil), base...), make([]byte, 128)...)))
	if err := refused(s, c, c.pathOf(1), m, 2, addr, base); err != nil {
		return err
	}
	// An address whose end wraps around 2^64.
	w := c.write(2, ^uint64(0)-63, s.r.pattern(128))
	if err := refused(s, c, c.pathOf(1), w, 2, 0, nil); err != nil {
		return err
	}
	if err := c.healthy(3); err != nil {
		return err
	}
	s.passf("WRITE across the region's end and WRITE wrapping 2^64: ERROR code 2, acknowledged, nothing written")
	return nil
}

func caseWrongVersion(s *session) error {
	c, err := s.connect()
	if err != nil {
		return err
	}
	addr, base, err := target(c, 128)
	if err != nil {
		return err
	}
	p := c.pathOf(1)
	m := c.write(1, addr, invert(base))
	mark := len(c.versions)
	err = badInput(s, c, p, addr, base, []string{"DATA of version 9"}, func(int) uint64 {
		return c.send(p, c.chunk(m, 0), withMangle(func(b []byte) []byte { b[0] = unspokenVersion; return b }))
	})
	if err != nil {
		return err
	}
	if len(c.versions) <= mark {
		return fmt.Errorf("DATA of version 9 not answered with VERSION")
	}
	if v := c.versions[mark]; v.Conn != c.id || !slices.Contains(v.Versions, 1) {
		return fmt.Errorf("VERSION for conn %#x lists %v, want conn %#x and version 1", v.Conn, v.Versions, c.id)
	}
	s.passf("DATA of version 9 answered with VERSION, unacknowledged, nothing written; connection healthy")
	return nil
}

func caseSendErrors(s *session) error {
	c, err := s.connect()
	if err != nil {
		return err
	}
	p := c.pathOf(1)
	if err := refused(s, c, p, c.sendTo(1, LastTag+1000, s.r.pattern(64)), 3, 0, nil); err != nil {
		return err
	}
	big := c.sendTo(2, FirstTag+2, s.r.pattern(TagBufSize+1))
	if err := refused(s, c, p, big, 4, 0, nil); err != nil {
		return err
	}
	if err := c.healthy(3); err != nil {
		return err
	}
	s.passf("SEND without a posted buffer: ERROR code 3; SEND longer than the buffer: ERROR code 4")
	return nil
}

func caseRefusedHead(s *session) error {
	c, err := s.connect()
	if err != nil {
		return err
	}
	p := c.pathOf(1)
	bad := c.newMsg(opWrite, 1, 0x7EAD_BEEF, 0, s.r.pattern(32))
	if err := refused(s, c, p, bad, 1, 0, nil); err != nil {
		return err
	}
	good := c.write(1, s.r.area(64), s.r.pattern(64))
	c.send(p, c.chunk(good, 0))
	if err := c.waitComplete(good); err != nil {
		return fmt.Errorf("a refused message at the head of stream 1 blocks the stream: %w", err)
	}
	if r := c.findReport(1, 0); r == nil || r.Status != 1 {
		return fmt.Errorf("refused msg 0 not reported (with status 1) before msg 1")
	}
	s.passf("refused msg 0 reported with status 1, then msg 1 completed")
	return nil
}

func caseEntropyChange(s *session) error {
	c, err := s.connect()
	if err != nil {
		return err
	}
	p := c.pathOf(1)
	data := s.r.pattern(4*c.mtu - 3)
	m := c.write(1, s.r.area(len(data)), data)
	old := c.paths[p].sock
	q0 := c.send(p, c.chunk(m, 0))
	q1 := c.send(p, c.chunk(m, 1))
	if a, err := c.waitAcked(p, q0, q1); err != nil {
		return err
	} else if a.sock != old {
		return fmt.Errorf("ACK for path %d arrived on socket %d, want its DATA's source port (socket %d)", p, a.sock, old)
	}
	nw, err := c.newSocket()
	if err != nil {
		return err
	}
	c.paths[p].sock = nw
	mark := len(c.acks)
	q2 := c.send(p, c.chunk(m, 2))
	q3 := c.send(p, c.chunk(m, 3))
	if _, err := c.waitAcked(p, q2, q3); err != nil {
		return fmt.Errorf("after the source port of path %d changed: %w", p, err)
	}
	for _, a := range c.acks[mark:] {
		if int(a.Path) == p && a.acked(q2) && a.sock != nw {
			return fmt.Errorf("ACK for path %d after the entropy change went to the old port (socket %d), want the new one (socket %d)", p, a.sock, nw)
		}
	}
	if err := c.waitComplete(m); err != nil {
		return err
	}
	s.passf("path %d moved from port %d to %d mid-message: ACKs followed, message completed", p, c.port(old), c.port(nw))
	return nil
}

func caseProbe(s *session) error {
	c, err := s.connect()
	if err != nil {
		return err
	}
	p := c.pathOf(2)
	nw, err := c.newSocket()
	if err != nil {
		return err
	}
	ts := c.ts()
	c.sendRaw(nw, (&probePkt{Type: tProbe, Conn: c.id, Path: uint16(p), TS: ts}).encode(), ecn.NotECT)
	if !c.pump(s.r.opts.Timeout, func() bool { return len(c.probeAcks) > 0 }) {
		return fmt.Errorf("PROBE on path %d not answered within %v", p, s.r.opts.Timeout)
	}
	pa := c.probeAcks[0]
	switch {
	case pa.sock != nw:
		return fmt.Errorf("PROBE_ACK arrived on socket %d, want the PROBE's source port (socket %d)", pa.sock, nw)
	case pa.TS != ts || int(pa.Path) != p:
		return fmt.Errorf("PROBE_ACK path %d timestamp %d, want path %d timestamp %d", pa.Path, pa.TS, p, ts)
	}
	s.passf("PROBE from a new port answered to that port with its timestamp")
	return nil
}
