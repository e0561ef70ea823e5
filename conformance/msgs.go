package conformance

import (
	"bytes"
	"fmt"

	"github.com/mrgw/mrgw/internal/ecn"
)

// msg is one message the suite sends: its chunks are crafted one by one, so
// a case decides which path carries each and in which order.
type msg struct {
	op     uint8
	stream uint32
	seq    uint64
	key    uint32
	addr   uint64 // WRITE: region offset; SEND: tag
	data   []byte
}

func (m *msg) String() string {
	if m.op == opSend {
		return fmt.Sprintf("SEND (stream %d, msg %d, tag %d, %d bytes)", m.stream, m.seq, m.addr, len(m.data))
	}
	return fmt.Sprintf("WRITE (stream %d, msg %d, key %d, addr %#x, %d bytes)", m.stream, m.seq, m.key, m.addr, len(m.data))
}

func (c *client) newMsg(op uint8, stream uint32, key uint32, addr uint64, data []byte) *msg {
	m := &msg{op: op, stream: stream, seq: c.streamNext[stream], key: key, addr: addr, data: data}
	c.streamNext[stream]++
	return m
}

// write is a WRITE of data to region RegionKey at addr.
func (c *client) write(stream uint32, addr uint64, data []byte) *msg {
	return c.newMsg(opWrite, stream, RegionKey, addr, data)
}

// sendTo is a SEND of data to the buffer posted with tag.
func (c *client) sendTo(stream uint32, tag uint64, data []byte) *msg {
	return c.newMsg(opSend, stream, 0, tag, data)
}

func (c *client) nchunks(m *msg) int { return max(1, (len(m.data)+c.mtu-1)/c.mtu) }

// chunk returns DATA for chunk i of m; send fills in path, seq and floor.
func (c *client) chunk(m *msg, i int) dataPkt {
	lo := min(i*c.mtu, len(m.data))
	hi := min(lo+c.mtu, len(m.data))
	return dataPkt{Op: m.op, Stream: m.stream, MsgSeq: m.seq, MsgLen: uint64(len(m.data)), Offset: uint64(lo),
		Key: m.key, Addr: m.addr, Payload: m.data[lo:hi]}
}

type sendCfg struct {
	cp       ecn.Codepoint
	sock     int
	floor    uint64
	setFloor bool
	ts       uint64
	mangle   func([]byte) []byte
}

type sendOpt func(*sendCfg)

func withCE() sendOpt                          { return func(c *sendCfg) { c.cp = ecn.CE } }
func withFloor(f uint64) sendOpt               { return func(c *sendCfg) { c.floor, c.setFloor = f, true } }
func withTS(ts uint64) sendOpt                 { return func(c *sendCfg) { c.ts = ts } }
func withMangle(f func([]byte) []byte) sendOpt { return func(c *sendCfg) { c.mangle = f } }

// send sends d on path as that path's next sequence number, with the ack
// floor at the lowest sequence neither acknowledged nor abandoned, and
// returns the sequence number.
func (c *client) send(path int, d dataPkt, opts ...sendOpt) uint64 {
	p := c.paths[path]
	for p.floor < p.next && (p.acked[p.floor] || p.given[p.floor]) {
		p.floor++
	}
	cfg := sendCfg{cp: ecn.ECT0, sock: p.sock, floor: p.floor}
	for _, o := range opts {
		o(&cfg)
	}
	d.Conn, d.Path, d.Seq = c.id, uint16(path), p.next
	d.FloorGap = uint32(d.Seq - cfg.floor)
	d.Timestamp = cfg.ts
	if d.Timestamp == 0 {
		d.Timestamp = c.ts()
	}
	p.next++
	var b []byte
	if c.wire == 2 {
		b, d.Seq = c.encodeV2(&d, cfg.sock, cfg.cp)
	} else {
		b = d.encode()
	}
	if cfg.mangle != nil {
		b = cfg.mangle(b)
	}
	c.sendRaw(cfg.sock, b, cfg.cp)
	return d.Seq
}

