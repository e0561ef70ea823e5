package metaroce

import (
	"bytes"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/mrgw/mrgw/cc"
	"github.com/mrgw/mrgw/pathmgr"
)

// relaySink forwards every chunk of a stream to another connection as a
// relayed message with the same sequence, key and address: a gateway in
// miniature.
type relaySink struct {
	t        *testing.T
	out      *Conn
	stream   uint32
	msgs     map[uint64]*RelayMessage
	inflight int // chunk buffers held by the outgoing connection
	maxHeld  int
}

func (r *relaySink) Chunk(c *Conn, h *DataHeader, payload []byte) ErrorCode {
	rm := r.msgs[h.MsgSeq]
	if rm == nil {
		var err error
		rm, err = r.out.WriteRelay(r.stream, h.MsgSeq, h.Op, h.Key, h.Addr, h.MsgLen, func(b []byte) {
			r.inflight--
			// Released: the buffer is reused at once, here scribbled on.
			for i := range b {
				b[i] = 0xee
			}
		})
		if err != nil {
			r.t.Errorf("WriteRelay: %v", err)
			return ErrCodeTooFarAhead
		}
		r.msgs[h.MsgSeq] = rm
	}
	if err := rm.Supply(h.Offset, append([]byte(nil), payload...)); err != nil {
		r.t.Errorf("Supply: %v", err)
	}
	r.inflight++
	r.maxHeld = max(r.maxHeld, r.inflight)
	return 0
}

// keepingRelaySink is relaySink relaying every chunk in the receive buffer
// it arrived in (BufferSink), as a gateway does.
type keepingRelaySink struct {
	relaySink
	kept int
}

func (r *keepingRelaySink) ChunkIn(c *Conn, h *DataHeader, payload, buf []byte) (ErrorCode, bool) {
	rm := r.msgs[h.MsgSeq]
	if rm == nil {
		var err error
		rm, err = r.out.WriteRelay(r.stream, h.MsgSeq, h.Op, h.Key, h.Addr, h.MsgLen, func(b []byte) {
			if len(b) != rxBufTestLen {
				r.t.Errorf("released %d bytes, not the %d-byte receive buffer kept", len(b), rxBufTestLen)
			}
			r.inflight--
			for i := range b {
				b[i] = 0xee
			}
		})
		if err != nil {
			r.t.Errorf("WriteRelay: %v", err)
			return ErrCodeTooFarAhead, false
		}
		r.msgs[h.MsgSeq] = rm
	}
	if err := rm.SupplyIn(h.Offset, payload, buf); err != nil {
		r.t.Errorf("SupplyIn: %v", err)
		return ErrCodeNoBuffer, false
	}
	r.inflight++
	r.kept++
	r.maxHeld = max(r.maxHeld, r.inflight)
	return 0, true
}

// TestRelayCutThrough relays random messages A → G → B with loss on both
// hops. G never holds a whole message: it forwards chunks as they arrive. B's
// memory must equal what A sent, with every message completed once in order,
// and G must end holding no buffers.
//
// With lent payloads, A and G lend theirs (LendPayloads) to a driver that
// reads each one 100 µs after the poll, after its ACK has come back: a
// relay buffer G reuses as soon as it is released, and a message's data A
// reuses as soon as it completes (both scribbled on), must still hold
// what was polled when the driver reads it.
func TestRelayCutThrough(t *testing.T) {
	t.Run("copied", func(t *testing.T) { relayCutThrough(t, 0, Version1, false) })
	t.Run("lent", func(t *testing.T) { relayCutThrough(t, 100*time.Microsecond, Version1, false) })
	t.Run("lent-v2", func(t *testing.T) { relayCutThrough(t, 100*time.Microsecond, Version2, false) })
	// G keeps each chunk's receive buffer and sends from it; buffers it
	// does not keep are scribbled on by the driver as soon as Receive
	// returns, the ones it keeps when released.
	t.Run("kept", func(t *testing.T) { relayCutThrough(t, 0, Version1, true) })
	t.Run("kept-lent-v2", func(t *testing.T) { relayCutThrough(t, 100*time.Microsecond, Version2, true) })
}

