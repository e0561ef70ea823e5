//go:build !linux

package rtsched

import "errors"

// MaxPriority is the highest SCHED_FIFO priority Linux accepts.
const MaxPriority = 99

// FIFO is Linux only.
func FIFO(prio int) (restore func() error, err error) {
	return nil, errors.New("rtsched: real-time scheduling is supported on Linux only")
}
