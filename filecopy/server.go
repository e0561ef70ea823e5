//go:build linux

package filecopy

import (
	"bufio"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"os"
	"path"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mrgw/mrgw/host"
	"github.com/mrgw/mrgw/stream"
)

// ServerConfig configures a receiver. Zero values take the defaults in
// brackets.
type ServerConfig struct {
	// Root is the directory every copy lands under; nothing outside it is
	// ever written (required).
	Root string
	// Port is the stream port copies dial ["7000"].
	Port string
	// Window is how much of a large file is mapped under one memory key
	// [64 MiB]; MaxWindows how many windows one copy may have mapped at
	// once [4]. Together they bound the address space and the dirty page
	// cache a copy holds, whatever the file's size.
	Window     int64
	MaxWindows int
	// InlineMax: files up to this size travel inside the control stream,
	// not as WRITEs into a mapping [256 KiB, at most 1 MiB].
	InlineMax int64
	// MaxSessions bounds the copies served at once [16]; MaxEntries the
	// entries (files and directories) of one copy [1,048,576].
	MaxSessions, MaxEntries int
	// IdleTimeout drops a copy whose sender sent nothing for this long
	// (a sender pings every IdleTimeout/8 at most) [2 min].
	IdleTimeout time.Duration
	// Logger: nil discards.
	Logger *slog.Logger

	// freeSpace reports the bytes available under dir (statfs); tests
	// replace it to stand for a full disk.
	freeSpace func(dir string) (uint64, error)
	// corrupt, if set, may alter a chunk in its mapping before its CRC
	// is checked: tests stand for a WRITE that placed wrong bytes.
	corrupt func(rel string, chunk uint64, mem []byte)
}

func (c ServerConfig) withDefaults() (ServerConfig, error) {
	if c.Root == "" {
		return c, errors.New("filecopy: ServerConfig.Root is required")
	}
	if c.Port == "" {
		c.Port = "7000"
	}
	if c.Window == 0 {
		c.Window = 64 << 20
	}
	if c.Window < minChunk || c.Window > 1<<30 || c.Window%int64(os.Getpagesize()) != 0 {
		return c, fmt.Errorf("filecopy: Window %d: want 64 KiB to 1 GiB, a multiple of the page size", c.Window)
	}
	if c.MaxWindows <= 0 {
		c.MaxWindows = 4
	}
	if c.MaxWindows > 64 {
		return c, fmt.Errorf("filecopy: MaxWindows %d: at most 64", c.MaxWindows)
	}
	if c.InlineMax == 0 {
		c.InlineMax = 256 << 10
	}
	if c.InlineMax < 0 || c.InlineMax > maxInline {
		return c, fmt.Errorf("filecopy: InlineMax %d: want 0 to %d", c.InlineMax, maxInline)
	}
	if c.MaxSessions <= 0 {
		c.MaxSessions = 16
	}
	if c.MaxEntries <= 0 {
		c.MaxEntries = 1 << 20
	}
	if c.IdleTimeout <= 0 {
		c.IdleTimeout = 2 * time.Minute
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.freeSpace == nil {
		c.freeSpace = statfsFree
	}
	return c, nil
}

func statfsFree(dir string) (uint64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return st.Bavail * uint64(st.Bsize), nil
}

// ServerStats count a receiver's work since NewServer.
type ServerStats struct {
	// Sessions counts copies accepted; Refused those refused (a path not
	// allowed, a full disk, too many at once); Failed those that ended in
	// an error after they started.
	Sessions, Refused, Failed uint64
	// Files counts files committed (renamed into place after their
	// SHA-256 matched); Inline those that came inside the stream.
	Files, Inline uint64
	// ChunksVerified and BytesVerified count chunks whose CRC32C matched
	// after their WRITE; ChunksBad those that did not; ChunksPersisted
	// those recorded in a state file (a resumed copy skips them).
	ChunksVerified, BytesVerified, ChunksBad, ChunksPersisted uint64
	// MappedBytes is the size of the windows mapped now, MaxMappedBytes
	// the most at any time.
	MappedBytes, MaxMappedBytes uint64
}

type serverCounters struct {
	sessions, refused, failed, files, inline                  atomic.Uint64
	chunksVerified, bytesVerified, chunksBad, chunksPersisted atomic.Uint64
	mapped, maxMapped                                         atomic.Uint64
}

// Server receives copies under one root directory.
type Server struct {
	mux  *stream.Mux
	h    *host.Host
	cfg  ServerConfig
	log  *slog.Logger
	root *os.Root
	ln   *stream.Listener
	ctr  serverCounters
	slot chan struct{} // one per session running

	mu       sync.Mutex
	keys     map[uint32]bool     // memory keys in use
	claims   map[string]*session // destination paths being written
	sessions map[*session]bool
	closed   bool
	// killed stands for the death of the process (tests): nothing more
	// is saved on the way out.
	killed atomic.Bool
	wg     sync.WaitGroup
	done   chan struct{}
}

// NewServer listens for copies on cfg.Port of m's host. It reads the
// Mux's Deliveries (the WRITEs into the mapped files) from now on: the
// application must not read them.
func NewServer(m *stream.Mux, cfg ServerConfig) (*Server, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.Root, 0o755); err != nil {
		return nil, fmt.Errorf("filecopy: root: %w", err)
	}
	root, err := os.OpenRoot(cfg.Root)
	if err != nil {
		return nil, fmt.Errorf("filecopy: root: %w", err)
	}
	ln, err := m.Listen(cfg.Port)
	if err != nil {
		root.Close()
		return nil, fmt.Errorf("filecopy: %w", err)
	}
	s := &Server{mux: m, h: m.Host(), cfg: cfg, log: cfg.Logger, root: root, ln: ln,
		slot: make(chan struct{}, cfg.MaxSessions), keys: map[uint32]bool{}, claims: map[string]*session{},
		sessions: map[*session]bool{}, done: make(chan struct{})}
	s.wg.Add(1)
	go s.drain(m.Deliveries())
	return s, nil
}

