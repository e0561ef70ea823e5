// Package labtest holds what tests that run the in-process two-region
// lab share: starting it with a test's temporary directory and logger,
// and waiting on a condition without a wall-clock threshold.
package labtest

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/mrgw/mrgw/loadtest/lab"
)

// Logger discards everything unless MRGW_TEST_LOG is set, then logs at
// info to stderr: quiet tests by default, the whole story on demand.
func Logger() *slog.Logger {
	if os.Getenv("MRGW_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	return slog.New(slog.DiscardHandler)
}

// Start builds the lab of cfg (in the test's temporary directory and with
// Logger unless cfg names its own), starts it, waits until it is ready
// and closes it at cleanup.
func Start(t testing.TB, ctx context.Context, cfg lab.Config) *lab.Lab {
	t.Helper()
	if cfg.Dir == "" {
		cfg.Dir = t.TempDir()
	}
	if cfg.Logger == nil {
		cfg.Logger = Logger()
	}
	l, err := lab.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	l.Start()
	if err := l.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	return l
}

// WaitFor polls ok until it holds; ctx's deadline only bounds a hang,
// and the failure names what was awaited.
func WaitFor(t testing.TB, ctx context.Context, what string, ok func() bool) {
	t.Helper()
	for !ok() {
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}
