//go:build linux

package filecopy

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"sync"

	"github.com/mrgw/mrgw/flowctl"
)

// transfer sends the manifest, waits for the receiver's answers, then
// the files, and waits for every file to be committed.
func (s *sender) transfer() {
	for i, e := range s.entries {
		if e.kind == kindFile && e.size > s.inline {
			e.data = dataBytes(e.src, e.size, int64(s.chunk))
		} else {
			e.data = e.size
		}
		if !s.queue(&msg{Type: tEntry, Idx: uint32(i), Kind: e.kind, Mode: e.mode, Size: uint64(e.size),
			DataBytes: uint64(e.data), Mtime: e.mtime, Path: e.rel}) {
			return
		}
	}
	if !s.queue(&msg{Type: tManifestEnd, Count: uint64(len(s.entries))}) {
		return
	}
	for _, ch := range []chan struct{}{s.haveAll, s.manOK} {
		select {
		case <-ch:
		case <-s.ctx.Done():
			return
		}
	}
	for range s.opt.Buffers {
		s.bufs <- make([]byte, s.chunk)
	}
	var cwg sync.WaitGroup
	cwg.Add(1)
	go func() { defer cwg.Done(); s.complete() }()
	defer cwg.Wait()
	defer close(s.inflight)
	s.planTotals()
	for i, e := range s.entries {
		if e.kind != kindFile {
			continue
		}
		if e.have == haveComplete {
			s.mu.Lock()
			e.state = "skipped"
			s.sum.Skipped++
			s.sum.BytesSkipped += e.size
			s.fileFinished()
			s.mu.Unlock()
			continue
		}
		var err error
		if e.size <= s.inline {
			err = s.sendInline(uint32(i), e)
		} else {
			err = s.sendLarge(uint32(i), e)
		}
		if err != nil {
			s.fail(err)
			return
		}
	}
	// Retries until every file is committed.
	for {
		select {
		case <-s.allDone:
			s.queue(&msg{Type: tEnd})
			select {
			case <-s.bye:
			case <-s.ctx.Done():
			}
			return
		case j := <-s.retry:
			if err := s.resend(j); err != nil {
				s.fail(err)
				return
			}
		case <-s.ctx.Done():
			return
		}
	}
}

// planTotals sets the bytes this run will send, for Progress.
func (s *sender) planTotals() {
	var t int64
	for _, e := range s.entries {
		if e.kind != kindFile || e.have == haveComplete {
			continue
		}
		if e.size <= s.inline {
			t += e.size
			continue
		}
		t += e.data
		if e.bits != nil {
			n := chunksOf(uint64(e.size), s.chunk)
			for c := uint64(0); c < n; c++ {
				if e.bits.has(c) {
					t -= min(int64(s.chunk), e.size-int64(c*s.chunk))
				}
			}
		}
	}
	s.totalB = max(t, 0)
}

// dataBytes counts the bytes of the chunks of a file that hold data
// (SEEK_DATA); a file that cannot be opened counts whole.
func dataBytes(src string, size, chunk int64) int64 {
	f, err := os.Open(src)
	if err != nil {
		return size
	}
	defer f.Close()
	var n int64
	for off := int64(0); off < size; off += chunk {
		end := min(off+chunk, size)
		d := nextData(f, off, size)
		if d >= end {
			// Skip to the chunk holding the next data.
			if d >= size {
				break
			}
			off = d/chunk*chunk - chunk
			continue
		}
		n += end - off
	}
	return n
}

func (s *sender) sendInline(idx uint32, e *sentry) error {
	select {
	case s.inlineQ <- struct{}{}:
	case <-s.ctx.Done():
		return nil
	}
	b, err := readSmall(e.src, e.size)
	if err != nil {
		return fmt.Errorf("filecopy: %w", err)
	}
	e.sum = sha256.Sum256(b)
	s.mu.Lock()
	s.sum.BytesSent += int64(len(b))
	s.mu.Unlock()
	s.queue(&msg{Type: tInline, Idx: idx, Sum: e.sum, Bytes: b})
	d := s.doneB.Add(int64(len(b)))
	if s.opt.Progress != nil {
		s.opt.Progress(d, s.totalB)
	}
	return nil
}

// readSmall reads a small file, which must still have the size the
// manifest announced.
func readSmall(p string, size int64) ([]byte, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b := make([]byte, size)
	if _, err := io.ReadFull(f, b); err != nil {
		return nil, fmt.Errorf("%s: changed while being copied: %w", p, err)
	}
	var one [1]byte
	if n, _ := f.Read(one[:]); n != 0 {
		return nil, fmt.Errorf("%s: grew while being copied", p)
	}
	return b, nil
}

