package metaroce

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"flag"
	"os"
	"reflect"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/vectors.json from the encoders")

// Vector is one golden packet: its bytes and their decoded meaning. The
// conformance suite reads the same file.
type Vector struct {
	Name string      `json:"name"`
	Type string      `json:"type"`
	Hex  string      `json:"hex"`
	Data *DataHeader `json:"data,omitempty"`
	// Data2 is a version-2 DATA (type "DATA2", vectors_v2.json).
	Data2 *DataHeaderV2  `json:"data2,omitempty"`
	Pay   string         `json:"payload_hex,omitempty"`
	Ack   *Ack           `json:"ack,omitempty"`
	Hs    *Handshake     `json:"handshake,omitempty"`
	Cl    *closeFields   `json:"close,omitempty"`
	Pr    *probeFields   `json:"probe,omitempty"`
	Err   *MessageError  `json:"error,omitempty"`
	Ver   *versionFields `json:"version,omitempty"`
}

type closeFields struct {
	Conn   uint64
	Reason CloseReason
	Ack    bool
}

type probeFields struct {
	Conn      uint64
	Path      uint16
	Timestamp uint64
}

type versionFields struct {
	Conn     uint64
	Versions []uint8
}

func goldenVectors() []Vector {
	ack := &Ack{Conn: 0x0102030405060708, Path: 3, Cum: 100, Largest: 104, EchoTimestamp: 5_000_001, CECount: 2, RxCount: 50, RateHintBps: 25_000_000_000, NStreams: 2}
	ack.Sack[0] = 0b0001_1010 // 101, 103, 104 received (base = Cum = 100)
	ack.Streams[0] = StreamAck{Stream: 1, Completed: 7}
	ack.Streams[1] = StreamAck{Stream: 9, Completed: 1}
	wide := &Ack{Conn: 42, Path: 0, Cum: 10, Largest: 1000, EchoTimestamp: 77, CECount: 0, RxCount: 900}
	wide.Sack[31] = 0x80 // bit 255 = Largest; base = 745
	return []Vector{
		{Name: "data-write", Type: "DATA", Data: &DataHeader{Op: OpWrite, Conn: 0x0102030405060708, Path: 5, Stream: 2, Seq: 1000, FloorGap: 3, MsgSeq: 7, MsgLen: 10000, Offset: 8192, Key: 0xbeef, Addr: 1 << 20, Timestamp: 123456789}, Pay: "deadbeef"},
		{Name: "data-send-retransmit", Type: "DATA", Data: &DataHeader{Flags: FlagRetransmit, Op: OpSend, Conn: 9, Path: 0, Stream: 0, Seq: 0, MsgSeq: 0, MsgLen: 3, Offset: 0, Key: 0, Addr: 0xfeed, Timestamp: 1}, Pay: "616263"},
		{Name: "data-empty-message", Type: "DATA", Data: &DataHeader{Op: OpWrite, Conn: 9, Path: 1, Stream: 4, Seq: 12, FloorGap: 12, MsgSeq: 3, MsgLen: 0, Key: 1, Addr: 0, Timestamp: 2}},
		{Name: "ack-sack-streams", Type: "ACK", Ack: ack},
		{Name: "ack-window-at-largest", Type: "ACK", Ack: wide},
		{Name: "init", Type: "INIT", Hs: &Handshake{Conn: 77, MTU: 4096, Paths: 16, Timestamp: 1000}},
		{Name: "accept", Type: "ACCEPT", Hs: &Handshake{Conn: 77, MTU: 1400, Paths: 8, Timestamp: 2000, EchoTimestamp: 1000, RateHintBps: 100_000_000_000}},
		{Name: "close", Type: "CLOSE", Cl: &closeFields{Conn: 77, Reason: CloseNormal}},
		{Name: "close-ack", Type: "CLOSE", Cl: &closeFields{Conn: 77, Reason: CloseNormal, Ack: true}},
		{Name: "close-refused", Type: "CLOSE", Cl: &closeFields{Conn: 78, Reason: CloseRefused}},
		{Name: "probe", Type: "PROBE", Pr: &probeFields{Conn: 77, Path: 6, Timestamp: 99}},
		{Name: "probe-ack", Type: "PROBE_ACK", Pr: &probeFields{Conn: 77, Path: 6, Timestamp: 99}},
		{Name: "error-unknown-key", Type: "ERROR", Err: &MessageError{Conn: 77, Stream: 3, MsgSeq: 12, Code: ErrCodeUnknownKey}},
		{Name: "version", Type: "VERSION", Ver: &versionFields{Conn: 77, Versions: []uint8{1}}},
	}
}

