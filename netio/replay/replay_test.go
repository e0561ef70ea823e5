package replay

import (
	"encoding/binary"
	"math"
	"testing"
)

// expect runs Check on each counter and compares with the wanted verdicts.
func expect(t *testing.T, f *Filter, steps ...any) {
	t.Helper()
	for i := 0; i < len(steps); i += 2 {
		c, want := steps[i].(uint64), steps[i+1].(bool)
		if got := f.Check(c); got != want {
			t.Fatalf("step %d: Check(%d) = %v, want %v", i/2, c, got, want)
		}
	}
}

func TestInOrder(t *testing.T) {
	var f Filter
	for c := uint64(0); c < 3*ringWords*wordBits; c++ { // wraps the ring three times
		if !f.Check(c) {
			t.Fatalf("in-order counter %d rejected", c)
		}
	}
}

func TestDuplicates(t *testing.T) {
	var f Filter
	expect(t, &f,
		uint64(0), true, uint64(0), false,
		uint64(1), true, uint64(1), false,
		uint64(100), true, uint64(1), false, uint64(100), false,
		uint64(50), true, uint64(50), false,
	)
}

func TestOutOfOrderWithinWindow(t *testing.T) {
	var f Filter
	top := uint64(WindowSize + 1000)
	expect(t, &f, top, true)
	// Every counter from top-WindowSize to top-1 is accepted exactly once,
	// in descending order (the worst reordering).
	for c := top - 1; c >= top-WindowSize; c-- {
		if !f.Check(c) {
			t.Fatalf("counter %d (%d behind) rejected", c, top-c)
		}
	}
	for c := top - WindowSize; c <= top; c++ {
		if f.Check(c) {
			t.Fatalf("counter %d accepted twice", c)
		}
	}
}

func TestTooOld(t *testing.T) {
	var f Filter
	top := uint64(5 * WindowSize)
	expect(t, &f,
		top, true,
		top-WindowSize, true, // the edge of the window
		top-WindowSize-1, false, // one past it
		uint64(0), false,
	)
	// Moving forward pushes formerly acceptable counters out.
	expect(t, &f, top+10, true, top-WindowSize+5, false, top-WindowSize+10, true)
}

func TestBigJumps(t *testing.T) {
	var f Filter
	expect(t, &f, uint64(1), true, uint64(2), true, uint64(3), true)
	// A jump larger than the ring must clear every word: the counters that
	// share ring slots with 1, 2, 3 in the new window must be accepted.
	j := uint64(1) << 40
	expect(t, &f, j, true, j-ringWords*wordBits+1, false /* too old */, j-1, true)
	for c := j - wordBits*4; c < j-1; c++ {
		if !f.Check(c) {
			t.Fatalf("counter %d after big jump rejected", c)
		}
	}
	// A jump of exactly the ring size and of one word.
	for _, d := range []uint64{ringWords * wordBits, wordBits, 1} {
		j += d
		expect(t, &f, j, true, j, false, j-1, d != 1) // after a step of 1, j-1 is the previous head
	}
	// Near the top of the counter space.
	expect(t, &f, uint64(math.MaxUint64), true, uint64(math.MaxUint64), false, uint64(math.MaxUint64-1), true)
}

// TestRingWrap checks that a word reused by the ring does not carry bits
// from the counters it held one lap earlier.
func TestRingWrap(t *testing.T) {
	var f Filter
	lap := uint64(ringWords * wordBits)
	// Mark every odd counter of the first lap.
	for c := uint64(1); c < lap; c += 2 {
		expect(t, &f, c, true)
	}
	// Jump exactly one lap ahead of counter 1: same ring slot.
	expect(t, &f, 1+lap, true)
	// Counters one lap ahead of the odd ones we marked share their bits and
	// must all be new.
	for c := lap + 3; c < 2*lap; c += 2 {
		if !f.Check(c) {
			t.Fatalf("counter %d rejected: stale bit from counter %d", c, c-lap)
		}
	}
}

func TestReset(t *testing.T) {
	var f Filter
	expect(t, &f, uint64(1)<<50, true, uint64(7), false)
	f.Reset()
	expect(t, &f, uint64(7), true, uint64(7), false, uint64(0), true)
}

func TestAllocationFree(t *testing.T) {
	var f Filter
	c := uint64(0)
	if a := testing.AllocsPerRun(1000, func() { c += 3; f.Check(c); f.Check(c - 1) }); a != 0 {
		t.Fatalf("Check allocates %.1f times", a)
	}
}

// model is the obviously-correct reference: a set of every accepted counter.
type model struct {
	seen map[uint64]bool
	last uint64
}

func (m *model) check(c uint64) bool {
	if m.seen[c] || (c < m.last && m.last-c > WindowSize) {
		return false
	}
	m.seen[c] = true
	m.last = max(m.last, c)
	return true
}

// FuzzCheck drives the filter and the map model with the same counters and
// requires identical verdicts. The input is a program of 3-byte steps: an
// opcode and a 16-bit operand, which move a cursor around the window (small
// steps, long jumps, exact repeats, far backwards).
func FuzzCheck(f *testing.F) {
	f.Add([]byte{0, 0, 1, 0, 0, 1, 1, 0, 5, 2, 0, 0})
	f.Add([]byte{3, 0xff, 0xff, 1, 0xff, 0x00, 1, 0x01, 0x00, 2, 0, 0})
	f.Add([]byte{3, 0x10, 0x00, 1, 0xfe, 0x3f, 4, 0, 0, 1, 0x01, 0x00})
	f.Add([]byte{5, 0, 0, 0, 0, 1, 1, 0xc0, 0xff})
	f.Fuzz(func(t *testing.T, prog []byte) {
		var flt Filter
		m := model{seen: map[uint64]bool{}}
		cur := uint64(0)
		for i := 0; i+3 <= len(prog) && i < 3*4096; i += 3 {
			arg := uint64(binary.BigEndian.Uint16(prog[i+1:]))
			switch prog[i] % 6 {
			case 0: // small step forward
				cur += arg % 128
			case 1: // step back, up to beyond the window
				cur -= min(cur, arg+arg/4)
			case 2: // repeat the current counter
			case 3: // jump forward by up to 2^16 words
				cur += arg << wordBitsLog
			case 4: // exactly one ring lap forward (same slot)
				cur += ringWords * wordBits
			case 5: // reset both
				flt.Reset()
				m = model{seen: map[uint64]bool{}}
				continue
			}
			if got, want := flt.Check(cur), m.check(cur); got != want {
				t.Fatalf("step %d: Check(%d) = %v, model says %v (last %d)", i/3, cur, got, want, m.last)
			}
		}
	})
}

func BenchmarkCheckInOrder(b *testing.B) {
	b.ReportAllocs()
	var f Filter
	c := uint64(0)
	for b.Loop() {
		c++
		f.Check(c)
	}
}

func BenchmarkCheckReordered(b *testing.B) {
	b.ReportAllocs()
	var f Filter
	c := uint64(WindowSize)
	for b.Loop() {
		c += 2
		f.Check(c)
		f.Check(c - 1001) // a late arrival from a slower path
	}
}