// sendLarge WRITEs a large file's missing chunks window by window.
func (s *sender) sendLarge(idx uint32, e *sentry) error {
	fd, err := os.Open(e.src)
	if err != nil {
		return fmt.Errorf("filecopy: %w", err)
	}
	f := &sfile{fd: fd, tries: map[uint64]int{}}
	n := chunksOf(uint64(e.size), s.chunk)
	per := s.window / s.chunk
	// Plan: chunks verified already, holes, and data to WRITE, by window.
	var zeroFirst, zeroN uint64
	var zeros []msg
	var send []uint64
	var skipped, holes int64
	for c := uint64(0); c < n; c++ {
		off := int64(c * s.chunk)
		end := min(off+int64(s.chunk), e.size)
		switch {
		case e.bits.has(c):
			skipped += end - off
		case isHole(fd, off, end):
			holes += end - off
			if zeroN > 0 && zeroFirst+zeroN == c {
				zeroN++
			} else {
				if zeroN > 0 {
					zeros = append(zeros, msg{Type: tZero, Idx: idx, N: zeroFirst, Count: zeroN})
				}
				zeroFirst, zeroN = c, 1
			}
		default:
			send = append(send, c)
		}
	}
	if zeroN > 0 {
		zeros = append(zeros, msg{Type: tZero, Idx: idx, N: zeroFirst, Count: zeroN})
	}
	s.mu.Lock()
	e.large = f
	f.total = len(send)
	s.sum.BytesSkipped += skipped
	s.sum.BytesHoles += holes
	s.mu.Unlock()
	if !s.queue(&msg{Type: tOpen, Idx: idx}) {
		return nil
	}
	for i := range zeros {
		if !s.queue(&zeros[i]) {
			return nil
		}
	}
	// The file's SHA-256, beside the transfer (at most two at once).
	select {
	case s.hashSem <- struct{}{}:
	case <-s.ctx.Done():
		return nil
	}
	go func() {
		defer func() { <-s.hashSem }()
		sum, err := hashFile(s.ctx, e.src, e.size)
		s.mu.Lock()
		defer s.mu.Unlock()
		e.sum, f.hashErr, f.hashed = sum, err, true
		s.maybeEnd(e)
	}()
	// Windows in order; the next one is asked for ahead of need.
	byWin := map[uint64][]uint64{}
	var order []uint64
	for _, c := range send {
		w := c / per
		if len(byWin[w]) == 0 {
			order = append(order, w)
		}
		byWin[w] = append(byWin[w], c)
	}
	for i, wn := range order {
		w, err := s.requestWindow(idx, wn, byWin[wn], per)
		if err != nil || w == nil {
			return err
		}
		if i+1 < len(order) {
			if _, err := s.tryRequestWindow(idx, order[i+1], byWin[order[i+1]], per); err != nil {
				return err
			}
		}
		select {
		case <-w.ready:
		case <-s.ctx.Done():
			return nil
		}
		for _, c := range byWin[wn] {
			if err := s.drainRetries(); err != nil {
				return err
			}
			if err := s.writeChunk(&chunkJob{e: e, idx: idx, c: c}, w.key); err != nil {
				return err
			}
		}
		s.mu.Lock()
		w.produced = true
		s.maybeUnmap(w)
		s.mu.Unlock()
	}
	s.mu.Lock()
	f.produced = true
	s.maybeEnd(e)
	s.mu.Unlock()
	return nil
}

func windowMask(chunks []uint64, per uint64) uint64 {
	var m uint64
	for _, c := range chunks {
		m |= 1 << (c % per)
	}
	return m
}

// requestWindow returns the window, asking the receiver to map it if it
// is not yet; it waits for a free slot, doing retries meanwhile (a slot
// frees only when its window's chunks are all in).
func (s *sender) requestWindow(idx uint32, wn uint64, chunks []uint64, per uint64) (*swin, error) {
	k := [2]uint64{uint64(idx), wn}
	s.mu.Lock()
	w := s.wins[k]
	s.mu.Unlock()
	if w != nil {
		return w, nil
	}
	for {
		select {
		case s.slots <- struct{}{}:
			return s.newWindow(idx, wn, chunks, per), nil
		case j := <-s.retry:
			if err := s.resend(j); err != nil {
				return nil, err
			}
		case <-s.ctx.Done():
			return nil, nil
		}
	}
}

