package units

import (
	"math"
	"strings"
	"testing"
)

func TestParseRate(t *testing.T) {
	for in, want := range map[string]float64{
		"50mbit": 50e6, "10gbit": 10e9, "1.5Gbps": 1.5e9, "200Mbit/s": 200e6, "200 Mbit/s": 200e6,
		"800kbps": 800e3, "800Kbit": 800e3, "2tbit": 2e12, "100bit": 100, "100 bits/s": 100, "5b/s": 5,
		"100e9": 100e9, "200000000": 200e6, "1000": 1000, "0": 0, "0mbit": 0, " 10Gbit/s ": 10e9,
		"1e3mbit": 1e9, "12.5MBit": 12.5e6,
	} {
		got, err := ParseRate(in)
		if err != nil || got != want {
			t.Errorf("ParseRate(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for in, why := range map[string]string{
		"50":       "no unit", // the old demo --rate meaning (Mbit/s): ambiguous
		"999":      "no unit",
		"0.5":      "no unit",
		"50MB/s":   "bytes per second",
		"1GBps":    "bytes per second",
		"10gib":    "unknown unit",
		"10Gibit":  "unknown unit",
		"10 mb":    "unknown unit",
		"-5mbit":   "negative",
		"mbit":     "want a number",
		"":         "want a number",
		"1e999":    "not a number",
		"NaN":      "want a number",
		"1,5gbit":  "unknown unit",
		"1e400bit": "not a number",
	} {
		if got, err := ParseRate(in); err == nil || !strings.Contains(err.Error(), why) {
			t.Errorf("ParseRate(%q) = %v, %v; want an error saying %q", in, got, err, why)
		}
	}
}

func TestFormatRate(t *testing.T) {
	for in, want := range map[float64]string{
		10e9: "10Gbit/s", 1.5e9: "1.5Gbit/s", 200e6: "200Mbit/s", 50e6: "50Mbit/s", 999: "999bit/s",
		1000: "1kbit/s", 123456789: "123.456789Mbit/s", 0: "0", 2e12: "2Tbit/s",
	} {
		if got := FormatRate(in); got != want {
			t.Errorf("FormatRate(%v) = %q, want %q", in, got, want)
		}
	}
}

func TestParseBytes(t *testing.T) {
	for in, want := range map[string]int64{
		"1MiB": 1 << 20, "64KiB": 64 << 10, "4096": 4096, "1MB": 1e6, "1.5GB": 1.5e9, "256 KiB": 256 << 10,
		"1mib": 1 << 20, "2Gi": 2 << 30, "1k": 1000, "1K": 1000, "3B": 3, "1.5KiB": 1536, "0": 0, " 8MiB ": 8 << 20,
	} {
		got, err := ParseBytes(in)
		if err != nil || got != want {
			t.Errorf("ParseBytes(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "1,5MB", "-1", "+1", "MiB", "1 parsec", "1_000", "20EiB", "1e3"} {
		if got, err := ParseBytes(in); err == nil {
			t.Errorf("ParseBytes(%q) = %v, want an error", in, got)
		}
	}
}

func TestFormatBytes(t *testing.T) {
	for in, want := range map[int64]string{
		1 << 20: "1MiB", 256 << 10: "256KiB", 1e6: "1MB", 1500: "1500", 0: "0", 3 << 30: "3GiB", 2000: "2kB", 1536: "1536",
	} {
		if got := FormatBytes(in); got != want {
			t.Errorf("FormatBytes(%d) = %q, want %q", in, got, want)
		}
	}
}

func TestParseFraction(t *testing.T) {
	for in, want := range map[string]float64{"0.01": 0.01, "1%": 0.01, "0.1%": 0.001, "0": 0, "100%": 1, " 5 % ": 0.05} {
		if got, err := ParseFraction(in); err != nil || math.Abs(got-want) > 1e-15 {
			t.Errorf("ParseFraction(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "2", "-0.1", "101%", "x", "NaN"} {
		if got, err := ParseFraction(in); err == nil {
			t.Errorf("ParseFraction(%q) = %v, want an error", in, got)
		}
	}
}

// FuzzParseRate: ParseRate never panics; what it accepts is a finite,
// non-negative rate that FormatRate prints in a form it reads back.
// The seeds (and testdata/fuzz/FuzzParseRate) run in every go test.
func FuzzParseRate(f *testing.F) {
	for _, s := range []string{"50mbit", "10gbit", "1.5Gbps", "200Mbit/s", "100e9", "50", "50MB/s", "1e308tbit", "-0", ".5gbit", "1e-3kbit", "e9", "1..2mbit", "9999999999999999999999bit"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseRate(s)
		if err != nil {
			return
		}
		if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
			t.Fatalf("ParseRate(%q) = %v", s, v)
		}
		back, err := ParseRate(FormatRate(v))
		if v >= 1 && (err != nil || math.Abs(back-v) > 1e-9*v) {
			t.Fatalf("ParseRate(%q) = %v, printed %q, read back %v, %v", s, v, FormatRate(v), back, err)
		}
	})
}

// FuzzParseBytes: ParseBytes never panics; what it accepts is
// non-negative, and FormatBytes prints it in a form it reads back exactly.
func FuzzParseBytes(f *testing.F) {
	for _, s := range []string{"1MiB", "64KiB", "4096", "1.5GB", "1,5MB", "18446744073709551615", "9.3e18", "1 tib", "0.1B"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseBytes(s)
		if err != nil {
			return
		}
		if v < 0 {
			t.Fatalf("ParseBytes(%q) = %d", s, v)
		}
		if back, err := ParseBytes(FormatBytes(v)); err != nil || back != v {
			t.Fatalf("ParseBytes(%q) = %d, printed %q, read back %d, %v", s, v, FormatBytes(v), back, err)
		}
	})
}
