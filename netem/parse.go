package netem

import (
	"math"
	"strconv"
	"strings"
	"time"
)

// ParseLink parses the compact link notation used by `mrgw-lab demo` and
// `mrgw-lab loadtest` flags, for example
//
//	rate=1gbit,queue=1MiB,delay=20ms,jitter=1ms,loss=1%,ecn=100KiB
//
// Keys (case-insensitive, each at most once, any order, all optional):
//
//	rate    bits/s: a number with an optional unit bit, kbit, mbit, gbit,
//	        tbit (decimal; "bps" suffixes are accepted as synonyms), or
//	        "unlimited"; 0 means unlimited
//	queue   bytes: a number with an optional unit B, KB, MB, GB (decimal)
//	        or KiB, MiB, GiB (binary)
//	delay   a Go duration (time.ParseDuration), e.g. 20ms
//	jitter  a Go duration
//	loss    a probability in [0, 1] or a percentage, e.g. 0.01 or 1%
//	ecn     bytes, as for queue: the CE-marking threshold
//
// The empty string is the zero LinkConfig. Errors wrap ErrInvalid and name
// the key. LinkConfig.String produces this notation.
func ParseLink(s string) (LinkConfig, error) {
	var l LinkConfig
	s = strings.TrimSpace(s)
	if s == "" {
		return l, nil
	}
	seen := map[string]bool{}
	for _, field := range strings.Split(s, ",") {
		key, val, ok := strings.Cut(field, "=")
		key = strings.ToLower(strings.TrimSpace(key))
		val = strings.TrimSpace(val)
		if !ok || key == "" || val == "" {
			return LinkConfig{}, invalid("link field %q is not key=value", field)
		}
		if seen[key] {
			return LinkConfig{}, invalid("link key %q given twice", key)
		}
		seen[key] = true
		var err error
		switch key {
		case "rate":
			l.Rate, err = parseRate(val)
		case "queue":
			l.QueueBytes, err = parseBytes(val)
		case "ecn":
			l.ECNThreshold, err = parseBytes(val)
		case "delay":
			l.Delay, err = time.ParseDuration(val)
		case "jitter":
			l.Jitter, err = time.ParseDuration(val)
		case "loss":
			l.Loss, err = parseLoss(val)
		default:
			return LinkConfig{}, invalid("unknown link key %q (want rate, queue, delay, jitter, loss, ecn)", key)
		}
		if err != nil {
			return LinkConfig{}, invalid("link key %q: %v", key, err)
		}
	}
	if err := l.Validate(); err != nil {
		return LinkConfig{}, err
	}
	return l, nil
}

// splitUnit splits "12.5mbit" into "12.5" and "mbit".
func splitUnit(s string) (num, unit string) {
	i := len(s)
	for i > 0 {
		c := s[i-1]
		if (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '%' {
			i--
			continue
		}
		break
	}
	return strings.TrimSpace(s[:i]), strings.ToLower(s[i:])
}

// scaled multiplies a decimal number by mult and requires an exact, finite,
// non-negative integer below max.
func scaled(num string, mult, max float64) (uint64, error) {
	if num == "" {
		return 0, strconv.ErrSyntax
	}
	if u, err := strconv.ParseUint(num, 10, 64); err == nil && mult == 1 {
		// Plain integers stay exact beyond float64's 2^53.
		if float64(u) >= max {
			return 0, strconv.ErrRange
		}
		return u, nil
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return 0, strconv.ErrSyntax
	}
	v := f * mult
	if math.IsNaN(v) || v < 0 || v >= max {
		return 0, strconv.ErrRange
	}
	if v != math.Trunc(v) {
		return 0, errNotWhole
	}
	return uint64(v), nil
}

type parseErr string

func (e parseErr) Error() string { return string(e) }

const errNotWhole = parseErr("not a whole number of units")

func parseRate(s string) (uint64, error) {
	if strings.EqualFold(s, "unlimited") {
		return 0, nil
	}
	num, unit := splitUnit(s)
	var mult float64
	switch unit {
	case "", "bit", "bps":
		mult = 1
	case "kbit", "kbps":
		mult = 1e3
	case "mbit", "mbps":
		mult = 1e6
	case "gbit", "gbps":
		mult = 1e9
	case "tbit", "tbps":
		mult = 1e12
	default:
		return 0, parseErr("unknown rate unit " + strconv.Quote(unit))
	}
	// 2^63 keeps the exactness check of float64 -> uint64 meaningful.
	return scaled(num, mult, 1<<63)
}

func parseBytes(s string) (int, error) {
	num, unit := splitUnit(s)
	var mult float64
	switch unit {
	case "", "b":
		mult = 1
	case "kb":
		mult = 1e3
	case "mb":
		mult = 1e6
	case "gb":
		mult = 1e9
	case "kib":
		mult = 1 << 10
	case "mib":
		mult = 1 << 20
	case "gib":
		mult = 1 << 30
	default:
		return 0, parseErr("unknown size unit " + strconv.Quote(unit))
	}
	v, err := scaled(num, mult, MaxQueueBytes+1)
	return int(v), err
}

func parseLoss(s string) (float64, error) {
	pct := strings.HasSuffix(s, "%")
	s = strings.TrimSpace(strings.TrimSuffix(s, "%"))
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, strconv.ErrSyntax
	}
	if pct {
		f /= 100
	}
	if math.IsNaN(f) || f < 0 || f > 1 {
		return 0, strconv.ErrRange
	}
	return f, nil
}

// String returns l in ParseLink's notation, omitting zero fields; ParseLink
// of the result gives back l exactly.
func (l LinkConfig) String() string {
	var parts []string
	if l.Rate != 0 {
		parts = append(parts, "rate="+formatRate(l.Rate))
	}
	if l.QueueBytes != 0 {
		parts = append(parts, "queue="+formatBytes(l.QueueBytes))
	}
	if l.Delay != 0 {
		parts = append(parts, "delay="+l.Delay.String())
	}
	if l.Jitter != 0 {
		parts = append(parts, "jitter="+l.Jitter.String())
	}
	if l.Loss != 0 {
		parts = append(parts, "loss="+strconv.FormatFloat(l.Loss, 'g', -1, 64))
	}
	if l.ECNThreshold != 0 {
		parts = append(parts, "ecn="+formatBytes(l.ECNThreshold))
	}
	return strings.Join(parts, ",")
}

func formatRate(r uint64) string {
	for _, u := range []struct {
		div  uint64
		name string
	}{{1e12, "tbit"}, {1e9, "gbit"}, {1e6, "mbit"}, {1e3, "kbit"}} {
		if r%u.div == 0 {
			return strconv.FormatUint(r/u.div, 10) + u.name
		}
	}
	return strconv.FormatUint(r, 10)
}

func formatBytes(n int) string {
	for _, u := range []struct {
		div  int
		name string
	}{{1 << 30, "GiB"}, {1 << 20, "MiB"}, {1 << 10, "KiB"}} {
		if n%u.div == 0 {
			return strconv.Itoa(n/u.div) + u.name
		}
	}
	return strconv.Itoa(n) + "B"
}
