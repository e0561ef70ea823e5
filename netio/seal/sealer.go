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
