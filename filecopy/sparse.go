//go:build linux

package filecopy

import (
	"errors"
	"hash"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// zeros feeds holes into a hash without reading them.
var zeros = make([]byte, 1<<20)

// nextData returns the offset of the first data at or after off, or end
// if there is none before end (SEEK_DATA; a file system without it
// reports all of the file as data).
func nextData(f *os.File, off, end int64) int64 {
	d, err := unix.Seek(int(f.Fd()), off, unix.SEEK_DATA)
	switch {
	case errors.Is(err, unix.ENXIO):
		return end
	case err != nil:
		return off
	}
	return min(d, end)
}

// nextHole returns the end of the data that starts at off (SEEK_HOLE),
// at most end.
func nextHole(f *os.File, off, end int64) int64 {
	h, err := unix.Seek(int(f.Fd()), off, unix.SEEK_HOLE)
	if err != nil {
		return end
	}
	return min(max(h, off), end)
}

// isHole reports whether [off, end) of f holds no data.
func isHole(f *os.File, off, end int64) bool { return nextData(f, off, end) >= end }

// hashRange feeds [off, end) of f into h, holes as zeros without reading
// them. buf bounds the memory.
func hashRange(h hash.Hash, f *os.File, off, end int64, buf []byte) error {
	for off < end {
		d := nextData(f, off, end)
		if err := hashZeros(h, d-off); err != nil {
			return err
		}
		off = d
		if off >= end {
			return nil
		}
		stop := nextHole(f, off, end)
		if stop <= off {
			stop = end
		}
		for off < stop {
			n := int(min(int64(len(buf)), stop-off))
			m, err := f.ReadAt(buf[:n], off)
			if m < n && (err == nil || err == io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			if err != nil {
				return err
			}
			h.Write(buf[:n])
			off += int64(n)
		}
	}
	return nil
}

func hashZeros(h hash.Hash, n int64) error {
	for n > 0 {
		k := min(n, int64(len(zeros)))
		h.Write(zeros[:k])
		n -= k
	}
	return nil
}
