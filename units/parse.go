package units

// The parser and printer of the quantities both binaries' flags take:
// sizes in bytes ("1MiB", "64KiB", "1.5GB", "4096") and rates in bits per
// second ("50mbit", "10gbit", "1.5Gbps", "200Mbit/s"). Every size and rate
// flag of mrgw and mrgw-lab goes through this one parser (internal/cli
// wraps it as flag values), so a unit means the same on every command.

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/dustin/go-humanize"
)

// ParseBytes reads a size: a number with an optional unit, decimal (k or
// kB = 1000, M or MB, G or GB, T or TB) or binary (Ki or KiB = 1024, Mi or
// MiB, Gi or GiB, Ti or TiB), case-insensitive, a space between allowed;
// a plain number is bytes. A fractional result is rounded down to whole
// bytes. Commas are refused (is "1,5MB" 1.5 or 15?).
func ParseBytes(s string) (int64, error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return 0, errors.New("empty size")
	}
	if strings.ContainsAny(t, ",_") {
		return 0, fmt.Errorf("size %q: write it without separators, e.g. 1500000 or 1.5MB", s)
	}
	if t[0] == '-' || t[0] == '+' {
		return 0, fmt.Errorf("size %q: a size is a number of bytes, not signed", s)
	}
	v, err := humanize.ParseBytes(t)
	if err != nil {
		return 0, fmt.Errorf("size %q: want a number of bytes with an optional unit, e.g. 4096, 64KiB, 1MiB, 1.5GB", s)
	}
	if v > math.MaxInt64 {
		return 0, fmt.Errorf("size %q is too large", s)
	}
	return int64(v), nil
}

// FormatBytes prints n exactly in the largest unit that divides it:
// binary first (1MiB, 256KiB), then decimal (1MB), else bytes (1500).
// ParseBytes reads it back to n.
func FormatBytes(n int64) string {
	if n == 0 {
		return "0"
	}
	for _, u := range []struct {
		name string
		size int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"TB", 1e12}, {"GB", 1e9}, {"MB", 1e6}, {"kB", 1e3}} {
		if n%u.size == 0 {
			return strconv.FormatInt(n/u.size, 10) + u.name
		}
	}
	return strconv.FormatInt(n, 10)
}

// MinPlainRate is the smallest rate a plain number may give: a number
// without a unit below it (say "50") is refused as ambiguous, since it is
// far likelier a forgotten Mbit/s or Gbit/s than a rate in bit/s.
const MinPlainRate = 1000

// ratePrefixes are the decimal prefixes of a rate's unit.
var ratePrefixes = map[string]float64{"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}

// ParseRate reads a rate in bits per second: a number with a unit made of
// an optional decimal prefix k, M, G or T (case-insensitive: "mbit" is
// megabits, as in tc) and bit, bits, bps, bit/s or b/s ("50mbit",
// "10Gbit", "1.5Gbps", "200 Mbit/s", "800kbps"). A plain number is bit/s
// ("100e9", "200000000"), but one from 0 to MinPlainRate exclusive is
// refused as ambiguous: write "50mbit" or "50bit". 0 is 0. Byte rates
// ("MB/s", "GBps": a capital B) and binary prefixes are refused, so that a
// rate is never off by a factor of 8 or 1.024.
func ParseRate(s string) (float64, error) {
	t := strings.TrimSpace(s)
	// The number: digits, '.', an exponent; no unit starts with e.
	i := strings.IndexFunc(t, func(r rune) bool { return !strings.ContainsRune("0123456789.eE+-", r) })
	if i < 0 {
		i = len(t)
	}
	num, unit := t[:i], strings.TrimSpace(t[i:])
	if num == "" {
		return 0, fmt.Errorf("rate %q: want a number of bits per second with a unit, e.g. 50mbit, 10gbit, 1.5Gbps", s)
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || math.IsInf(v, 0) || math.IsNaN(v) {
		return 0, fmt.Errorf("rate %q: %q is not a number", s, num)
	}
	if v < 0 {
		return 0, fmt.Errorf("rate %q is negative", s)
	}
	if unit == "" {
		if v > 0 && v < MinPlainRate {
			return 0, fmt.Errorf("rate %q has no unit: write %smbit (or %sgbit; a plain number is bit/s)", s, num, num)
		}
	} else {
		mult, err := rateUnit(unit)
		if err != nil {
			return 0, fmt.Errorf("rate %q: %w", s, err)
		}
		v *= mult
	}
	if math.IsInf(v, 0) || v > math.MaxInt64 {
		return 0, fmt.Errorf("rate %q is too large", s)
	}
	return v, nil
}

// rateUnit returns the multiplier of a rate unit such as "Mbit/s".
func rateUnit(unit string) (float64, error) {
	lower := strings.ToLower(unit)
	var base string
	for _, b := range []string{"bits/s", "bit/s", "bits", "bit", "bps", "b/s"} {
		if strings.HasSuffix(lower, b) {
			base = b
			break
		}
	}
	const want = "want bit/s with an optional k, M, G or T: 50mbit, 10gbit, 1.5Gbps, 200Mbit/s"
	if base == "" {
		return 0, fmt.Errorf("unknown unit %q (%s)", unit, want)
	}
	if (base == "bps" || base == "b/s") && unit[len(unit)-len(base)] == 'B' {
		return 0, fmt.Errorf("%q is bytes per second; rates are in bits (8 times the bytes): %s", unit, want)
	}
	p, ok := ratePrefixes[lower[:len(lower)-len(base)]]
	if !ok {
		return 0, fmt.Errorf("unknown unit %q (%s; prefixes are decimal)", unit, want)
	}
	return p, nil
}

// FormatRate prints a rate in bits per second in the largest unit that
// keeps it at least 1: "10Gbit/s", "1.5Gbit/s", "200Mbit/s", "999bit/s".
// ParseRate reads it back (to within rounding of the last digit).
func FormatRate(bps float64) string { return BitRate(bps).String() }

// ParseFraction reads a probability such as a loss rate: a number in
// [0, 1] ("0.01") or a percentage ("1%", "0.1%").
func ParseFraction(s string) (float64, error) {
	t := strings.TrimSpace(s)
	pct := strings.HasSuffix(t, "%")
	t = strings.TrimSpace(strings.TrimSuffix(t, "%"))
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || math.IsNaN(v) {
		return 0, fmt.Errorf("%q is not a fraction (0.01) or a percentage (1%%)", s)
	}
	if pct {
		v /= 100
	}
	if v < 0 || v > 1 {
		return 0, fmt.Errorf("%q is outside 0..1 (0%%..100%%)", s)
	}
	return v, nil
}

// FormatFraction prints a fraction as ParseFraction reads it: a
// percentage ("1%", "0.1%"), or "0".
func FormatFraction(x float64) string {
	if x == 0 {
		return "0"
	}
	// 12 significant digits: 0.07 prints 7%, not 7.000000000000001%.
	r, _ := strconv.ParseFloat(strconv.FormatFloat(x*100, 'g', 12, 64), 64)
	return strconv.FormatFloat(r, 'f', -1, 64) + "%"
}
