package report

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
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
	// Equal shares whose sums round up: the raw ratio is 1.0000000000000002.
	if j := Jain([]float64{0.333, 0.333, 0.333}); j != 1 {
		t.Fatalf("equal shares with rounding: %v, want 1", j)
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

func TestFormatForPeople(t *testing.T) {
	for _, c := range []struct {
		got, want string
	}{
		{FormatPercent(0.07), "7%"},
		{FormatPercent(0.001), "0.1%"},
		{FormatPercent(0.0001), "0.01%"},
		{FormatPercent(0.1), "10%"},
		{FormatPercent(0), "0%"},
		{FormatPercent(1), "100%"},
		{FormatPercent(0.12345), "12.3%"},
		{FormatPercent(1e-7), "0.00001%"},
		{FormatNumber(1234), "1230"},
		{FormatNumber(-0.5), "-0.5"},
		{FormatRTT(0.3), "300µs"},
		{FormatRTT(0.01), "10µs"},
		{FormatRTT(150), "150ms"},
		{FormatRTT(12.5), "12.5ms"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
	// The table shows the same.
	var b bytes.Buffer
	if err := WriteTable(&b, []Row{{Loss: 0.07}}, ColLoss); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "| 7%   |") {
		t.Errorf("loss column:\n%s", b.String())
	}
	b.Reset()
	if err := WriteTable(&b, []Row{{RTTms: 0}}, ColRTT); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "| -   |") {
		t.Errorf("rtt column of a row of several round trips:\n%s", b.String())
	}
}

// TestWriteJSONLines: one object per line, in order, with the notes' <, >
// and & written as they are.
func TestWriteJSONLines(t *testing.T) {
	type row struct {
		Fault string `json:"fault"`
		Note  string `json:"note"`
	}
	var b strings.Builder
	if err := WriteJSONLines(&b, []row{{"a", "p99 < 1 s & ok"}, {"b", ""}}); err != nil {
		t.Fatal(err)
	}
	want := `{"fault":"a","note":"p99 < 1 s & ok"}` + "\n" + `{"fault":"b","note":""}` + "\n"
	if b.String() != want {
		t.Errorf("got %q, want %q", b.String(), want)
	}
}

func TestQuantileNearestRank(t *testing.T) {
	xs := []float64{5, 1, 4, 2, 3}
	for _, c := range []struct{ q, want float64 }{{0, 1}, {0.2, 1}, {0.5, 3}, {0.99, 5}, {1, 5}} {
		if got := Quantile(xs, c.q); got != c.want {
			t.Errorf("Quantile(%v, %g) = %g, want %g", xs, c.q, got, c.want)
		}
	}
	if xs[0] != 5 {
		t.Errorf("Quantile sorted its input: %v", xs)
	}
	if got := Quantile([]time.Duration(nil), 0.5); got != 0 {
		t.Errorf("Quantile of nothing = %v", got)
	}
}
