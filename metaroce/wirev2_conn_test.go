package metaroce

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mrgw/mrgw/cc"
	"github.com/mrgw/mrgw/internal/script"
)

// Connection-level tests of wire version 2 (PROTOCOL.md §4 "Version", §12).
// The rules they test by name are also named by scenarios
// (testdata/scenarios/v2-*.txt); TestV2RulesCovered checks each has one.

// wireTally counts the DATA datagrams a test network carries, by version.
type wireTally struct {
	v1, v2, descOnly, desc int
	maxLen, bytes          int
	payload                int
}

func (w *wireTally) tap(from int, b []byte) {
	if from != 0 || len(b) < 2 || PacketType(b[1]) != TypeData {
		return
	}
	w.bytes += len(b)
	w.maxLen = max(w.maxLen, len(b))
	switch b[0] {
	case Version1:
		var h DataHeader
		p, err := DecodeData(b, &h)
		if err != nil {
			panic(err)
		}
		w.v1++
		w.payload += len(p)
	case Version2:
		var h DataHeaderV2
		p, err := DecodeDataV2(b, &h)
		if err != nil {
			panic(err)
		}
		w.v2++
		w.payload += len(p)
		if h.DescriptorOnly(len(p)) {
			w.descOnly++
		} else if h.Desc {
			w.desc++
		}
	}
}

// moveMessage writes data from a's connection c into b's region 1 at 0 and
// runs the network until both sides completed it.
func moveMessage(t *testing.T, n *testNet, c *Conn, data []byte) {
	t.Helper()
	region := make([]byte, len(data))
	n.eps[1].Memory().Deregister(1)
	if err := n.eps[1].Memory().Register(1, region); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write(n.now, 0, 1, 0, data); err != nil {
		t.Fatal(err)
	}
	sent, recvd := false, false
	if !n.run(n.now+10*time.Second, func() bool {
		for _, ev := range drain(n.eps[0]) {
			if ev.Kind == EventSendComplete {
				sent = ev.Err == nil
			}
		}
		for _, ev := range drain(n.eps[1]) {
			if ev.Kind == EventRecvComplete {
				recvd = ev.Err == nil
			}
		}
		return sent && recvd
	}) {
		t.Fatalf("message not moved: sent %v received %v", sent, recvd)
	}
	if !bytes.Equal(region, data) {
		t.Fatal("message differs at the receiver")
	}
}

// TestV2Negotiation: every combination of what the two ends speak agrees on
// the highest common version, or is refused; DATA then moves in that
// version's layout. A version-1-only initiator's INIT and a version-1
// responder's ACCEPT are byte for byte what version 1 sends.
// rules: v2-negotiate, v2-v1-peer
func TestV2Negotiation(t *testing.T) {
	v1, v2, both := []uint8{1}, []uint8{2}, []uint8{1, 2}
	cases := []struct {
		name    string
		a, b    []uint8
		want    int   // agreed version; 0: refused
		wantErr error // a's close error when refused
	}{
		{"both-speak-2", both, both, 2, nil},
		{"default-config-speaks-1", nil, nil, 1, nil},
		{"default-initiator-v2-responder", nil, both, 1, nil},
		{"v1-only-initiator", v1, both, 1, nil},
		{"v1-only-responder", both, v1, 1, nil},
		{"v1-only-both", v1, v1, 1, nil},
		{"v2-only-initiator", v2, both, 2, nil},
		{"v2-only-vs-v1-only", v2, v1, 0, ErrRefused},
		{"v1-only-vs-v2-only", v1, v2, 0, ErrRefused},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ca := Config{MTU: 1024, Paths: 4, WireVersions: tc.a, Seed: 5}
			cb := Config{MTU: 1024, Paths: 4, WireVersions: tc.b, Seed: 6}
			n := newTestNet(t, ca, cb, 2, 1)
			var tally wireTally
			var hs [][]byte
			n.tap = func(from int, b []byte) {
				if _, typ, _, _ := Peek(b); typ == TypeInit || typ == TypeAccept {
					hs = append(hs, b)
				}
				tally.tap(from, b)
			}
			c, err := n.eps[0].Connect(0, 1)
			if err != nil {
				t.Fatal(err)
			}
			var closeErr error
			closed := false
			n.run(time.Second, func() bool {
				for _, ev := range drain(n.eps[0]) {
					if ev.Kind == EventClosed {
						closed, closeErr = true, ev.Err
					}
				}
				return c.Established() || closed
			})
			if tc.want == 0 {
				if !closed || !errors.Is(closeErr, tc.wantErr) {
					t.Fatalf("closed %v with %v, want %v", closed, closeErr, tc.wantErr)
				}
				return
			}
			if !c.Established() || c.WireVersion() != tc.want {
				t.Fatalf("established %v, version %d, want %d", c.Established(), c.WireVersion(), tc.want)
			}
			var s *Conn
			for _, x := range n.eps[1].Conns() {
				s = x
			}
			if s == nil || s.WireVersion() != tc.want {
				t.Fatalf("responder's version differs")
			}
			// What a version-1 implementation sends, byte for byte.
			if len(tc.a) == 1 && tc.a[0] == 1 && hs[0][2] != 0 {
				t.Fatalf("a version-1-only INIT has flags %#x", hs[0][2])
			}
			if tc.want == 1 && hs[len(hs)-1][3] != 0 {
				t.Fatalf("an ACCEPT of version 1 has byte 3 = %d", hs[len(hs)-1][3])
			}
			data := make([]byte, 20000)
			for i := range data {
				data[i] = byte(i * 7)
			}
			moveMessage(t, n, c, data)
			if tc.want == 1 && (tally.v1 == 0 || tally.v2 != 0) || tc.want == 2 && (tally.v2 == 0 || tally.v1 != 0) {
				t.Fatalf("DATA of version 1: %d, of version 2: %d; want all %d", tally.v1, tally.v2, tc.want)
			}
			if tally.payload < len(data) {
				t.Fatalf("payload %d < %d", tally.payload, len(data))
			}
		})
	}
}