// drain reads the deliveries of the mapped windows: each chunk's WRITE is
// verified when its sender reports it complete, so nothing more is
// needed of them here.
func (s *Server) drain(ch <-chan host.Delivery) {
	defer s.wg.Done()
	for {
		select {
		case <-s.done:
			return
		case _, ok := <-ch:
			if !ok {
				return
			}
		}
	}
}

// Addr is the stream address copies dial.
func (s *Server) Addr() stream.Addr { return s.ln.Addr().(stream.Addr) }

// Stats returns a snapshot of the counters.
func (s *Server) Stats() ServerStats {
	c := &s.ctr
	return ServerStats{Sessions: c.sessions.Load(), Refused: c.refused.Load(), Failed: c.failed.Load(),
		Files: c.files.Load(), Inline: c.inline.Load(),
		ChunksVerified: c.chunksVerified.Load(), BytesVerified: c.bytesVerified.Load(), ChunksBad: c.chunksBad.Load(),
		ChunksPersisted: c.chunksPersisted.Load(), MappedBytes: c.mapped.Load(), MaxMappedBytes: c.maxMapped.Load()}
}

// Serve accepts copies until ctx ends or Close; it returns nil then.
func (s *Server) Serve(ctx context.Context) error {
	go func() {
		select {
		case <-ctx.Done():
			s.ln.Close()
		case <-s.done:
		}
	}()
	for {
		c, err := s.ln.AcceptStream(ctx)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, stream.ErrClosed) {
				return nil
			}
			return err
		}
		select {
		case s.slot <- struct{}{}:
		default:
			s.ctr.refused.Add(1)
			s.log.Warn("filecopy: copy refused: too many at once", "from", c.RemoteAddr().String(), "max", s.cfg.MaxSessions)
			writeError(c, codeLimit, fmt.Sprintf("the receiver serves %d copies at once", s.cfg.MaxSessions))
			c.Close()
			continue
		}
		ss := &session{s: s, conn: c, from: c.RemoteAddr().String(), entries: nil, released: make(chan struct{})}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			<-s.slot
			c.Reset()
			return nil
		}
		s.sessions[ss] = true
		s.mu.Unlock()
		s.ctr.sessions.Add(1)
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer func() { <-s.slot }()
			ss.run()
		}()
	}
}

// Close stops accepting, aborts the copies in progress (their state
// files keep what was verified) and waits for them. The Mux's
// Deliveries are no longer read: close the Mux too (or read them).
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	var all []*session
	for ss := range s.sessions {
		all = append(all, ss)
	}
	s.mu.Unlock()
	s.ln.Close()
	for _, ss := range all {
		ss.abort(codeShutdown, "the receiver is shutting down")
	}
	close(s.done)
	s.wg.Wait()
	return s.root.Close()
}

