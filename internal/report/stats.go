package report

import (
	"cmp"
	"fmt"
	"os"
	"slices"
)

// Quantile returns the q-quantile of xs by nearest rank (the smallest
// value at least a fraction q of the values do not exceed), or zero for
// no values. xs is not modified.
func Quantile[T cmp.Ordered](xs []T, q float64) T {
	var zero T
	if len(xs) == 0 {
		return zero
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	k := int(q*float64(len(s))+0.999999) - 1
	return s[min(max(k, 0), len(s)-1)]
}

// LoadAvg is the machine's 1-minute load average (0 where /proc/loadavg
// cannot be read): every real-time figure is reported with it.
func LoadAvg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	var l float64
	fmt.Sscanf(string(b), "%f", &l)
	return l
}

// JoinNote joins two parts of a row's note with "; ", either of them
// possibly empty.
func JoinNote(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return a + "; " + b
}
