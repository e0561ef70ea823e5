//go:build linux

package netns

import (
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"
)

// Do runs fn on a fresh OS thread that has joined the network namespace at
// nsPath (Path(name) for a named one) and returns its error. Sockets fn
// opens belong to that namespace and keep belonging to it after fn returns.
// The thread is never unlocked, so the runtime destroys it when the
// goroutine returns instead of reusing it in the wrong namespace.
func Do(nsPath string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// Deliberately no UnlockOSThread: see above.
		fd, err := unix.Open(nsPath, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			errc <- fmt.Errorf("netns: open %s: %w", nsPath, err)
			return
		}
		err = unix.Setns(fd, unix.CLONE_NEWNET)
		unix.Close(fd)
		if err != nil {
			errc <- fmt.Errorf("netns: setns %s: %w", nsPath, err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}
