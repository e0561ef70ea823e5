//go:build linux

package peers

import "testing"

// TestPacedFraction checks the paced-F controller names: a fraction in
// (0, 1] is taken, anything else is refused with the name in the error, and
// a name without the prefix is not this option's.
func TestPacedFraction(t *testing.T) {
	for _, c := range []struct {
		name   string
		frac   float64
		isOurs bool
		bad    bool
	}{
		{"paced-0.5", 0.5, true, false},
		{"paced-1", 1, true, false},
		{"paced-0", 0, true, true},
		{"paced-1.2", 0, true, true},
		{"paced-x", 0, true, true},
		{"paced-NaN", 0, true, true},
		{"longrtt-htcp", 0, false, false},
		{CCFixedPaced, 0, false, false},
	} {
		f, ours, err := pacedFraction(c.name)
		if ours != c.isOurs || (err != nil) != c.bad || (!c.bad && f != c.frac) {
			t.Errorf("pacedFraction(%q) = %g, %v, %v; want %g, %v, error %v", c.name, f, ours, err, c.frac, c.isOurs, c.bad)
		}
	}
}
