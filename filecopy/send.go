//go:build linux

package filecopy

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/mrgw/mrgw/flowctl"
	"github.com/mrgw/mrgw/host"
	"github.com/mrgw/mrgw/stream"
	"github.com/mrgw/mrgw/units"
)

// Options tune a copy. Zero values take the defaults in brackets.
type Options struct {
	// Chunk is the unit of verification and resume: a power of two from
	// 64 KiB to 64 MiB [4 MiB]. A copy resumes only what an earlier run
	// of the same chunk size verified.
	Chunk int64
	// Buffers bounds the chunks read and in flight at once, so the
	// sender holds at most Buffers × Chunk of file data [8].
	Buffers int
	// Class is the scheduling class of the data flow [none].
	Class string
	// Progress, if set, is called as data is verified at the receiver:
	// done and total bytes of what this run sends. It runs with the
	// copy's state locked: it must return fast and call nothing of the
	// copy.
	Progress func(done, total int64)
	// PingEvery: the control stream carries a keepalive when it has been
	// idle this long [10 s]; the receiver drops a silent copy.
	PingEvery time.Duration

	// onFlow, if set, is called with the data flow once it is open
	// (tests: to find the gateway that carries it).
	onFlow func(*host.Flow)
}

func (o Options) withDefaults() (Options, error) {
	if o.Chunk == 0 {
		o.Chunk = 4 << 20
	}
	if o.Chunk < minChunk || o.Chunk > maxChunk || o.Chunk&(o.Chunk-1) != 0 {
		return o, fmt.Errorf("filecopy: chunk size %d: want a power of two from 64 KiB to 64 MiB", o.Chunk)
	}
	if o.Buffers <= 0 {
		o.Buffers = 8
	}
	if o.PingEvery <= 0 {
		o.PingEvery = 10 * time.Second
	}
	return o, nil
}

// Summary reports a copy.
type Summary struct {
	Files int   `json:"files"`
	Dirs  int   `json:"dirs"`
	Bytes int64 `json:"bytes"` // size of every file
	// BytesSent counts file bytes this run WROTE or sent inline
	// (re-sent chunks included); BytesSkipped those an earlier run had
	// completed (whole files, verified chunks); BytesHoles those in holes
	// of sparse files, never sent.
	BytesSent    int64 `json:"bytes_sent"`
	BytesSkipped int64 `json:"bytes_skipped"`
	BytesHoles   int64 `json:"bytes_holes"`
	// Verified counts files whose SHA-256 matched at both ends in this
	// run; Skipped files the receiver held already (same size, mode and
	// modification time).
	Verified int `json:"verified"`
	Skipped  int `json:"skipped"`
	// ChunksResent counts chunks whose CRC32C did not match at the
	// receiver and went again.
	ChunksResent int           `json:"chunks_resent"`
	Duration     time.Duration `json:"-"`
	Seconds      float64       `json:"seconds"`
	// RateBps is BytesSent per second, in bits.
	RateBps float64       `json:"rate_bps"`
	List    []FileSummary `json:"list"`
}

// FileSummary is one file of a copy.
type FileSummary struct {
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	Status string `json:"status"` // "copied" or "skipped"
	SHA256 string `json:"sha256,omitempty"`
}

// Errors of a copy.
var (
	// ErrRefused: the receiver refused the copy or failed it; a
	// *RemoteError says why.
	ErrRefused = errors.New("filecopy: refused by the receiver")
	// ErrIntegrity: a file's SHA-256 differed at the two ends.
	ErrIntegrity = errors.New("filecopy: SHA-256 mismatch")
)

// RemoteError is an error the receiver reported.
type RemoteError struct {
	Code uint16
	Text string
}

func (e *RemoteError) Error() string {
	return "filecopy: receiver: " + strings.TrimPrefix(e.Text, "filecopy: ")
}