// TestV2AcceptOfUnofferedVersion: an initiator that offers version 2 only,
// answered by a version-1 responder (which ignores the offer and sends the
// ACCEPT every version-1 implementation sends), fails the connection with
// ErrNoCommonVersion and tells the responder with CLOSE reason 2.
// rules: v2-v1-peer
func TestV2AcceptOfUnofferedVersion(t *testing.T) {
	ep, err := NewEndpoint(Config{WireVersions: []uint8{2}, Seed: 3}, nil)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := ep.Connect(0, 7)
	buf := make([]byte, 0, 9000)
	tx, ok := ep.Poll(0, buf)
	var init Handshake
	if !ok || DecodeHandshake(buf[:tx.Len], TypeInit, &init) != nil || init.Offer != 0b10 {
		t.Fatalf("INIT %v %+v", ok, init)
	}
	acc, _ := AppendAccept(make([]byte, 0, 64), &Handshake{Conn: c.ID(), MTU: 4096, Paths: 8, Timestamp: 1})
	ep.Receive(time.Millisecond, acc, RecvMeta{Peer: 7, Entropy: 4791})
	var closeErr error
	for _, ev := range drain(ep) {
		if ev.Kind == EventClosed {
			closeErr = ev.Err
		}
	}
	if !errors.Is(closeErr, ErrNoCommonVersion) {
		t.Fatalf("closed with %v, want ErrNoCommonVersion", closeErr)
	}
	tx, ok = ep.Poll(time.Millisecond, buf)
	if !ok {
		t.Fatal("no CLOSE sent")
	}
	id, reason, ack, err := DecodeClose(buf[:tx.Len])
	if err != nil || id != c.ID() || reason != CloseProtocol || ack || tx.Peer != 7 || tx.Entropy != 4791 {
		t.Fatalf("CLOSE %d %v %v %v %+v", id, reason, ack, err, tx)
	}
}

