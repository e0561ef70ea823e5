//go:build linux

package filecopy

import (
	"bufio"
	"errors"
	"fmt"
	"slices"
	"time"
)

// sendLoop writes the queued messages, coalescing them, and a PING when
// the stream has been idle for PingEvery.
func (s *sender) sendLoop() {
	defer close(s.sent)
	w := bufio.NewWriterSize(s.conn, 64<<10)
	ping := time.NewTicker(s.opt.PingEvery)
	defer ping.Stop()
	idle := true
	write := func(b []byte) bool {
		idle = false
		if _, err := w.Write(b); err != nil {
			s.fail(fmt.Errorf("filecopy: control stream: %w", err))
			return false
		}
		return true
	}
	// writeUrgent writes what the reader queued. It runs before every
	// message taken from out: an UNMAP the reader queued before it freed
	// a window slot must reach the receiver before the MAP that took the
	// slot.
	writeUrgent := func() bool {
		s.wmu.Lock()
		urgent := s.urgent
		s.urgent = nil
		s.wmu.Unlock()
		for _, b := range urgent {
			if !write(b) {
				return false
			}
		}
		return true
	}
	for {
		if !writeUrgent() {
			return
		}
		select {
		case b := <-s.out:
			if !writeUrgent() || !write(b) {
				return
			}
			continue
		default:
		}
		if w.Buffered() > 0 {
			if err := w.Flush(); err != nil {
				s.fail(fmt.Errorf("filecopy: control stream: %w", err))
				return
			}
		}
		select {
		case <-s.ctx.Done():
			return
		case b := <-s.out:
			if !writeUrgent() || !write(b) {
				return
			}
		case <-s.kick:
		case <-ping.C:
			if idle && !write(appendMsg(nil, &msg{Type: tPing})) {
				return
			}
			idle = true
		}
	}
}

// readLoop handles the receiver's messages; it never blocks on anything
// but the stream.
func (s *sender) readLoop(mr *msgReader) {
	for {
		m, err := mr.read()
		if err != nil {
			if s.ctx.Err() == nil {
				s.fail(fmt.Errorf("filecopy: control stream: %w", err))
			}
			return
		}
		if err := s.handle(&m); err != nil {
			s.fail(err)
			return
		}
		if m.Type == tBye {
			s.fail(errFinished)
			return
		}
	}
}

func (s *sender) entry(idx uint32) (*sentry, error) {
	if int(idx) >= len(s.entries) {
		return nil, fmt.Errorf("filecopy: receiver names entry %d of %d", idx, len(s.entries))
	}
	return s.entries[idx], nil
}

func (s *sender) handle(m *msg) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch m.Type {
	case tError:
		return &RemoteError{Code: m.Code, Text: m.Text}
	case tHave:
		e, err := s.entry(m.Idx)
		if err != nil {
			return err
		}
		if uint64(m.Idx) != uint64(s.haves) {
			return fmt.Errorf("filecopy: HAVE %d out of order", m.Idx)
		}
		e.have = m.Kind
		if m.Kind == havePartial {
			n := chunksOf(uint64(e.size), s.chunk)
			if uint64(len(m.Bytes)) != (n+7)/8 {
				return fmt.Errorf("filecopy: HAVE %d: bitmap of %d bytes for %d chunks", m.Idx, len(m.Bytes), n)
			}
			e.bits = bitmap(slices.Clone(m.Bytes))
		}
		s.haves++
		if s.haves == len(s.entries) {
			close(s.haveAll)
		}
	case tManifestEnd:
		close(s.manOK)
	case tMapped:
		w := s.wins[[2]uint64{uint64(m.Idx), m.N}]
		if w == nil || w.key != 0 {
			return fmt.Errorf("filecopy: MAPPED for window %d of entry %d, not asked for", m.N, m.Idx)
		}
		if m.Key == 0 || m.Key >= 1<<31 {
			return fmt.Errorf("filecopy: MAPPED key %#x", m.Key)
		}
		w.key = m.Key
		close(w.ready)
	case tChunkAck:
		return s.chunkAck(m)
	case tFileDone:
		e, err := s.entry(m.Idx)
		if err != nil {
			return err
		}
		if e.state != "" || e.kind != kindFile {
			return fmt.Errorf("filecopy: FILE_DONE for entry %d twice", m.Idx)
		}
		if !m.OK {
			return fmt.Errorf("%w: %s: %s", ErrIntegrity, e.rel, m.Text)
		}
		if m.Sum != e.sum {
			return fmt.Errorf("%w: %s: receiver %x, sender %x", ErrIntegrity, e.rel, m.Sum, e.sum)
		}
		e.rsum = m.Sum
		e.state = "copied"
		s.sum.Verified++
		if e.large == nil {
			<-s.inlineQ
		}
		s.fileFinished()
	case tBye:
		select {
		case <-s.allDone:
		default:
			return errors.New("filecopy: BYE before every file was done")
		}
		close(s.bye)
	default:
		return fmt.Errorf("filecopy: unexpected %v from the receiver", m.Type)
	}
	return nil
}

func (s *sender) fileFinished() {
	s.pending--
	if s.pending == 0 {
		close(s.allDone)
	}
}

// chunkAck (s.mu held) counts an acknowledged chunk, or queues it again.
func (s *sender) chunkAck(m *msg) error {
	e, err := s.entry(m.Idx)
	if err != nil {
		return err
	}
	f := e.large
	if f == nil {
		return fmt.Errorf("filecopy: CHUNK_ACK for entry %d, not a large file", m.Idx)
	}
	w := s.wins[[2]uint64{uint64(m.Idx), m.N * s.chunk / s.window}]
	if w == nil {
		return fmt.Errorf("filecopy: CHUNK_ACK for chunk %d of %s: no window", m.N, e.rel)
	}
	n := int64(min(s.chunk, uint64(e.size)-m.N*s.chunk))
	if !m.OK {
		f.tries[m.N]++
		if f.tries[m.N] >= 4 {
			return fmt.Errorf("%w: %s: chunk %d failed its CRC32C check %d times", ErrIntegrity, e.rel, m.N, f.tries[m.N])
		}
		s.sum.ChunksResent++
		s.retry <- &chunkJob{e: e, idx: m.Idx, c: m.N} // bounded: one per chunk in a mapped window
		return nil
	}
	f.acked++
	w.acked++
	s.maybeUnmap(w)
	s.maybeEnd(e)
	d := s.doneB.Add(n)
	if s.opt.Progress != nil {
		s.opt.Progress(d, s.totalB)
	}
	return nil
}

// maybeUnmap (s.mu held) releases a window all of whose chunks are in.
func (s *sender) maybeUnmap(w *swin) {
	if !w.produced || w.acked < w.total {
		return
	}
	delete(s.wins, [2]uint64{uint64(w.idx), w.n})
	s.queueUrgent(&msg{Type: tUnmap, Idx: w.idx, N: w.n})
	<-s.slots
}

// maybeEnd (s.mu held) sends FILE_END once a large file's chunks are all
// acknowledged and its SHA-256 known.
func (s *sender) maybeEnd(e *sentry) {
	f := e.large
	if f.ended || !f.produced || f.acked < f.total || !f.hashed {
		return
	}
	if f.hashErr != nil {
		s.cancel(fmt.Errorf("filecopy: %s: %w", e.src, f.hashErr))
		return
	}
	f.ended = true
	s.queueUrgent(&msg{Type: tFileEnd, Idx: s.index(e), Sum: e.sum})
}

func (s *sender) index(e *sentry) uint32 {
	return uint32(slices.Index(s.entries, e))
}
