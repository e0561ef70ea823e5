//go:build !linux

package region

import (
	"net"
	"syscall"
)

const overflowOOBSize = 0

func enableOverflowCount(*net.UDPConn) {}

func parseOverflow([]byte) (uint32, bool) { return 0, false }

const msgTrunc = 0

// memberSockets: members share the gossip port's socket (steering by
// connected sockets is Linux's).
const memberSockets = false

func reusePort(string, string, syscall.RawConn) error { return nil }
