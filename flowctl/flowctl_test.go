package flowctl

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
)

func samples() []Msg {
	return []Msg{
		{Type: Register, Endpoint: "h2", Region: "us-east"},
		{Type: RegisterOK},
		{Type: Open, Flow: 0x0102030405060708, Stream: 7, Resume: 42, SrcRegion: "eu-west", SrcEndpoint: "h1", DstRegion: "us-east", DstEndpoint: "h2", Class: "gold"},
		{Type: OpenOK, Flow: 9, Credit: 64 << 20},
		{Type: OpenErr, Flow: 9, Code: CodeRegionUnreachable, Reason: "us-east: all gateways dead"},
		{Type: Done, Flow: 9, Below: 1000},
		{Type: Reset, Flow: 9, Code: CodeRouteLost, Reason: "use-gw1 died"},
		{Type: Close, Flow: 9},
		{Type: Ping, Seq: 5},
		{Type: Pong, Seq: 5},
	}
}

func TestRoundTrip(t *testing.T) {
	for _, m := range samples() {
		b, err := Append(nil, &m)
		if err != nil {
			t.Fatalf("%v: %v", m.Type, err)
		}
		got, err := Decode(b)
		if err != nil {
			t.Fatalf("%v: decode: %v", m.Type, err)
		}
		if !reflect.DeepEqual(got, m) {
			t.Fatalf("%v: round trip\n got  %+v\n want %+v", m.Type, got, m)
		}
		for i := 0; i < len(b); i++ {
			if _, err := Decode(b[:i]); err == nil {
				t.Fatalf("%v: truncated to %d bytes decodes", m.Type, i)
			}
		}
		if _, err := Decode(append(b, 0)); err != ErrTrailing {
			t.Fatalf("%v: trailing byte: %v", m.Type, err)
		}
	}
}

func TestPinnedEncoding(t *testing.T) {
	b, _ := Append(nil, &Msg{Type: Done, Flow: 1, Below: 2})
	want := []byte{1, 6, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 2}
	if !bytes.Equal(b, want) {
		t.Fatalf("DONE encodes as %x, want %x", b, want)
	}
}

func TestRejects(t *testing.T) {
	if _, err := Append(nil, &Msg{Type: Register, Endpoint: strings.Repeat("x", 256)}); err != ErrString {
		t.Fatalf("long string: %v", err)
	}
	if _, err := Append(nil, &Msg{Type: Register, Endpoint: "\xff"}); err != ErrString {
		t.Fatalf("invalid UTF-8: %v", err)
	}
	long := strings.Repeat("x", 200)
	if _, err := Append(nil, &Msg{Type: Open, SrcRegion: long, SrcEndpoint: long, DstRegion: long}); err != ErrTooLong {
		t.Fatalf("oversized open: %v", err)
	}
	if _, err := Append(nil, &Msg{Type: 99}); err != ErrType {
		t.Fatalf("unknown type: %v", err)
	}
	if _, err := Decode([]byte{2, 1}); err != ErrVersion {
		t.Fatalf("version: %v", err)
	}
	if _, err := Decode([]byte{1, 99}); err != ErrType {
		t.Fatalf("type: %v", err)
	}
	if _, err := Decode([]byte{1, 1, 1, 0xff, 0}); err != ErrString {
		t.Fatalf("invalid UTF-8: %v", err)
	}
}

func FuzzDecode(f *testing.F) {
	for _, m := range samples() {
		b, _ := Append(nil, &m)
		f.Add(b)
		f.Add(b[:len(b)/2])
	}
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Decode(b)
		if err != nil {
			return
		}
		out, err := Append(nil, &m)
		if err != nil {
			t.Fatalf("decoded message does not encode: %v", err)
		}
		if !bytes.Equal(out, b) {
			t.Fatalf("re-encoding differs:\n in  %x\n out %x", b, out)
		}
	})
}
