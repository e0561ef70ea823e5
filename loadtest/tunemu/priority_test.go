//go:build linux

package tunemu

import (
	"os"
	"testing"
)

func TestParseAutogroupNice(t *testing.T) {
	for in, want := range map[string]int{"/autogroup-30 nice 0\n": 0, "/autogroup-7 nice -20": -20, "/autogroup-1 nice 19": 19} {
		if got, err := parseAutogroupNice(in); err != nil || got != want {
			t.Errorf("%q: %d, %v", in, got, err)
		}
	}
	for _, in := range []string{"", "/autogroup-1 nice", "/autogroup-1 nice x", "/autogroup-1 prio 3", "/autogroup-1 nice 40"} {
		if _, err := parseAutogroupNice(in); err == nil {
			t.Errorf("%q accepted", in)
		}
	}
}

// FuzzParseAutogroupNice: the parser never panics and only returns nice
// values the kernel could have written.
func FuzzParseAutogroupNice(f *testing.F) {
	for _, s := range []string{"/autogroup-30 nice 0\n", "/autogroup-7 nice -20", "x nice 5", "", "a b c d"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if n, err := parseAutogroupNice(s); err == nil && (n < -20 || n > 19) {
			t.Fatalf("%q: nice %d", s, n)
		}
	})
}

// TestPrioritize: nested calls raise the session's share once and the
// last restore puts the saved value back. It changes this process's
// session's autogroup for a moment, so it runs as root only.
func TestPrioritize(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	before, err := readAutogroupNice()
	if err != nil {
		t.Skip(err)
	}
	r1, err := Prioritize(before - 1)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := Prioritize(before - 1)
	if err != nil {
		r1()
		t.Fatal(err)
	}
	if n, _ := readAutogroupNice(); n != before-1 {
		t.Errorf("nice %d while prioritized, want %d", n, before-1)
	}
	r1()
	r1() // idempotent
	if n, _ := readAutogroupNice(); n != before-1 {
		t.Errorf("nice %d after the first restore of two, want %d", n, before-1)
	}
	r2()
	if n, _ := readAutogroupNice(); n != before {
		t.Errorf("nice %d after the last restore, want %d", n, before)
	}
	if _, err := Prioritize(-21); err == nil {
		t.Error("nice -21 accepted")
	}
}
