package filecopy

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// The sidecar state file sits next to a large file's temporary copy and
// says which chunks are complete and verified there. It names the source
// it belongs to (size, modification time, mode, chunk size), so that a
// copy of a changed source starts over instead of mixing two versions.
// A checksum covers the whole file: a torn write (power loss in the
// middle of an update) reads as no state, never as a wrong one.

const (
	stateMagic   = 0x4d524350 // "MRCP"
	stateVersion = 1
	stateHeader  = 4 + 4 + 8 + 8 + 4 + 8 + 4
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// fileState is a large file's resume state.
type fileState struct {
	Size  uint64
	Mtime int64
	Mode  uint32
	Chunk uint64
	Done  bitmap // verified chunks
}

// matches reports whether s belongs to the source described.
func (s *fileState) matches(size uint64, mtime int64, mode uint32, chunk uint64) bool {
	return s.Size == size && s.Mtime == mtime && s.Mode == mode && s.Chunk == chunk
}

func chunksOf(size, chunk uint64) uint64 { return (size + chunk - 1) / chunk }

func encodeState(s *fileState) []byte {
	n := chunksOf(s.Size, s.Chunk)
	b := make([]byte, 0, stateHeader+len(s.Done)+4)
	be := binary.BigEndian
	b = be.AppendUint32(b, stateMagic)
	b = be.AppendUint32(b, stateVersion)
	b = be.AppendUint64(b, s.Size)
	b = be.AppendUint64(b, uint64(s.Mtime))
	b = be.AppendUint32(b, s.Mode)
	b = be.AppendUint64(b, s.Chunk)
	b = be.AppendUint32(b, uint32(n))
	b = append(b, s.Done[:(n+7)/8]...)
	return be.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

var errState = errors.New("filecopy: malformed state file")

func decodeState(b []byte) (*fileState, error) {
	if len(b) < stateHeader+4 {
		return nil, fmt.Errorf("%w: %d bytes", errState, len(b))
	}
	be := binary.BigEndian
	body, sum := b[:len(b)-4], be.Uint32(b[len(b)-4:])
	if crc32.Checksum(body, castagnoli) != sum {
		return nil, fmt.Errorf("%w: checksum", errState)
	}
	if be.Uint32(b) != stateMagic || be.Uint32(b[4:]) != stateVersion {
		return nil, fmt.Errorf("%w: magic or version", errState)
	}
	s := &fileState{Size: be.Uint64(b[8:]), Mtime: int64(be.Uint64(b[16:])), Mode: be.Uint32(b[24:]), Chunk: be.Uint64(b[28:])}
	n := uint64(be.Uint32(b[36:]))
	if s.Chunk < minChunk || s.Chunk > maxChunk || s.Chunk&(s.Chunk-1) != 0 {
		return nil, fmt.Errorf("%w: chunk size %d", errState, s.Chunk)
	}
	if n > maxChunks || n != chunksOf(s.Size, s.Chunk) {
		return nil, fmt.Errorf("%w: %d chunks for %d bytes", errState, n, s.Size)
	}
	bits := body[stateHeader:]
	if uint64(len(bits)) != (n+7)/8 {
		return nil, fmt.Errorf("%w: bitmap of %d bytes for %d chunks", errState, len(bits), n)
	}
	s.Done = newBitmap(n)
	copy(s.Done, bits)
	if s.Done.any(n) {
		return nil, fmt.Errorf("%w: bits past the last chunk", errState)
	}
	return s, nil
}

// bitmap is a set of chunk numbers.
type bitmap []byte

func newBitmap(n uint64) bitmap    { return make(bitmap, (n+7)/8) }
func (b bitmap) has(i uint64) bool { return i/8 < uint64(len(b)) && b[i/8]&(1<<(i%8)) != 0 }
func (b bitmap) set(i uint64)      { b[i/8] |= 1 << (i % 8) }
func (b bitmap) count(n uint64) (c uint64) {
	for i := uint64(0); i < n; i++ {
		if b.has(i) {
			c++
		}
	}
	return c
}

// any reports whether a bit at or past n is set.
func (b bitmap) any(n uint64) bool {
	for i := n; i < uint64(len(b))*8; i++ {
		if b.has(i) {
			return true
		}
	}
	return false
}

// Chunk sizes the receiver accepts (a power of two).
const (
	minChunk = 64 << 10
	maxChunk = 64 << 20
)
