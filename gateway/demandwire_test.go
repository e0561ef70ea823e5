package gateway

import (
	"bytes"
	"errors"
	"testing"
)

func sampleDemand() demandReport {
	return demandReport{Region: "eu-west", From: "euw-gw1", Seq: 1_700_000_000_123_456_789,
		demandSample: demandSample{Rate: 187_500_000, Limited: true}, Part: 375_000_000}
}

// TestDemandReportWire: a report survives the wire; malformed ones are
// refused with errBadDemand.
func TestDemandReportWire(t *testing.T) {
	r := sampleDemand()
	b, err := appendDemand(nil, r)
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeDemand(b)
	if err != nil || got != r {
		t.Fatalf("decoded %+v, %v; want %+v", got, err, r)
	}
	// A later version's extra fields are skipped.
	v2 := append(bytes.Clone(b), 0xaa, 0xbb)
	v2[0] = demandVersion + 1
	if got, err := decodeDemand(v2); err != nil || got != r {
		t.Fatalf("version 2 with extra bytes: %+v, %v", got, err)
	}
	bad := map[string][]byte{
		"empty":            nil,
		"cut":              b[:len(b)-1],
		"trailing":         append(bytes.Clone(b), 0),
		"version 0":        append([]byte{0}, b[1:]...),
		"unknown flag":     append([]byte{demandVersion, 0x82}, b[2:]...),
		"empty region":     append(bytes.Clone(b[:demandFixedBytes]), 0, 1, 'x'),
		"name not utf-8":   append(bytes.Clone(b[:demandFixedBytes]), 1, 'r', 1, 0xff),
		"rate beyond 1 Pb": func() []byte { c := bytes.Clone(b); c[10] = 0xff; return c }(),
	}
	for name, m := range bad {
		if _, err := decodeDemand(m); !errors.Is(err, errBadDemand) {
			t.Errorf("%s: err %v, want errBadDemand", name, err)
		}
	}
	for _, r := range []demandReport{{From: "a"}, {Region: "r"}, {Region: "r", From: "a", Part: -1}, {Region: "r", From: string(make([]byte, 256))}} {
		if _, err := appendDemand(nil, r); err == nil {
			t.Errorf("encoded %+v", r)
		}
	}
}

// FuzzDecodeDemand: decoding never panics, and a version-1 report it
// accepts encodes back to the same bytes.
func FuzzDecodeDemand(f *testing.F) {
	b, _ := appendDemand(nil, sampleDemand())
	f.Add(b)
	idle, _ := appendDemand(nil, demandReport{Region: "r", From: "g"})
	f.Add(idle)
	f.Add(append(append([]byte{2}, b[1:]...), 1, 2, 3))
	f.Add([]byte{demandVersion, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decodeDemand(b)
		if err != nil {
			return
		}
		again, err := appendDemand(nil, r)
		if err != nil {
			t.Fatalf("decoded %+v does not encode: %v", r, err)
		}
		if b[0] == demandVersion && !bytes.Equal(again, b) {
			t.Fatalf("re-encoding differs:\n in %x\nout %x", b, again)
		}
	})
}
