package conformance

import (
	"fmt"
	"slices"

	"github.com/mrgw/mrgw/internal/ecn"
)

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
