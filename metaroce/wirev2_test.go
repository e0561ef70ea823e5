package metaroce

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// goldenVectorsV2 are the packets wire version 2 adds or changes
// (PROTOCOL.md §12 and the version fields of §4), kept in
// testdata/vectors_v2.json beside version 1's.
func goldenVectorsV2() []Vector {
	return []Vector{
		{Name: "data2-write-descriptor", Type: "DATA2", Data2: &DataHeaderV2{Op: OpWrite, Tag: 0x05060708, Path: 5, Seq: 1000, FloorGap: 3, Stream: 2, MsgSeq: 7, Chunk: 2, Desc: true, Key: 0xbeef, Addr: 1 << 20, MsgLen: 10000}, Pay: "deadbeef"},
		{Name: "data2-write", Type: "DATA2", Data2: &DataHeaderV2{Op: OpWrite, Tag: 0x05060708, Path: 6, Seq: 1001, FloorGap: 4, Stream: 2, MsgSeq: 7, Chunk: 3}, Pay: "deadbeef"},
		{Name: "data2-send-retransmit-descriptor", Type: "DATA2", Data2: &DataHeaderV2{Flags: FlagRetransmit, Op: OpSend, Tag: 9, Path: 0, Seq: 0, Stream: 0, MsgSeq: 0, Chunk: 0, Desc: true, Key: 0, Addr: 0xfeed, MsgLen: 3}, Pay: "616263"},
		{Name: "data2-send", Type: "DATA2", Data2: &DataHeaderV2{Op: OpSend, Tag: 9, Path: 1, Seq: 17, FloorGap: 2, Stream: 0, MsgSeq: 0, Chunk: 1}, Pay: "616263"},
		{Name: "data2-descriptor-only", Type: "DATA2", Data2: &DataHeaderV2{Op: OpWrite, Tag: 9, Path: 2, Seq: 40, FloorGap: 1, Stream: 3, MsgSeq: 5, Desc: true, Key: 1, Addr: 4096, MsgLen: 1 << 20}},
		{Name: "data2-empty-message", Type: "DATA2", Data2: &DataHeaderV2{Op: OpWrite, Tag: 9, Path: 1, Seq: 12, FloorGap: 12, Stream: 4, MsgSeq: 3, Desc: true, Key: 1}},
		{Name: "data2-widest-fields", Type: "DATA2", Data2: &DataHeaderV2{Op: OpWrite, Tag: 0xffffffff, Path: 1023, Seq: 0xfffffffe, FloorGap: 1<<24 - 1, Stream: 0xffffffff, MsgSeq: 0xffffffff, Chunk: 0xffffffff, Desc: true, Key: 0xffffffff, Addr: 0xffffffffffffffff, MsgLen: 1 << 40}, Pay: "01"},
		{Name: "init-offers-v1-v2", Type: "INIT", Hs: &Handshake{Conn: 0x1122334455667788, MTU: 1416, Paths: 8, Timestamp: 1000, Offer: 0b11}},
		{Name: "accept-chooses-v2", Type: "ACCEPT", Hs: &Handshake{Conn: 0x1122334455667788, MTU: 1416, Paths: 8, Timestamp: 2000, EchoTimestamp: 1000, RateHintBps: 10_000_000_000, Version: 2}},
		{Name: "version-v1-v2", Type: "VERSION", Ver: &versionFields{Conn: 77, Versions: []uint8{1, 2}}},
	}
}

// TestGoldenVectorsV2 pins wire version 2 as TestGoldenVectors pins 1.
func TestGoldenVectorsV2(t *testing.T) {
	checkGolden(t, "testdata/vectors_v2.json", goldenVectorsV2())
}

// TestDataV2Size: the header is 28 bytes, and with the 28-byte seal
// envelope a datagram's overhead is 56 (the target).
func TestDataV2Size(t *testing.T) {
	h := DataHeaderV2{Op: OpWrite, Tag: 1, Seq: 1, Stream: 1, MsgSeq: 1, Chunk: 1}
	p, err := AppendDataV2(make([]byte, 0, 2000), &h, make([]byte, 1416))
	if err != nil {
		t.Fatal(err)
	}
	if len(p)-1416 != DataHeaderLenV2 || DataHeaderLenV2 != 28 {
		t.Fatalf("header %d bytes, want 28", len(p)-1416)
	}
	const envelope = 28 // netio/seal.Overhead (metaroce may not import it)
	if over := DataHeaderLenV2 + envelope; over > 56 {
		t.Fatalf("overhead %d > 56", over)
	}
	h.Desc, h.MsgLen = true, 1<<20
	p, _ = AppendDataV2(p[:0], &h, nil)
	if len(p) != DataHeaderLenV2+DataDescLen {
		t.Fatalf("descriptor-only DATA %d bytes, want %d", len(p), DataHeaderLenV2+DataDescLen)
	}
}