func writeError(c *stream.Conn, code uint16, text string) {
	_, _ = c.Write(appendMsg(nil, &msg{Type: tError, Code: code, Text: text}))
}

// newKey draws a memory key below 1<<31 (the application's range of a
// stream.Mux) that no window uses: random, so that a late WRITE of an
// earlier copy never lands in a later copy's window.
func (s *Server) newKey() uint32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		k := rand.Uint32N(1<<31-1) + 1
		if !s.keys[k] {
			s.keys[k] = true
			return k
		}
	}
}

func (s *Server) freeKey(k uint32) {
	s.mu.Lock()
	delete(s.keys, k)
	s.mu.Unlock()
}

// claim makes ss the one session writing rel. A session that holds it
// already is aborted first: the same copy run again (its sender was
// killed, or its stream is gone) supersedes the old one, which keeps
// what it verified in its state files.
func (s *Server) claim(ss *session, rel string) error {
	for {
		s.mu.Lock()
		old := s.claims[rel]
		if old == nil || old == ss {
			s.claims[rel] = ss
			s.mu.Unlock()
			return nil
		}
		s.mu.Unlock()
		s.log.Info("filecopy: a newer copy supersedes one in progress", "path", rel, "old", old.from, "new", ss.from)
		old.abort(codeBusy, fmt.Sprintf("superseded by a newer copy of %s from %s", rel, ss.from))
		select {
		case <-old.released:
		case <-time.After(time.Minute):
			return fmt.Errorf("%s is held by a copy from %s that does not stop", rel, old.from)
		}
	}
}

func (s *Server) unclaim(ss *session) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for rel, v := range s.claims {
		if v == ss {
			delete(s.claims, rel)
		}
	}
	delete(s.sessions, ss)
}

func (s *Server) addMapped(n int64) {
	v := s.ctr.mapped.Add(uint64(n))
	for {
		m := s.ctr.maxMapped.Load()
		if v <= m || s.ctr.maxMapped.CompareAndSwap(m, v) {
			return
		}
	}
}

// copyError is an error to report to the sender with its code.
type copyError struct {
	code uint16
	text string
}

func (e *copyError) Error() string { return e.text }

func cerr(code uint16, format string, args ...any) error {
	return &copyError{code: code, text: fmt.Sprintf(format, args...)}
}

// session is one copy being received.
type session struct {
	s        *Server
	conn     *stream.Conn
	from     string
	w        *bufio.Writer
	chunk    uint64
	window   uint64
	dest     string
	entries  []*rentry
	nEntries uint64
	manifest bool // MANIFEST_END seen
	mapped   int
	dirs     map[string]bool // directories whose entries changed: synced at END
	paths    map[string]bool // the manifest's paths
	released chan struct{}
	// batch: small files written, not yet synced and renamed.
	batch      []pendingInline
	batchBytes int

	abortOnce sync.Once
	aborted   atomic.Bool
}

// rentry is a manifest entry at the receiver.
type rentry struct {
	kind      uint8
	rel       string // below the root
	size      uint64
	mode      uint32
	mtime     int64
	dataBytes uint64
	state     *fileState // a valid resume state found at HAVE time
	f         *rfile     // a large file being received
	done      bool
}

// rfile is a large file being received: its temporary copy, mapped a
// window at a time.
type rfile struct {
	e           *rentry
	fd          *os.File
	part, state string
	n           uint64 // chunks
	wins        map[uint64]*rwin
	dirty       uint64 // chunks verified since the last checkpoint

	mu      sync.Mutex
	cond    *sync.Cond
	done    bitmap
	stop    bool
	sum     chan hashResult
	hashing bool
}

type hashResult struct {
	sum [32]byte
	err error
}

type rwin struct {
	key uint32
	mem []byte
	off uint64
}

func (ss *session) abort(code uint16, text string) {
	ss.abortOnce.Do(func() {
		ss.aborted.Store(true)
		writeErrorAsync(ss.conn, code, text)
	})
}

