//go:build linux

package metaroce

import (
	"syscall"
	"time"
)

// processCPU is the process's CPU time so far (user + system). The
// benchmarks report CPU per datagram beside the wall time: on the shared
// test machine a benchmark's goroutine waits for a core for much of its
// wall time, and what it waits for is not its cost.
func processCPU() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