// abandon puts seq below the path's ack floor (the suite gave up on it).
func (c *client) abandon(path int, seqs ...uint64) {
	for _, s := range seqs {
		c.paths[path].given[s] = true
	}
}

// sendMsg sends every chunk of m in order, spreading them over the paths,
// and returns (path, seq) of each chunk.
func (c *client) sendMsg(m *msg) [][2]uint64 {
	var out [][2]uint64
	for i := 0; i < c.nchunks(m); i++ {
		p := i % len(c.paths)
		out = append(out, [2]uint64{uint64(p), c.send(p, c.chunk(m, i))})
	}
	return out
}

// lastAck returns the most recent ACK for path, or nil.
func (c *client) lastAck(path int) *ackPkt {
	return c.lastAckWhere(path, func(*ackPkt) bool { return true })
}

// lastAckWhere returns the last ACK received for path that satisfies ok,
// or nil.
func (c *client) lastAckWhere(path int, ok func(*ackPkt) bool) *ackPkt {
	for i := len(c.acks) - 1; i >= 0; i-- {
		if int(c.acks[i].Path) == path && ok(c.acks[i]) {
			return c.acks[i]
		}
	}
	return nil
}

// ackSince returns the first ACK for path received at index ≥ from that
// satisfies ok, or nil.
func (c *client) ackSince(from, path int, ok func(*ackPkt) bool) *ackPkt {
	for _, a := range c.acks[min(from, len(c.acks)):] {
		if int(a.Path) == path && (ok == nil || ok(a)) {
			return a
		}
	}
	return nil
}

// waitAcked waits for an ACK on path that acknowledges every seq.
func (c *client) waitAcked(path int, seqs ...uint64) (*ackPkt, error) {
	var got *ackPkt
	all := func(a *ackPkt) bool {
		for _, s := range seqs {
			if !a.acked(s) {
				return false
			}
		}
		return true
	}
	if c.pump(c.r.opts.Timeout, func() bool { got = c.ackSince(0, path, all); return got != nil }) {
		return got, nil
	}
	last := "no ACK at all"
	if a := c.lastAck(path); a != nil {
		last = "last ACK: " + describeAck(a)
	}
	return nil, fmt.Errorf("no ACK on path %d acknowledged seq %v within %v (%s)", path, seqs, c.r.opts.Timeout, last)
}

func describeAck(a *ackPkt) string {
	var got []uint64
	for s := a.base(); s <= a.Largest && s-a.base() < sackBits; s++ {
		if a.acked(s) {
			got = append(got, s)
		}
	}
	return fmt.Sprintf("path %d cum %d largest %d sack %v CE %d RX %d hint %d", a.Path, a.Cum, a.Largest, compactSeqs(got), a.CE, a.RX, a.RateHint)
}

// compactSeqs prints sequences as ranges: [1-3 7 9-10].
func compactSeqs(s []uint64) string {
	var b bytes.Buffer
	b.WriteByte('[')
	for i := 0; i < len(s); {
		j := i
		for j+1 < len(s) && s[j+1] == s[j]+1 {
			j++
		}
		if b.Len() > 1 {
			b.WriteByte(' ')
		}
		if j > i {
			fmt.Fprintf(&b, "%d-%d", s[i], s[j])
		} else {
			fmt.Fprintf(&b, "%d", s[i])
		}
		i = j + 1
	}
	b.WriteByte(']')
	return b.String()
}

// findReport returns the COMPLETE report of (stream, seq), or nil.
func (c *client) findReport(stream uint32, seq uint64) *Report {
	for _, r := range c.reports {
		if r.Stream == stream && r.MsgSeq == seq {
			return r
		}
	}
	return nil
}

func (c *client) countReports(stream uint32, seq uint64) int {
	n := 0
	for _, r := range c.reports {
		if r.Stream == stream && r.MsgSeq == seq {
			n++
		}
	}
	return n
}

