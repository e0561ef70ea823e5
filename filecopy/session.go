//go:build linux

package filecopy

import (
	"bufio"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mrgw/mrgw/stream"
)

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
// journal commit each.
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
