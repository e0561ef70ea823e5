package metaroce

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// placeLog is a placeHandler that records what it is told.
type placeLog struct {
	refusals    []string // "stream/seq code port"
	completions []string // "stream/seq" or "stream/seq err"
	sunk        []string // "stream/seq@offset" handed to a sink
}

func (l *placeLog) placementRefused(_ time.Duration, h *DataHeader, port uint16, code ErrorCode) {
	l.refusals = append(l.refusals, fmt.Sprintf("%d/%d %d %d", h.Stream, h.MsgSeq, code, port))
}

func (l *placeLog) messageComplete(_ time.Duration, stream uint32, seq uint64, m *rxMessage) {
	s := fmt.Sprintf("%d/%d", stream, seq)
	if m.err != nil {
		s += " " + m.err.Error()
	}
	l.completions = append(l.completions, s)
}

func (l *placeLog) sinkChunk(s Sink, h *DataHeader, payload []byte) ErrorCode {
	l.sunk = append(l.sunk, fmt.Sprintf("%d/%d@%d", h.Stream, h.MsgSeq, h.Offset))
	return s.Chunk(nil, h, payload)
}

// sinkFunc makes a function a Sink.
type sinkFunc func(h *DataHeader, payload []byte) ErrorCode

func (f sinkFunc) Chunk(_ *Conn, h *DataHeader, payload []byte) ErrorCode { return f(h, payload) }

// placeRig is a placer with an MTU of 4 bytes, region 1 of 64 bytes and
// its handler and stats.
type placeRig struct {
	p     placer
	log   placeLog
	stats ConnStats
	mem   *Memory
	bound map[uint32]Sink
	reg   []byte
}

func newPlaceRig(t *testing.T, maxAhead int) *placeRig {
	t.Helper()
	r := &placeRig{mem: NewMemory(), reg: make([]byte, 64)}
	if err := r.mem.Register(1, r.reg); err != nil {
		t.Fatal(err)
	}
	r.p = newPlacer(4, maxAhead, r.mem, &r.bound, &r.stats, &r.log)
	return r
}

// chunk places the chunk at off of message seq of stream, a message of
// msgLen bytes (op, key and addr as given), with payload bytes all b.
func (r *placeRig) chunk(op Op, stream uint32, seq uint64, key uint32, addr, msgLen, off uint64, b byte) {
	h := DataHeader{Op: op, Stream: stream, MsgSeq: seq, Key: key, Addr: addr, MsgLen: msgLen, Offset: off}
	n := min(msgLen-off, 4)
	idx, ok := r.p.chunkIndex(&h, int(n))
	if !ok {
		panic(fmt.Sprintf("test chunk %+v is not valid", h))
	}
	r.p.place(0, &h, idx, bytes.Repeat([]byte{b}, int(n)), 7)
}

// write places a chunk of a WRITE to region 1.
func (r *placeRig) write(stream uint32, seq, addr, msgLen, off uint64, b byte) {
	r.chunk(OpWrite, stream, seq, 1, addr, msgLen, off, b)
}

func wantLog(t *testing.T, what string, got []string, want ...string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Fatalf("%s: got %q, want %q", what, got, want)
	}
}

func TestPlacerChunkIndex(t *testing.T) {
	r := newPlaceRig(t, 16)
	for _, c := range []struct {
		msgLen, off uint64
		n           int
		ok          bool
	}{
		{10, 0, 4, true},
		{10, 4, 4, true},
		{10, 8, 2, true}, // the last chunk is short
		{10, 8, 4, false},
		{10, 4, 3, false},
		{10, 2, 4, false},  // not on a chunk boundary
		{0, 0, 0, true},    // an empty message is one empty chunk
		{8, 8, 0, false},   // at the message's end
		{10, 12, 4, false}, // past it
		{10, 400, 4, false},
	} {
		h := DataHeader{MsgLen: c.msgLen, Offset: c.off}
		idx, got := r.p.chunkIndex(&h, c.n)
		if got != c.ok || got && uint64(idx) != c.off/4 {
			t.Errorf("chunkIndex(len %d, off %d, n %d) = %d, %v, want %d, %v", c.msgLen, c.off, c.n, idx, got, c.off/4, c.ok)
		}
	}
}

