//go:build !linux

package region

import "net"

const overflowOOBSize = 0

func enableOverflowCount(*net.UDPConn) {}

func parseOverflow([]byte) (uint32, bool) { return 0, false }

const msgTrunc = 0
