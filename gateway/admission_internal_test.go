//go:build linux

package gateway

import "testing"

// TestCookieCountsNeverWrap: netio's BadCookies may run ahead of
// RetriesSent (two atomics read one after the other; a challenge that
// could not be sent counts a bad cookie and no retry). Neither reason may
// then grow by more than what netio counted, and the retry count never
// goes back: the unsigned difference RetriesSent-BadCookies used to wrap
// to about 1.8e19.
func TestCookieCountsNeverWrap(t *testing.T) {
	var c cookieCounts
	steps := []struct {
		retries, bad       uint64 // netio's running totals
		wantRetry, wantBad uint64 // what each reason grows by
	}{
		{10, 0, 10, 0},
		{12, 5, 0, 5},   // bad ahead of the plain challenges: the 10 counted are kept
		{12, 9, 0, 4},   // bad grows with no retry at all
		{30, 10, 10, 1}, // 20 plain challenges in all: 10 more
		{30, 10, 0, 0},
		{31, 12, 0, 2},
	}
	var sumRetry, sumBad uint64
	for i, s := range steps {
		r, b := c.sync(s.retries, s.bad)
		if r != s.wantRetry || b != s.wantBad {
			t.Errorf("step %d: sync(%d, %d) = %d, %d; want %d, %d", i, s.retries, s.bad, r, b, s.wantRetry, s.wantBad)
		}
		sumRetry += r
		sumBad += b
		if sumRetry+sumBad > s.retries+s.bad {
			t.Fatalf("step %d: counted %d refusals for %d challenges and %d bad cookies", i, sumRetry+sumBad, s.retries, s.bad)
		}
	}
}
