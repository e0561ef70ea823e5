package region

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// rateLog writes at most one line per key per interval; the next line
// written for that key says how many were suppressed in between. Keys come
// from small fixed sets (drop and refusal reasons), so the table stays
// small.
type rateLog struct {
	log   *slog.Logger
	level slog.Level
	every time.Duration

	mu   sync.Mutex
	keys map[string]*rateEntry
}

type rateEntry struct {
	last       time.Time
	suppressed uint64
}

func newRateLog(l *slog.Logger, level slog.Level, every time.Duration) *rateLog {
	return &rateLog{log: l, level: level, every: every, keys: map[string]*rateEntry{}}
}

// allow reports whether a line for key may be written at now, and how many
// were suppressed since the last one. A caller that is refused builds no
// attributes at all, so a flood costs a map lookup per event.
func (r *rateLog) allow(key string, now time.Time) (bool, uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.keys[key]
	if e == nil {
		e = &rateEntry{}
		r.keys[key] = e
	} else if now.Sub(e.last) < r.every {
		e.suppressed++
		return false, 0
	}
	n := e.suppressed
	e.last, e.suppressed = now, 0
	return true, n
}

// logf writes msg with args for key unless a line for key was written
// less than the interval ago; "suppressed" is added when lines were
// skipped.
func (r *rateLog) logf(key string, now time.Time, msg string, args ...any) {
	ok, n := r.allow(key, now)
	if !ok {
		return
	}
	if n > 0 {
		args = append(args, "suppressed", n)
	}
	r.log.Log(context.Background(), r.level, msg, args...)
}
