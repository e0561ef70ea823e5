//go:build linux

package filecopy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
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
