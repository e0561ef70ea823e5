package seal

import (
	"crypto/cipher"
	"slices"
	"sync/atomic"
)

// Sealer encrypts one direction's datagrams under one key and epoch. It is
// safe for concurrent use: each Seal takes the next counter atomically.
type Sealer struct {
	aead  cipher.AEAD
	epoch uint8
	limit uint64
	next  atomic.Uint64 // next counter to use
}

// NewSealer returns a Sealer for key whose counters run from 0 to limit-1.
// limit 0 means DefaultLimit.
func NewSealer(key Key, limit uint64) (*Sealer, error) {
	aead, err := key.Suite.newAEAD(key.Secret)
	if err != nil {
		return nil, err
	}
	if limit == 0 {
		limit = DefaultLimit
	}
	return &Sealer{aead: aead, epoch: key.Epoch, limit: limit}, nil
}

// Epoch returns the key epoch this Sealer writes into its datagrams.
func (s *Sealer) Epoch() uint8 { return s.epoch }

// Sent returns how many counters have been used so far; the control channel
// compares it with its rekey threshold.
func (s *Sealer) Sent() uint64 { return min(s.next.Load(), s.limit) }

// Remaining returns how many more datagrams the Sealer will seal.
func (s *Sealer) Remaining() uint64 { return s.limit - s.Sent() }

// Seal appends the sealed datagram carrying plaintext to dst and returns the
// extended slice. It allocates nothing when dst has Overhead+len(plaintext)
// bytes of spare capacity. To seal in place, put the plaintext at
// buf[HeaderLen:] and call Seal(buf[:0], buf[HeaderLen:HeaderLen+n]); any
// other overlap of plaintext with dst's spare capacity is invalid.
//
// Once the limit is reached Seal returns ErrKeyExhausted and dst unchanged.
func (s *Sealer) Seal(dst, plaintext []byte) ([]byte, error) {
	// Take a counter with compare-and-swap rather than Add, so that the
	// counter never moves past the limit however often Seal is called
	// after exhaustion (Add could eventually wrap around to reused values).
	var ctr uint64
	for {
		ctr = s.next.Load()
		if ctr >= s.limit {
			return dst, ErrKeyExhausted
		}
		if s.next.CompareAndSwap(ctr, ctr+1) {
			break
		}
	}
	n := len(dst)
	out := slices.Grow(dst, Overhead+len(plaintext))[:n+HeaderLen]
	putHeader(out[n:], s.epoch, ctr)
	nonce := getNonce(ctr)
	out = s.aead.Seal(out, nonce[:], plaintext, out[n:n+HeaderLen])
	nonces.Put(nonce)
	return out, nil
}

// Run is a run of consecutive counters that one goroutine took from a
// Sealer at once (Sealer.Reserve) and seals with, one datagram per counter.
//
// Why: two sender goroutines sealing for one peer each took every counter
// with a compare-and-swap on the Sealer's one counter, a cache line both
// cores wrote for every datagram, and each seal borrowed a nonce buffer
// from a sync.Pool. A sender reserves its batch's counters in one
// compare-and-swap and seals them from a nonce buffer of its own. The
// datagrams two runs seal reach the peer out of counter order, as they
// did when the senders took counters one at a time; the peer's replay
// window (netio/replay.WindowSize) is far wider than a batch.
//
// A Run is not safe for concurrent use; its zero value has no counters.
// Counters left unused in a Run are never used by anyone: a gap the
// receiver sees as lost datagrams, never a reused nonce.
type Run struct {
	s         *Sealer
	next, end uint64
	nonce     [NonceLen]byte
}

// Reserve hands r the next n counters (fewer if the limit comes first,
// none once it is reached), replacing whatever r had left. It reports how
// many r got.
func (s *Sealer) Reserve(r *Run, n int) int {
	r.s = s
	r.next, r.end = 0, 0
	if n <= 0 {
		return 0
	}
	for {
		ctr := s.next.Load()
		if ctr >= s.limit {
			return 0
		}
		k := min(uint64(n), s.limit-ctr)
		if s.next.CompareAndSwap(ctr, ctr+k) {
			r.next, r.end = ctr, ctr+k
			return int(k)
		}
	}
}

// Left returns how many counters r has not used yet.
func (r *Run) Left() int { return int(r.end - r.next) }

// Sealer returns the Sealer r's counters came from (nil: never reserved).
func (r *Run) Sealer() *Sealer { return r.s }

// Seal is Sealer.Seal with r's next counter: the same datagram, the same
// in-place contract. It returns ErrKeyExhausted and dst unchanged when r
// has no counter left.
func (r *Run) Seal(dst, plaintext []byte) ([]byte, error) {
	if r.next >= r.end {
		return dst, ErrKeyExhausted
	}
	ctr := r.next
	r.next++
	s := r.s
	n := len(dst)
	out := slices.Grow(dst, Overhead+len(plaintext))[:n+HeaderLen]
	putHeader(out[n:], s.epoch, ctr)
	putNonce(&r.nonce, ctr)
	return s.aead.Seal(out, r.nonce[:], plaintext, out[n:n+HeaderLen]), nil
}
