//go:build linux

package lab

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// records is a slog handler that keeps every record with the attributes
// its logger was given (the gateway's name among them).
type records struct {
	mu    *sync.Mutex
	lines *[]string
	attrs []slog.Attr
}

func newRecords() *records { return &records{mu: new(sync.Mutex), lines: new([]string)} }

func (h *records) Enabled(context.Context, slog.Level) bool { return true }

func (h *records) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Level.String() + " " + r.Message)
	for _, a := range h.attrs {
		b.WriteString(" " + a.String())
	}
	r.Attrs(func(a slog.Attr) bool {
		b.WriteString(" " + a.String())
		return true
	})
	h.mu.Lock()
	*h.lines = append(*h.lines, b.String())
	h.mu.Unlock()
	return nil
}

func (h *records) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.attrs = append(append([]slog.Attr(nil), h.attrs...), as...)
	return &c
}

func (h *records) WithGroup(string) slog.Handler { return h }

// since returns the lines logged from index i on.
func (h *records) since(i int) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), (*h.lines)[i:]...)
}

func (h *records) len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(*h.lines)
}

// TestCleanStopLogsNoWarnings: a gateway drained and stopped the way the
// daemon does on SIGTERM (Shutdown) logs nothing at warn or above, in
// particular no failed dial of a peer it was still connecting to.
func TestCleanStopLogsNoWarnings(t *testing.T) {
	if testing.Short() {
		t.Skip("starts four gateways")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	h := newRecords()
	l, err := New(ctx, Config{Logger: slog.New(h), LogLevel: "debug", OneWay: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	l.Start()
	if err := l.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	mark := h.len()
	stopped := []string{"euw-gw1", "use-gw1"}
	for _, n := range stopped {
		sctx, scancel := context.WithTimeout(ctx, 10*time.Second)
		if err := l.Gateways[n].Shutdown(sctx); err != nil {
			t.Errorf("%s: Shutdown: %v", n, err)
		}
		scancel()
	}
	for _, line := range h.since(mark) {
		t.Log(line)
		for _, n := range stopped {
			if strings.Contains(line, "gateway="+n) && (strings.HasPrefix(line, "WARN") || strings.HasPrefix(line, "ERROR")) {
				t.Errorf("%s logged while stopping cleanly: %s", n, line)
			}
		}
	}
}
