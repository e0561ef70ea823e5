//go:build linux

package rtsched

import (
	"errors"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

func TestFIFORejectsPriorityOutOfRange(t *testing.T) {
	for _, p := range []int{0, -1, MaxPriority + 1} {
		if _, err := FIFO(p); err == nil {
			t.Errorf("FIFO(%d): no error", p)
		}
	}
}

// TestFIFOCoversEveryThreadAndRestores: every thread that exists, and one
// the runtime creates afterwards, runs under SCHED_FIFO until restore, and
// under the old policy after it. Without the privilege, FIFO says which one
// it lacks and leaves every thread as it was.
func TestFIFOCoversEveryThreadAndRestores(t *testing.T) {
	before, _, err := Policy(0)
	if err != nil {
		t.Fatal(err)
	}
	restore, err := FIFO(1)
	if err != nil {
		if !errors.Is(err, unix.EPERM) {
			t.Fatalf("FIFO(1): %v", err)
		}
		// Unprivileged: nothing may have changed.
		checkAll(t, before, "after a refused FIFO")
		return
	}
	checkAll(t, unix.SCHED_FIFO, "after FIFO")

	// Threads the runtime starts now (goroutines locked to their threads
	// and blocked, more of them than the threads that exist) inherit the
	// class from their creators.
	old, err := Threads()
	if err != nil {
		t.Fatal(err)
	}
	existed := map[int]bool{}
	for _, tid := range old {
		existed[tid] = true
	}
	n := len(old) + 8
	release := make(chan struct{})
	started := make(chan int)
	for range n {
		go func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			started <- unix.Gettid()
			<-release
		}()
	}
	fresh := 0
	for range n {
		tid := <-started
		if !existed[tid] {
			fresh++
		}
		if p, _, err := Policy(tid); err != nil || p != unix.SCHED_FIFO {
			t.Errorf("thread %d (new: %v): policy %d, %v; want SCHED_FIFO", tid, !existed[tid], p, err)
		}
	}
	if fresh == 0 {
		t.Errorf("%d locked goroutines ran on the %d threads that existed: no new thread was tested", n, len(old))
	}
	close(release)

	if err := restore(); err != nil {
		t.Fatalf("restore: %v", err)
	}
	checkAll(t, before, "after restore")
}

func checkAll(t *testing.T, want int, when string) {
	t.Helper()
	tids, err := Threads()
	if err != nil {
		t.Fatal(err)
	}
	for _, tid := range tids {
		p, _, err := Policy(tid)
		if errors.Is(err, unix.ESRCH) {
			continue // exited meanwhile
		}
		if err != nil || p != want {
			t.Errorf("%s: thread %d policy %d, %v; want %d", when, tid, p, err, want)
		}
	}
}
