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
		{Type: Register, Endpoint: "h2", Region: "us-east", Instance: 9, Flags: FlagTakeover, KeyID: "k1", Time: 1700000000, MAC: make([]byte, MACLen)},
		{Type: RegisterErr, Code: CodeDuplicate, Reason: "in use"},
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
		// A REGISTER's tail is optional: cut right before it, it is a v1
		// REGISTER, and a byte after a v1 REGISTER starts a (truncated) tail.
		v1 := -1
		if m.Type == Register {
			v1 = 2 + 1 + len(m.Endpoint) + 1 + len(m.Region)
		}
		for i := 0; i < len(b); i++ {
			if _, err := Decode(b[:i]); err == nil && i != v1 {
				t.Fatalf("%v: truncated to %d bytes decodes", m.Type, i)
			}
		}
		if _, err := Decode(append(b, 0)); err != ErrTrailing && (m.Type != Register || err == nil) {
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

// TestRegisterMAC: the MAC binds every field and the connection.
func TestRegisterMAC(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	m := Msg{Type: Register, Endpoint: "trainer-0", Region: "eu", Instance: 5, KeyID: "k1", Time: 1700000000}
	m.MAC = RegisterMAC(key, &m, 77)
	if !CheckRegisterMAC(key, &m, 77) {
		t.Fatal("own MAC refused")
	}
	b, err := Append(nil, &m)
	if err != nil {
		t.Fatal(err)
	}
	d, err := Decode(b)
	if err != nil || !CheckRegisterMAC(key, &d, 77) {
		t.Fatalf("MAC after a round trip: %v", err)
	}
	for name, edit := range map[string]func(*Msg){
		"endpoint": func(x *Msg) { x.Endpoint = "trainer-1" },
		"takeover": func(x *Msg) { x.Flags = FlagTakeover },
		"time":     func(x *Msg) { x.Time++ },
		"key id":   func(x *Msg) { x.KeyID = "k2" },
	} {
		x := d
		edit(&x)
		if CheckRegisterMAC(key, &x, 77) {
			t.Errorf("MAC still valid with another %s", name)
		}
	}
	if CheckRegisterMAC(key, &d, 78) {
		t.Error("MAC valid on another connection")
	}
}
