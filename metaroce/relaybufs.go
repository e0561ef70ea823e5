package metaroce

// relayBufs holds a relayed message's supplied chunks until each is
// acknowledged: the chunk of index i at held[head+i-base]. Chunks are
// supplied and acknowledged in any order, but what is held at once is
// bounded by the credit the relay grants (a window of the message, however
// long the message), so a slice over the indexes from the oldest not yet
// released to the newest supplied replaces a map: no hashing, no growth by
// rehashing and no deletes per chunk (a map was about 6% of a relaying
// gateway's CPU), and nothing for the collector to scan but one slice.
type relayBufs struct {
	held [][]byte
	head int // held[:head] is spent, reused when it is half the slice
	base int // the chunk index of held[head]
	n    int // chunks held
}

// empty stands for a held chunk of no bytes (a message of length 0)
// given as nil: a nil slot is a chunk not held.
var empty = make([]byte, 0)

// get returns chunk i, if held.
func (r *relayBufs) get(i int) ([]byte, bool) {
	j := i - r.base
	if j < 0 || j >= len(r.held)-r.head {
		return nil, false
	}
	b := r.held[r.head+j]
	if b == nil {
		return nil, false
	}
	if cap(b) == 0 {
		return nil, true
	}
	return b, true
}

// put holds b as chunk i (not held, nor released before: Supply checks).
func (r *relayBufs) put(i int, b []byte) {
	if r.n == 0 {
		// Empty: the window starts at i.
		r.held, r.head, r.base = r.held[:0], 0, i
	}
	if i < r.base {
		// Before the window (chunks supplied out of order): move it.
		grow := r.base - i
		r.held = append(r.held, make([][]byte, grow)...)
		copy(r.held[r.head+grow:], r.held[r.head:len(r.held)-grow])
		clear(r.held[r.head : r.head+grow])
		r.base = i
	}
	for j := i - r.base; j >= len(r.held)-r.head; {
		r.held = append(r.held, nil)
	}
	if b == nil {
		b = empty
	}
	r.held[r.head+i-r.base] = b
	r.n++
}

// take removes chunk i and returns it, if held; the window's front moves
// past the chunks no longer held.
func (r *relayBufs) take(i int) ([]byte, bool) {
	b, ok := r.get(i)
	if !ok {
		return nil, false
	}
	r.held[r.head+i-r.base] = nil
	r.n--
	for r.head < len(r.held) && r.held[r.head] == nil && r.n > 0 {
		r.head++
		r.base++
	}
	if r.n == 0 {
		clear(r.held)
		r.held, r.head = r.held[:0], 0
	} else if r.head > len(r.held)/2 {
		k := copy(r.held, r.held[r.head:])
		clear(r.held[k:])
		r.held, r.head = r.held[:k], 0
	}
	return b, true
}

// all calls f with every chunk held and empties r.
func (r *relayBufs) all(f func([]byte)) {
	for _, b := range r.held[r.head:] {
		if b == nil {
			continue
		}
		if cap(b) == 0 {
			b = nil
		}
		f(b)
	}
	clear(r.held)
	*r = relayBufs{held: r.held[:0]}
}