func TestPlacerPlacesOutOfOrderChunksOnArrival(t *testing.T) {
	r := newPlaceRig(t, 16)
	// A 14-byte WRITE at region offset 8: chunks at 0, 4, 8, 12 (2 bytes).
	for i, off := range []uint64{8, 0, 12} {
		r.write(0, 0, 8, 14, off, byte('a'+off))
		if got := r.reg[8+off]; got != byte('a'+off) {
			t.Fatalf("chunk at %d not placed on arrival (after %d chunks)", off, i+1)
		}
	}
	wantLog(t, "completions before the last chunk", r.log.completions)
	r.write(0, 0, 8, 14, 4, 'e')
	wantLog(t, "completions", r.log.completions, "0/0")
	if got, want := string(r.reg[8:22]), "aaaaeeeeiiiimm"; got != want {
		t.Fatalf("region holds %q, want %q", got, want)
	}
	if r.reg[7] != 0 || r.reg[22] != 0 {
		t.Fatal("placement wrote outside the message")
	}
	if r.stats.PayloadBytesPlaced != 14 || r.stats.MessagesReceived != 1 {
		t.Fatalf("placed %d bytes, %d messages; want 14, 1", r.stats.PayloadBytesPlaced, r.stats.MessagesReceived)
	}
}

func TestPlacerCompletesInOrderPerStream(t *testing.T) {
	r := newPlaceRig(t, 16)
	r.write(1, 2, 8, 4, 0, 'c')
	r.write(1, 1, 4, 4, 0, 'b')
	r.write(2, 0, 20, 4, 0, 'x') // another stream is not held up by stream 1
	wantLog(t, "completions", r.log.completions, "2/0")
	if string(r.reg[4:12]) != "bbbbcccc" {
		t.Fatal("messages ahead of the oldest were not placed on arrival")
	}
	r.write(1, 0, 0, 4, 0, 'a')
	wantLog(t, "completions", r.log.completions, "2/0", "1/0", "1/1", "1/2")

	// The next ACK reports each stream's completion point once, newest first.
	var a Ack
	r.p.fillStreamAcks(&a)
	want := []StreamAck{{Stream: 1, Completed: 3}, {Stream: 2, Completed: 1}}
	if a.NStreams != 2 || !slices.Equal(a.Streams[:2], want) {
		t.Fatalf("ACK streams %v, want %v", a.Streams[:a.NStreams], want)
	}
	a = Ack{}
	r.p.fillStreamAcks(&a)
	if a.NStreams != 0 {
		t.Fatalf("a second ACK reports %d streams, want none", a.NStreams)
	}
	r.write(2, 1, 24, 4, 0, 'y')
	r.p.fillStreamAcks(&a)
	if a.NStreams != 1 || a.Streams[0] != (StreamAck{Stream: 2, Completed: 2}) {
		t.Fatalf("ACK streams %v, want stream 2 at 2", a.Streams[:a.NStreams])
	}
}

func TestPlacerFillStreamAcksStopsWhenFull(t *testing.T) {
	r := newPlaceRig(t, 16)
	for s := range uint32(MaxAckStreams + 3) {
		r.chunk(OpWrite, s, 0, 1, 0, 0, 0, 0) // an empty WRITE completes at once
	}
	var a Ack
	r.p.fillStreamAcks(&a)
	if a.NStreams != MaxAckStreams || a.Streams[0].Stream != MaxAckStreams+2 {
		t.Fatalf("first ACK: %d streams from %d, want %d from %d", a.NStreams, a.Streams[0].Stream, MaxAckStreams, MaxAckStreams+2)
	}
	a = Ack{}
	r.p.fillStreamAcks(&a)
	if a.NStreams != 3 || a.Streams[2].Stream != 0 {
		t.Fatalf("second ACK: %v, want streams 2, 1, 0", a.Streams[:a.NStreams])
	}
}