func TestDecodeDataV2Rejects(t *testing.T) {
	good, _ := AppendDataV2(make([]byte, 0, 200), &DataHeaderV2{Op: OpWrite, Tag: 1, Seq: 5, Desc: true, MsgLen: 4, Key: 1}, []byte("abcd"))
	short, _ := AppendDataV2(make([]byte, 0, 200), &DataHeaderV2{Op: OpWrite, Tag: 1, Seq: 5, Chunk: 9}, []byte("abcd"))
	mutate := func(b []byte, f func(b []byte)) []byte {
		b = append([]byte(nil), b...)
		f(b)
		return b
	}
	cases := map[string]struct {
		b    []byte
		want error
	}{
		"truncated":             {short[:DataHeaderLenV2-1], ErrTruncated},
		"descriptor cut":        {good[:DataHeaderLenV2+DataDescLen-1], ErrTruncated},
		"version 1":             {mutate(good, func(b []byte) { b[0] = 1 }), ErrBadVersion},
		"not DATA":              {mutate(good, func(b []byte) { b[1] = byte(TypeAck) }), ErrBadType},
		"payload past message":  {mutate(good, func(b []byte) { b[45] = 3 }), ErrBadField},
		"chunk past message":    {mutate(good, func(b []byte) { b[27] = 1 }), ErrBadField},
		"message over 2^40":     {mutate(good, func(b []byte) { b[40] = 1 }), ErrBadField},
		"empty chunk not first": {mutate(good[:DataHeaderLenV2+DataDescLen], func(b []byte) { b[27] = 1 }), ErrBadField},
		"oversized payload":     {append(append([]byte(nil), short...), make([]byte, MaxPayload)...), ErrBadLength},
	}
	var h DataHeaderV2
	for name, c := range cases {
		if _, err := DecodeDataV2(c.b, &h); err != c.want {
			t.Errorf("%s: err = %v, want %v", name, err, c.want)
		}
	}
	// Unknown flag bits are ignored (and kept, so the packet re-encodes).
	odd := mutate(short, func(b []byte) { b[2] |= 0x80 })
	if p, err := DecodeDataV2(odd, &h); err != nil || string(p) != "abcd" || h.Flags != 0x80 {
		t.Fatalf("unknown flag bit: %v %q flags %#x", err, p, h.Flags)
	}
	if _, err := AppendDataV2(make([]byte, 0, 200), &DataHeaderV2{Op: OpWrite, FloorGap: 1 << 24}, nil); err != ErrBadField {
		t.Fatalf("floor gap 2^24 encoded: %v", err)
	}
}

// TestUnwrap32: the 64-bit number nearest to what is expected, across the
// 32-bit wrap in both directions (PROTOCOL.md §12).
func TestUnwrap32(t *testing.T) {
	const w = 1 << 32
	cases := []struct {
		expected uint64
		v        uint32
		want     uint64
	}{
		{0, 0, 0},
		{0, 5, 5},
		{0, 0xffffffff, 0xffffffff}, // nothing below 0: the only candidate
		{10, 3, 3},                  // a little behind (a late packet)
		{w - 2, 1, w + 1},           // just past the wrap
		{w + 1, 0xfffffffe, w - 2},  // just before it (reordered)
		{w + 1, 0xffffffff, w - 1},
		{5*w + 7, 7, 5*w + 7},
		{5*w + 7, 1 << 31, 5*w + 1<<31}, // half a window ahead
		{5*w + 1<<31 + 8, 7, 6*w + 7},   // more than half behind: ahead
		{1<<64 - 10, 1, 1<<64 - w + 1},  // no room above: stays below
	}
	for _, c := range cases {
		if got := Unwrap32(c.expected, c.v); got != c.want {
			t.Errorf("Unwrap32(%#x, %#x) = %#x, want %#x", c.expected, c.v, got, c.want)
		}
	}
	// Every sequence within ±2^31 of what is expected comes back exactly.
	for _, e := range []uint64{0, 1 << 20, w - 1, w, w + 1, 7*w - 3, 1 << 40} {
		for _, d := range []int64{-(1 << 31) + 1, -70000, -1, 0, 1, 65535, 1<<24 + 5, 1<<31 - 1} {
			s := int64(e) + d
			if s < 0 {
				continue
			}
			if got := Unwrap32(e, uint32(s)); got != uint64(s) {
				t.Errorf("Unwrap32(%#x, low bits of %#x) = %#x", e, s, got)
			}
		}
	}
}

