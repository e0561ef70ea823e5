//go:build linux

package hostcap

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/mrgw/mrgw/loadtest/chaos"
)

// workerEnv makes the test binary a generator process (ServeWorker), as
// `mrgw-lab loadtest hosts worker` is for the command.
// (Not MRGW_...: the daemon reads those as configuration.)
const workerEnv = "HOSTCAP_TEST_WORKER"

func TestMain(m *testing.M) {
	if os.Getenv(workerEnv) == "1" {
		if err := ServeWorker(context.Background(), os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// run builds the daemon and runs o against it.
func run(t *testing.T, o Options) *Result {
	t.Helper()
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
	o.Binary, o.Progress = bin, &progress
	res, err := Run(ctx, o)
	t.Log("\n" + progress.String())
	if err != nil {
		t.Fatal(err)
	}
	if res.Registered != o.Hosts || res.RegisterFails != 0 {
		t.Fatalf("%d of %d registered, %d failed: %v %v", res.Registered, o.Hosts, res.RegisterFails, res.Failures, res.FailureExamples)
	}
	return res
}

// TestHostCapacityShort is the short form of `mrgw-lab loadtest hosts`:
// 40 hosts registered with one gateway daemon. Every one registers, and
// the daemon's path sockets and descriptors stay within the hosts' shared
// pool (64) however many hosts there are; each host held a socket per
// path before (8 per host here: 320). The daemon's peak RSS (VmHWM) stays
// within limits.memory_bytes (256 MiB) plus the fixed overhead and the
// per-host share the Go memory limit counts; memory per host is logged,
// not asserted.
func TestHostCapacityShort(t *testing.T) {
	res := run(t, Options{Hosts: 40, Settle: time.Second})
	if res.PathSockets > 64 || res.FDsAfter-res.FDsBefore > 64+8 {
		t.Errorf("40 hosts hold %d path sockets and %d more descriptors at the gateway, want at most the pool of 64",
			res.PathSockets, res.FDsAfter-res.FDsBefore)
	}
	if res.RSSPeakMB <= 0 || !res.Within {
		t.Errorf("peak RSS %.1f MiB, bound %.1f MiB", res.RSSPeakMB, res.BoundMB)
	}
	if res.Processes != 1 || res.RegisterP50 <= 0 || res.RegisterP99 < res.RegisterP50 {
		t.Errorf("%d generator processes, registration p50 %.3f s p99 %.3f s", res.Processes, res.RegisterP50, res.RegisterP99)
	}
}

// maxGenHeapKiBPerHost bounds the Go heap one idle host of the host
// library holds in the generator: its sockets' buffers grow only with the
// datagrams that wait for them, and an idle host receives and sends a
// few dozen in all here, so even a starved process stays below it (every
// buffer made, 6.7 MiB, would not). Each host held 8.2 MiB when the send
// and receive batches and GRO buffers were made in full as its sockets
// opened; 0.8 MiB with them made as they fill (1,000 hosts).
const maxGenHeapKiBPerHost = 3 << 10

// TestGeneratorFootprint: 150 idle hosts registered in this process grow
// its Go heap in use by less than maxGenHeapKiBPerHost each.
func TestGeneratorFootprint(t *testing.T) {
	res := run(t, Options{Hosts: 150, Settle: time.Second})
	if res.GenHeapKiBPerHost <= 0 || res.GenHeapKiBPerHost > maxGenHeapKiBPerHost {
		t.Errorf("each host holds %.1f KiB of the generator's heap, want at most %d KiB", res.GenHeapKiBPerHost, maxGenHeapKiBPerHost)
	}
}

// TestGeneratorProcesses: 30 hosts at most 10 per process are spread over
// three generator processes (this test binary, as ServeWorker), every one
// registers, and each process's report comes back.
func TestGeneratorProcesses(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(workerEnv, "1")
	res := run(t, Options{Hosts: 30, PerProcess: 10, Worker: []string{exe}, Settle: time.Second})
	if res.Processes != 3 {
		t.Errorf("%d generator processes, want 3", res.Processes)
	}
	if res.GenHeapKiBPerHost <= 0 || res.GenRSSKiBPerHost <= 0 || res.RegisterP50 <= 0 {
		t.Errorf("the processes' reports are missing: heap %.1f KiB, RSS %.1f KiB per host, p50 %.3f s",
			res.GenHeapKiBPerHost, res.GenRSSKiBPerHost, res.RegisterP50)
	}
}

// TestWorkerRequired: more hosts than one process holds need a worker
// command.
func TestWorkerRequired(t *testing.T) {
	o := Options{Binary: "mrgw", Hosts: 3000}
	if err := o.fill(); err == nil || !strings.Contains(err.Error(), "worker command") {
		t.Fatalf("3,000 hosts without a worker: %v", err)
	}
}
