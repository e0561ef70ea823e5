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