// Is maps codes to the package's errors.
func (e *RemoteError) Is(target error) bool {
	switch target {
	case ErrRefused:
		return true
	case ErrNotAllowed:
		return e.Code == codeNotAllowed
	case ErrDiskFull:
		return e.Code == codeDiskFull
	}
	return false
}

// ErrDiskFull: the receiver has no room for the data.
var ErrDiskFull = errors.New("filecopy: disk full at the receiver")

// sentry is a manifest entry at the sender.
type sentry struct {
	src   string // path on this host
	rel   string // path below the destination directory
	kind  uint8
	size  int64
	mode  uint32
	mtime int64
	data  int64 // bytes of chunks that hold data

	have  uint8
	bits  bitmap
	sum   [32]byte
	rsum  [32]byte
	state string // "copied", "skipped"
	large *sfile
}

// sfile is a large file's progress at the sender.
type sfile struct {
	total, acked int   // chunks to WRITE and acknowledged
	produced     bool  // every chunk handed to the flow
	hashed       bool  // sum is known
	hashErr      error // the local hash failed
	ended        bool  // FILE_END sent
	tries        map[uint64]int
	fd           *os.File
}

// swin is a window the sender WRITEs into.
type swin struct {
	idx      uint32
	n        uint64
	key      uint32
	ready    chan struct{}
	total    int
	acked    int
	produced bool
}

type chunkJob struct {
	e   *sentry
	idx uint32
	c   uint64
	crc uint32
	buf []byte
	n   int
	p   *host.Pending
}

type sender struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	opt    Options
	mux    *stream.Mux
	conn   *stream.Conn
	flow   *host.Flow
	chunk  uint64
	window uint64
	maxWin int
	inline int64

	entries []*sentry
	out     chan []byte // messages for the send loop, in order
	wmu     sync.Mutex
	urgent  [][]byte // messages the reader queues: it never blocks
	kick    chan struct{}
	sent    chan struct{} // the send loop has ended

	bufs     chan []byte
	inflight chan *chunkJob
	retry    chan *chunkJob
	slots    chan struct{}
	inlineQ  chan struct{} // inline files awaiting FILE_DONE

	mu       sync.Mutex
	wins     map[[2]uint64]*swin
	haves    int
	haveAll  chan struct{}
	manOK    chan struct{}
	pending  int // files not yet FILE_DONE
	allDone  chan struct{}
	bye      chan struct{}
	firstErr error
	sum      Summary
	doneB    atomic.Int64
	totalB   int64
	hashSem  chan struct{}
}

// Send copies srcs (files and directory trees) into directory dest below
// the root of the receiver listening at to, through m's host: control
// over a stream, data as WRITEs on a flow straight into the destination
// files. Run again after a failure, it sends only what the receiver does
// not hold verified yet.
func Send(ctx context.Context, m *stream.Mux, to stream.Addr, dest string, srcs []string, opt Options) (*Summary, error) {
	opt, err := opt.withDefaults()
	if err != nil {
		return nil, err
	}
	if dest != "" {
		if err := checkRel(dest); err != nil {
			return nil, fmt.Errorf("destination directory: %w", err)
		}
	}
	start := time.Now()
	entries, err := walk(srcs, opt.Chunk)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	conn, err := m.DialAddr(ctx, to)
	if err != nil {
		return nil, fmt.Errorf("filecopy: %w", err)
	}
	s := &sender{ctx: ctx, cancel: cancel, opt: opt, mux: m, conn: conn, chunk: uint64(opt.Chunk), entries: entries,
		out: make(chan []byte, 256), kick: make(chan struct{}, 1), sent: make(chan struct{}),
		haveAll: make(chan struct{}), manOK: make(chan struct{}), allDone: make(chan struct{}), bye: make(chan struct{}),
		wins: map[[2]uint64]*swin{}, hashSem: make(chan struct{}, 2)}
	sum, err := s.run(start, to, dest)
	if err != nil {
		conn.Reset()
	}
	return sum, err
}

