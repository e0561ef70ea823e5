package sleep

import (
	"context"
	"testing"
	"time"
)

func TestCtx(t *testing.T) {
	if err := Ctx(context.Background(), time.Millisecond); err != nil {
		t.Fatalf("a full sleep returned %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	t0 := time.Now()
	if err := Ctx(ctx, time.Hour); err != context.Canceled {
		t.Fatalf("an ended context returned %v, want context.Canceled", err)
	}
	if d := time.Since(t0); d > time.Second {
		t.Fatalf("an ended context still slept %v", d)
	}
}
