package conformance

import (
	"fmt"

	"github.com/mrgw/mrgw/internal/ecn"
)

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