// walk lists the sources: each lands below the destination by its base
// name. Symbolic links given as sources are followed; inside a tree they
// are skipped, with every other file that is neither regular nor a
// directory.
func walk(srcs []string, chunk int64) ([]*sentry, error) {
	if len(srcs) == 0 {
		return nil, errors.New("filecopy: nothing to copy")
	}
	var out []*sentry
	seen := map[string]string{}
	add := func(src, rel string, fi fs.FileInfo) error {
		if prev, ok := seen[rel]; ok {
			return fmt.Errorf("filecopy: %s and %s both land at %s", prev, src, rel)
		}
		if err := checkRel(rel); err != nil {
			return fmt.Errorf("filecopy: %s: %w", src, err)
		}
		seen[rel] = src
		e := &sentry{src: src, rel: rel, mode: unixMode(fi), mtime: fi.ModTime().UnixNano()}
		if fi.IsDir() {
			e.kind = kindDir
		} else {
			e.kind, e.size = kindFile, fi.Size()
		}
		out = append(out, e)
		return nil
	}
	for _, src := range srcs {
		fi, err := os.Stat(src)
		if err != nil {
			return nil, fmt.Errorf("filecopy: %w", err)
		}
		base := filepath.Base(filepath.Clean(src))
		if base == "/" || base == "." || base == ".." {
			return nil, fmt.Errorf("filecopy: %s: name it by a path that ends in a name", src)
		}
		if !fi.IsDir() {
			if !fi.Mode().IsRegular() {
				return nil, fmt.Errorf("filecopy: %s is not a regular file or a directory", src)
			}
			if err := add(src, base, fi); err != nil {
				return nil, err
			}
			continue
		}
		// A directory named through a symbolic link is walked where the
		// link leads.
		if real, err := filepath.EvalSymlinks(src); err == nil {
			src = real
		}
		err = filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if !d.IsDir() && !d.Type().IsRegular() {
				return nil
			}
			fi, err := d.Info()
			if err != nil {
				return err
			}
			if p == src {
				fi, err = os.Stat(src)
				if err != nil {
					return err
				}
			}
			r, err := filepath.Rel(src, p)
			if err != nil {
				return err
			}
			rel := base
			if r != "." {
				rel = base + "/" + filepath.ToSlash(r)
			}
			return add(p, rel, fi)
		})
		if err != nil {
			return nil, fmt.Errorf("filecopy: %w", err)
		}
	}
	return out, nil
}

func unixMode(fi fs.FileInfo) uint32 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Mode & 0o7777
	}
	return uint32(fi.Mode().Perm())
}

func (s *sender) fail(err error) {
	s.mu.Lock()
	if s.firstErr == nil {
		s.firstErr = err
	}
	s.mu.Unlock()
	s.cancel(err)
}

func (s *sender) err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.firstErr != nil {
		return s.firstErr
	}
	return context.Cause(s.ctx)
}

