//go:build linux

package sockbuf

import (
	"net"

	"golang.org/x/sys/unix"
)

// SetRead asks for a receive buffer of size bytes: forced past
// net.core.rmem_max where the process may, else through SetReadBuffer,
// which the kernel clamps to the cap without an error.
func SetRead(uc *net.UDPConn, size int) error {
	return set(uc, unix.SO_RCVBUFFORCE, uc.SetReadBuffer, size)
}

// SetWrite is SetRead for the send buffer (net.core.wmem_max).
func SetWrite(uc *net.UDPConn, size int) error {
	return set(uc, unix.SO_SNDBUFFORCE, uc.SetWriteBuffer, size)
}

// set tries the forcing option force, then the ordinary setter.
func set(uc *net.UDPConn, force int, ordinary func(int) error, size int) error {
	rc, err := uc.SyscallConn()
	if err != nil {
		return err
	}
	var forceErr error
	if err := rc.Control(func(fd uintptr) {
		forceErr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, force, size)
	}); err != nil {
		return err
	}
	if forceErr == nil {
		return nil
	}
	return ordinary(size)
}

// Granted returns the receive and send buffers the kernel granted, in the
// bytes SetRead and SetWrite ask in (half what SO_RCVBUF and SO_SNDBUF
// read back: the kernel doubles a request for its bookkeeping); 0 where it
// cannot tell.
func Granted(uc *net.UDPConn) (read, write int) {
	rc, err := uc.SyscallConn()
	if err != nil {
		return 0, 0
	}
	_ = rc.Control(func(fd uintptr) {
		if n, err := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF); err == nil {
			read = n / 2
		}
		if n, err := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUF); err == nil {
			write = n / 2
		}
	})
	return read, write
}
