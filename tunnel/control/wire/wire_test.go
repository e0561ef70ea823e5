package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net/netip"
	"reflect"
	"strings"
	"testing"
)

func sampleMessages() []Message {
	h := Hello{
		Version: ProtocolVersion, Name: "gw-a1", Region: "eu-west",
		Capabilities: []string{"ecn", "gso"},
		Planes: []netip.AddrPort{
			netip.MustParseAddrPort("10.0.0.1:4791"),
			netip.MustParseAddrPort("[2001:db8::1]:4792"),
		},
		NumPaths: 64,
	}
	return []Message{
		h,
		HelloAck{Hello{Version: 1, Name: "gw-b1", Region: "us-east", NumPaths: 8}},
		PathSetup{Seq: 7, Paths: []Path{{1, 50001}, {2, 50002}}},
		PathSetupAck{Seq: 7, IDs: []uint16{1, 2}},
		KeyUpdate{Epoch: 3},
		KeyUpdateAck{Epoch: 3},
		Ping{Seq: 1<<63 + 5},
		Pong{Seq: 42},
		Drain{},
		DrainAck{},
	}
}

func TestRoundTrip(t *testing.T) {
	var stream []byte
	for _, m := range sampleMessages() {
		b, err := Append(nil, m)
		if err != nil {
			t.Fatalf("%v: %v", m.Type(), err)
		}
		got, n, err := Decode(b)
		if err != nil || n != len(b) {
			t.Fatalf("%v: Decode = %v, %d of %d", m.Type(), err, n, len(b))
		}
		if !reflect.DeepEqual(got, m) {
			t.Fatalf("%v: got %#v want %#v", m.Type(), got, m)
		}
		stream = append(stream, b...)
	}
	// The same messages back to back through Read, then a clean EOF.
	r := bytes.NewReader(stream)
	for _, m := range sampleMessages() {
		got, err := Read(r)
		if err != nil || !reflect.DeepEqual(got, m) {
			t.Fatalf("Read = %#v, %v; want %#v", got, err, m)
		}
	}
	if _, err := Read(r); err != io.EOF {
		t.Fatalf("after last frame: %v, want io.EOF", err)
	}
}

// TestByteLayout pins the documented layout of two frames byte by byte.
func TestByteLayout(t *testing.T) {
	b, err := Append(nil, KeyUpdate{Epoch: 0x01020304})
	if err != nil {
		t.Fatal(err)
	}
	want := []byte{1, 0x05, 0, 0, 0, 4, 1, 2, 3, 4}
	if !bytes.Equal(b, want) {
		t.Fatalf("KeyUpdate = % x, want % x", b, want)
	}
	b, err = Append(nil, Hello{Version: 1, Name: "a", Region: "r", Capabilities: []string{"x"},
		Planes: []netip.AddrPort{netip.MustParseAddrPort("1.2.3.4:258")}, NumPaths: 3})
	if err != nil {
		t.Fatal(err)
	}
	want = []byte{1, 0x01, 0, 0, 0, 19,
		0, 1, // version
		1, 'a', 1, 'r', // name, region
		1, 1, 'x', // capabilities
		1, 4, 1, 2, 3, 4, 1, 2, // one plane: 1.2.3.4:258
		0, 3, // paths
	}
	if !bytes.Equal(b, want) {
		t.Fatalf("Hello = % x\nwant    % x", b, want)
	}
}

func TestOversizeRejected(t *testing.T) {
	h := []byte{1, byte(TypePing), 0, 0, 0, 0}
	binary.BigEndian.PutUint32(h[2:], MaxPayload+1)
	if _, _, err := Decode(h); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("Decode: %v, want ErrTooLarge", err)
	}
	// Read must refuse from the header alone, before reading a payload that
	// is not even there.
	if _, err := Read(bytes.NewReader(h)); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("Read: %v, want ErrTooLarge", err)
	}
	binary.BigEndian.PutUint32(h[2:], 0xffffffff)
	if _, err := Read(bytes.NewReader(h)); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("Read 4 GiB: %v, want ErrTooLarge", err)
	}
	// The encoder refuses to build such a frame too.
	big := PathSetupAck{IDs: make([]uint16, MaxPaths+1)}
	if _, err := Append(nil, big); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Append too many paths: %v", err)
	}
	if _, err := Append(nil, Hello{Name: strings.Repeat("n", 256)}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Append long name: %v", err)
	}
	if _, err := Append(nil, Hello{Planes: []netip.AddrPort{{}}}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Append zero address: %v", err)
	}
}

