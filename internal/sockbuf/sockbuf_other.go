//go:build !linux

package sockbuf

import "net"

// SetRead asks for a receive buffer of size bytes (no forcing here).
func SetRead(uc *net.UDPConn, size int) error { return uc.SetReadBuffer(size) }

// SetWrite asks for a send buffer of size bytes (no forcing here).
func SetWrite(uc *net.UDPConn, size int) error { return uc.SetWriteBuffer(size) }

// Granted is unknown here: 0, 0.
func Granted(*net.UDPConn) (read, write int) { return 0, 0 }
