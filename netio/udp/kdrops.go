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
)

// KernelDrops returns how many datagrams the kernel dropped on the socket
// (its receive buffer was full): the drops column of the socket's line in
// /proc/self/net/udp or udp6, found by the socket's inode.
func (c *Conn) KernelDrops() (uint64, error) {
	rc, err := c.udp.SyscallConn()
	if err != nil {
		return 0, err
	}
	return KernelDropsOf(rc, c.local.Addr().Is6() && !c.local.Addr().Is4In6())
}

// KernelDropsOf is KernelDrops for any UDP socket of this process (the
// control channel's QUIC socket): ipv6 says which table holds it.
func KernelDropsOf(rc syscall.RawConn, ipv6 bool) (uint64, error) {
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