// encodeVector encodes a vector's fields.
func encodeVector(t testing.TB, v *Vector) []byte {
	t.Helper()
	b := make([]byte, 0, 70000)
	var err error
	switch v.Type {
	case "DATA":
		p, _ := hex.DecodeString(v.Pay)
		b, err = AppendData(b, v.Data, p)
	case "DATA2":
		p, _ := hex.DecodeString(v.Pay)
		b, err = AppendDataV2(b, v.Data2, p)
	case "ACK":
		b, err = AppendAck(b, v.Ack)
	case "INIT":
		b, err = AppendInit(b, v.Hs)
	case "ACCEPT":
		b, err = AppendAccept(b, v.Hs)
	case "CLOSE":
		b, err = AppendClose(b, v.Cl.Conn, v.Cl.Reason, v.Cl.Ack)
	case "PROBE":
		b, err = AppendProbe(b, TypeProbe, v.Pr.Conn, v.Pr.Path, v.Pr.Timestamp)
	case "PROBE_ACK":
		b, err = AppendProbe(b, TypeProbeAck, v.Pr.Conn, v.Pr.Path, v.Pr.Timestamp)
	case "ERROR":
		b, err = AppendError(b, v.Err)
	case "VERSION":
		b, err = AppendVersion(b, v.Ver.Conn, v.Ver.Versions)
	default:
		t.Fatalf("unknown vector type %q", v.Type)
	}
	if err != nil {
		t.Fatalf("%s: encode: %v", v.Name, err)
	}
	return b
}

// decodeVector decodes b as v's type into a fresh vector.
func decodeVector(t testing.TB, typ string, b []byte) Vector {
	t.Helper()
	out := Vector{Type: typ}
	var err error
	switch typ {
	case "DATA":
		var h DataHeader
		var p []byte
		p, err = DecodeData(b, &h)
		out.Data, out.Pay = &h, hex.EncodeToString(p)
	case "DATA2":
		var h DataHeaderV2
		var p []byte
		p, err = DecodeDataV2(b, &h)
		out.Data2, out.Pay = &h, hex.EncodeToString(p)
	case "ACK":
		var a Ack
		err = DecodeAck(b, &a)
		out.Ack = &a
	case "INIT", "ACCEPT":
		var h Handshake
		pt := TypeInit
		if typ == "ACCEPT" {
			pt = TypeAccept
		}
		err = DecodeHandshake(b, pt, &h)
		out.Hs = &h
	case "CLOSE":
		var c closeFields
		c.Conn, c.Reason, c.Ack, err = DecodeClose(b)
		out.Cl = &c
	case "PROBE", "PROBE_ACK":
		var p probeFields
		pt := TypeProbe
		if typ == "PROBE_ACK" {
			pt = TypeProbeAck
		}
		p.Conn, p.Path, p.Timestamp, err = DecodeProbe(b, pt)
		out.Pr = &p
	case "ERROR":
		var e MessageError
		err = DecodeError(b, &e)
		out.Err = &e
	case "VERSION":
		var v versionFields
		var vs []uint8
		v.Conn, vs, err = DecodeVersion(b)
		v.Versions = append([]uint8(nil), vs...)
		out.Ver = &v
	}
	if err != nil {
		t.Fatalf("decode %s: %v", typ, err)
	}
	return out
}

