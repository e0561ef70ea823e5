//go:build linux

package sockbuf

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

func listen(t *testing.T) *net.UDPConn {
	t.Helper()
	uc, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { uc.Close() })
	return uc
}

// Buffers asked for above net.core.rmem_max and wmem_max are forced past
// them where the process has CAP_NET_ADMIN and clamped to them otherwise,
// with no error either way; Granted reports what was granted.
func TestBuffersPastSysctlCap(t *testing.T) {
	rmax := sysctlInt(t, "/proc/sys/net/core/rmem_max")
	wmax := sysctlInt(t, "/proc/sys/net/core/wmem_max")
	ask := 2 * max(rmax, wmax)
	uc := listen(t)
	if err := SetRead(uc, ask); err != nil {
		t.Fatal(err)
	}
	if err := SetWrite(uc, ask); err != nil {
		t.Fatal(err)
	}
	r, w := Granted(uc)
	if hasNetAdmin() {
		if r < ask || w < ask {
			t.Fatalf("with CAP_NET_ADMIN: granted %d/%d bytes, asked %d (rmem_max %d, wmem_max %d)", r, w, ask, rmax, wmax)
		}
	} else if r != rmax || w != wmax {
		t.Fatalf("without CAP_NET_ADMIN: granted %d/%d bytes, want the caps %d/%d", r, w, rmax, wmax)
	}
}

// Where forcing is refused (an option the kernel does not take stands in
// for a process without CAP_NET_ADMIN), the buffer is asked for the
// ordinary way and clamped to the cap.
func TestFallsBackToCap(t *testing.T) {
	rmax := sysctlInt(t, "/proc/sys/net/core/rmem_max")
	uc := listen(t)
	const unknownOption = 0x7fff
	if err := set(uc, unknownOption, uc.SetReadBuffer, 2*rmax); err != nil {
		t.Fatalf("fallback failed: %v", err)
	}
	if got, _ := Granted(uc); got != rmax {
		t.Fatalf("granted %d bytes, want the cap %d", got, rmax)
	}
}