func TestPlacerRefusesAndReports(t *testing.T) {
	for _, c := range []struct {
		name string
		op   Op
		key  uint32
		addr uint64
		len  uint64
		post []byte // posted under tag addr, if not nil
		code ErrorCode
	}{
		{"unknown key", OpWrite, 9, 0, 8, nil, ErrCodeUnknownKey},
		{"out of bounds", OpWrite, 1, 60, 8, nil, ErrCodeOutOfBounds},
		{"no posted buffer", OpSend, 0, 5, 8, nil, ErrCodeNoBuffer},
		{"buffer too small", OpSend, 0, 5, 8, make([]byte, 7), ErrCodeBufferTooSmall},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newPlaceRig(t, 16)
			if c.post != nil {
				if err := r.p.post(c.addr, c.post); err != nil {
					t.Fatal(err)
				}
			}
			r.chunk(c.op, 3, 0, c.key, c.addr, c.len, 4, 'z')
			wantLog(t, "refusals", r.log.refusals, fmt.Sprintf("3/0 %d 7", c.code))
			// A refused message completes, with its error, so it does not
			// stall the stream.
			wantLog(t, "completions", r.log.completions, "3/0 "+c.code.Err().Error())
			if r.stats.PlacementErrors != 1 || r.stats.PayloadBytesPlaced != 0 {
				t.Fatalf("%d placement errors, %d bytes placed; want 1, 0", r.stats.PlacementErrors, r.stats.PayloadBytesPlaced)
			}
			if bytes.ContainsRune(r.reg, 'z') || bytes.ContainsRune(c.post, 'z') {
				t.Fatal("a refused packet wrote")
			}
			// Its other chunks are late copies of a completed message.
			r.chunk(c.op, 3, 0, c.key, c.addr, c.len, 0, 'z')
			if r.stats.Duplicates != 1 || len(r.log.refusals) != 1 {
				t.Fatalf("%d duplicates, %d refusals; want 1, 1", r.stats.Duplicates, len(r.log.refusals))
			}
			r.write(3, 1, 0, 4, 0, 'n')
			wantLog(t, "completions", r.log.completions, "3/0 "+c.code.Err().Error(), "3/1")
		})
	}
}

func TestPlacerRefusesMessageBehindTheOldest(t *testing.T) {
	// A refused message that is not the oldest waits, failed, for its turn;
	// its later chunks are dropped without another refusal.
	r := newPlaceRig(t, 16)
	r.write(0, 1, 0, 8, 0, 'z')
	r.chunk(OpWrite, 0, 2, 9, 0, 8, 0, 'z')
	r.chunk(OpWrite, 0, 2, 9, 0, 8, 4, 'z')
	wantLog(t, "refusals", r.log.refusals, "0/2 1 7")
	wantLog(t, "completions", r.log.completions)
	r.write(0, 1, 0, 8, 4, 'z')
	r.write(0, 0, 8, 4, 0, 'a')
	wantLog(t, "completions", r.log.completions, "0/0", "0/1", "0/2 "+ErrUnknownKey.Error())
	if r.stats.PlacementErrors != 1 || r.stats.Duplicates != 0 {
		t.Fatalf("%d placement errors, %d duplicates; want 1, 0", r.stats.PlacementErrors, r.stats.Duplicates)
	}
}

func TestPlacerRefusesWriteToDeregisteredRegion(t *testing.T) {
	r := newPlaceRig(t, 16)
	r.write(0, 0, 0, 8, 0, 'a')
	r.mem.Deregister(1)
	r.write(0, 0, 0, 8, 4, 'b')
	wantLog(t, "refusals", r.log.refusals, "0/0 1 7")
	wantLog(t, "completions", r.log.completions, "0/0 "+ErrUnknownKey.Error())
	if r.reg[4] != 0 || r.stats.PayloadBytesPlaced != 4 {
		t.Fatalf("placed %d bytes, want only the first chunk's 4", r.stats.PayloadBytesPlaced)
	}
}

