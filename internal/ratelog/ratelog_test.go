package ratelog

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
)

func TestOneLinePerKeyPerInterval(t *testing.T) {
	var buf bytes.Buffer
	now := time.Unix(1000, 0)
	l := New(slog.New(slog.NewTextHandler(&buf, nil)), time.Second).WithClock(func() time.Time { return now })
	if !l.Warn("a", "refused", "src", "x") {
		t.Fatal("first line held back")
	}
	for range 5 {
		if l.Warn("a", "refused") {
			t.Fatal("line within the interval written")
		}
	}
	if !l.Warn("b", "other") {
		t.Fatal("another key held back")
	}
	now = now.Add(time.Second)
	if !l.Warn("a", "refused") {
		t.Fatal("line after the interval held back")
	}
	out := buf.String()
	if got := strings.Count(out, "\n"); got != 3 {
		t.Fatalf("%d lines, want 3:\n%s", got, out)
	}
	if !strings.Contains(out, "suppressed=5") || !strings.Contains(out, "reason=a") {
		t.Fatalf("the third line does not count the 5 held back:\n%s", out)
	}
}

func TestKeysBounded(t *testing.T) {
	now := time.Unix(1000, 0)
	l := New(nil, time.Second).WithClock(func() time.Time { return now })
	for i := range 3 * MaxKeys {
		l.Warn(string(rune('a'+i%26))+strings.Repeat("x", i), "m")
	}
	if len(l.keys) > MaxKeys+1 {
		t.Fatalf("%d keys tracked, bound %d", len(l.keys), MaxKeys+1)
	}
}
