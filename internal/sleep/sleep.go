// Package sleep waits for a duration unless a context ends first: the one
// helper the load tests, the lab and the emulators share for it.
package sleep

import (
	"context"
	"time"
)

// Ctx waits for d, or until ctx ends: then it returns ctx.Err() at once.
func Ctx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