// TestDataV2RoundTripWrap: a header at and past the 32-bit wrap encodes,
// decodes and unwraps to the 64-bit numbers it was built from.
func TestDataV2RoundTripWrap(t *testing.T) {
	buf := make([]byte, 0, 300)
	for _, seq := range []uint64{0, 1<<32 - 2, 1<<32 - 1, 1 << 32, 1<<32 + 1, 3<<32 + 17} {
		for _, gap := range []uint64{0, 1, 1<<24 - 1} {
			if gap > seq {
				continue
			}
			msg := seq/3 + 1<<32 - 5
			h := DataHeaderV2{Op: OpSend, Tag: 0xabcdef01, Path: 7, Seq: uint32(seq), FloorGap: uint32(gap), Stream: 9, MsgSeq: uint32(msg), Chunk: 4}
			p, err := AppendDataV2(buf, &h, []byte("xy"))
			if err != nil {
				t.Fatal(err)
			}
			var d DataHeaderV2
			pay, err := DecodeDataV2(p, &d)
			if err != nil || d != h || string(pay) != "xy" {
				t.Fatalf("seq %#x: decoded %+v %q %v, want %+v", seq, d, pay, err, h)
			}
			// The receiver expects the packet after its largest; the
			// stream's completion point lags the message a little.
			exp := seq + 1 - min(seq, 3)
			if got := Unwrap32(exp, d.Seq); got != seq {
				t.Fatalf("seq %#x unwraps to %#x", seq, got)
			}
			if got := Unwrap32(msg-2, d.MsgSeq); got != msg {
				t.Fatalf("message seq %#x unwraps to %#x", msg, got)
			}
			if floor := seq - uint64(d.FloorGap); floor != seq-gap {
				t.Fatalf("floor %#x", floor)
			}
		}
	}
}

// TestPeekV2: a version-2 DATA's connection id, as far as Peek can tell, is its tag.
func TestPeekV2(t *testing.T) {
	p, _ := AppendDataV2(make([]byte, 0, 100), &DataHeaderV2{Op: OpWrite, Tag: 0xdeadbeef}, nil)
	v, typ, id, err := Peek(p)
	if err != nil || v != Version2 || typ != TypeData || id != 0xdeadbeef {
		t.Fatalf("Peek = %d %v %#x %v", v, typ, id, err)
	}
	// Any other packet of version 2 (none is defined) has a 64-bit id.
	init, _ := AppendInit(make([]byte, 0, 64), &Handshake{Conn: 0x0102030405060708, MTU: 256, Paths: 1})
	init[0] = Version2
	if _, _, id, _ := Peek(init); id != 0x0102030405060708 {
		t.Fatalf("Peek of a version-2 INIT: id %#x", id)
	}
}

// TestHandshakeVersions: the offer and the choice, and what 0 means.
func TestHandshakeVersions(t *testing.T) {
	var h Handshake
	if !h.Offers(1) || h.Offers(2) || h.Chosen() != 1 {
		t.Fatal("a version-1 INIT/ACCEPT (0) means version 1")
	}
	h.Offer, h.Version = 0b10, 2
	if h.Offers(1) || !h.Offers(2) || h.Chosen() != 2 || h.Offers(0) || h.Offers(9) {
		t.Fatal("offer 0b10 is version 2 only")
	}
	b, _ := AppendInit(make([]byte, 0, 64), &Handshake{Conn: 1, MTU: 256, Paths: 1, Offer: 3})
	var d Handshake
	if err := DecodeHandshake(b, TypeInit, &d); err != nil || d.Offer != 3 || b[2] != 3 {
		t.Fatalf("INIT offer: %v %+v", err, d)
	}
	b, _ = AppendAccept(make([]byte, 0, 64), &Handshake{Conn: 1, MTU: 256, Paths: 1, Version: 2})
	if err := DecodeHandshake(b, TypeAccept, &d); err != nil || d.Version != 2 || b[3] != 2 || d.Offer != 0 {
		t.Fatalf("ACCEPT version: %v %+v", err, d)
	}
}

func TestWireV2Allocs(t *testing.T) {
	buf := make([]byte, 0, 9000)
	payload := bytes.Repeat([]byte{7}, 4096)
	h := DataHeaderV2{Op: OpWrite, Tag: 1, Seq: 9, Chunk: 1, Desc: true, MsgLen: 1 << 20, Key: 3}
	var hd DataHeaderV2
	allocs := testing.AllocsPerRun(1000, func() {
		p, _ := AppendDataV2(buf, &h, payload)
		_, _ = DecodeDataV2(p, &hd)
		_ = Unwrap32(1<<33, hd.Seq)
	})
	if allocs != 0 {
		t.Fatalf("version-2 encode/decode allocates %.1f times per packet", allocs)
	}
}