// TestPlacerFollowsReregisteredRegion: each chunk of a message goes to
// the region its key names when the chunk arrives: registered again under
// the same key, the new buffer takes the next chunk, and one too short
// refuses it.
func TestPlacerFollowsReregisteredRegion(t *testing.T) {
	r := newPlaceRig(t, 16)
	r.write(0, 0, 0, 12, 0, 'a')
	r.mem.Deregister(1)
	moved := make([]byte, 64)
	if err := r.mem.Register(1, moved); err != nil {
		t.Fatal(err)
	}
	r.write(0, 0, 0, 12, 4, 'b')
	if r.reg[4] != 0 || moved[4] != 'b' {
		t.Fatalf("second chunk: old region %q, new %q; want it in the new one", r.reg[4], moved[4])
	}
	r.mem.Deregister(1)
	if err := r.mem.Register(1, make([]byte, 8)); err != nil {
		t.Fatal(err)
	}
	r.write(0, 0, 0, 12, 8, 'c')
	wantLog(t, "refusals", r.log.refusals, "0/0 2 7")
	wantLog(t, "completions", r.log.completions, "0/0 "+ErrOutOfBounds.Error())
}

func TestPlacerMessagesAheadLimit(t *testing.T) {
	r := newPlaceRig(t, 4)
	r.write(0, 4, 0, 4, 0, 'z') // 4 beyond the oldest (0): refused
	wantLog(t, "refusals", r.log.refusals, "0/4 5 7")
	if len(r.p.streams[0].msgs) != 0 || r.reg[0] != 0 {
		t.Fatal("a message too far ahead was tracked or written")
	}
	r.write(0, 3, 12, 4, 0, 'd') // 3 beyond: placed
	if r.reg[12] != 'd' || len(r.log.refusals) != 1 {
		t.Fatal("a message within the limit was not placed")
	}
	for seq := range uint64(3) {
		r.write(0, seq, 4*seq, 4, 0, 'a')
	}
	r.write(0, 4, 16, 4, 0, 'e') // the window moved on with the oldest
	r.write(0, 9, 36, 4, 0, 'z') // and is still 4 wide: 5 to 8
	wantLog(t, "completions", r.log.completions, "0/0", "0/1", "0/2", "0/3", "0/4")
	wantLog(t, "refusals", r.log.refusals, "0/4 5 7", "0/9 5 7")
	// A refused-as-too-far message does not complete: the sender never
	// sends that far ahead, and it may send it again once the window moves.
	if r.stats.PlacementErrors != 2 || r.stats.MessagesReceived != 5 {
		t.Fatalf("%d placement errors, %d messages; want 2, 5", r.stats.PlacementErrors, r.stats.MessagesReceived)
	}
}

func TestPlacerDropsDuplicateChunks(t *testing.T) {
	r := newPlaceRig(t, 16)
	r.write(0, 0, 0, 8, 0, 'a')
	r.write(0, 0, 0, 8, 0, 'z') // a resent copy of a chunk already placed
	if r.reg[0] != 'a' || r.stats.Duplicates != 1 || r.stats.PayloadBytesPlaced != 4 {
		t.Fatalf("duplicate chunk: region %q, %d duplicates, %d bytes placed", r.reg[:4], r.stats.Duplicates, r.stats.PayloadBytesPlaced)
	}
	r.write(0, 0, 0, 8, 4, 'b')
	wantLog(t, "completions", r.log.completions, "0/0")
	copy(r.reg, "APP!") // the buffer is the application's again
	r.write(0, 0, 0, 8, 0, 'z')
	if string(r.reg[:4]) != "APP!" || r.stats.Duplicates != 2 {
		t.Fatal("a late copy of a completed message was written")
	}
	// A chunk whose header disagrees with the message's first is malformed.
	r.write(0, 1, 8, 8, 0, 'c')
	r.write(0, 1, 8, 12, 4, 'z')
	if r.stats.Malformed != 1 || r.reg[12] != 0 {
		t.Fatalf("%d malformed, region[12] %q; want 1, 0", r.stats.Malformed, r.reg[12])
	}
	wantLog(t, "refusals", r.log.refusals)
}

