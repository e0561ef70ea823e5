package metaroce

// relayBufs holds a relayed message's supplied chunks until each is
// acknowledged: the chunk of index i at held[head+i-base], with the
// buffer it lies in (what release gives back: the chunk itself, or a
// whole receive buffer the relay kept instead of copying the chunk out). Chunks are
// supplied and acknowledged in any order, but what is held at once is
// bounded by the credit the relay grants (a window of the message, however
// long the message), so a slice over the indexes from the oldest not yet
// released to the newest supplied replaces a map: no hashing, no growth by
// rehashing and no deletes per chunk (a map was about 6% of a relaying
// gateway's CPU), and nothing for the collector to scan but one slice.
type relayBufs struct {
	held []heldChunk
	head int // held[:head] is spent, reused when it is half the slice
	base int // the chunk index of held[head]
	n    int // chunks held
}

// maxHeldPresize bounds the chunks a relayed message makes room for when
// it starts (48 KiB): a longer message holds at most its credit's worth
// at once, and grows the slice only if it holds more.
const maxHeldPresize = 1024

// heldChunk is a supplied chunk and the buffer it lies in.
type heldChunk struct {
	chunk, buf []byte
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
	b := r.held[r.head+j].chunk
	if b == nil {
		return nil, false
	}
	if cap(b) == 0 {
		return nil, true
	}
	return b, true
}

// put holds b, lying in buf, as chunk i (not held, nor released before:
// Supply checks).
func (r *relayBufs) put(i int, b, buf []byte) {
	if r.n == 0 {
		// Empty: the window starts at i.
		r.held, r.head, r.base = r.held[:0], 0, i
	}
	if i < r.base {
		// Before the window (chunks supplied out of order): move it.
		grow := r.base - i
		r.held = append(r.held, make([]heldChunk, grow)...)
		copy(r.held[r.head+grow:], r.held[r.head:len(r.held)-grow])
		clear(r.held[r.head : r.head+grow])
		r.base = i
	}
	for j := i - r.base; j >= len(r.held)-r.head; {
		r.held = append(r.held, heldChunk{})
	}
	if b == nil {
		b = empty
	}
	if buf == nil {
		buf = b
	}
	r.held[r.head+i-r.base] = heldChunk{chunk: b, buf: buf}
	r.n++
}

// take removes chunk i and returns the buffer it lies in, if held; the
// window's front moves past the chunks no longer held.
func (r *relayBufs) take(i int) ([]byte, bool) {
	if _, ok := r.get(i); !ok {
		return nil, false
	}
	h := &r.held[r.head+i-r.base]
	b := h.buf
	if cap(b) == 0 {
		b = nil
	}
	*h = heldChunk{}
	r.n--
	for r.head < len(r.held) && r.held[r.head].chunk == nil && r.n > 0 {
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

// all calls f with the buffer of every chunk held and empties r.
func (r *relayBufs) all(f func([]byte)) {
	for _, h := range r.held[r.head:] {
		if h.chunk == nil {
			continue
		}
		b := h.buf
		if cap(b) == 0 {
			b = nil
		}
		f(b)
	}
	clear(r.held)
	*r = relayBufs{held: r.held[:0]}
}
