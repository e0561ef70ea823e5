//go:build linux

package region

import (
	"net"
	"os"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// The gossip socket's receive buffer is forced past net.core.rmem_max
// where the process has CAP_NET_ADMIN; where it has not, forcing says so
// and the transport asks the ordinary way.
func TestGossipReadBufferPastSysctlCap(t *testing.T) {
	b, err := os.ReadFile("/proc/sys/net/core/rmem_max")
	if err != nil {
		t.Fatal(err)
	}
	rmax, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var caps [2]unix.CapUserData
	netAdmin := unix.Capget(&hdr, &caps[0]) == nil && caps[0].Effective&(1<<unix.CAP_NET_ADMIN) != 0
	ask := 2 * rmax
	if forced := forceReadBuffer(c, ask); forced != netAdmin {
		t.Fatalf("forced %v with CAP_NET_ADMIN %v", forced, netAdmin)
	}
	if !netAdmin {
		return
	}
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	got := 0
	_ = rc.Control(func(fd uintptr) { got, _ = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF) })
	if got/2 < ask {
		t.Fatalf("receive buffer %d bytes, asked %d past rmem_max %d", got/2, ask, rmax)
	}
}
