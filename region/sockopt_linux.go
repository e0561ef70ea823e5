//go:build linux

package region

import (
	"encoding/binary"
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// overflowOOBSize holds one SO_RXQ_OVFL control message.
var overflowOOBSize = unix.CmsgSpace(4)

// enableOverflowCount asks the kernel to attach to every datagram read the
// number of datagrams it has dropped on this socket for want of buffer
// space.
func enableOverflowCount(c *net.UDPConn) {
	rc, err := c.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Control(func(fd uintptr) {
		_ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RXQ_OVFL, 1)
	})
}

// parseOverflow reads the SO_RXQ_OVFL counter out of a datagram's control
// messages (one batch's last datagram: the counter only grows).
func parseOverflow(oob []byte) (uint32, bool) {
	if len(oob) == 0 {
		return 0, false
	}
	cms, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return 0, false
	}
	for _, cm := range cms {
		if cm.Header.Level == unix.SOL_SOCKET && cm.Header.Type == unix.SO_RXQ_OVFL && len(cm.Data) >= 4 {
			return binary.NativeEndian.Uint32(cm.Data), true
		}
	}
	return 0, false
}

// msgTrunc is recvmsg's flag for a datagram longer than the buffer.
const msgTrunc = unix.MSG_TRUNC

// memberSockets: members get sockets of their own (openMemberSocket).
const memberSockets = true

// reusePort sets SO_REUSEPORT before bind: the gossip port's listening
// socket and the members' connected sockets share the port.
func reusePort(_, _ string, rc syscall.RawConn) error {
	var serr error
	err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1)
	})
	if err != nil {
		return err
	}
	return serr
}
