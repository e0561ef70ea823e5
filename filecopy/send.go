//go:build linux

package filecopy

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

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
