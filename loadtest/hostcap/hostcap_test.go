//go:build linux

package hostcap

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/mrgw/mrgw/loadtest/chaos"
)

// TestHostCapacityShort is the short form of `mrgw-lab loadtest hosts`:
// 40 hosts registered with one gateway daemon. Every one registers, and
// the daemon's path sockets and descriptors stay within the hosts' shared
// pool (64) however many hosts there are; each host held a socket per
// path before (8 per host here: 320). The daemon's peak RSS (VmHWM) stays
// within limits.memory_bytes (256 MiB) plus the fixed overhead and the
// per-host share the Go memory limit counts; memory per host is logged,
// not asserted.
func TestHostCapacityShort(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the gateway daemon")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	bin, err := chaos.Build(ctx, t.TempDir(), "mrgw")
	if err != nil {
		t.Fatal(err)
	}
	var progress strings.Builder
	res, err := Run(ctx, Options{Binary: bin, Hosts: 40, Settle: time.Second, Progress: &progress})
	t.Log("\n" + progress.String())
	if err != nil {
		t.Fatal(err)
	}
	if res.Registered != 40 || res.RegisterFails != 0 {
		t.Fatalf("%d of 40 registered, %d failed: %s", res.Registered, res.RegisterFails, res.FirstFailure)
	}
	if res.PathSockets > 64 || res.FDsAfter-res.FDsBefore > 64+8 {
		t.Errorf("40 hosts hold %d path sockets and %d more descriptors at the gateway, want at most the pool of 64",
			res.PathSockets, res.FDsAfter-res.FDsBefore)
	}
	if res.RSSPeakMB <= 0 || !res.Within {
		t.Errorf("peak RSS %.1f MiB, bound %.1f MiB", res.RSSPeakMB, res.BoundMB)
	}
}