func TestPlacerSendUsesPostedBufferOnce(t *testing.T) {
	r := newPlaceRig(t, 16)
	buf := make([]byte, 8)
	if err := r.p.post(5, buf); err != nil {
		t.Fatal(err)
	}
	if err := r.p.post(5, nil); !errors.Is(err, ErrDuplicateTag) {
		t.Fatalf("posting a tag twice: %v, want ErrDuplicateTag", err)
	}
	r.chunk(OpSend, 0, 0, 0, 5, 6, 4, 'b')
	r.chunk(OpSend, 0, 0, 0, 5, 6, 0, 'a')
	if string(buf) != "aaaabb\x00\x00" {
		t.Fatalf("posted buffer holds %q", buf)
	}
	wantLog(t, "completions", r.log.completions, "0/0")
	r.chunk(OpSend, 0, 1, 0, 5, 6, 0, 'z') // the tag's buffer was consumed
	wantLog(t, "refusals", r.log.refusals, "0/1 3 7")
}

func TestPlacerSinkStreams(t *testing.T) {
	r := newPlaceRig(t, 16)
	var got []byte
	sink := sinkFunc(func(h *DataHeader, payload []byte) ErrorCode {
		if h.MsgSeq == 1 {
			return ErrCodeOutOfBounds
		}
		got = append(got, payload...)
		return 0
	})
	r.bound = map[uint32]Sink{4: sink} // bound on every connection: new streams start bound
	r.p.bind(6, sink)
	r.chunk(OpWrite, 4, 0, 9, 0, 6, 4, 'b') // key 9 is not registered: the sink decides
	r.chunk(OpWrite, 6, 0, 9, 0, 4, 0, 'c')
	r.chunk(OpWrite, 4, 0, 9, 0, 6, 0, 'a')
	r.chunk(OpWrite, 4, 0, 9, 0, 6, 0, 'z') // a duplicate never reaches the sink
	wantLog(t, "sunk", r.log.sunk, "4/0@4", "6/0@0", "4/0@0")
	if string(got) != "bbccccaaaa" || bytes.ContainsAny(r.reg, "abcz") {
		t.Fatalf("sink got %q; memory must not be written", got)
	}
	wantLog(t, "completions", r.log.completions, "6/0", "4/0")
	r.chunk(OpWrite, 4, 1, 9, 0, 6, 0, 'x') // the sink refuses
	wantLog(t, "refusals", r.log.refusals, "4/1 2 7")
	wantLog(t, "completions", r.log.completions, "6/0", "4/0", "4/1 "+ErrOutOfBounds.Error())
	r.chunk(OpWrite, 5, 0, 1, 0, 4, 0, 'm') // an unbound stream places into memory
	if r.reg[0] != 'm' || len(r.log.sunk) != 4 {
		t.Fatal("an unbound stream went to a sink")
	}
}

