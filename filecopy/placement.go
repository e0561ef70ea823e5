//go:build linux

package filecopy

import (
	"crypto/sha256"
	"errors"
	"hash/crc32"
	"os"
	"slices"
	"sync"

	"golang.org/x/sys/unix"
)

func (ss *session) open(m *msg) error {
	s := ss.s
	e, err := ss.file(m.Idx, true)
	if err != nil {
		return err
	}
	if e.f != nil {
		return cerr(codeProtocol, "%s opened twice", e.rel)
	}
	part, state := workNames(e.rel)
	f := &rfile{e: e, part: part, state: state, n: chunksOf(e.size, ss.chunk), wins: map[uint64]*rwin{}, sum: make(chan hashResult, 1)}
	f.cond = sync.NewCond(&f.mu)
	if e.state != nil {
		f.fd, err = s.root.OpenFile(part, os.O_RDWR, 0)
		f.done = slices.Clone(e.state.Done)
	}
	if e.state == nil || err != nil {
		f.fd, err = s.root.OpenFile(part, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
		if err != nil {
			return rootErr(e.rel, err)
		}
		if err := f.fd.Truncate(int64(e.size)); err != nil {
			f.fd.Close()
			return rootErr(e.rel, err)
		}
		f.done = newBitmap(f.n)
		e.state = nil
	}
	e.f = f
	if e.state == nil {
		if err := ss.checkpoint(f); err != nil {
			return err
		}
	}
	f.hashing = true
	go f.hash(int64(ss.chunk))
	return nil
}

// hash computes the file's SHA-256 in order, as chunks are verified.
func (f *rfile) hash(chunk int64) {
	h := sha256.New()
	buf := make([]byte, 1<<20)
	size := int64(f.e.size)
	for c := uint64(0); c < f.n; c++ {
		f.mu.Lock()
		for !f.done.has(c) && !f.stop {
			f.cond.Wait()
		}
		stop := f.stop
		f.mu.Unlock()
		if stop {
			f.sum <- hashResult{err: errors.New("stopped")}
			return
		}
		off := int64(c) * chunk
		if err := hashRange(h, f.fd, off, min(off+chunk, size), buf); err != nil {
			f.sum <- hashResult{err: err}
			return
		}
	}
	var r hashResult
	h.Sum(r.sum[:0])
	f.sum <- r
}

func (ss *session) largeFile(idx uint32) (*rfile, error) {
	e, err := ss.file(idx, true)
	if err != nil {
		return nil, err
	}
	if e.f == nil {
		return nil, cerr(codeProtocol, "%s not opened", e.rel)
	}
	return e.f, nil
}

func (ss *session) mapWindow(m *msg) error {
	s := ss.s
	f, err := ss.largeFile(m.Idx)
	if err != nil {
		return err
	}
	nw := (f.e.size + ss.window - 1) / ss.window
	per := ss.window / ss.chunk
	switch {
	case m.N >= nw:
		return cerr(codeProtocol, "%s: window %d of %d", f.e.rel, m.N, nw)
	case f.wins[m.N] != nil:
		return cerr(codeProtocol, "%s: window %d mapped twice", f.e.rel, m.N)
	case ss.mapped >= s.cfg.MaxWindows:
		return cerr(codeProtocol, "more than %d windows mapped at once", s.cfg.MaxWindows)
	case per < 64 && m.Mask>>per != 0:
		return cerr(codeProtocol, "%s: window mask %#x beyond its %d chunks", f.e.rel, m.Mask, per)
	}
	off := m.N * ss.window
	length := min(ss.window, f.e.size-off)
	// Reserve the blocks the WRITEs will fill: a write into a mapping
	// that finds the disk full kills the process (SIGBUS), an fallocate
	// fails with ENOSPC and is reported.
	for i := uint64(0); i < per; i++ {
		if m.Mask&(1<<i) == 0 {
			continue
		}
		c := m.N*per + i
		if c >= f.n {
			return cerr(codeProtocol, "%s: chunk %d of %d", f.e.rel, c, f.n)
		}
		co := c * ss.chunk
		cl := min(ss.chunk, f.e.size-co)
		if err := unix.Fallocate(int(f.fd.Fd()), 0, int64(co), int64(cl)); err != nil {
			if errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT) {
				return cerr(codeDiskFull, "disk full: %s: reserving %d bytes at %d: %v", f.e.rel, cl, co, err)
			}
			if !errors.Is(err, unix.EOPNOTSUPP) {
				return cerr(codeIO, "%s: fallocate: %v", f.e.rel, err)
			}
		}
	}
	mem, err := unix.Mmap(int(f.fd.Fd()), int64(off), int(length), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return cerr(codeIO, "%s: mmap window %d: %v", f.e.rel, m.N, err)
	}
	// Fault the pages the WRITEs will fill in here, on the session's
	// goroutine, before the key is announced: else every first touch of
	// a page faults on the host's owner goroutine, in the middle of
	// placing packets, with the file system's work per page (allocating
	// it, starting a journal handle). Where the kernel cannot (before
	// 5.14), the WRITEs fault them in as they come.
	for i := uint64(0); i < per; i++ {
		if m.Mask&(1<<i) == 0 {
			continue
		}
		lo := i * ss.chunk
		if lo >= length {
			break
		}
		hi := min(lo+ss.chunk, length)
		_ = unix.Madvise(mem[lo:hi], unix.MADV_POPULATE_WRITE)
	}
	key := s.newKey()
	if err := s.h.RegisterMemory(key, mem); err != nil {
		unix.Munmap(mem)
		s.freeKey(key)
		return cerr(codeIO, "register memory: %v", err)
	}
	f.wins[m.N] = &rwin{key: key, mem: mem, off: off}
	ss.mapped++
	s.addMapped(int64(length))
	return ss.send(&msg{Type: tMapped, Idx: m.Idx, N: m.N, Key: key})
}

