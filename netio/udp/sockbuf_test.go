//go:build linux

package udp

import (
	"net"
	"os"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// sysctlInt reads an integer sysctl of this network namespace.
func sysctlInt(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return n
}

// hasNetAdmin reports whether the process may force socket buffers past
// the sysctl caps.
func hasNetAdmin() bool {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return false
	}
	return data[0].Effective&(1<<unix.CAP_NET_ADMIN) != 0
}

// A socket buffer asked for above net.core.rmem_max is forced past it
// where the process has CAP_NET_ADMIN and clamped to it otherwise, with no
// error either way; Stats reports what was granted.
func TestSocketBufferPastSysctlCap(t *testing.T) {
	rmax := sysctlInt(t, "/proc/sys/net/core/rmem_max")
	wmax := sysctlInt(t, "/proc/sys/net/core/wmem_max")
	ask := 2 * max(rmax, wmax)
	c := open(t, loop4, Options{ReadBuffer: ask, WriteBuffer: ask})
	st := c.Stats()
	if hasNetAdmin() {
		if st.ReadBuffer < ask || st.WriteBuffer < ask {
			t.Fatalf("with CAP_NET_ADMIN: granted %d/%d bytes, asked %d (rmem_max %d, wmem_max %d)", st.ReadBuffer, st.WriteBuffer, ask, rmax, wmax)
		}
	} else if st.ReadBuffer != rmax || st.WriteBuffer != wmax {
		t.Fatalf("without CAP_NET_ADMIN: granted %d/%d bytes, want the caps %d/%d", st.ReadBuffer, st.WriteBuffer, rmax, wmax)
	}
}

// Where forcing is refused (an option the kernel does not take stands in
// for a process without CAP_NET_ADMIN), the buffer is asked for the
// ordinary way and clamped to the cap.
func TestSocketBufferFallsBackToCap(t *testing.T) {
	rmax := sysctlInt(t, "/proc/sys/net/core/rmem_max")
	uc, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer uc.Close()
	const unknownOption = 0x7fff
	if err := setSocketBuffer(uc, unknownOption, uc.SetReadBuffer, 2*rmax); err != nil {
		t.Fatalf("fallback failed: %v", err)
	}
	if got := grantedBuffer(uc, unix.SO_RCVBUF); got != rmax {
		t.Fatalf("granted %d bytes, want the cap %d", got, rmax)
	}
}