func TestPlacerResumeAndForget(t *testing.T) {
	r := newPlaceRig(t, 16)
	if err := r.p.resume(2, 10); err != nil {
		t.Fatal(err)
	}
	r.write(2, 10, 0, 8, 0, 'a')
	r.write(2, 9, 8, 4, 0, 'z') // before the resumed point: a late duplicate
	if r.stats.Duplicates != 1 || r.reg[8] != 0 {
		t.Fatal("a message before the resumed point was placed")
	}
	if err := r.p.resume(2, 12); err == nil {
		t.Fatal("resume of a stream with a message under way succeeded")
	}
	r.write(2, 10, 0, 8, 4, 'a')
	if err := r.p.resume(2, 3); err == nil {
		t.Fatal("resume backwards succeeded")
	}
	wantLog(t, "completions", r.log.completions, "2/10")
	var a Ack
	r.p.forget(2) // a stream forgotten before its ACK is not reported
	r.p.fillStreamAcks(&a)
	if a.NStreams != 0 {
		t.Fatalf("ACK reports %v of a forgotten stream", a.Streams[:a.NStreams])
	}
	r.write(2, 0, 0, 4, 0, 'b') // and starts afresh
	wantLog(t, "completions", r.log.completions, "2/10", "2/0")
}

func TestPlacerStreamLimit(t *testing.T) {
	r := newPlaceRig(t, 16)
	rs := &rxStream{msgs: map[uint64]*rxMessage{}}
	for id := range uint32(maxStreams) {
		r.p.streams[id] = rs
	}
	r.write(maxStreams, 0, 0, 4, 0, 'z')
	if r.stats.PlacementErrors != 1 || r.reg[0] != 0 || len(r.log.refusals) != 0 {
		t.Fatalf("a stream beyond the limit: %d placement errors, refusals %q", r.stats.PlacementErrors, r.log.refusals)
	}
	if err := r.p.resume(maxStreams, 1); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("resume beyond the stream limit: %v, want ErrQueueFull", err)
	}
}

func TestPlacerPlacesWithoutAllocating(t *testing.T) {
	const chunks = 2048
	r := newPlaceRig(t, 16)
	region := make([]byte, 4*chunks)
	if err := r.mem.Register(2, region); err != nil {
		t.Fatal(err)
	}
	h := DataHeader{Op: OpWrite, Stream: 1, Key: 2, MsgLen: 4 * chunks}
	payload := []byte("abcd")
	r.p.place(0, &h, 0, payload, 0) // the message is tracked from its first chunk
	idx := uint64(1)
	allocs := testing.AllocsPerRun(chunks/2-2, func() {
		h.Offset = 4 * (idx + 1) // one out of order...
		r.p.place(0, &h, int(idx+1), payload, 0)
		h.Offset = 4 * idx // ...then the hole
		r.p.place(0, &h, int(idx), payload, 0)
		r.p.place(0, &h, int(idx), payload, 0) // and a duplicate
		idx += 2
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per 3 chunks placed, want 0", allocs)
	}
	if r.stats.PlacementErrors != 0 || r.stats.Malformed != 0 || len(r.log.completions) != 0 {
		t.Fatalf("stats %+v, completions %q", r.stats, r.log.completions)
	}
	if !strings.HasPrefix(string(region), strings.Repeat("abcd", int(idx))) {
		t.Fatal("the chunks were not placed")
	}
}

// TestRelayOnlyRefusesStreamsWithoutASink: on a relaying endpoint a WRITE
// on a stream with no Sink (never bound, or forgotten with its flow) is
// refused as not relayed, even to a key that is registered, so that the
// sender tells a lost route from a destination's refusal of its memory; a
// bound stream still relays.
func TestRelayOnlyRefusesStreamsWithoutASink(t *testing.T) {
	r := newPlaceRig(t, 16)
	r.p.relayOnly = true
	r.write(3, 0, 0, 8, 0, 'a')
	wantLog(t, "refusals", r.log.refusals, fmt.Sprintf("3/0 %d 7", ErrCodeNotRelayed))
	wantLog(t, "completions", r.log.completions, "3/0 "+ErrNotRelayed.Error())
	if r.reg[0] != 0 || r.stats.PayloadBytesPlaced != 0 {
		t.Fatal("a refused WRITE reached memory")
	}
	if !errors.Is(ErrCodeNotRelayed.Err(), ErrNotRelayed) || errCode(ErrNotRelayed) != ErrCodeNotRelayed {
		t.Fatal("ErrCodeNotRelayed and ErrNotRelayed do not map to each other")
	}
}