// writeErrorAsync tells the sender why and resets the stream, so that the
// session's reader stops; the write must not block the caller.
func writeErrorAsync(c *stream.Conn, code uint16, text string) {
	go func() {
		c.SetWriteDeadline(time.Now().Add(5 * time.Second))
		writeError(c, code, text)
		c.Reset()
	}()
}

func (ss *session) run() {
	s := ss.s
	defer close(ss.released)
	defer s.unclaim(ss)
	defer ss.cleanup()
	ss.w = bufio.NewWriterSize(ss.conn, 64<<10)
	ss.dirs = map[string]bool{}
	ss.paths = map[string]bool{}
	mr := newMsgReader(ss.conn)
	err := ss.loop(mr)
	var ce *copyError
	switch {
	case err == nil:
		return
	case ss.aborted.Load():
		s.ctr.failed.Add(1)
		s.log.Warn("filecopy: copy aborted", "from", ss.from, "err", err)
	case errors.As(err, &ce):
		if ce.code == codeNotAllowed || ce.code == codeDiskFull || ce.code == codeLimit || ce.code == codeVersion {
			s.ctr.refused.Add(1)
		} else {
			s.ctr.failed.Add(1)
		}
		s.log.Warn("filecopy: copy failed", "from", ss.from, "err", err)
		_ = ss.send(&msg{Type: tError, Code: ce.code, Text: ce.text})
		_ = ss.w.Flush()
		ss.conn.Close()
	default:
		s.ctr.failed.Add(1)
		s.log.Warn("filecopy: copy failed", "from", ss.from, "err", err)
		if !errors.Is(err, io.EOF) && !errors.Is(err, stream.ErrReset) && !errors.Is(err, os.ErrDeadlineExceeded) {
			_ = ss.send(&msg{Type: tError, Code: codeIO, Text: err.Error()})
			_ = ss.w.Flush()
		}
		ss.conn.Reset()
	}
}

func (ss *session) send(m *msg) error {
	_, err := ss.w.Write(appendMsg(nil, m))
	return err
}

// loop handles the sender's messages in order until END (nil) or an
// error. Replies are flushed whenever no more input is buffered, before
// the next read can block.
func (ss *session) loop(mr *msgReader) error {
	s := ss.s
	for {
		if mr.r.Buffered() == 0 {
			if err := ss.commitBatch(); err != nil {
				return err
			}
			if err := ss.w.Flush(); err != nil {
				return err
			}
		}
		ss.conn.SetReadDeadline(time.Now().Add(s.cfg.IdleTimeout))
		m, err := mr.read()
		if err != nil {
			if errors.Is(err, errFrame) {
				return cerr(codeProtocol, "%v", err)
			}
			if ss.aborted.Load() {
				return fmt.Errorf("aborted: %w", err)
			}
			return err
		}
		if ss.aborted.Load() {
			return errors.New("aborted")
		}
		if ss.chunk == 0 && m.Type != tHello {
			return cerr(codeProtocol, "%v before HELLO", m.Type)
		}
		if m.Type != tInline && len(ss.batch) > 0 {
			if err := ss.commitBatch(); err != nil {
				return err
			}
		}
		switch m.Type {
		case tHello:
			err = ss.hello(&m)
		case tEntry:
			err = ss.entry(&m)
		case tManifestEnd:
			err = ss.manifestEnd(&m)
		case tInline:
			err = ss.inline(&m)
		case tOpen:
			err = ss.open(&m)
		case tMap:
			err = ss.mapWindow(&m)
		case tZero:
			err = ss.zero(&m)
		case tChunk:
			err = ss.chunkDone(&m)
		case tUnmap:
			err = ss.unmap(&m)
		case tFileEnd:
			err = ss.fileEnd(&m)
		case tPing:
		case tEnd:
			if err := ss.end(); err != nil {
				return err
			}
			if err := ss.w.Flush(); err != nil {
				return err
			}
			// The sender closes once it has read BYE.
			ss.conn.SetReadDeadline(time.Now().Add(s.cfg.IdleTimeout))
			_, _ = mr.read()
			ss.conn.Close()
			return nil
		case tError:
			return fmt.Errorf("the sender gave up: %s", m.Text)
		default:
			return cerr(codeProtocol, "unexpected %v", m.Type)
		}
		if err != nil {
			return err
		}
	}
}