// FuzzDecodeV2 feeds arbitrary bytes to the version-2 DATA decoder (and the
// handshake decoders, whose version fields are new): none may panic, a
// packet that decodes re-encodes to the same bytes, and what it carries
// stays inside the limits of PROTOCOL.md §12. The seeds (the version-2
// golden vectors and broken variants) run with every go test.
func FuzzDecodeV2(f *testing.F) {
	for _, v := range goldenVectorsV2() {
		b := encodeVector(f, &v)
		f.Add(b)
		f.Add(b[:len(b)/2])
		c := append([]byte(nil), b...)
		c[2] ^= 0xff
		f.Add(c)
		c = append([]byte(nil), b...)
		c[len(c)-1] ^= 0xff
		f.Add(c)
	}
	f.Add([]byte{2, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		var h DataHeaderV2
		if p, err := DecodeDataV2(b, &h); err == nil {
			if h.FloorGap > maxFloorGapV2 || h.MsgLen > MaxMessageLen || len(p) > MaxPayload || len(b) != h.Len()+len(p) {
				t.Fatalf("decoded out of range: %+v", h)
			}
			if h.Desc && len(p) > 0 && uint64(len(p)) > h.MsgLen {
				t.Fatalf("payload beyond its message: %+v", h)
			}
			out, err := AppendDataV2(make([]byte, 0, len(b)), &h, p)
			if err != nil || !bytes.Equal(out, b) {
				t.Fatalf("DATA2 does not round-trip: %v", err)
			}
			if v, typ, id, err := Peek(b); err != nil || v != Version2 || typ != TypeData || id != uint64(h.Tag) {
				t.Fatalf("Peek disagrees: %d %v %d %v", v, typ, id, err)
			}
		}
		var hs Handshake
		for _, typ := range []PacketType{TypeInit, TypeAccept} {
			if err := DecodeHandshake(b, typ, &hs); err == nil {
				enc := AppendInit
				if typ == TypeAccept {
					enc = AppendAccept
				}
				out, err := enc(make([]byte, 0, len(b)), &hs)
				// Byte 2 of ACCEPT and byte 3 of INIT are not kept.
				if err != nil || len(out) != len(b) || !bytes.Equal(out[4:], b[4:]) || out[0] != b[0] || out[1] != b[1] {
					t.Fatalf("%v does not round-trip: %v", typ, err)
				}
			}
		}
	})
}

// TestEncodeDataV2IsAppendDataV2: the sender's encoder writes exactly the
// bytes AppendDataV2 writes for the header it describes, and refuses what
// AppendDataV2 refuses, over random messages, sequences, flags and
// payload sizes (with and without descriptor, at the limits of each field).
func TestEncodeDataV2IsAppendDataV2(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	src := make([]byte, MaxPayload+1)
	for i := range src {
		src[i] = byte(i * 7)
	}
	c := &Conn{}
	for i := range 10000 {
		c.id = rng.Uint64()
		m := &txMessage{stream: &txStream{id: rng.Uint32()}, seq: rng.Uint64(), op: Op(rng.IntN(3) + 1),
			key: rng.Uint32(), addr: rng.Uint64(), length: rng.Uint64N(2 << 40)}
		ref := chunkRef{msg: m, idx: int(rng.Uint32())}
		path := rng.IntN(1 << 16)
		seq := rng.Uint64()
		floor := seq - rng.Uint64N(1<<25)
		payload := src[:rng.IntN(len(src)+1)]
		retransmit, desc := rng.IntN(2) == 0, rng.IntN(2) == 0
		if i%4 == 0 { // mostly inside the limits
			m.op, m.length, floor, payload = OpWrite, m.length%(1<<40), seq-rng.Uint64N(1<<24), payload[:min(len(payload), MaxPayload)]
		}
		h := DataHeaderV2{Op: m.op, Tag: uint32(c.id), Path: uint16(path), Seq: uint32(seq), FloorGap: uint32(seq - floor),
			Stream: m.stream.id, MsgSeq: uint32(m.seq), Chunk: uint32(ref.idx), Desc: desc}
		if desc {
			h.Key, h.Addr, h.MsgLen = m.key, m.addr, m.length
		}
		if retransmit {
			h.Flags = FlagRetransmit
		}
		size := DataHeaderLenV2 + DataDescLen + len(payload) - rng.IntN(DataDescLen+2)
		want, werr := AppendDataV2(make([]byte, 0, size), &h, payload)
		got, gerr := c.encodeDataV2(make([]byte, 0, size), path, seq, floor, ref, payload, retransmit, desc, false)
		if gerr != werr || werr == nil && !bytes.Equal(got, want) {
			t.Fatalf("header %+v, payload %d, buffer %d: encodeDataV2 gave %x, %v; AppendDataV2 %x, %v",
				h, len(payload), size, got[:min(len(got), 48)], gerr, want[:min(len(want), 48)], werr)
		}
	}
}
