// Package seal is the encrypted envelope of every datagram exchanged
// between two mrgw gateways over the WAN: it turns an inner packet into an
// authenticated, encrypted, replay-protected UDP payload and back.
//
// # Wire layout
//
// All integers are big-endian. Offsets are in bytes.
//
//	offset  size  field
//	0       1     type: 1 = data (TypeData); other values are reserved
//	1       1     epoch: the key phase; lets a new key overlap the old one
//	2       2     reserved: zero on send; a non-zero value is rejected
//	4       8     counter: per (key, direction), starts at 0, never reused
//	12      n     ciphertext of the n-byte inner packet
//	12+n    16    AEAD tag
//
// The 12-byte header (offsets 0–11) is the AEAD's additional data, so none
// of it can be changed in flight. The 96-bit nonce is four zero bytes
// followed by the 8-byte counter. A datagram therefore costs Overhead (28)
// bytes more than its inner packet.
//
// # Keys and epochs
//
// Keys come from the control channel (tunnel/control); this package only uses
// them. A Sealer holds one direction's key, epoch and next counter and
// refuses to go past a counter limit, so a (key, nonce) pair is never used
// twice. That limit is a hard stop against nonce reuse, not the rekey
// policy: for AES-GCM the usual confidentiality bound asks for a new key far
// earlier (on the order of 2^32 datagrams), which the control channel does by
// installing a new epoch.
//
// An Opener holds the current epoch and, during a rekey, the previous one,
// each with its cached AEAD and its own replay window (netio/replay), so
// datagrams still in flight under the old key are accepted until the
// previous epoch is dropped.
//
// Sealer and Opener are safe for concurrent use and do not allocate per
// datagram. This package imports netio/replay and nothing else from mrgw.
package seal

import (
	"crypto/aes"
	"crypto/cipher"
	"encoding/binary"
	"fmt"
	"sync"

	"golang.org/x/crypto/chacha20poly1305"
)

// Envelope sizes.
const (
	// TypeData is the type byte of a datagram that carries an inner packet.
	TypeData = 1
	// HeaderLen is the length of the cleartext, authenticated header.
	HeaderLen = 12
	// TagLen is the length of the AEAD tag of every suite.
	TagLen = 16
	// Overhead is how many bytes Seal adds to an inner packet.
	Overhead = HeaderLen + TagLen
	// NonceLen is the AEAD nonce length of every suite (96 bits).
	NonceLen = 12
)

// DefaultLimit is the number of datagrams a Sealer seals under one key when
// no other limit is given: counters 0 to 2^60-1.
const DefaultLimit = 1 << 60

// Error is the type of every error Seal and Open return for a datagram.
// Its values are small integers, so a caller can count them in an array
// indexed by the error.
type Error uint8

// Errors returned by Open and Seal. Compare with errors.Is or ==.
const (
	// ErrTooShort: the datagram is shorter than Overhead.
	ErrTooShort Error = iota + 1
	// ErrUnknownType: the type byte is not TypeData, or the reserved bytes
	// are not zero (a header this version does not understand).
	ErrUnknownType
	// ErrUnknownEpoch: the epoch is neither the current nor the previous one.
	ErrUnknownEpoch
	// ErrAuth: the AEAD rejected the datagram: wrong key, or altered.
	ErrAuth
	// ErrReplayed: authentic, but its counter was already accepted or is
	// older than the replay window.
	ErrReplayed
	// ErrKeyExhausted: the Sealer reached its counter limit; a new key (a
	// new Sealer) is needed before anything more can be sent.
	ErrKeyExhausted

	// NumErrors is one more than the largest Error value.
	NumErrors
)

func (e Error) Error() string {
	switch e {
	case ErrTooShort:
		return "seal: datagram too short"
	case ErrUnknownType:
		return "seal: unknown datagram type"
	case ErrUnknownEpoch:
		return "seal: unknown key epoch"
	case ErrAuth:
		return "seal: authentication failed"
	case ErrReplayed:
		return "seal: replayed datagram"
	case ErrKeyExhausted:
		return "seal: key exhausted"
	}
	return fmt.Sprintf("seal: error %d", uint8(e))
}