func (s *sender) tryRequestWindow(idx uint32, wn uint64, chunks []uint64, per uint64) (*swin, error) {
	k := [2]uint64{uint64(idx), wn}
	s.mu.Lock()
	w := s.wins[k]
	s.mu.Unlock()
	if w != nil {
		return w, nil
	}
	select {
	case s.slots <- struct{}{}:
		return s.newWindow(idx, wn, chunks, per), nil
	default:
		return nil, nil
	}
}

func (s *sender) newWindow(idx uint32, wn uint64, chunks []uint64, per uint64) *swin {
	w := &swin{idx: idx, n: wn, ready: make(chan struct{}), total: len(chunks)}
	s.mu.Lock()
	s.wins[[2]uint64{uint64(idx), wn}] = w
	s.mu.Unlock()
	s.queue(&msg{Type: tMap, Idx: idx, N: wn, Mask: windowMask(chunks, per)})
	return w
}

func (s *sender) drainRetries() error {
	for {
		select {
		case j := <-s.retry:
			if err := s.resend(j); err != nil {
				return err
			}
		default:
			return nil
		}
	}
}

// resend WRITEs a chunk again into its window (still mapped: it is
// released only once all its chunks are in).
func (s *sender) resend(j *chunkJob) error {
	s.mu.Lock()
	w := s.wins[[2]uint64{uint64(j.idx), j.c * s.chunk / s.window}]
	s.mu.Unlock()
	if w == nil {
		return fmt.Errorf("filecopy: %s: chunk %d to re-send has no window", j.e.rel, j.c)
	}
	return s.writeChunk(&chunkJob{e: j.e, idx: j.idx, c: j.c}, w.key)
}

// writeChunk reads a chunk into a free buffer and WRITEs it into the
// window at its offset; the completer reports it once it is in the
// receiver's memory.
func (s *sender) writeChunk(j *chunkJob, key uint32) error {
	var buf []byte
	select {
	case buf = <-s.bufs:
	case <-s.ctx.Done():
		return nil
	}
	off := int64(j.c * s.chunk)
	n := int(min(int64(s.chunk), j.e.size-off))
	m, err := j.e.large.fd.ReadAt(buf[:n], off)
	if m < n {
		s.bufs <- buf
		if err == nil || err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return fmt.Errorf("filecopy: %s changed while being copied: %w", j.e.src, err)
	}
	j.buf, j.n = buf, n
	j.crc = crc32.Checksum(buf[:n], castagnoli)
	addr := uint64(off) - (uint64(off)/s.window)*s.window
	p, err := s.flow.Write(s.ctx, key, addr, buf[:n])
	if err != nil {
		// The buffer stays with the flow until it closes (the copy is
		// over): it is not reused.
		if s.ctx.Err() != nil {
			return nil
		}
		return flowError(err)
	}
	j.p = p
	select {
	case s.inflight <- j:
	case <-s.ctx.Done():
	}
	return nil
}

// complete reports every chunk whose WRITE completed end to end, in
// order, and frees its buffer.
func (s *sender) complete() {
	for j := range s.inflight {
		err := j.p.Wait(s.ctx)
		if err != nil {
			if s.ctx.Err() == nil {
				s.fail(flowError(err))
			}
			// The flow holds the buffer until it closes with the copy:
			// it is not reused.
			continue
		}
		s.bufs <- j.buf
		s.mu.Lock()
		s.sum.BytesSent += int64(j.n)
		s.mu.Unlock()
		s.queue(&msg{Type: tChunk, Idx: j.idx, N: j.c, CRC: j.crc})
	}
}

// hashFile returns a file's SHA-256, holes hashed as zeros without being
// read.
func hashFile(ctx context.Context, p string, size int64) ([32]byte, error) {
	var sum [32]byte
	f, err := os.Open(p)
	if err != nil {
		return sum, err
	}
	defer f.Close()
	h := sha256.New()
	buf := make([]byte, 1<<20)
	const step = 64 << 20
	for off := int64(0); off < size; off += step {
		if ctx.Err() != nil {
			return sum, ctx.Err()
		}
		if err := hashRange(h, f, off, min(off+step, size), buf); err != nil {
			return sum, err
		}
	}
	h.Sum(sum[:0])
	return sum, nil
}

// flowError says what a failed data flow means for the copy. The
// receiving host refuses a WRITE to a memory key it does not hold: the
// receiver restarted (and the flow followed its name to the new process),
// or it dropped this copy.
func flowError(err error) error {
	var fe *flowctl.Error
	if errors.As(err, &fe) && fe.Code == flowctl.CodeBadRequest {
		return fmt.Errorf("filecopy: the receiver refused a WRITE (it restarted, or dropped this copy); run the copy again to resume: %w", err)
	}
	return fmt.Errorf("filecopy: data flow: %w", err)
}
