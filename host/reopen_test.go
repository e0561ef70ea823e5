//go:build linux

package host

import (
	"math/rand/v2"
	"testing"
	"time"
)

// TestReopenElsewhereResetsTheOldRoute: the source host loses its
// connection to the gateway carrying a flow, the gateway living on, and
// re-opens the flow through the other gateway. The destination, seeing
// the flow arrive through another gateway, sends RESET for it to the
// gateway it came through before, which may still hold the flow's old
// instance (gateways place by their own load, so the new route need not
// end at the old destination gateway). Every message is delivered once.
func TestReopenElsewhereResetsTheOldRoute(t *testing.T) {
	ctx := testCtx(t)
	w := newWorld(t, 2, 1<<20)
	if err := w.dst.RegisterMemory(1, make([]byte, 1<<20)); err != nil {
		t.Fatal(err)
	}
	col := collect(t, w.dst)
	f, err := w.src.OpenFlow(ctx, "us", "dst", FlowOptions{})
	if err != nil {
		t.Fatal(err)
	}
	old := w.gatewayOf(t, f)
	msgs := layout(rand.New(rand.NewPCG(8, 9)), 0, 1<<20, 64<<10)
	half := len(msgs) / 2
	ps, err := writeAll(ctx, f, 1, msgs[:half], 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		if err := p.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	before := old.resets.Load()
	old.dropHost(t, "eu/src")
	more, err := writeAll(ctx, f, 1, msgs[half:], 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range more {
		if err := p.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got := f.Gateway(); got == old.addr() {
		t.Fatalf("flow still on %v, whose connection to the source dropped", got)
	}
	for old.resets.Load() == before {
		select {
		case <-ctx.Done():
			t.Fatal("the destination sent no RESET to the gateway the flow left")
		case <-time.After(5 * time.Millisecond):
		}
	}
	col.waitFor(t, ctx, len(msgs))
	if n, dups, _ := col.count(); n != len(msgs) || dups != 0 {
		t.Fatalf("delivered %d of %d, %d twice", n, len(msgs), dups)
	}
	checkMemory(t, ctx, w.dst, 1, msgs)
	for _, g := range w.gws {
		g.checkErrs(t)
	}
}