// Suite names an AEAD.
type Suite uint8

// The supported suites.
const (
	AES128GCM        Suite = iota + 1 // "aes-128-gcm", 16-byte key
	AES256GCM                         // "aes-256-gcm", 32-byte key
	ChaCha20Poly1305                  // "chacha20-poly1305", 32-byte key
)

// ParseSuite returns the suite with the given configuration name:
// "aes-128-gcm", "aes-256-gcm" or "chacha20-poly1305".
func ParseSuite(name string) (Suite, error) {
	for _, s := range []Suite{AES128GCM, AES256GCM, ChaCha20Poly1305} {
		if s.String() == name {
			return s, nil
		}
	}
	return 0, fmt.Errorf("seal: unknown cipher suite %q (want aes-128-gcm, aes-256-gcm or chacha20-poly1305)", name)
}

// String returns the suite's configuration name.
func (s Suite) String() string {
	switch s {
	case AES128GCM:
		return "aes-128-gcm"
	case AES256GCM:
		return "aes-256-gcm"
	case ChaCha20Poly1305:
		return "chacha20-poly1305"
	}
	return fmt.Sprintf("suite(%d)", uint8(s))
}

// KeyLen returns the key length of the suite in bytes, 0 if unknown.
func (s Suite) KeyLen() int {
	switch s {
	case AES128GCM:
		return 16
	case AES256GCM, ChaCha20Poly1305:
		return 32
	}
	return 0
}

// newAEAD builds the suite's AEAD. It is built once per key and cached:
// building it costs more than sealing a packet.
func (s Suite) newAEAD(key []byte) (cipher.AEAD, error) {
	if n := s.KeyLen(); n == 0 || len(key) != n {
		if n == 0 {
			return nil, fmt.Errorf("seal: unknown cipher suite %d", uint8(s))
		}
		return nil, fmt.Errorf("seal: %v needs a %d-byte key, got %d bytes", s, n, len(key))
	}
	if s == ChaCha20Poly1305 {
		return chacha20poly1305.New(key)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

// Key is one direction's keying material for one epoch.
type Key struct {
	Suite  Suite
	Secret []byte // Suite.KeyLen() bytes; copied by the AEAD, not retained
	Epoch  uint8
}

// Header is the cleartext part of a datagram.
type Header struct {
	Type    uint8
	Epoch   uint8
	Counter uint64
}

// ParseHeader decodes the header of a sealed datagram without checking its
// authenticity: the result is only a hint (for example, which epoch a
// datagram claims) until Open succeeds.
func ParseHeader(b []byte) (Header, error) {
	if len(b) < Overhead {
		return Header{}, ErrTooShort
	}
	if b[0] != TypeData || b[2] != 0 || b[3] != 0 {
		return Header{}, ErrUnknownType
	}
	return Header{Type: b[0], Epoch: b[1], Counter: binary.BigEndian.Uint64(b[4:12])}, nil
}

// putHeader writes the 12-byte header into h.
func putHeader(h []byte, epoch uint8, counter uint64) {
	h[0] = TypeData
	h[1] = epoch
	h[2], h[3] = 0, 0
	binary.BigEndian.PutUint64(h[4:12], counter)
}

// nonces lends out nonce buffers. A nonce passed to cipher.AEAD (an
// interface) escapes to the heap, so a stack array would cost one allocation
// per datagram; a per-Sealer buffer would need a lock. A pool of pointers is
// lock-free per P and allocation-free in steady state.
var nonces = sync.Pool{New: func() any { return new([NonceLen]byte) }}

func getNonce(counter uint64) *[NonceLen]byte {
	n := nonces.Get().(*[NonceLen]byte)
	putNonce(n, counter)
	return n
}

// putNonce writes counter's nonce into n: four zero bytes, then the
// counter.
func putNonce(n *[NonceLen]byte, counter uint64) {
	n[0], n[1], n[2], n[3] = 0, 0, 0, 0
	binary.BigEndian.PutUint64(n[4:], counter)
}