// TestGoldenVectors pins the wire format: every packet type's bytes must match
// testdata/vectors.json exactly, and decode back to the same fields.
func TestGoldenVectors(t *testing.T) {
	checkGolden(t, "testdata/vectors.json", goldenVectors())
}

// checkGolden compares the encodings of vs with the file at path (and
// rewrites it with -update).
func checkGolden(t *testing.T, path string, vs []Vector) {
	for i := range vs {
		vs[i].Hex = hex.EncodeToString(encodeVector(t, &vs[i]))
	}
	if *update {
		js, _ := json.MarshalIndent(vs, "", "  ")
		if err := os.WriteFile(path, append(js, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -run TestGoldenVectors -update to create it)", err)
	}
	var golden []Vector
	if err := json.Unmarshal(raw, &golden); err != nil {
		t.Fatal(err)
	}
	if len(golden) != len(vs) {
		t.Fatalf("golden file has %d vectors, encoders produce %d", len(golden), len(vs))
	}
	for i, g := range golden {
		if g.Hex != vs[i].Hex {
			t.Errorf("%s: encoding changed:\n got  %s\n want %s", g.Name, vs[i].Hex, g.Hex)
		}
		b, _ := hex.DecodeString(g.Hex)
		d := decodeVector(t, g.Type, b)
		d.Name, d.Hex = g.Name, g.Hex
		if (g.Type == "DATA" || g.Type == "DATA2") && g.Pay == "" {
			d.Pay = ""
		}
		if !reflect.DeepEqual(d, g) {
			dj, _ := json.Marshal(d)
			gj, _ := json.Marshal(g)
			t.Errorf("%s: decoded fields differ:\n got  %s\n want %s", g.Name, dj, gj)
		}
	}
}

func TestAckSackBase(t *testing.T) {
	a := Ack{Cum: 10, Largest: 1000}
	if got := a.SackBase(); got != 745 {
		t.Fatalf("SackBase = %d, want 745 (window ends at Largest)", got)
	}
	a = Ack{Cum: 10, Largest: 100}
	if got := a.SackBase(); got != 10 {
		t.Fatalf("SackBase = %d, want 10 (never below Cum)", got)
	}
	a.Sack[0] = 1 << 3
	if !a.Acked(13) || a.Acked(12) || !a.Acked(9) || a.Acked(10) || a.Acked(10+SackBits) {
		t.Fatal("Acked disagrees with the bitvector")
	}
}

func TestDecodeRejects(t *testing.T) {
	good, _ := AppendData(make([]byte, 0, 200), &DataHeader{Op: OpWrite, Conn: 1, Seq: 5, MsgLen: 4, Key: 1}, []byte("abcd"))
	var h DataHeader
	mutate := func(f func(b []byte) []byte) []byte {
		b := append([]byte(nil), good...)
		return f(b)
	}
	cases := map[string]struct {
		b    []byte
		want error
	}{
		"truncated":        {good[:DataHeaderLen-1], ErrTruncated},
		"payload cut":      {good[:len(good)-1], ErrBadLength},
		"oversized":        {append(append([]byte(nil), good...), 0), ErrBadLength},
		"wrong version":    {mutate(func(b []byte) []byte { b[0] = 2; return b }), ErrBadVersion},
		"wrong type":       {mutate(func(b []byte) []byte { b[1] = byte(TypeAck); return b }), ErrBadType},
		"bad op":           {mutate(func(b []byte) []byte { b[3] = 9; return b }), ErrBadField},
		"floor above seq":  {mutate(func(b []byte) []byte { be.PutUint32(b[28:], 6); return b }), ErrBadField},
		"payload past msg": {mutate(func(b []byte) []byte { be.PutUint64(b[48:], 2); return b }), ErrBadField},
	}
	for name, c := range cases {
		if _, err := DecodeData(c.b, &h); err != c.want {
			t.Errorf("%s: err = %v, want %v", name, err, c.want)
		}
	}
	ack, _ := AppendAck(make([]byte, 0, 200), &Ack{Conn: 1, NStreams: 1})
	ack[3] = MaxAckStreams + 1
	var a Ack
	if err := DecodeAck(ack, &a); err != ErrBadField {
		t.Errorf("ack with too many streams: %v", err)
	}
}

// TestWireAllocs checks that encoding and decoding the hot-path packets
// allocate nothing.
func TestWireAllocs(t *testing.T) {
	buf := make([]byte, 0, 9000)
	payload := bytes.Repeat([]byte{7}, 4096)
	h := DataHeader{Op: OpWrite, Conn: 1, Seq: 9, MsgLen: 1 << 20, Offset: 4096, Key: 3}
	a := Ack{Conn: 1, Cum: 5, Largest: 300, NStreams: 3}
	var hd DataHeader
	var ad Ack
	allocs := testing.AllocsPerRun(1000, func() {
		p, _ := AppendData(buf, &h, payload)
		_, _ = DecodeData(p, &hd)
		q, _ := AppendAck(buf, &a)
		_ = DecodeAck(q, &ad)
	})
	if allocs != 0 {
		t.Fatalf("encode/decode allocates %.1f times per packet", allocs)
	}
}

func BenchmarkEncodeDecodeData(b *testing.B) {
	buf := make([]byte, 0, 9000)
	payload := bytes.Repeat([]byte{7}, 4096)
	h := DataHeader{Op: OpWrite, Conn: 1, Seq: 9, MsgLen: 1 << 20, Offset: 4096, Key: 3}
	var hd DataHeader
	b.SetBytes(int64(len(payload)))
	b.ReportAllocs()
	for b.Loop() {
		p, _ := AppendData(buf, &h, payload)
		_, _ = DecodeData(p, &hd)
	}
}

// fuzzSeeds are the golden vectors plus broken variants, so that every fuzz
// target starts from each packet type.
func fuzzSeeds(f *testing.F) {
	for _, v := range goldenVectors() {
		b := encodeVector(f, &v)
		f.Add(b)
		f.Add(b[:len(b)/2])
		c := append([]byte(nil), b...)
		c[len(c)-1] ^= 0xff
		f.Add(c)
	}
	f.Add([]byte{})
	f.Add([]byte{1})
}

// FuzzDecode feeds arbitrary bytes to every decoder: none may panic, and a
// packet that decodes must re-encode to the same bytes.
func FuzzDecode(f *testing.F) {
	fuzzSeeds(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		buf := make([]byte, 0, len(b)+100)
		var h DataHeader
		if p, err := DecodeData(b, &h); err == nil {
			out, err := AppendData(buf, &h, p)
			if err != nil || !bytes.Equal(out, b) {
				t.Fatalf("DATA does not round-trip: %v", err)
			}
		}
		var a Ack
		if err := DecodeAck(b, &a); err == nil {
			out, err := AppendAck(buf, &a)
			// Byte 14-15 is reserved and not kept; compare the rest.
			if err != nil || !bytes.Equal(out[:14], b[:14]) || !bytes.Equal(out[16:], b[16:]) {
				t.Fatalf("ACK does not round-trip: %v", err)
			}
		}
		var hs Handshake
		_ = DecodeHandshake(b, TypeInit, &hs)
		_ = DecodeHandshake(b, TypeAccept, &hs)
		_, _, _, _ = DecodeClose(b)
		_, _, _, _ = DecodeProbe(b, TypeProbe)
		_, _, _, _ = DecodeProbe(b, TypeProbeAck)
		var e MessageError
		_ = DecodeError(b, &e)
		_, _, _ = DecodeVersion(b)
		_, _, _, _ = Peek(b)
	})
}