// release deregisters a window (no WRITE lands in it afterwards) and
// unmaps it.
func (ss *session) release(f *rfile, n uint64) {
	w := f.wins[n]
	if w == nil {
		return
	}
	delete(f.wins, n)
	_ = ss.s.h.DeregisterMemory(w.key)
	ss.s.freeKey(w.key)
	_ = unix.Munmap(w.mem)
	ss.mapped--
	ss.s.ctr.mapped.Add(^uint64(len(w.mem) - 1))
}

func (ss *session) unmap(m *msg) error {
	f, err := ss.largeFile(m.Idx)
	if err != nil {
		return err
	}
	if f.wins[m.N] == nil {
		return cerr(codeProtocol, "%s: window %d not mapped", f.e.rel, m.N)
	}
	ss.release(f, m.N)
	return ss.checkpoint(f)
}

// checkpoint makes the verified chunks durable, then records them in the
// state file (written beside it and renamed over it, so it is whole or
// the previous one).
func (ss *session) checkpoint(f *rfile) error {
	s := ss.s
	if err := unix.Fdatasync(int(f.fd.Fd())); err != nil {
		return rootErr(f.e.rel, err)
	}
	f.mu.Lock()
	st := &fileState{Size: f.e.size, Mtime: f.e.mtime, Mode: f.e.mode, Chunk: ss.chunk, Done: slices.Clone(f.done)}
	f.mu.Unlock()
	tmp := f.state + ".new"
	w, err := s.root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return rootErr(f.state, err)
	}
	_, err = w.Write(encodeState(st))
	if err == nil {
		err = w.Sync()
	}
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = s.root.Rename(tmp, f.state)
	}
	if err != nil {
		return rootErr(f.state, err)
	}
	s.ctr.chunksPersisted.Add(f.dirty)
	f.dirty = 0
	return nil
}

func (ss *session) chunkDone(m *msg) error {
	s := ss.s
	f, err := ss.largeFile(m.Idx)
	if err != nil {
		return err
	}
	if m.N >= f.n {
		return cerr(codeProtocol, "%s: chunk %d of %d", f.e.rel, m.N, f.n)
	}
	wn := m.N * ss.chunk / ss.window
	w := f.wins[wn]
	if w == nil {
		return cerr(codeProtocol, "%s: chunk %d in window %d, not mapped", f.e.rel, m.N, wn)
	}
	lo := m.N*ss.chunk - w.off
	hi := lo + min(ss.chunk, f.e.size-m.N*ss.chunk)
	if s.cfg.corrupt != nil {
		s.cfg.corrupt(f.e.rel, m.N, w.mem[lo:hi])
	}
	ok := crc32.Checksum(w.mem[lo:hi], castagnoli) == m.CRC
	if ok {
		f.mu.Lock()
		if !f.done.has(m.N) {
			f.done.set(m.N)
			f.dirty++
		}
		f.cond.Broadcast()
		f.mu.Unlock()
		s.ctr.chunksVerified.Add(1)
		s.ctr.bytesVerified.Add(hi - lo)
	} else {
		s.ctr.chunksBad.Add(1)
		s.log.Warn("filecopy: chunk CRC mismatch: asked again", "path", f.e.rel, "chunk", m.N)
	}
	return ss.send(&msg{Type: tChunkAck, Idx: m.Idx, N: m.N, OK: ok})
}

func (ss *session) zero(m *msg) error {
	f, err := ss.largeFile(m.Idx)
	if err != nil {
		return err
	}
	if m.N >= f.n || m.Count > f.n-m.N {
		return cerr(codeProtocol, "%s: zero chunks %d+%d of %d", f.e.rel, m.N, m.Count, f.n)
	}
	for c := m.N; c < m.N+m.Count; c++ {
		f.mu.Lock()
		had := f.done.has(c)
		f.mu.Unlock()
		if had {
			continue
		}
		if f.wins[c*ss.chunk/ss.window] != nil {
			return cerr(codeProtocol, "%s: zero chunk %d in a mapped window", f.e.rel, c)
		}
		off := int64(c * ss.chunk)
		end := min(off+int64(ss.chunk), int64(f.e.size))
		if !isHole(f.fd, off, end) {
			// An earlier copy wrote here: make it a hole again.
			if err := punch(f.fd, off, end); err != nil {
				return rootErr(f.e.rel, err)
			}
		}
		f.mu.Lock()
		f.done.set(c)
		f.dirty++
		f.cond.Broadcast()
		f.mu.Unlock()
	}
	return nil
}

// punch zeroes [off, end) of f: a hole where the file system can, else
// written zeros.
func punch(f *os.File, off, end int64) error {
	err := unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, end-off)
	if err == nil || !errors.Is(err, unix.EOPNOTSUPP) {
		return err
	}
	for off < end {
		n := min(int64(len(zeros)), end-off)
		if _, err := f.WriteAt(zeros[:n], off); err != nil {
			return err
		}
		off += n
	}
	return nil
}