func (ss *session) hello(m *msg) error {
	s := ss.s
	switch {
	case ss.chunk != 0:
		return cerr(codeProtocol, "second HELLO")
	case m.Version != protocolVersion:
		return cerr(codeVersion, "protocol version %d; this receiver speaks %d", m.Version, protocolVersion)
	case m.Size < minChunk || m.Size > maxChunk || m.Size&(m.Size-1) != 0:
		return cerr(codeProtocol, "chunk size %d: want a power of two from %d to %d", m.Size, minChunk, maxChunk)
	case m.Count > uint64(s.cfg.MaxEntries):
		return cerr(codeLimit, "%d entries; this receiver takes at most %d per copy", m.Count, s.cfg.MaxEntries)
	}
	if m.Path != "" {
		if err := checkRel(m.Path); err != nil {
			return cerr(codeNotAllowed, "destination directory: %v", err)
		}
	}
	ss.chunk = m.Size
	ss.window = max(uint64(s.cfg.Window)/ss.chunk, 1) * ss.chunk
	if ss.window/ss.chunk > 64 {
		ss.window = 64 * ss.chunk
	}
	ss.dest = m.Path
	ss.nEntries = m.Count
	ss.entries = make([]*rentry, 0, min(m.Count, 1<<16))
	if ss.dest != "" {
		if err := s.root.MkdirAll(ss.dest, 0o755); err != nil {
			return rootErr("destination directory", err)
		}
		if err := ss.checkDir(ss.dest); err != nil {
			return err
		}
	}
	s.log.Info("filecopy: copy started", "from", ss.from, "dest", ss.dest, "entries", m.Count)
	return ss.send(&msg{Type: tHelloOK, Version: protocolVersion, Window: ss.window,
		MaxWin: uint32(s.cfg.MaxWindows), InlineMax: uint64(s.cfg.InlineMax)})
}

// rootErr turns an os.Root error into a copy error: an escape is
// ErrNotAllowed, a full disk codeDiskFull, the rest an I/O error.
func rootErr(what string, err error) error {
	switch {
	case errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT):
		return cerr(codeDiskFull, "%s: disk full: %v", what, err)
	case strings.Contains(err.Error(), "path escapes from parent"): // os.Root's refusal, not exported
		return cerr(codeNotAllowed, "path not allowed: %s: %v", what, err)
	case errors.Is(err, unix.ELOOP) || errors.Is(err, unix.EXDEV):
		return cerr(codeNotAllowed, "path not allowed: %s: %v", what, err)
	}
	return cerr(codeIO, "%s: %v", what, err)
}

func (ss *session) entry(m *msg) error {
	s := ss.s
	if ss.manifest || uint64(m.Idx) != uint64(len(ss.entries)) || uint64(len(ss.entries)) >= ss.nEntries {
		return cerr(codeProtocol, "entry %d out of order (%d of %d)", m.Idx, len(ss.entries), ss.nEntries)
	}
	if err := checkRel(m.Path); err != nil {
		return cerr(codeNotAllowed, "%v", err)
	}
	// Set-user-ID and set-group-ID bits are dropped: a sender in another
	// region does not choose who runs this host's files.
	e := &rentry{kind: m.Kind, rel: joinRel(ss.dest, m.Path), size: m.Size, mode: m.Mode & 0o1777, mtime: m.Mtime, dataBytes: m.DataBytes}
	if len(e.rel) > maxPath {
		return cerr(codeNotAllowed, "path not allowed: %q longer than %d bytes", e.rel, maxPath)
	}
	if ss.paths[e.rel] {
		return cerr(codeProtocol, "%s listed twice", e.rel)
	}
	ss.paths[e.rel] = true
	ss.entries = append(ss.entries, e)
	have := &msg{Type: tHave, Idx: m.Idx, Kind: haveNone}
	switch m.Kind {
	case kindDir:
		if err := s.root.MkdirAll(e.rel, 0o700); err != nil {
			return rootErr(e.rel, err)
		}
		if err := ss.checkDir(e.rel); err != nil {
			return err
		}
		have.Kind = haveComplete
	case kindFile:
		if m.Size > maxChunks*ss.chunk {
			return cerr(codeLimit, "%s: %d bytes, more than %d chunks", e.rel, m.Size, maxChunks)
		}
		if m.DataBytes > m.Size {
			return cerr(codeProtocol, "%s: %d data bytes in %d", e.rel, m.DataBytes, m.Size)
		}
		if err := s.claim(ss, e.rel); err != nil {
			return cerr(codeBusy, "%v", err)
		}
		if dir := path.Dir(e.rel); dir != "." {
			if err := s.root.MkdirAll(dir, 0o755); err != nil {
				return rootErr(dir, err)
			}
			if err := ss.checkDir(dir); err != nil {
				return err
			}
		}
		if fi, err := s.root.Lstat(e.rel); err == nil {
			if fi.Mode().IsRegular() && uint64(fi.Size()) == e.size && fi.ModTime().UnixNano() == e.mtime &&
				uint32(fi.Mode().Perm()|fi.Mode()&(fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky)) == fileModeOf(e.mode) {
				have.Kind = haveComplete
				e.done = true
				break
			}
			if fi.IsDir() {
				return cerr(codeIO, "%s is a directory at the destination", e.rel)
			}
		} else if !errors.Is(err, fs.ErrNotExist) {
			return rootErr(e.rel, err)
		}
		if e.size > uint64(s.cfg.InlineMax) {
			if st := ss.readState(e); st != nil {
				e.state = st
				have.Kind = havePartial
				have.Bytes = st.Done
			}
		}
	default:
		return cerr(codeProtocol, "entry %d: kind %d", m.Idx, m.Kind)
	}
	return ss.send(have)
}

