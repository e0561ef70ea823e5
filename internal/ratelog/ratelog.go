// Package ratelog writes log lines that a remote party can trigger at will
// (a refused handshake, a refused registration, a flood of bad datagrams)
// without letting that party fill the journal: at most one line per key per
// interval, and the next line that is written says how many were held back
// ("suppressed": n).
//
// Keys are reasons ("bad_certificate", "admission_full"), not sources: a
// flood from many addresses must not create many keys. The number of keys is
// bounded anyway (MaxKeys); past it, every further key shares one slot.
//
// This package imports only the standard library.
package ratelog

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// MaxKeys bounds the keys a Logger tracks.
const MaxKeys = 256

// overflowKey is the slot every key beyond MaxKeys shares.
const overflowKey = "\x00overflow"

// Logger rate-limits lines per key. It is safe for concurrent use. The
// zero value is not usable: call New.
type Logger struct {
	log   *slog.Logger
	every time.Duration
	now   func() time.Time

	mu   sync.Mutex
	keys map[string]*entry
}

type entry struct {
	last       time.Time // when a line was last written
	suppressed uint64    // lines held back since
}

// New returns a Logger that writes to log at most one line per key every
// interval (<= 0: one second). A nil log discards.
func New(log *slog.Logger, every time.Duration) *Logger {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if every <= 0 {
		every = time.Second
	}
	return &Logger{log: log, every: every, now: time.Now, keys: map[string]*entry{}}
}

// WithClock replaces the clock (tests). It must be called before use.
func (l *Logger) WithClock(now func() time.Time) *Logger {
	l.now = now
	return l
}

// Warn logs msg at warn level under key, unless a line of that key was
// written less than the interval ago. It reports whether it wrote.
func (l *Logger) Warn(key, msg string, args ...any) bool {
	return l.Log(slog.LevelWarn, key, msg, args...)
}

// Info is Warn at info level.
func (l *Logger) Info(key, msg string, args ...any) bool {
	return l.Log(slog.LevelInfo, key, msg, args...)
}

// Log logs msg at level under key (see Warn). The line carries "reason"
// (the key) and, when lines were held back since the last one,
// "suppressed" (how many).
func (l *Logger) Log(level slog.Level, key, msg string, args ...any) bool {
	ok, n, shared := l.allow(key)
	if !ok {
		return false
	}
	if !l.log.Enabled(context.Background(), level) {
		return true
	}
	if !shared {
		args = append(args, "reason", key)
	}
	if n > 0 {
		args = append(args, "suppressed", n)
	}
	l.log.Log(context.Background(), level, msg, args...)
	return true
}

// Allow reports whether a line under key may be written now (and counts it
// as written), and how many were held back since the last one. It is for a
// caller that builds its own line, and builds no attributes at all when it
// is refused: a flood then costs a map lookup per event.
func (l *Logger) Allow(key string) (bool, uint64) {
	ok, n, _ := l.allow(key)
	return ok, n
}

// allow is the rate limit of Log and Allow; shared says key was folded
// into the overflow slot (beyond MaxKeys).
func (l *Logger) allow(key string) (ok bool, held uint64, shared bool) {
	if l == nil {
		return false, 0, false
	}
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.keys[key]
	if e == nil {
		if len(l.keys) >= MaxKeys {
			key = overflowKey
			e = l.keys[key]
		}
		if e == nil {
			e = &entry{}
			l.keys[key] = e
		}
	}
	if !e.last.IsZero() && now.Sub(e.last) < l.every {
		e.suppressed++
		return false, 0, false
	}
	n := e.suppressed
	e.suppressed = 0
	e.last = now
	return true, n, key == overflowKey
}
