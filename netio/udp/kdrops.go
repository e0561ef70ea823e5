//go:build linux

package udp

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// KernelDrops returns how many datagrams the kernel dropped on the socket
// (its receive buffer was full): the socket's sk_drops, which is also the
// drops column of its line in /proc/self/net/udp or udp6.
func (c *Conn) KernelDrops() (uint64, error) {
	rc, err := c.udp.SyscallConn()
	if err != nil {
		return 0, err
	}
	return KernelDropsOf(rc, c.local.Addr().Is6() && !c.local.Addr().Is4In6())
}

// KernelDropsOf is KernelDrops for any UDP socket of this process (the
// control channel's QUIC socket): ipv6 says which /proc table holds it.
//
// It asks the socket (getsockopt SO_MEMINFO, one system call) and reads
// the table only when that fails (a kernel without the option). The table
// lists every UDP socket of the network namespace: read for each of a
// gateway's sockets on every statistics pass, its cost grew with the
// sockets squared (half of a relaying gateway's CPU in a namespace that
// held tens of thousands of UDP sockets; 0.35 s per read there).
func KernelDropsOf(rc syscall.RawConn, ipv6 bool) (uint64, error) {
	if n, err := meminfoDrops(rc); err == nil {
		return n, nil
	}
	return procDrops(rc, ipv6)
}

// skMeminfoDrops and skMeminfoVars are SK_MEMINFO_DROPS and
// SK_MEMINFO_VARS of linux/sock_diag.h: SO_MEMINFO returns that many
// 32-bit counters, the socket's sk_drops at index skMeminfoDrops.
const (
	skMeminfoDrops = 8
	skMeminfoVars  = 9
)

// meminfoDrops reads the socket's drop count with getsockopt SO_MEMINFO.
func meminfoDrops(rc syscall.RawConn) (uint64, error) {
	var info [skMeminfoVars]uint32
	size := uint32(unsafe.Sizeof(info))
	var errno syscall.Errno
	if err := rc.Control(func(fd uintptr) {
		_, _, errno = unix.Syscall6(unix.SYS_GETSOCKOPT, fd, unix.SOL_SOCKET, unix.SO_MEMINFO,
			uintptr(unsafe.Pointer(&info[0])), uintptr(unsafe.Pointer(&size)), 0)
	}); err != nil {
		return 0, err
	}
	if errno != 0 {
		return 0, errno
	}
	if size < (skMeminfoDrops+1)*4 {
		return 0, unix.ENOPROTOOPT // an older layout without the drops
	}
	return uint64(info[skMeminfoDrops]), nil
}

// procDrops finds the socket's line in /proc/self/net/udp or udp6 by its
// inode and returns the drops column.
func procDrops(rc syscall.RawConn, ipv6 bool) (uint64, error) {
	var st syscall.Stat_t
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = syscall.Fstat(int(fd), &st) }); err != nil {
		return 0, err
	}
	if serr != nil {
		return 0, serr
	}
	file := "/proc/self/net/udp"
	if ipv6 {
		file += "6"
	}
	f, err := os.Open(file)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return kernelDrops(f, st.Ino)
}

// errNoSocket: the inode is not in the table.
var errNoSocket = errors.New("udp: socket not found in /proc/net/udp")

// kernelDrops finds the line of inode in a /proc/net/udp table and returns
// its drops column.
func kernelDrops(r io.Reader, inode uint64) (uint64, error) {
	sc := bufio.NewScanner(r)
	want := strconv.FormatUint(inode, 10)
	first := true
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if first { // the header
			first = false
			continue
		}
		// sl local rem st tx:rx tr:when retrnsmt uid timeout inode ref pointer drops
		if len(f) < 13 || f[9] != want {
			continue
		}
		n, err := strconv.ParseUint(f[12], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("udp: drops column %q: %w", f[12], err)
		}
		return n, nil
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, errNoSocket
}