func relayCutThrough(t *testing.T, lendLag time.Duration, wire uint8, keep bool) {
	cfg := Config{MTU: 1024, Paths: 4, CC: cc.NewFixed(32<<10, 0), Seed: 11, WireVersions: []uint8{wire}}
	n1 := newTestNet(t, cfg, cfg, 4, 11) // A (0) → G (1)
	n2 := newTestNet(t, cfg, cfg, 4, 12) // G (0) → B (1)
	if lendLag > 0 {
		n1.lendLag, n2.lendLag = lendLag, lendLag
		n1.eps[0].LendPayloads()
		n2.eps[0].LendPayloads()
	}
	n1.loss, n2.loss = 0.02, 0.02
	a, _ := n1.eps[0].Connect(0, 1)
	gOut, _ := n2.eps[0].Connect(0, 1)
	step := func(cond func() bool) bool {
		for i := 0; i < 200000; i++ {
			if cond() {
				return true
			}
			t1 := n1.now + 10*time.Microsecond
			n1.run(t1, func() bool { return false })
			n2.run(t1, func() bool { return false })
			n1.now, n2.now = t1, t1
		}
		return cond()
	}
	if !step(func() bool { return a.Established() && gOut.Established() }) {
		t.Fatal("handshakes")
	}
	var gIn, bIn *Conn
	for _, ev := range drain(n1.eps[1]) {
		if ev.Kind == EventConnected {
			gIn = ev.Conn
		}
	}
	for _, ev := range drain(n2.eps[1]) {
		if ev.Kind == EventConnected {
			bIn = ev.Conn
		}
	}
	sink := &relaySink{t: t, out: gOut, stream: 9, msgs: map[uint64]*RelayMessage{}}
	var keeper *keepingRelaySink
	if keep {
		keeper = &keepingRelaySink{relaySink: relaySink{t: t, out: gOut, stream: 9, msgs: map[uint64]*RelayMessage{}}}
		sink = &keeper.relaySink
		n1.rxBufs = true
		gIn.BindSink(5, keeper)
	} else {
		gIn.BindSink(5, sink)
	}
	region := make([]byte, 1<<20)
	if err := n2.eps[1].Memory().Register(3, region); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var want []byte
	sent := map[uint64][]byte{} // A's messages' data, reused once complete
	off := 0
	const msgs = 40
	for i := 0; i < msgs; i++ {
		size := 1 + rng.IntN(20000)
		data := make([]byte, size)
		for j := range data {
			data[j] = byte(rng.Uint32())
		}
		seq, err := a.Write(n1.now, 5, 3, uint64(off), data)
		if err != nil {
			t.Fatal(err)
		}
		sent[seq] = data
		want = append(want, data...)
		off += size
	}
	var aDone, bDone []uint64
	if !step(func() bool {
		for _, ev := range drain(n1.eps[0]) {
			if ev.Kind == EventSendComplete {
				aDone = append(aDone, ev.Seq)
				// Complete: the application reuses the data at once.
				for i := range sent[ev.Seq] {
					sent[ev.Seq][i] = 0xdd
				}
			}
		}
		drain(n1.eps[1])
		drain(n2.eps[0])
		for _, ev := range drain(n2.eps[1]) {
			if ev.Kind == EventRecvComplete {
				if ev.Err != nil || ev.Stream != 9 {
					t.Errorf("completion %+v", ev)
				}
				bDone = append(bDone, ev.Seq)
			}
		}
		return len(aDone) == msgs && len(bDone) == msgs && sink.inflight == 0
	}) {
		t.Fatalf("relay incomplete: A %d, B %d, G holds %d buffers", len(aDone), len(bDone), sink.inflight)
	}
	for i, s := range bDone {
		if s != uint64(i) {
			t.Fatalf("B completed %v: not in order", bDone)
		}
	}
	if !bytes.Equal(region[:len(want)], want) {
		t.Fatal("B's memory differs from what A wrote")
	}
	if keep && (keeper.kept == 0 || n1.keptN == 0 || n1.keptN != keeper.kept) {
		t.Fatalf("G's sink kept %d receive buffers, Receive reported %d; want the same, above 0", keeper.kept, n1.keptN)
	}
	if lendLag > 0 && (n1.lentN[0] == 0 || n2.lentN[0] == 0) {
		t.Fatalf("payloads lent: A %d, G %d; want both > 0", n1.lentN[0], n2.lentN[0])
	}
	if sink.maxHeld*1024 >= len(want) {
		t.Fatalf("G held %d chunks at once: that is the whole transfer, not cut-through", sink.maxHeld)
	}
	_ = bIn
}

