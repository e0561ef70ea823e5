package conformance

import (
	"fmt"

	"github.com/mrgw/mrgw/internal/ecn"
)

// The cases of wire version 2 (PROTOCOL.md §4 "Version", §12): a client
// that speaks version 1 only and one that offers version 2 against the
// same target, and the descriptor rule's receiving side.

// caseV1OnlyClient: an INIT that offers nothing (what a version-1
// implementation sends) is accepted with byte 3 of the ACCEPT 0, and a
// message moves in version 1's layout.
func caseV1OnlyClient(s *session) error {
	c, err := s.newClient()
	if err != nil {
		return err
	}
	c.offer = 0
	if err := c.connect(); err != nil {
		return err
	}
	if c.accept.Choice != 0 {
		return fmt.Errorf("ACCEPT of an INIT offering version 1 only has byte 3 = %d, want 0 (version 1)", c.accept.Choice)
	}
	data := s.r.pattern(3*c.mtu + 17)
	m := c.write(1, s.r.area(len(data)), data)
	c.sendMsg(m)
	if err := c.waitComplete(m); err != nil {
		return err
	}
	if err := c.expectBytes(0, m.addr, data, "WRITE of a version-1-only client"); err != nil {
		return err
	}
	if len(c.violations) > 0 {
		return fmt.Errorf("%s", c.violations[0])
	}
	s.passf("INIT offering version 1 only: ACCEPT byte 3 = 0; %d-byte WRITE over %d paths in version-1 DATA completed and read back in version-1 DATA", len(data), len(c.paths))
	return nil
}

// caseV2Offered: an INIT that offers versions 1 and 2 is accepted with the
// choice in byte 3. When the target chooses 2, a WRITE goes in version-2
// DATA (each path's first DATA of the message a descriptor-only DATA),
// chunks out of order across the paths; it must be placed, acknowledged
// and completed, and the target's reports (its own version-2 DATA) must
// follow the descriptor rule: none may reach the suite as an orphan.
func caseV2Offered(s *session) error {
	c, err := s.newClient()
	if err != nil {
		return err
	}
	c.offer = 0b11
	if err := c.connect(); err != nil {
		return err
	}
	if c.wire == 1 {
		return notApplicable("the target chose version 1 for an INIT offering 1 and 2 (ACCEPT byte 3 = %d): it speaks version 1 only", c.accept.Choice)
	}
	if err := needPaths(c, 2); err != nil {
		return err
	}
	n := 6
	data := s.r.pattern(n*c.mtu - 50)
	m := c.write(1, s.r.area(len(data)), data)
	order := []int{4, 1, 5, 0, 3, 2}
	sent := map[int][]uint64{}
	for k, i := range order {
		p := k % len(c.paths)
		sent[p] = append(sent[p], c.send(p, c.chunk(m, i)))
	}
	for p, seqs := range sent {
		if _, err := c.waitAcked(p, seqs...); err != nil {
			return err
		}
	}
	if err := c.waitComplete(m); err != nil {
		return err
	}
	if err := c.expectBytes(0, m.addr, data, "version-2 WRITE"); err != nil {
		return err
	}
	if c.orphans > 0 {
		return fmt.Errorf("the target sent %d version-2 DATA without a descriptor the suite could have (§12 descriptor rule)", c.orphans)
	}
	if len(c.violations) > 0 {
		return fmt.Errorf("%s", c.violations[0])
	}
	s.passf("INIT offering 1 and 2: ACCEPT chose 2; %d chunks in version-2 DATA over %d paths in order %v placed and completed; read back in the target's version-2 DATA, no orphans",
		n, len(c.paths), order)
	return nil
}

// caseV2Orphan: a version-2 DATA without descriptor of a message the target
// cannot know is an orphan: nothing is written and its sequence is not
// acknowledged (so the sender resends it); sent again with its descriptor,
// the message completes.
func caseV2Orphan(s *session) error {
	c, err := s.newClient()
	if err != nil {
		return err
	}
	c.offer = 0b11
	if err := c.connect(); err != nil {
		return err
	}
	if c.wire != 2 {
		return notApplicable("the target speaks version 1 only")
	}
	data := s.r.pattern(2*c.mtu - 10)
	addr, base, err := target(c, len(data))
	if err != nil {
		return err
	}
	copy(data, invert(base))
	m := c.write(1, addr, data)
	// Chunk 1 of m, without descriptor, on path 0: an orphan.
	p := c.paths[0]
	for p.floor < p.next && (p.acked[p.floor] || p.given[p.floor]) {
		p.floor++
	}
	orphan := p.next
	p.next++
	ch := c.chunk(m, 1)
	x := data2Pkt{Tag: uint32(c.id), Path: 0, Seq: uint32(orphan), FloorGap: uint32(orphan - p.floor), Stream: m.stream,
		MsgSeq: uint32(m.seq), Chunk: 1, Payload: ch.Payload}
	c.sendRaw(p.sock, x.encode(), ecn.ECT0)
	// Another message on the same path makes the path report.
	probe := s.r.pattern(64)
	m2 := c.write(2, s.r.area(len(probe)), probe)
	seq2 := c.send(0, c.chunk(m2, 0))
	a, err := c.waitAcked(0, seq2)
	if err != nil {
		return err
	}
	if a.acked(orphan) {
		return fmt.Errorf("the orphan (path 0 seq %d, a DATA without descriptor of a message never announced) was acknowledged: ACK cum %d largest %d", orphan, a.Cum, a.Largest)
	}
	if err := c.expectBytes(0, addr+uint64(c.mtu), base[c.mtu:], "an orphan's payload was placed"); err != nil {
		return err
	}
	// The suite gives the orphan up and sends m properly.
	c.abandon(0, orphan)
	c.sendMsg(m)
	if err := c.waitComplete(m); err != nil {
		return err
	}
	if err := c.expectBytes(0, addr, data, "message resent after its orphan"); err != nil {
		return err
	}
	s.passf("DATA without descriptor of an unknown message: not acknowledged (ACK cum %d, largest %d), nothing written; resent with its descriptor, completed", a.Cum, a.Largest)
	return nil
}