// TestV2DatagramSize: between two version-2 ends a full chunk travels in
// MTU + 28 bytes (MTU + 76 in version 1), the descriptor costs at most one
// descriptor-only DATA per path, and the whole transfer puts fewer bytes
// on the wire. At the MTU that fills a 1500-byte IP packet under the
// 28-byte seal envelope (1416), the overhead is 56 bytes a datagram.
func TestV2DatagramSize(t *testing.T) {
	const mtu, paths = 1416, 4
	data := make([]byte, 4<<20)
	for i := range data {
		data[i] = byte(i)
	}
	run := func(wire []uint8) wireTally {
		cfg := Config{MTU: mtu, Paths: paths, CC: cc.NewFixed(1<<20, 0), WireVersions: wire, Seed: 9}
		n := newTestNet(t, cfg, cfg, 2, 1)
		var tally wireTally
		n.tap = tally.tap
		c, _ := n.eps[0].Connect(0, 1)
		if !n.run(time.Second, c.Established) {
			t.Fatal("no handshake")
		}
		moveMessage(t, n, c, data)
		return tally
	}
	v1, v2 := run([]uint8{1}), run([]uint8{Version1, Version2})
	chunks := (len(data) + mtu - 1) / mtu
	if v1.maxLen != mtu+DataHeaderLen || v2.maxLen != mtu+DataHeaderLenV2 {
		t.Fatalf("largest DATA: version 1 %d, version 2 %d; want %d and %d", v1.maxLen, v2.maxLen, mtu+DataHeaderLen, mtu+DataHeaderLenV2)
	}
	if v2.v2 != chunks+v2.descOnly || v2.descOnly == 0 || v2.descOnly > paths || v2.desc > 1 {
		t.Fatalf("version 2: %d DATA for %d chunks, %d descriptor-only, %d with descriptor", v2.v2, chunks, v2.descOnly, v2.desc)
	}
	const envelope = 28 // netio/seal.Overhead
	overhead := v2.maxLen - mtu + envelope
	t.Logf("version 1: %d bytes of DATA on the wire; version 2: %d (%.2f%% less); overhead per full datagram %d bytes, payload %d of a 1500-byte IP packet (%.3f), %.3f of its UDP payload",
		v1.bytes, v2.bytes, 100*(1-float64(v2.bytes)/float64(v1.bytes)), overhead, mtu, float64(mtu)/1500, float64(mtu)/1472)
	if overhead != 56 || 1500-20-8-overhead != mtu {
		t.Fatalf("overhead %d bytes, want 56", overhead)
	}
	if v2.bytes >= v1.bytes-(chunks-paths)*(DataHeaderLen-DataHeaderLenV2) {
		t.Fatalf("version 2 put %d bytes on the wire, version 1 %d", v2.bytes, v1.bytes)
	}
}

// TestV2SeqWrap: paths whose sequence numbers and a stream whose message
// numbers cross 2^32 during a lossy, reordering transfer: the receiver
// unwraps the 32-bit fields right (PROTOCOL.md §12), every message
// completes in order and byte for byte, and the ACKs report the 64-bit
// sequences above 2^32.
// rules: v2-seq-wrap
func TestV2SeqWrap(t *testing.T) {
	const start = 1<<32 - 40
	const msgStart = 1<<32 - 3
	cfg := Config{MTU: 512, Paths: 4, CC: cc.NewFixed(64<<10, 0), Seed: 4, WireVersions: []uint8{Version1, Version2}}
	n, c, s := establish(t, cfg)
	if c.WireVersion() != 2 {
		t.Fatalf("version %d", c.WireVersion())
	}
	n.loss = 0.03
	for i := range c.tx {
		c.tx[i].next, c.tx[i].floor = start, start
		s.rx[i].win.cum = start
	}
	const stream = 5
	c.stream(stream).nextSeq = msgStart
	if err := s.ResumeStream(stream, msgStart); err != nil {
		t.Fatal(err)
	}
	region := make([]byte, 1<<20)
	if err := n.eps[1].Memory().Register(3, region); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	want := make([]byte, len(region))
	const msgs = 12
	off := 0
	for i := 0; i < msgs; i++ {
		size := 1 + rng.IntN(30000)
		data := want[off : off+size]
		for j := range data {
			data[j] = byte(rng.Uint32())
		}
		seq, err := c.Write(n.now, stream, 3, uint64(off), data)
		if err != nil || seq != msgStart+uint64(i) {
			t.Fatalf("write %d: seq %#x %v", i, seq, err)
		}
		off += size
	}
	var got []uint64
	sent := 0
	var maxCum uint64
	n.tap = func(from int, b []byte) {
		var a Ack
		if from == 1 && DecodeAck(b, &a) == nil {
			maxCum = max(maxCum, a.Cum)
		}
	}
	if !n.run(n.now+20*time.Second, func() bool {
		for _, ev := range drain(n.eps[0]) {
			if ev.Kind == EventSendComplete && ev.Err == nil {
				sent++
			}
		}
		for _, ev := range drain(n.eps[1]) {
			if ev.Kind == EventRecvComplete {
				if ev.Err != nil {
					t.Fatalf("receive %d: %v", ev.Seq, ev.Err)
				}
				got = append(got, ev.Seq)
			}
		}
		return sent == msgs && len(got) == msgs
	}) {
		t.Fatalf("%d/%d sent, %d received; stats %+v / %+v", sent, msgs, len(got), c.Stats, s.Stats)
	}
	for i, g := range got {
		if g != msgStart+uint64(i) {
			t.Fatalf("completion %d is message %#x, want %#x", i, g, msgStart+uint64(i))
		}
	}
	if !bytes.Equal(region, want) {
		t.Fatal("memory differs")
	}
	for i := range c.tx {
		if c.tx[i].next <= 1<<32 {
			t.Fatalf("path %d never crossed 2^32 (next %#x)", i, c.tx[i].next)
		}
	}
	if maxCum <= 1<<32 || c.Stats.Retransmits == 0 || s.Stats.Malformed != 0 || s.Stats.WindowViolations != 0 {
		t.Fatalf("largest cum %#x, retransmits %d, malformed %d, window violations %d", maxCum, c.Stats.Retransmits, s.Stats.Malformed, s.Stats.WindowViolations)
	}
}

