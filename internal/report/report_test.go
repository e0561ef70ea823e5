package report

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func TestWriteTableAligned(t *testing.T) {
	rows := []Row{{System: "mrgw", RTTms: 0.01, GoodputBps: 98.17e9}, {System: "rocev2", RTTms: 50, GoodputBps: 3.85e6}}
	var b bytes.Buffer
	if err := WriteTable(&b, rows, ColSystem, ColRTT, ColGoodput); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(b.String(), "\n"), "\n")
	want := []string{
		"| system | rtt  | goodput      |",
		"|--------|------|--------------|",
		"| mrgw   | 10µs | 98.17 Gbit/s |",
		"| rocev2 | 50ms | 3.85 Mbit/s  |",
	}
	if len(lines) != len(want) {
		t.Fatalf("got %d lines:\n%s", len(lines), b.String())
	}
	for i := range want {
		if lines[i] != want[i] {
			t.Errorf("line %d:\n got  %q\n want %q", i, lines[i], want[i])
		}
	}
}

func TestWriteJSONFieldNames(t *testing.T) {
	var b bytes.Buffer
	if err := WriteJSON(&b, []Row{{Scenario: "loss-sweep", System: "mrgw", RTTms: 50, Loss: 0.01, CapacityBps: 1e11, GoodputBps: 9.7e10, Fraction: 0.97}}); err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"scenario", "system", "rtt_ms", "loss", "capacity_bps", "goodput_bps", "fraction"} {
		if _, ok := m[k]; !ok {
			t.Errorf("JSON row lacks %q: %s", k, b.String())
		}
	}
}

func TestJain(t *testing.T) {
	if j := Jain([]float64{1, 1, 1, 1}); j != 1 {
		t.Fatalf("equal shares: %v", j)
	}
	if j := Jain([]float64{1, 0, 0, 0}); j != 0.25 {
		t.Fatalf("one takes all: %v", j)
	}
}

func TestSlug(t *testing.T) {
	for in, want := range map[string]string{
		"longrtt-htcp 0.1%":   "longrtt-htcp_0p1_",
		"Fabric Bottleneck":   "fabric_bottleneck",
		"8 planes/longrtt-1%": "8_planes_longrtt-1_",
	} {
		if got := Slug(in); got != want {
			t.Errorf("Slug(%q) = %q, want %q", in, got, want)
		}
	}
}