// waitComplete waits for m's COMPLETE report and checks it: status 0, the
// message's fields, and the digest of the bytes at the destination.
func (c *client) waitComplete(m *msg) error {
	var r *Report
	if !c.pump(c.r.opts.Timeout, func() bool { r = c.findReport(m.stream, m.seq); return r != nil }) {
		return fmt.Errorf("no completion report for %v within %v (contract §2.4)", m, c.r.opts.Timeout)
	}
	switch {
	case r.Status != StatusOK:
		return fmt.Errorf("%v completed with status %d, want 0", m, r.Status)
	case r.Op != m.op || r.Len != uint64(len(m.data)) || r.Addr != m.addr || (m.op == opWrite && r.Key != m.key):
		return fmt.Errorf("completion report for %v names op %d key %d addr %#x len %d", m, r.Op, r.Key, r.Addr, r.Len)
	case r.Digest != Digest(m.data):
		return fmt.Errorf("%v completed but its destination holds other bytes (SHA-256 %x, want %x)", m, r.Digest[:8], digestPrefix(m.data))
	}
	return nil
}

func digestPrefix(b []byte) []byte { d := Digest(b); return d[:8] }

// read returns n bytes read back from the target (region RegionKey at addr
// when tag is 0, else the buffer posted with tag at offset addr).
func (c *client) read(tag uint64, addr uint64, n int) ([]byte, error) {
	var out []byte
	for len(out) < n {
		k := min(n-len(out), MaxRead)
		req := Request{Kind: ReqRead, Space: SpaceRegion, Key: RegionKey, Addr: addr + uint64(len(out)), Len: uint32(k), ID: c.nextReq}
		if tag != 0 {
			req.Space, req.Key, req.Addr, req.BufOff = SpaceTag, 0, tag, uint32(addr)+uint32(len(out))
		}
		c.nextReq++
		m := c.sendTo(CtlStream, CtlTag, req.Encode())
		var rep *Report
		for try := 0; try < 3 && rep == nil; try++ {
			c.send(0, c.chunk(m, 0))
			c.pump(c.r.opts.Timeout, func() bool { rep = c.reads[req.ID]; return rep != nil })
		}
		if rep == nil {
			return nil, fmt.Errorf("no answer to READ request %d (contract §2.5) within %v", req.ID, 3*c.r.opts.Timeout)
		}
		if rep.Status != StatusOK || len(rep.Data) != k {
			return nil, fmt.Errorf("READ request %d answered with status %#x and %d bytes, want status 0 and %d", req.ID, rep.Status, len(rep.Data), k)
		}
		out = append(out, rep.Data...)
	}
	return out, nil
}

// expectBytes reads back and compares, naming the first difference.
func (c *client) expectBytes(tag uint64, addr uint64, want []byte, what string) error {
	got, err := c.read(tag, addr, len(want))
	if err != nil {
		return err
	}
	if i := firstDiff(got, want); i >= 0 {
		where := fmt.Sprintf("region[%d][%#x]", RegionKey, addr+uint64(i))
		if tag != 0 {
			where = fmt.Sprintf("buffer of tag %d [%d]", tag, addr+uint64(i))
		}
		return fmt.Errorf("%s: %s is %#02x, want %#02x (%d of %d bytes differ)", what, where, got[i], want[i], countDiff(got, want), len(want))
	}
	return nil
}

func firstDiff(a, b []byte) int {
	for i := range a {
		if i >= len(b) || a[i] != b[i] {
			return i
		}
	}
	if len(b) > len(a) {
		return len(a)
	}
	return -1
}

func countDiff(a, b []byte) int {
	n := 0
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			n++
		}
	}
	return n
}

func invert(b []byte) []byte {
	out := make([]byte, len(b))
	for i, x := range b {
		out[i] = ^x
	}
	return out
}

// healthy proves that the connection still works: a fresh WRITE completes
// with the right bytes in place.
func (c *client) healthy(stream uint32) error {
	data := c.r.pattern(200)
	m := c.write(stream, c.r.area(len(data)), data)
	c.sendMsg(m)
	if err := c.waitComplete(m); err != nil {
		return fmt.Errorf("connection no longer healthy: %w", err)
	}
	return nil
}
