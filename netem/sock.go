package netem

import (
	"fmt"
	"net"
	"net/netip"

	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"

	"github.com/mrgw/mrgw/internal/ecn"
)

// sockBufBytes is the kernel buffer asked for on every emulator socket.
// Bursts of thousands of datagrams arrive faster than one goroutine drains
// them on a 2-core machine; a small buffer would add invisible loss that is
// not the model's.
const sockBufBytes = 8 << 20

// sock is one of the emulator's UDP sockets: a stand-in for a real endpoint.
type sock struct {
	uc   *net.UDPConn
	pc   *ipv4.PacketConn
	addr netip.AddrPort
}

// listen opens a UDP socket on bind with an ephemeral port, large kernel
// buffers and TOS reporting (for ECN).
func listen(bind netip.Addr) (*sock, error) {
	uc, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(bind, 0)))
	if err != nil {
		return nil, fmt.Errorf("emu: listen: %w", err)
	}
	setBuffers(uc)
	if err := ecn.EnableReceive(uc); err != nil {
		uc.Close()
		return nil, fmt.Errorf("emu: %w", err)
	}
	return &sock{
		uc:   uc,
		pc:   ipv4.NewPacketConn(uc),
		addr: uc.LocalAddr().(*net.UDPAddr).AddrPort(),
	}, nil
}

// setBuffers raises the socket buffers, past rmem_max/wmem_max when the
// process may (root: SO_RCVBUFFORCE); failures leave the defaults, which
// only costs burst tolerance.
func setBuffers(uc *net.UDPConn) {
	_ = uc.SetReadBuffer(sockBufBytes)
	_ = uc.SetWriteBuffer(sockBufBytes)
	rc, err := uc.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Control(func(fd uintptr) {
		_ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, sockBufBytes)
		_ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, sockBufBytes)
	})
}