func TestTruncatedRejected(t *testing.T) {
	for _, m := range sampleMessages() {
		b, err := Append(nil, m)
		if err != nil {
			t.Fatal(err)
		}
		for cut := 1; cut < len(b); cut++ {
			if _, _, err := Decode(b[:cut]); !errors.Is(err, ErrTruncated) {
				t.Fatalf("%v cut at %d: Decode %v, want ErrTruncated", m.Type(), cut, err)
			}
			if _, err := Read(bytes.NewReader(b[:cut])); !errors.Is(err, ErrTruncated) {
				t.Fatalf("%v cut at %d: Read %v, want ErrTruncated", m.Type(), cut, err)
			}
		}
	}
}

func TestMalformedRejected(t *testing.T) {
	frame := func(t Type, p ...byte) []byte {
		b := []byte{FrameVersion, byte(t), 0, 0, 0, 0}
		binary.BigEndian.PutUint32(b[2:], uint32(len(p)))
		return append(b, p...)
	}
	cases := []struct {
		name string
		b    []byte
		want error
	}{
		{"version 2", []byte{2, byte(TypePing), 0, 0, 0, 0}, ErrVersion},
		{"unknown type", frame(0x7f), ErrUnknownType},
		{"type zero", frame(0), ErrUnknownType},
		{"trailing bytes", frame(TypeDrain, 0), ErrMalformed},
		{"ping too short", frame(TypePing, 1, 2, 3), ErrMalformed},
		{"hello name overruns", frame(TypeHello, 0, 1, 9, 'a'), ErrMalformed},
		{"hello bad addr len", frame(TypeHello, 0, 1, 0, 0, 0, 1, 5, 1, 2, 3, 4, 5, 0, 1, 0, 0), ErrMalformed},
		{"hello mapped v4", frame(TypeHello, append(append([]byte{0, 1, 0, 0, 0, 1, 16},
			netip.MustParseAddr("::ffff:1.2.3.4").AsSlice()...), 0, 1, 0, 0)...), ErrMalformed},
		{"too many caps", frame(TypeHello, 0, 1, 0, 0, MaxCapabilities+1), ErrMalformed},
		{"pathsetup count lies", frame(TypePathSetup, 0, 0, 0, 1, 0, 2, 0, 1, 0, 2), ErrMalformed},
	}
	for _, tc := range cases {
		if _, _, err := Decode(tc.b); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
}

// FuzzDecode feeds arbitrary bytes to the decoder. It must never panic, and
// whatever it accepts must re-encode to exactly the bytes it consumed (one
// encoding per message, so no two gateways can read one frame differently).
func FuzzDecode(f *testing.F) {
	for _, m := range sampleMessages() {
		b, err := Append(nil, m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		f.Add(b[:len(b)/2])
	}
	f.Add([]byte{})
	f.Add([]byte{1, 1, 0, 0, 0x40, 0x01})
	f.Add([]byte{1, 0x0a, 0, 0, 0, 1, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, n, err := Decode(b)
		mr, rerr := Read(bytes.NewReader(b))
		if (err == nil) != (rerr == nil) {
			t.Fatalf("Decode err %v but Read err %v", err, rerr)
		}
		if err != nil {
			return
		}
		if !reflect.DeepEqual(m, mr) {
			t.Fatalf("Decode %#v != Read %#v", m, mr)
		}
		out, err := Append(nil, m)
		if err != nil {
			t.Fatalf("re-encode %#v: %v", m, err)
		}
		if !bytes.Equal(out, b[:n]) {
			t.Fatalf("re-encoded % x, consumed % x", out, b[:n])
		}
	})
}