// fileModeOf maps permission bits as carried (Unix mode bits) to the
// bits fs.FileMode reports for a comparison.
func fileModeOf(mode uint32) uint32 {
	fm := fs.FileMode(mode & 0o777)
	if mode&unix.S_ISUID != 0 {
		fm |= fs.ModeSetuid
	}
	if mode&unix.S_ISGID != 0 {
		fm |= fs.ModeSetgid
	}
	if mode&unix.S_ISVTX != 0 {
		fm |= fs.ModeSticky
	}
	return uint32(fm)
}

// checkDir refuses a directory that resolves through a symbolic link:
// os.Root keeps a link inside the root, but a copy writes only into real
// directories, so what it wrote is where its paths say.
func (ss *session) checkDir(rel string) error {
	p := ""
	for _, c := range splitPath(rel) {
		p = joinRel(p, c)
		fi, err := ss.s.root.Lstat(p)
		if err != nil {
			return rootErr(p, err)
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			return cerr(codeNotAllowed, "path not allowed: %s is a symbolic link at the destination", p)
		}
		if !fi.IsDir() {
			return cerr(codeIO, "%s is not a directory at the destination", p)
		}
	}
	return nil
}

func splitPath(p string) []string {
	var out []string
	for p != "" {
		i := 0
		for i < len(p) && p[i] != '/' {
			i++
		}
		out = append(out, p[:i])
		if i == len(p) {
			break
		}
		p = p[i+1:]
	}
	return out
}

// readState returns e's resume state if it belongs to this source and
// its temporary copy is there.
func (ss *session) readState(e *rentry) *fileState {
	part, state := workNames(e.rel)
	b, err := ss.s.root.ReadFile(state)
	if err != nil {
		return nil
	}
	st, err := decodeState(b)
	if err != nil {
		ss.s.log.Warn("filecopy: state file unreadable: starting the file over", "path", state, "err", err)
		return nil
	}
	if !st.matches(e.size, e.mtime, e.mode, ss.chunk) {
		return nil
	}
	fi, err := ss.s.root.Lstat(part)
	if err != nil || !fi.Mode().IsRegular() || uint64(fi.Size()) != e.size {
		return nil
	}
	return st
}

func (ss *session) manifestEnd(m *msg) error {
	s := ss.s
	if ss.manifest || m.Count != uint64(len(ss.entries)) || m.Count != ss.nEntries {
		return cerr(codeProtocol, "manifest of %d entries, %d announced, %d received", m.Count, ss.nEntries, len(ss.entries))
	}
	ss.manifest = true
	var need uint64
	for _, e := range ss.entries {
		if e.kind != kindFile || e.done {
			continue
		}
		n := e.dataBytes
		if e.state != nil {
			have := e.state.Done.count(chunksOf(e.size, ss.chunk)) * ss.chunk
			n -= min(n, have)
		}
		need += n
	}
	dir := s.cfg.Root
	if ss.dest != "" {
		dir = path.Join(dir, ss.dest)
	}
	free, err := s.cfg.freeSpace(dir)
	if err == nil && need > free {
		return cerr(codeDiskFull, "disk full: the copy needs %d bytes under %s, %d are free", need, dir, free)
	}
	return ss.send(&msg{Type: tManifestEnd, Count: m.Count})
}

