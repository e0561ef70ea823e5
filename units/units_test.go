package units

import (
	"testing"
	"time"
)

func TestConversions(t *testing.T) {
	if got := BitRate(10e9).Bytes(); got != 1.25e9 {
		t.Errorf("10 Gbit/s = %v B/s, want 1.25e9", float64(got))
	}
	if got := ByteRate(1.25e9).Bits(); got != 10*Gbps {
		t.Errorf("1.25 GB/s = %v bit/s, want 1e10", float64(got))
	}
	// Dividing by 8 is exact in float64, so a round trip returns the value
	// bit for bit and the conversion commutes with any other factor.
	for _, r := range []BitRate{0, 1, 3, 1e-300, 123456789.123, 1e14, 8e300} {
		if back := r.Bytes().Bits(); back != r {
			t.Errorf("%v: round trip gave %v", float64(r), float64(back))
		}
		if a, b := float64(r.Bytes())*0.37, float64(r)*0.37/8; a != b {
			t.Errorf("%v: (r/8)*0.37 = %v, r*0.37/8 = %v", float64(r), a, b)
		}
	}
	if got := BitRate(8e6).Bytes().BytesIn(20 * time.Millisecond); got != 20000 {
		t.Errorf("20 ms at 8 Mbit/s = %v bytes, want 20000", got)
	}
}

func TestString(t *testing.T) {
	for _, c := range []struct {
		got, want string
	}{
		{BitRate(0).String(), "0"},
		{BitRate(10e9).String(), "10Gbit/s"},
		{BitRate(1.5e9).String(), "1.5Gbit/s"},
		{(200 * Mbps).String(), "200Mbit/s"},
		{BitRate(999).String(), "999bit/s"},
		{ByteRate(1.25e9).String(), "1.25GB/s"},
		{ByteRate(100).String(), "100B/s"},
		{BitRate(8e6).Bytes().String(), "1MB/s"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}
