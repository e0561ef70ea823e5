//go:build linux

// Package rtsched runs this whole process under the kernel's real-time
// FIFO scheduling class, so that the host does not deschedule its threads
// for milliseconds behind ordinary work.
//
// Why: a user-space sender on a small, shared host is held off its CPU for
// 3–12 ms several times per 100 ms (docs/CC.md §7). It then either lets the
// link idle or sends what fell due in one burst; at a shallow ECN marking
// threshold the burst marks every other flow on the link, and a queue deep
// enough to cover the stall costs latency. A dedicated gateway host runs
// its datapath at real-time priority for the same reason (the daemon gets
// it from its service manager: docs/OPERATIONS.md, "Real-time
// scheduling"); the load tests ask for it with --realtime, which uses this
// package.
//
// A thread created later inherits the policy of the thread that creates
// it, so setting every thread that exists covers the Go runtime's later
// threads too. The kernel keeps a real-time class from taking the whole
// machine (kernel.sched_rt_runtime_us, 95% of each second by default).
package rtsched

import (
	"errors"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// MaxPriority is the highest SCHED_FIFO priority Linux accepts.
const MaxPriority = 99

// FIFO puts every thread of this process under SCHED_FIFO at priority prio
// (1..MaxPriority) and returns a function that puts them back to the
// policy the process had. It needs root or CAP_SYS_NICE (or an
// RLIMIT_RTPRIO of at least prio); without, it changes nothing and says
// so.
func FIFO(prio int) (restore func() error, err error) {
	if prio < 1 || prio > MaxPriority {
		return nil, fmt.Errorf("rtsched: priority %d outside 1..%d", prio, MaxPriority)
	}
	saved, err := unix.SchedGetAttr(0, 0)
	if err != nil {
		return nil, fmt.Errorf("rtsched: read this thread's scheduling policy: %w", err)
	}
	fifo := &unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_FIFO, Priority: uint32(prio)}
	if err := setAll(fifo); err != nil {
		// Leave nothing half done: a process whose threads run under two
		// classes behaves worse than either.
		_ = setAll(saved)
		if errors.Is(err, unix.EPERM) {
			return nil, fmt.Errorf("rtsched: SCHED_FIFO %d needs root or CAP_SYS_NICE: %w", prio, err)
		}
		return nil, err
	}
	return func() error { return setAll(saved) }, nil
}

// Policy reports the scheduling policy and priority of thread tid (0: the
// calling thread).
func Policy(tid int) (policy, prio int, err error) {
	a, err := unix.SchedGetAttr(tid, 0)
	if err != nil {
		return 0, 0, err
	}
	return int(a.Policy), int(a.Priority), nil
}

// Threads lists the thread IDs of this process.
func Threads() ([]int, error) {
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return nil, fmt.Errorf("rtsched: list threads: %w", err)
	}
	tids := make([]int, 0, len(ents))
	for _, e := range ents {
		if tid, err := strconv.Atoi(e.Name()); err == nil {
			tids = append(tids, tid)
		}
	}
	return tids, nil
}

// setAll applies a to every thread, listing them again until a pass finds
// no thread it had not set: one created meanwhile may have copied the old
// policy from its creator.
func setAll(a *unix.SchedAttr) error {
	a.Size = unix.SizeofSchedAttr
	done := map[int]bool{}
	for range 8 {
		tids, err := Threads()
		if err != nil {
			return err
		}
		fresh := 0
		for _, tid := range tids {
			if done[tid] {
				continue
			}
			fresh++
			if err := unix.SchedSetAttr(tid, a, 0); err != nil && !errors.Is(err, unix.ESRCH) {
				return fmt.Errorf("rtsched: set thread %d: %w", tid, err)
			}
			done[tid] = true
		}
		if fresh == 0 {
			return nil
		}
	}
	return errors.New("rtsched: threads kept appearing while their policy was set")
}
