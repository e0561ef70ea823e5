package region

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
)

// logRecorder is a slog handler that keeps every record.
type logRecorder struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (r *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *logRecorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recs = append(r.recs, rec.Clone())
	return nil
}
func (r *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *logRecorder) WithGroup(string) slog.Handler      { return r }

// find returns the records at level whose message contains msg, with
// their attributes as text.
func (r *logRecorder) find(level slog.Level, msg string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, rec := range r.recs {
		if rec.Level != level || !strings.Contains(rec.Message, msg) {
			continue
		}
		var b strings.Builder
		b.WriteString(rec.Message)
		rec.Attrs(func(a slog.Attr) bool {
			b.WriteString(" " + a.String())
			return true
		})
		out = append(out, b.String())
	}
	return out
}

func startLogged(t *testing.T, cfg Config) (*Cluster, *logRecorder) {
	t.Helper()
	rec := &logRecorder{}
	c, err := New(cfg, slog.New(rec))
	if err != nil {
		t.Fatalf("New(%s): %v", cfg.Name, err)
	}
	t.Cleanup(func() { _ = c.Shutdown() })
	return c, rec
}

// A gateway with another keyring (or none) is refused: the refusing side
// counts it by reason and says so at warn; the refused side cannot join,
// says so at error and keeps the reason for /readyz.
func TestWrongKeyringRefusedAndReported(t *testing.T) {
	k1 := bytes.Repeat([]byte{1}, 32)
	k2 := bytes.Repeat([]byte{2}, 32)
	a1, aLog := startLogged(t, testConfig("a1", "a", k1))

	for _, tc := range []struct {
		name   string
		keys   [][]byte
		reason string // counted on a1
		warn   string // a1's warn line
		hint   string // in the joiner's JoinErr
	}{
		{"wrong key", [][]byte{k2}, RefuseKeyring, "another keyring", "check gossip.keyring"},
		{"no key", nil, RefuseUnencrypted, "clear gossip stream", "has no gossip.keyring"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := a1.Stats().Refused[tc.reason]
			cfg := testConfig("x-"+tc.name[:2], "x", tc.keys...)
			cfg.JoinAttempts = 2
			x, xLog := startLogged(t, cfg)
			if err := x.JoinErr(); err != nil {
				t.Fatalf("JoinErr before any Join = %v", err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), deadline)
			defer cancel()
			n, err := x.Join(ctx, []string{a1.Addr()})
			if err == nil || n != 0 {
				t.Fatalf("Join = %d, %v; want an error", n, err)
			}
			var je *JoinError
			if !errors.As(err, &je) || je.Attempts != 2 || !strings.Contains(je.Hint, tc.hint) {
				t.Fatalf("Join error = %v; want a *JoinError after 2 attempts with a hint containing %q", err, tc.hint)
			}
			if got := x.JoinErr(); got == nil || got.Error() != err.Error() {
				t.Errorf("JoinErr = %v, want %v", got, err)
			}
			if lines := xLog.find(slog.LevelError, "cannot join gossip"); len(lines) != 1 {
				t.Errorf("joiner logged %d error lines for one failed Join: %q", len(lines), lines)
			} else {
				t.Logf("joiner: %s", lines[0])
			}
			// Two attempts, two refusals, each counted; the warn line
			// is rate-limited, and the first one is written.
			if got := a1.Stats().Refused[tc.reason] - before; got < 2 {
				t.Errorf("a1 counted %d %s refusals, want at least 2", got, tc.reason)
			}
			lines := aLog.find(slog.LevelWarn, tc.warn)
			if len(lines) != 1 {
				t.Fatalf("a1 wrote %d warn lines %q; want exactly one (rate-limited)", len(lines), lines)
			}
			if !strings.Contains(lines[0], "reason="+tc.reason) || !strings.Contains(lines[0], "from=127.0.0.1") {
				t.Errorf("a1's warn line lacks reason or source: %s", lines[0])
			}
			t.Logf("refusing side: %s", lines[0])
			if _, ok := a1.View().Gateway(cfg.Name); ok {
				t.Errorf("a1 admitted %s", cfg.Name)
			}
		})
	}

	// A Join that succeeds clears the error.
	b1 := start(t, testConfig("b1", "b", k2))
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	cfg := testConfig("b2", "b", k2)
	cfg.JoinAttempts = 1
	b2 := start(t, cfg)
	if _, err := b2.Join(ctx, []string{a1.Addr()}); err == nil {
		t.Fatal("b2 joined a cluster with another keyring")
	}
	if b2.JoinErr() == nil {
		t.Fatal("no JoinErr after a failed Join")
	}
	join(t, b2, b1)
	if err := b2.JoinErr(); err != nil {
		t.Errorf("JoinErr after a successful Join = %v", err)
	}
}