// TestV2RTTFromSendTimes: a version-2 DATA carries no timestamp, the
// sender times the ACK's largest from its own send times and gets the
// round trip it would have from version 1's echo.
func TestV2RTTFromSendTimes(t *testing.T) {
	rtt := func(wire []uint8) time.Duration {
		cfg := Config{MTU: 1024, Paths: 2, WireVersions: wire, Seed: 2}
		n, c, _ := establish(t, cfg)
		moveMessage(t, n, c, make([]byte, 100000))
		return c.Paths().Paths[0].SRTT
	}
	v1, v2 := rtt([]uint8{1}), rtt([]uint8{Version1, Version2})
	if v2 <= 0 || v1 != v2 {
		t.Fatalf("smoothed RTT: version 1 %v, version 2 %v", v1, v2)
	}
}

// TestBadInputV2: version-2 DATA that is malformed, misdirected or an
// orphan is dropped and counted; an orphan is not recorded on its path (no
// acknowledgement is owed for it); nothing is written.
// rules: v2-orphan-resent
func TestBadInputV2(t *testing.T) {
	n, c, s := establish(t, Config{MTU: 1024, Paths: 4, WireVersions: []uint8{Version1, Version2}})
	rx := n.eps[1]
	region := make([]byte, 4096)
	if err := rx.Memory().Register(5, region); err != nil {
		t.Fatal(err)
	}
	meta := RecvMeta{Peer: 0, Entropy: 50000}
	pkt := func(mod func(h *DataHeaderV2), payload int) []byte {
		h := DataHeaderV2{Op: OpWrite, Tag: uint32(c.ID()), Path: 1, Stream: 9, Seq: 0, MsgSeq: 0, Chunk: 0}
		mod(&h)
		b, err := AppendDataV2(make([]byte, 0, 2000), &h, bytes.Repeat([]byte{0xAA}, payload))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	st := s.Stats
	// An orphan: no descriptor, message unknown.
	rx.Receive(n.now, pkt(func(*DataHeaderV2) {}, 1024), meta)
	if s.Stats.Orphans != st.Orphans+1 || s.rx[1].pending != 0 || s.rx[1].win.any {
		t.Fatalf("orphan: Orphans %d, pending %d, recorded %v", s.Stats.Orphans-st.Orphans, s.rx[1].pending, s.rx[1].win.any)
	}
	desc := func(h *DataHeaderV2) { h.Desc, h.Key, h.MsgLen = true, 5, 3000 }
	malformed := map[string][]byte{
		"floor above seq":          pkt(func(h *DataHeaderV2) { desc(h); h.Seq, h.FloorGap = 2, 3 }, 1024),
		"path beyond paths":        pkt(func(h *DataHeaderV2) { desc(h); h.Path = 4 }, 1024),
		"short first chunk":        pkt(desc, 1000),
		"last chunk too long":      pkt(func(h *DataHeaderV2) { desc(h); h.Chunk = 2 }, 1000),
		"version 1 on version 2":   mustV1(t, &DataHeader{Op: OpWrite, Conn: c.ID(), MsgLen: 4, Key: 5}, 4),
		"descriptor cut off":       pkt(desc, 0)[:DataHeaderLenV2+5],
		"chunk beyond the message": pkt(func(h *DataHeaderV2) { desc(h); h.Chunk = 3 }, 1),
	}
	for name, b := range malformed {
		before := s.Stats.Malformed
		rx.Receive(n.now, b, meta)
		if s.Stats.Malformed != before+1 {
			t.Errorf("%s: not counted as malformed", name)
		}
	}
	// A message announced; then a chunk that disagrees with it.
	rx.Receive(n.now, pkt(func(h *DataHeaderV2) { desc(h); h.Seq = 10 }, 0), meta) // descriptor-only
	if s.rx[1].win.largest != 10 || !s.rx[1].win.any {
		t.Fatal("descriptor-only DATA not recorded on its path")
	}
	before := s.Stats.Malformed
	rx.Receive(n.now, pkt(func(h *DataHeaderV2) { h.Seq, h.Op = 11, OpSend }, 1024), meta)
	rx.Receive(n.now, pkt(func(h *DataHeaderV2) { desc(h); h.Seq, h.Addr = 12, 8 }, 1024), meta)
	if s.Stats.Malformed != before+2 {
		t.Fatalf("disagreeing chunks: malformed %d, want 2", s.Stats.Malformed-before)
	}
	// Chunks past the announced message's end, full-sized or empty, its
	// length taken from the message held: malformed, nothing placed.
	before, largest := s.Stats.Malformed, s.rx[1].win.largest
	rx.Receive(n.now, pkt(func(h *DataHeaderV2) { h.Seq, h.Chunk = 13, 100 }, 1024), meta)
	rx.Receive(n.now, pkt(func(h *DataHeaderV2) { h.Seq, h.Chunk = 13, 3 }, 1024), meta)
	if s.Stats.Malformed != before+2 || s.rx[1].win.largest != largest {
		t.Fatalf("chunks past the message: malformed %d, want 2; largest %d, want %d (not recorded)", s.Stats.Malformed-before, s.rx[1].win.largest, largest)
	}
	// The announced message's chunks then place without descriptor.
	for i := uint32(0); i < 3; i++ {
		rx.Receive(n.now, pkt(func(h *DataHeaderV2) { h.Seq, h.Chunk = 13+i, i }, min(1024, 3000-int(i)*1024)), meta)
	}
	if !bytes.Equal(region[:3000], bytes.Repeat([]byte{0xAA}, 3000)) || !bytes.Equal(region[3000:], make([]byte, 1096)) {
		t.Fatal("announced message not placed exactly")
	}
	// A tag nobody has.
	u := rx.Stats.UnknownConn
	rx.Receive(n.now, pkt(func(h *DataHeaderV2) { h.Tag++ }, 10), meta)
	if rx.Stats.UnknownConn != u+1 {
		t.Fatal("unknown tag not counted")
	}
	// A version-1-only endpoint answers version-2 DATA with VERSION [1].
	old, _ := NewEndpoint(Config{WireVersions: []uint8{1}, Listen: true}, nil)
	old.Receive(0, pkt(func(*DataHeaderV2) {}, 10), meta)
	buf := make([]byte, 0, 100)
	tx, ok := old.Poll(0, buf)
	_, vers, err := DecodeVersion(buf[:tx.Len])
	if !ok || err != nil || !bytes.Equal(vers, []byte{1}) {
		t.Fatalf("VERSION answer %v %v %v", ok, vers, err)
	}
}

func mustV1(t *testing.T, h *DataHeader, n int) []byte {
	b, err := AppendData(make([]byte, 0, 2000), h, make([]byte, n))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestV2TagCollision: a responder that already has a version-2 connection
// with an INIT's tag gives the new connection version 1, and both carry
// data.
func TestV2TagCollision(t *testing.T) {
	n := newTestNet(t, Config{MTU: 1024, Seed: 1, WireVersions: []uint8{Version1, Version2}}, Config{MTU: 1024, Seed: 2, WireVersions: []uint8{Version1, Version2}}, 2, 1)
	b := n.eps[1]
	first, _ := AppendInit(make([]byte, 0, 64), &Handshake{Conn: 0xaaaa_0000_1234_5678, MTU: 1024, Paths: 2, Timestamp: 1, Offer: 3})
	second, _ := AppendInit(make([]byte, 0, 64), &Handshake{Conn: 0xbbbb_0000_1234_5678, MTU: 1024, Paths: 2, Timestamp: 1, Offer: 3})
	b.Receive(0, first, RecvMeta{Peer: 0, Entropy: 1})
	b.Receive(0, second, RecvMeta{Peer: 0, Entropy: 2})
	var vers []int
	for _, c := range b.Conns() {
		vers = append(vers, c.WireVersion())
	}
	if len(vers) != 2 || vers[0] != 2 || vers[1] != 1 {
		t.Fatalf("versions %v, want [2 1]", vers)
	}
	// And an initiator never draws a tag it already uses.
	a := n.eps[0]
	seen := map[uint32]bool{}
	for i := 0; i < 1000; i++ {
		c, err := a.Connect(0, 1)
		if err != nil {
			t.Fatal(err)
		}
		if seen[uint32(c.ID())] {
			t.Fatal("tag drawn twice")
		}
		seen[uint32(c.ID())] = true
	}
}

// TestV2SteadyStateAllocs: a version-2 transfer allocates nothing per
// datagram in either endpoint (what a message allocates, it allocates at
// Write).
func TestV2SteadyStateAllocs(t *testing.T) {
	cfg := Config{MTU: 1024, Paths: 4, CC: cc.NewFixed(1<<20, 0), Seed: 8, WireVersions: []uint8{Version1, Version2}}
	n, c, _ := establish(t, cfg)
	if err := n.eps[1].Memory().Register(1, make([]byte, 64<<20)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write(n.now, 0, 1, 0, make([]byte, 64<<20)); err != nil {
		t.Fatal(err)
	}
	bufs := [2][]byte{make([]byte, 0, 9000), make([]byte, 0, 9000)}
	step := func() {
		// One datagram each way, delivered at once: DATA out, ACK back.
		for from := 0; from < 2; from++ {
			tx, ok := n.eps[from].Poll(n.now, bufs[from])
			if ok {
				n.eps[1-from].Receive(n.now, bufs[from][:tx.Len], RecvMeta{Peer: PeerID(from), Entropy: tx.Entropy})
			}
		}
		n.now += time.Microsecond
		for _, ep := range n.eps {
			if t := ep.NextTimeout(); t >= 0 && t <= n.now {
				ep.HandleTimeout(n.now)
			}
			for {
				if _, ok := ep.PollEvent(); !ok {
					break
				}
			}
		}
	}
	for i := 0; i < 3000; i++ {
		step()
	}
	before := c.Stats.DataSent
	allocs := testing.AllocsPerRun(2000, step)
	if c.Stats.DataSent-before < 1000 || c.WireVersion() != 2 {
		t.Fatalf("only %d DATA sent", c.Stats.DataSent-before)
	}
	if allocs != 0 {
		t.Fatalf("%.2f allocations per step (a DATA and an ACK)", allocs)
	}
}

// TestV2RulesCovered: every rule PROTOCOL.md §12 names is named by a
// scenario ("# rules:") or a test ("// rules:").
func TestV2RulesCovered(t *testing.T) {
	doc, err := os.ReadFile("../docs/PROTOCOL.md")
	if err != nil {
		t.Fatal(err)
	}
	rules, err := script.DocRules(string(doc), "\n## 12.", "")
	if err != nil {
		t.Fatalf("PROTOCOL.md: %v", err)
	}
	if len(rules) < 5 {
		t.Fatalf("found %d rules in §12", len(rules))
	}
	files, _ := filepath.Glob("testdata/scenarios/*.txt")
	tests, _ := filepath.Glob("*_test.go")
	named := map[string]bool{}
	for _, f := range append(files, tests...) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(string(b), "\n") {
			l = strings.TrimSpace(l)
			r, ok := strings.CutPrefix(l, "# rules:")
			if !ok {
				r, ok = strings.CutPrefix(l, "// rules:")
			}
			for _, name := range strings.Split(r, ",") {
				if ok {
					named[strings.TrimSpace(name)] = true
				}
			}
		}
	}
	for _, r := range rules {
		if !named[r] {
			t.Errorf("rule %q of PROTOCOL.md §12 has no scenario or test naming it", r)
		}
	}
}
