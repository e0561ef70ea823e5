package filecopy

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// seedMsgs holds one message of every type, with fields set.
func seedMsgs() []msg {
	var sum [32]byte
	for i := range sum {
		sum[i] = byte(i)
	}
	return []msg{
		{Type: tHello, Version: protocolVersion, Size: 4 << 20, Count: 3, Path: "ckpt/run1"},
		{Type: tHelloOK, Version: protocolVersion, Window: 64 << 20, MaxWin: 4, InlineMax: 256 << 10},
		{Type: tEntry, Idx: 2, Kind: kindFile, Mode: 0o644, Size: 1 << 40, DataBytes: 1 << 30, Mtime: -5, Path: "a/b/c.bin"},
		{Type: tManifestEnd, Count: 3},
		{Type: tHave, Idx: 1, Kind: havePartial, Bytes: []byte{0xff, 0x01}},
		{Type: tInline, Idx: 0, Sum: sum, Bytes: []byte("small file")},
		{Type: tOpen, Idx: 7},
		{Type: tMap, Idx: 7, N: 3, Mask: 0xf0f0},
		{Type: tMapped, Idx: 7, N: 3, Key: 12345},
		{Type: tZero, Idx: 7, N: 10, Count: 100},
		{Type: tChunk, Idx: 7, N: 11, CRC: 0xdeadbeef},
		{Type: tChunkAck, Idx: 7, N: 11, OK: true},
		{Type: tUnmap, Idx: 7, N: 3},
		{Type: tFileEnd, Idx: 7, Sum: sum},
		{Type: tFileDone, Idx: 7, OK: false, Sum: sum, Text: "SHA-256 differs"},
		{Type: tEnd},
		{Type: tBye, Count: 9},
		{Type: tError, Code: codeNotAllowed, Idx: 1, Text: "path not allowed"},
		{Type: tPing},
	}
}

// TestMessagesRoundTrip: every message type decodes to what was encoded.
func TestMessagesRoundTrip(t *testing.T) {
	var all []byte
	for _, m := range seedMsgs() {
		all = appendMsg(all, &m)
	}
	got, err := decodeFrames(all)
	if err != nil {
		t.Fatal(err)
	}
	want := seedMsgs()
	if len(got) != len(want) {
		t.Fatalf("%d messages, want %d", len(got), len(want))
	}
	for i := range want {
		if want[i].Bytes == nil && got[i].Bytes != nil && len(got[i].Bytes) == 0 {
			got[i].Bytes = nil
		}
		if !reflect.DeepEqual(got[i], want[i]) {
			t.Fatalf("message %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	if len(layouts) != len(want) {
		t.Fatalf("%d layouts, %d seeds: seed every type", len(layouts), len(want))
	}
}

// FuzzMessages: any byte string decodes to messages or a clear error,
// never a panic, and whatever decodes encodes back to the same bytes.
func FuzzMessages(f *testing.F) {
	for _, m := range seedMsgs() {
		f.Add(appendMsg(nil, &m))
	}
	f.Add([]byte{byte(tHello), 0, 0, 0, 1, 0})
	f.Add([]byte{byte(tHave), 0, 0, 0, 9, 0, 0, 0, 0, 2, 0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{99, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		ms, err := decodeFrames(b)
		if err != nil {
			if !errors.Is(err, errFrame) {
				t.Fatalf("error %v is not errFrame", err)
			}
			return
		}
		var again []byte
		for i := range ms {
			again = appendMsg(again, &ms[i])
		}
		if !bytes.Equal(again, b) {
			t.Fatalf("re-encoded %x, decoded from %x", again, b)
		}
	})
}

// FuzzState: any state file decodes to a consistent state or an error;
// a decoded state encodes back to the same bytes.
func FuzzState(f *testing.F) {
	st := &fileState{Size: 10<<20 + 5, Mtime: 1700000000123456789, Mode: 0o640, Chunk: 1 << 20, Done: newBitmap(11)}
	st.Done.set(0)
	st.Done.set(10)
	f.Add(encodeState(st))
	f.Add(encodeState(&fileState{Size: 0, Chunk: 4 << 20, Done: newBitmap(0)}))
	f.Add([]byte("MRCP"))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := decodeState(b)
		if err != nil {
			if !errors.Is(err, errState) {
				t.Fatalf("error %v is not errState", err)
			}
			return
		}
		if !bytes.Equal(encodeState(s), b) {
			t.Fatalf("state re-encodes differently")
		}
	})
}

// FuzzTarget: a destination parses to a valid address and a clean
// relative directory, or an error; never a path out of the root.
func FuzzTarget(f *testing.F) {
	for _, s := range []string{"us-east/trainer-0:7000", "us-east/trainer-0:7000/ckpt/run1", "us-east/t:7000/../x",
		"us-east/t:7000//abs", "r/e:0", "r/e:65536/x", "/e:1", "r/:1", "r/e:1/a/./b", "r/e:1/x/"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		a, dest, err := ParseTarget(s)
		if err != nil {
			return
		}
		if a.Region == "" || a.Endpoint == "" || a.Port == 0 {
			t.Fatalf("%q parsed to %+v", s, a)
		}
		if dest != "" && checkRel(dest) != nil {
			t.Fatalf("%q: destination %q not clean", s, dest)
		}
		for _, c := range strings.Split(dest, "/") {
			if c == ".." {
				t.Fatalf("%q: destination %q leaves the root", s, dest)
			}
		}
	})
}

// TestParseTarget: the forms the command line takes, and the refusals.
func TestParseTarget(t *testing.T) {
	for _, c := range []struct {
		in, addr, dest, err string
	}{
		{"us-east/trainer-0:7000", "us-east/trainer-0:7000", "", ""},
		{"us-east/trainer-0:7000/ckpt/run1/", "us-east/trainer-0:7000", "ckpt/run1", ""},
		{"us-east/trainer-0:7000/../etc", "", "", "leaves its directory"},
		{"us-east/trainer-0:7000//etc", "", "", "is absolute"},
		{"us-east/trainer-0:7000/a//b", "", "", "not a clean path"},
		{"us-east/trainer-0", "", "", "no endpoint:port"},
		{"us-east/trainer-0:x", "", "", "is not 1 to 65535"},
	} {
		a, dest, err := ParseTarget(c.in)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%q: %v, want %q", c.in, err, c.err)
			}
			continue
		}
		if err != nil || a.String() != c.addr || dest != c.dest {
			t.Errorf("%q: %v %q %v", c.in, a, dest, err)
		}
	}
}
