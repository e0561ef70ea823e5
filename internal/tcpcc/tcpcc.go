//go:build linux

// Package tcpcc sets and reads a kernel TCP socket's congestion control,
// for the load tests that run kernel TCP beside mrgw.
package tcpcc

import (
	"fmt"
	"net"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Dialer returns a dialer whose sockets run congestion control algo
// (TCP_CONGESTION), or fail to dial saying the kernel refused it.
func Dialer(algo string) *net.Dialer {
	return &net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		if err := rc.Control(func(fd uintptr) {
			serr = unix.SetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION, algo)
		}); err != nil {
			return err
		}
		if serr != nil {
			return fmt.Errorf("TCP_CONGESTION %s: %w", algo, serr)
		}
		return nil
	}}
}

// Info reads a socket's congestion control and total retransmissions
// ("" and 0 for a connection that is not TCP).
func Info(c net.Conn) (string, uint32) {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return "", 0
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return "", 0
	}
	var name string
	var retx uint32
	_ = rc.Control(func(fd uintptr) {
		name, _ = unix.GetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION)
		if info, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO); err == nil {
			retx = info.Total_retrans
		}
	})
	return strings.TrimRight(name, "\x00"), retx
}
