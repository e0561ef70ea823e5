package stream

import (
	"bytes"
	"testing"
)

// FuzzRecord: any slot contents either parse into a record that encodes
// back to the same fields, or are refused; nothing panics.
func FuzzRecord(f *testing.F) {
	f.Add(appendRecord(nil, record{Flags: flagAccept, RingKey: keyBase | 7, Window: 1 << 20, Consumed: 12345, Answers: 99}))
	f.Add(appendRecord(nil, record{Flags: flagAccept | flagFin | flagReset, Code: CodeAborted, FinAt: 1 << 40}))
	f.Add(appendRecord(nil, record{Flags: flagReset, Code: CodeRefused, Answers: 1}))
	f.Add(make([]byte, slotSize))
	f.Add([]byte("MRS1"))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := parseRecord(b)
		if err != nil {
			return
		}
		again, err := parseRecord(appendRecord(nil, r))
		if err != nil || again != r {
			t.Fatalf("round trip: %+v → %+v, %v", r, again, err)
		}
		var m record
		m.merge(r)
		m.merge(record{})
		if m.Flags != r.Flags || m.Consumed != r.Consumed {
			t.Fatalf("merge lost state: %+v from %+v", m, r)
		}
	})
}

// FuzzParseAddr: an address either parses into one that prints back to
// an address parsing the same, or is refused; nothing panics.
func FuzzParseAddr(f *testing.F) {
	for _, s := range []string{"us-east/trainer-0:7000", "a/b:1", "a/b:65535", "a/b:0", "a/b:65536", "a:1", "/b:1", "a/:1", "a/b/c:1", "a/b", "", ":::", "a/b:+1", "a/b:01"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		a, err := ParseAddr(s)
		if err != nil {
			return
		}
		if a.Port == 0 || a.Region == "" || a.Endpoint == "" {
			t.Fatalf("%q parsed into %+v", s, a)
		}
		b, err := ParseAddr(a.String())
		if err != nil || b != a {
			t.Fatalf("%q → %v → %+v, %v", s, a, b, err)
		}
	})
}

func TestRecordMergeIsMonotonic(t *testing.T) {
	var r record
	r.merge(record{Flags: flagAccept, RingKey: keyBase | 1, Window: 4096, Consumed: 100, Answers: 5})
	r.merge(record{Flags: flagAccept | flagFin, RingKey: keyBase | 1, Window: 4096, Consumed: 50, FinAt: 700, Answers: 5})
	r.merge(record{Flags: flagAccept, RingKey: keyBase | 1, Window: 4096, Consumed: 80, Answers: 5}) // an old copy, read late
	want := record{Flags: flagAccept | flagFin, RingKey: keyBase | 1, Window: 4096, Consumed: 100, FinAt: 700, Answers: 5}
	if r != want {
		t.Fatalf("merged %+v, want %+v", r, want)
	}
	if b := appendRecord(nil, r); len(b) != slotSize || !bytes.HasPrefix(b, []byte("MRS1")) {
		t.Fatalf("encoded %d bytes: %q", len(b), b[:4])
	}
}