func (s *sender) run(start time.Time, to stream.Addr, dest string) (*Summary, error) {
	// HELLO and its answer, before anything else runs.
	if _, err := s.conn.Write(appendMsg(nil, &msg{Type: tHello, Version: protocolVersion, Size: s.chunk,
		Count: uint64(len(s.entries)), Path: dest})); err != nil {
		return nil, fmt.Errorf("filecopy: %w", err)
	}
	mr := newMsgReader(s.conn)
	hm, err := mr.read()
	if err != nil {
		return nil, fmt.Errorf("filecopy: waiting for the receiver: %w", err)
	}
	switch {
	case hm.Type == tError:
		return nil, &RemoteError{Code: hm.Code, Text: hm.Text}
	case hm.Type != tHelloOK:
		return nil, fmt.Errorf("filecopy: receiver answered %v", hm.Type)
	case hm.Window < s.chunk || hm.Window%s.chunk != 0 || hm.Window/s.chunk > 64 || hm.MaxWin == 0 || hm.MaxWin > 64 || hm.InlineMax > maxInline:
		return nil, fmt.Errorf("filecopy: receiver's window %d, %d windows, inline %d: not usable with chunks of %d", hm.Window, hm.MaxWin, hm.InlineMax, s.chunk)
	}
	s.window, s.maxWin, s.inline = hm.Window, int(hm.MaxWin), int64(hm.InlineMax)
	s.slots = make(chan struct{}, s.maxWin)
	s.retry = make(chan *chunkJob, s.maxWin*int(s.window/s.chunk)+s.opt.Buffers)
	s.bufs = make(chan []byte, s.opt.Buffers)
	s.inflight = make(chan *chunkJob, s.opt.Buffers)
	s.inlineQ = make(chan struct{}, 1024)
	for _, e := range s.entries {
		if e.kind == kindFile {
			s.pending++
		}
	}
	if s.pending == 0 {
		close(s.allDone)
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); s.sendLoop() }()
	go func() { defer wg.Done(); s.readLoop(mr) }()
	s.flow, err = s.mux.Host().OpenFlow(s.ctx, to.Region, to.Endpoint, host.FlowOptions{Class: s.opt.Class})
	if err != nil {
		s.fail(fmt.Errorf("filecopy: data flow: %w", err))
	} else {
		if s.opt.onFlow != nil {
			s.opt.onFlow(s.flow)
		}
		s.transfer()
	}
	if s.flow != nil {
		defer s.flow.Close()
	}
	finished := false
	select {
	case <-s.bye:
		finished = true
	default:
	}
	if !finished {
		s.conn.Reset()
	}
	wg.Wait()
	if finished {
		// Half-close, then wait for the receiver's end: its last records
		// must be DONE here before this host goes, or its flow would
		// retry them until it gives up on this endpoint.
		s.conn.CloseWrite()
		s.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, _ = io.Copy(io.Discard, s.conn)
		s.conn.Close()
	}
	for _, e := range s.entries {
		if e.large != nil && e.large.fd != nil {
			e.large.fd.Close()
		}
	}
	sum := s.summarize(start)
	if !finished {
		if err := s.err(); err != nil {
			return sum, err
		}
		return sum, errors.New("filecopy: the copy ended before the receiver confirmed it")
	}
	for _, e := range s.entries {
		if e.kind == kindFile && e.state == "" {
			return sum, fmt.Errorf("%w: %s", ErrIntegrity, e.rel)
		}
	}
	return sum, nil
}

var errFinished = errors.New("filecopy: finished")

func (s *sender) summarize(start time.Time) *Summary {
	s.mu.Lock()
	defer s.mu.Unlock()
	sum := s.sum
	sum.Duration = time.Since(start)
	sum.Seconds = sum.Duration.Seconds()
	if sum.Seconds > 0 {
		sum.RateBps = float64(units.Throughput(float64(sum.BytesSent), sum.Seconds))
	}
	for _, e := range s.entries {
		if e.kind == kindDir {
			sum.Dirs++
			continue
		}
		sum.Files++
		sum.Bytes += e.size
		fsum := FileSummary{Path: e.rel, Size: e.size, Status: e.state}
		if e.state == "copied" {
			fsum.SHA256 = hex.EncodeToString(e.rsum[:])
		}
		if e.state == "" {
			fsum.Status = "failed"
		}
		sum.List = append(sum.List, fsum)
	}
	return &sum
}

// queue hands a message to the send loop, in order with the others.
func (s *sender) queue(m *msg) bool {
	select {
	case s.out <- appendMsg(nil, m):
		return true
	case <-s.ctx.Done():
		return false
	}
}

// queueUrgent queues a message from the reader, which must never block:
// what it queues is bounded by construction (an UNMAP per window, a
// FILE_END per file).
func (s *sender) queueUrgent(m *msg) {
	s.wmu.Lock()
	s.urgent = append(s.urgent, appendMsg(nil, m))
	s.wmu.Unlock()
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

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
