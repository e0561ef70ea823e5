// Package replay is the anti-replay filter of the tunnel datapath: it
// accepts each 64-bit datagram counter at most once and rejects counters
// that fall behind a sliding window, so that an attacker who records
// authenticated tunnel datagrams cannot have them delivered again.
//
// The algorithm is RFC 6479's bitmap ring, as in wireguard-go's replay
// package: the window is a ring of 64-bit words; moving the window forward
// clears the words it enters, so the cost per counter is O(1) (a big jump
// clears at most the whole ring once) and no memory is allocated.
//
// The window is wide on purpose. mrgw sprays one tunnel's datagrams over many
// paths whose round trips differ by milliseconds, so datagrams routinely
// arrive thousands of counters out of order; at 10 Gbit/s of 1400-byte
// datagrams, 10 ms of path skew is about 9,000 counters. WindowSize covers
// 65,472 counters (about 70 ms of skew at that rate) in 8 KiB.
//
// Check must be called only after the datagram has been authenticated,
// otherwise forged counters would slide the window. A Filter is not safe for
// concurrent use; its owner (netio/seal.Opener) serializes access.
//
// This package imports nothing from mrgw.
package replay

const (
	wordBitsLog = 6
	wordBits    = 1 << wordBitsLog // bits per ring word
	ringWords   = 1 << 10          // ring size in words; power of two
	wordMask    = ringWords - 1
	bitMask     = wordBits - 1

	// WindowSize is how far behind the highest counter seen a counter may
	// be and still be accepted (once). It is one word less than the ring,
	// because the word holding the highest counter is only partly in the
	// window.
	WindowSize = (ringWords - 1) * wordBits
)

// Filter is a sliding-window replay filter. The zero value is ready to use
// and accepts any counter first.
type Filter struct {
	last uint64 // highest counter accepted so far
	ring [ringWords]uint64
}

// Reset forgets every counter seen, as for a fresh key.
func (f *Filter) Reset() {
	f.last = 0
	clear(f.ring[:])
}

// Check reports whether counter is new: not accepted before and not older
// than WindowSize behind the highest counter accepted so far. An accepted
// counter is recorded, so a second Check of it returns false.
func (f *Filter) Check(counter uint64) bool {
	word := counter >> wordBitsLog
	if counter > f.last {
		// Slide the window forward: every word between the old head word
		// and the new one now stands for counters not yet seen.
		cur := f.last >> wordBitsLog
		n := word - cur
		if n > ringWords {
			n = ringWords // the whole ring is stale; clear each word once
		}
		for i := cur + 1; i <= cur+n; i++ {
			f.ring[i&wordMask] = 0
		}
		f.last = counter
	} else if f.last-counter > WindowSize {
		return false
	}
	w := &f.ring[word&wordMask]
	bit := uint64(1) << (counter & bitMask)
	if *w&bit != 0 {
		return false
	}
	*w |= bit
	return true
}