func (ss *session) file(idx uint32, large bool) (*rentry, error) {
	if !ss.manifest || int(idx) >= len(ss.entries) {
		return nil, cerr(codeProtocol, "no entry %d", idx)
	}
	e := ss.entries[idx]
	if e.kind != kindFile || e.done {
		return nil, cerr(codeProtocol, "entry %d is not a file to receive", idx)
	}
	if large != (e.size > uint64(ss.s.cfg.InlineMax)) {
		return nil, cerr(codeProtocol, "entry %d: %d bytes sent the wrong way", idx, e.size)
	}
	return e, nil
}

func (ss *session) inline(m *msg) error {
	s := ss.s
	e, err := ss.file(m.Idx, false)
	if err != nil {
		return err
	}
	if uint64(len(m.Bytes)) != e.size {
		return cerr(codeProtocol, "%s: %d bytes inline, %d announced", e.rel, len(m.Bytes), e.size)
	}
	sum := sha256.Sum256(m.Bytes)
	if sum != m.Sum {
		e.done = true
		return ss.send(&msg{Type: tFileDone, Idx: m.Idx, Sum: sum, Text: "SHA-256 differs from the sender's"})
	}
	part, _ := workNames(e.rel)
	f, err := s.root.OpenFile(part, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return rootErr(e.rel, err)
	}
	ss.batch = append(ss.batch, pendingInline{e: e, idx: m.Idx, f: f, part: part, sum: sum})
	ss.batchBytes += len(m.Bytes)
	_, err = f.Write(m.Bytes)
	if err == nil {
		err = f.Chmod(fs.FileMode(fileModeOf(e.mode)))
	}
	if err != nil {
		return rootErr(e.rel, err)
	}
	if len(ss.batch) >= batchFiles || ss.batchBytes >= batchBytes {
		return ss.commitBatch()
	}
	return nil
}

// Small files are committed in batches: written under their temporary
// names, then synced together (concurrent syncs share the file system's
// journal commits), then renamed. A sync per file as it comes costs a
// journal commit each (docs/ARCHITECTURE.md has the figures).
const (
	batchFiles  = 256
	batchBytes  = 32 << 20
	syncWorkers = 8
)

// pendingInline is a small file written under its temporary name,
// waiting for its batch to be synced and renamed.
type pendingInline struct {
	e    *rentry
	idx  uint32
	f    *os.File
	part string
	sum  [32]byte
}

// commitBatch syncs, renames and reports the small files written since
// the last batch. It runs before any other message is handled and before
// the session waits for input, so replies never wait on a batch.
func (ss *session) commitBatch() error {
	s := ss.s
	batch := ss.batch
	ss.batch, ss.batchBytes = ss.batch[:0], 0
	// Concurrent syncs share journal commits.
	errs := make([]error, len(batch))
	var wg sync.WaitGroup
	next := atomic.Int64{}
	for range min(syncWorkers, len(batch)) {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(batch) {
					return
				}
				errs[i] = batch[i].f.Sync()
			}
		})
	}
	wg.Wait()
	for i, p := range batch {
		err := errs[i]
		if cerr := p.f.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = ss.commit(p.e, p.part)
		}
		if err != nil {
			for _, q := range batch[i+1:] {
				q.f.Close()
				_ = s.root.Remove(q.part)
			}
			_ = s.root.Remove(p.part)
			return rootErr(p.e.rel, err)
		}
		p.e.done = true
		s.ctr.files.Add(1)
		s.ctr.inline.Add(1)
		if err := ss.send(&msg{Type: tFileDone, Idx: p.idx, OK: true, Sum: p.sum}); err != nil {
			return err
		}
	}
	clear(batch)
	return nil
}

