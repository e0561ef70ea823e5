//go:build linux

package flood

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/mrgw/mrgw/loadtest/lab"
)

// Reproductions of bugs the flood found (docs/results/flood.md) that can
// only be judged by time. They report what they see and fail while the bug
// is there, so they run only when asked:
// MRGW_FLOOD_REPRO=1 go test ./loadtest/flood -run TestRepro -v
// Fixed ones became regression tests (regress_test.go).

func reproLab(t *testing.T) *lab.Lab {
	t.Helper()
	if os.Getenv("MRGW_FLOOD_REPRO") == "" {
		t.Skip("a reproduction of a known bug: set MRGW_FLOOD_REPRO=1")
	}
	l, err := lab.New(context.Background(), lab.Config{Admin: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	l.Start()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := l.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	return l
}

// TestReproSharedIPHostClose: two hosts on 127.0.0.1; one carries a
// transfer through a gateway, the other registers with that gateway and
// closes, three times. In about one case in three the transfer stopped for
// about 3 s (the gateway sent to the closed host's socket: a last reply of
// the closed host, given to the other by IP, had moved its address); on
// 127.0.0.2 the second host changed nothing. Fixed in netio (an address
// moves only by a datagram of the peer's connection;
// TestIPFallbackDoesNotMoveAPeer is the regression test): kept as a
// measurement, since it judges a gap in time.
func TestReproSharedIPHostClose(t *testing.T) {
	l := reproLab(t)
	for _, ip := range []string{"127.0.0.2", "127.0.0.1"} {
		tr, err := startTransfer(context.Background(), l, 32<<10, nil)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Second)
		t0 := time.Now()
		// Three times: the stall comes in about one case in three.
		for k := range 3 {
			if _, err := register(l, tr.flow.Gateway(), netip.MustParseAddr(ip), fmt.Sprintf("other-%d", k), 5*time.Second, nil); err != nil {
				t.Fatal(err)
			}
			time.Sleep(4 * time.Second)
		}
		_, gap := tr.deliveredIn(t0, time.Now())
		res := tr.finish(10 * time.Second)
		tr.close()
		t.Logf("second host on %s: longest gap in deliveries %v (byte-exact %v)", ip, gap.Round(time.Millisecond), res.ByteExact)
		if gap > time.Second {
			t.Errorf("second host on %s registering and closing stalled the transfer for %v", ip, gap.Round(time.Millisecond))
		}
	}
}