func TestWriteRelayValidation(t *testing.T) {
	_, c, _ := establish(t, Config{MTU: 1024})
	rm, err := c.WriteRelay(1, 7, OpWrite, 1, 0, 2500, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.WriteRelay(1, 7, OpWrite, 1, 0, 10, nil); err != ErrSeqUsed {
		t.Fatalf("second WriteRelay of seq 7: %v", err)
	}
	for _, bad := range []struct {
		off uint64
		n   int
	}{{1, 1024}, {0, 1000}, {2048, 1024}, {3072, 1}} {
		if err := rm.Supply(bad.off, make([]byte, bad.n)); err != ErrBadChunk {
			t.Errorf("Supply(%d, %d bytes) = %v, want ErrBadChunk", bad.off, bad.n, err)
		}
	}
	if err := rm.Supply(2048, make([]byte, 452)); err != nil {
		t.Fatal(err)
	}
	if err := rm.Supply(2048, make([]byte, 452)); err != ErrChunkTwice {
		t.Fatalf("chunk twice: %v", err)
	}
}

// TestStreamWeights: with two streams always backlogged, a stream of weight 3
// gets three times the packets of a stream of weight 1.
func TestStreamWeights(t *testing.T) {
	// The test polls the sender without delivering anything, so probe
	// timeouts are set far beyond its 40 ms.
	pc := pathmgr.DefaultConfig()
	pc.InitialRTT, pc.MinPTO = time.Second, time.Second
	n, c, _ := establish(t, Config{MTU: 1024, Paths: 2, CC: cc.NewFixed(64<<20, 50e6), Path: pc})
	if err := n.eps[1].Memory().Register(1, make([]byte, 8<<20)); err != nil {
		t.Fatal(err)
	}
	c.SetStreamWeight(2, 3)
	big := make([]byte, 4<<20)
	c.Write(n.now, 1, 1, 0, big)
	c.Write(n.now, 2, 1, 4<<20, big)
	sent := map[uint32]int{}
	buf := make([]byte, 0, 4096)
	now := n.now
	for i := 0; i < 40000; i++ {
		tx, ok := n.eps[0].Poll(now, buf)
		if !ok {
			now += time.Microsecond
			if t := n.eps[0].NextTimeout(); t >= 0 && t <= now {
				n.eps[0].HandleTimeout(now)
			}
			continue
		}
		if stream, ok := chunkStream(buf[:tx.Len]); ok {
			sent[stream]++
		}
	}
	ratio := float64(sent[2]) / float64(sent[1])
	if sent[1] < 100 || ratio < 2.8 || ratio > 3.2 {
		t.Fatalf("packets per stream %v: ratio %.2f, want 3", sent, ratio)
	}
}

func TestResumeStream(t *testing.T) {
	n, c, s := establish(t, Config{MTU: 1024})
	if err := n.eps[1].Memory().Register(1, make([]byte, 4096)); err != nil {
		t.Fatal(err)
	}
	if err := s.ResumeStream(4, 100); err != nil {
		t.Fatal(err)
	}
	rm, err := c.WriteRelay(4, 100, OpWrite, 1, 0, 10, nil)
	if err != nil {
		t.Fatal(err)
	}
	rm.Supply(0, []byte("0123456789"))
	var got []uint64
	if !n.run(n.now+time.Second, func() bool {
		for _, ev := range drain(n.eps[1]) {
			if ev.Kind == EventRecvComplete {
				got = append(got, ev.Seq)
			}
		}
		return len(got) == 1
	}) || got[0] != 100 {
		t.Fatalf("resumed stream completions %v, want [100]", got)
	}
	if err := s.ResumeStream(4, 50); err == nil {
		t.Fatal("resuming a stream backwards must fail")
	}
}

// chunkStream returns the stream of a DATA packet of either wire version
// that carries a chunk (not a version-2 descriptor-only DATA).
func chunkStream(b []byte) (uint32, bool) {
	if len(b) > 0 && b[0] == Version2 {
		var h DataHeaderV2
		p, err := DecodeDataV2(b, &h)
		return h.Stream, err == nil && !h.DescriptorOnly(len(p))
	}
	var h DataHeader
	_, err := DecodeData(b, &h)
	return h.Stream, err == nil
}

// BenchmarkRelaySupply is what a relaying gateway pays per chunk to hand
// a relayed message's chunks over (WriteRelay, then Supply of each of its
// 512 chunks, then Fail to release them); ns/op and allocations are per
// chunk.
func BenchmarkRelaySupply(b *testing.B) {
	const mtu, chunks = 1316, 512
	_, c, _ := establish(b, Config{MTU: mtu})
	bufs := make([][]byte, chunks)
	for i := range bufs {
		bufs[i] = make([]byte, mtu)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for seq := uint64(0); int(seq)*chunks < b.N; seq++ {
		rm, err := c.WriteRelay(1, seq, OpWrite, 1, 0, mtu*chunks, nil)
		if err != nil {
			b.Fatal(err)
		}
		for i, buf := range bufs {
			if err := rm.Supply(uint64(i*mtu), buf); err != nil {
				b.Fatal(err)
			}
		}
		rm.Fail(ErrClosed)
		for {
			if _, ok := c.ep.PollEvent(); !ok {
				break
			}
		}
	}
}
