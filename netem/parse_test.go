package netem

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestParseLink(t *testing.T) {
	good := []struct {
		in   string
		want LinkConfig
	}{
		{"", LinkConfig{}},
		{"rate=1gbit,queue=1MiB,delay=20ms,jitter=1ms,loss=1%,ecn=100KiB", LinkConfig{
			Rate: 1e9, QueueBytes: 1 << 20, Delay: 20 * time.Millisecond, Jitter: time.Millisecond,
			Loss: 0.01, ECNThreshold: 100 << 10}},
		{" RATE = 2.5Mbps , loss=0.1 ", LinkConfig{Rate: 2_500_000, Loss: 0.1}},
		{"rate=unlimited,queue=1500", LinkConfig{QueueBytes: 1500}},
		{"rate=123456789,queue=64KB", LinkConfig{Rate: 123456789, QueueBytes: 64000}},
		{"delay=1.5ms,loss=100%", LinkConfig{Delay: 1500 * time.Microsecond, Loss: 1}},
	}
	for _, c := range good {
		got, err := ParseLink(c.in)
		if err != nil || got != c.want {
			t.Errorf("ParseLink(%q) = %+v, %v; want %+v", c.in, got, err, c.want)
			continue
		}
		back, err := ParseLink(got.String())
		if err != nil || back != got {
			t.Errorf("round trip of %q via %q = %+v, %v", c.in, got.String(), back, err)
		}
	}
	bad := []struct{ in, mention string }{
		{"rate", "key=value"},
		{"rate=1gbit,rate=2gbit", "twice"},
		{"speed=1gbit", "unknown link key"},
		{"rate=1.5bit", "rate"},
		{"rate=-1", "rate"},
		{"rate=1furlong", "rate"},
		{"queue=2GiB", "queue"},
		{"delay=-1ms", "delay"},
		{"delay=11s", "delay"},
		{"loss=101%", "loss"},
		{"loss=NaN", "loss"},
		{"ecn=1e30", "ecn"},
		{"jitter=soon", "jitter"},
	}
	for _, c := range bad {
		_, err := ParseLink(c.in)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.mention) {
			t.Errorf("ParseLink(%q) error %v, want ErrInvalid mentioning %q", c.in, err, c.mention)
		}
	}
}

// FuzzParseLink checks that ParseLink never panics, accepts only valid
// configurations, and that String round-trips whatever it accepts.
func FuzzParseLink(f *testing.F) {
	for _, s := range []string{
		"",
		"rate=1gbit,queue=1MiB,delay=20ms,jitter=1ms,loss=1%,ecn=100KiB",
		"rate=unlimited",
		"rate=9223372036854775807",
		"rate=18446744073709551615",
		"queue=1.5KiB,loss=0.001",
		"delay=10s,jitter=0s",
		"loss=1e-9",
		"ecn=0,queue=0",
		"rate=1e3kbit",
		",,",
		"=",
		"rate=NaNgbit",
		"loss=-0%",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		l, err := ParseLink(s)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v does not wrap ErrInvalid", err)
			}
			return
		}
		if err := l.Validate(); err != nil {
			t.Fatalf("ParseLink(%q) accepted invalid %+v: %v", s, l, err)
		}
		back, err := ParseLink(l.String())
		if err != nil || back != l {
			t.Fatalf("ParseLink(%q) = %+v; String %q parses to %+v, %v", s, l, l.String(), back, err)
		}
	})
}