// commit sets the modification time and renames the temporary copy into
// place; the directory is synced at END.
func (ss *session) commit(e *rentry, part string) error {
	s := ss.s
	mt := time.Unix(0, e.mtime)
	if err := s.root.Chtimes(part, mt, mt); err != nil {
		return rootErr(e.rel, err)
	}
	if err := s.root.Rename(part, e.rel); err != nil {
		return rootErr(e.rel, err)
	}
	ss.dirs[path.Dir(e.rel)] = true
	return nil
}

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

func (ss *session) fileEnd(m *msg) error {
	s := ss.s
	f, err := ss.largeFile(m.Idx)
	if err != nil {
		return err
	}
	e := f.e
	for n := range f.wins {
		ss.release(f, n)
	}
	f.mu.Lock()
	missing := f.n - f.done.count(f.n)
	f.mu.Unlock()
	if missing > 0 {
		return cerr(codeProtocol, "%s: FILE_END with %d chunks missing", e.rel, missing)
	}
	r := <-f.sum
	f.hashing = false
	if r.err != nil {
		return rootErr(e.rel, r.err)
	}
	e.done = true
	e.f = nil
	if r.sum != m.Sum {
		// The copy is wrong although every chunk matched its CRC: start
		// the file over next time.
		f.fd.Close()
		_ = s.root.Remove(f.state)
		_ = s.root.Remove(f.part)
		s.log.Warn("filecopy: SHA-256 mismatch", "path", e.rel)
		return ss.send(&msg{Type: tFileDone, Idx: m.Idx, Sum: r.sum, Text: "SHA-256 differs from the sender's"})
	}
	err = f.fd.Sync()
	if err == nil {
		err = f.fd.Chmod(fs.FileMode(fileModeOf(e.mode)))
	}
	if cerr := f.fd.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return rootErr(e.rel, err)
	}
	if err := ss.commit(e, f.part); err != nil {
		return err
	}
	if err := ss.syncDir(path.Dir(e.rel)); err != nil {
		return err
	}
	_ = s.root.Remove(f.state)
	s.ctr.files.Add(1)
	return ss.send(&msg{Type: tFileDone, Idx: m.Idx, OK: true, Sum: r.sum})
}

func (ss *session) syncDir(dir string) error {
	d, err := ss.s.root.Open(dir)
	if err != nil {
		return rootErr(dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return rootErr(dir, err)
	}
	return nil
}

// end finishes the directories (their modes and times, deepest first,
// once nothing more is created in them), syncs every directory that
// gained an entry, and says BYE.
func (ss *session) end() error {
	s := ss.s
	var n uint64
	for _, e := range ss.entries {
		if e.kind == kindFile && !e.done {
			return cerr(codeProtocol, "END with %s not received", e.rel)
		}
		if e.kind == kindFile {
			n++
		}
	}
	for i := len(ss.entries) - 1; i >= 0; i-- {
		e := ss.entries[i]
		if e.kind != kindDir {
			continue
		}
		if err := s.root.Chmod(e.rel, fs.FileMode(fileModeOf(e.mode))|fs.ModeDir); err != nil {
			return rootErr(e.rel, err)
		}
		mt := time.Unix(0, e.mtime)
		if err := s.root.Chtimes(e.rel, mt, mt); err != nil {
			return rootErr(e.rel, err)
		}
		ss.dirs[path.Dir(e.rel)] = true
	}
	for d := range ss.dirs {
		if err := ss.syncDir(d); err != nil {
			return err
		}
	}
	s.log.Info("filecopy: copy finished", "from", ss.from, "dest", ss.dest, "files", n)
	return ss.send(&msg{Type: tBye, Count: n})
}

// cleanup releases what a session holds: windows, files (their verified
// chunks recorded in the state file), hashers.
func (ss *session) cleanup() {
	for _, p := range ss.batch {
		p.f.Close()
		_ = ss.s.root.Remove(p.part)
	}
	ss.batch = nil
	for _, e := range ss.entries {
		f := e.f
		if f == nil {
			continue
		}
		for n := range f.wins {
			ss.release(f, n)
		}
		if f.dirty > 0 && !ss.s.killed.Load() {
			if err := ss.checkpoint(f); err != nil {
				ss.s.log.Warn("filecopy: state not saved", "path", f.state, "err", err)
			}
		}
		f.mu.Lock()
		f.stop = true
		f.cond.Broadcast()
		f.mu.Unlock()
		if f.hashing {
			<-f.sum
		}
		f.fd.Close()
		e.f = nil
	}
}
