//go:build linux

package udp

import (
	"net/netip"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// mmsgReader is recvmmsg(2) with every header, iovec, address and control
// buffer allocated once, so that a steady-state read allocates nothing.
// (golang.org/x/net's ReadBatch builds a *net.UDPAddr per message.) The
// caller serializes calls (Conn.rmu).
type mmsgReader struct {
	rc    syscall.RawConn
	hdrs  []unix.Mmsghdr
	iovs  []unix.Iovec
	names []unix.RawSockaddrInet6 // large enough for either family
	oob   []byte
	oobSz int
	// The read callback and its arguments and results: a method value made
	// once, because a closure built per call would escape to the heap.
	fn    func(fd uintptr) bool
	want  int
	got   int
	errno syscall.Errno
	// waited: the last read found nothing at first and waited for the
	// socket to become readable (no backlog when it was asked).
	waited bool
}

func newMmsgReader(rc syscall.RawConn, n, oobSize int) *mmsgReader {
	r := &mmsgReader{
		rc:    rc,
		hdrs:  make([]unix.Mmsghdr, n),
		iovs:  make([]unix.Iovec, n),
		names: make([]unix.RawSockaddrInet6, n),
		oob:   make([]byte, n*oobSize),
		oobSz: oobSize,
	}
	r.fn = r.recv
	return r
}

// read receives up to len(bufs) datagrams, datagram i into bufs[i] (at
// most len(r.hdrs)). It blocks, through Go's poller, until at least one
// is there.
func (r *mmsgReader) read(bufs [][]byte) (int, error) {
	n := min(len(bufs), len(r.hdrs))
	for i := range n {
		h := &r.hdrs[i]
		iov := &r.iovs[i]
		if len(bufs[i]) > 0 {
			iov.Base = &bufs[i][0]
		} else {
			iov.Base = nil
		}
		iov.SetLen(len(bufs[i]))
		h.Hdr.Iov = iov
		h.Hdr.SetIovlen(1)
		h.Hdr.Name = (*byte)(unsafe.Pointer(&r.names[i]))
		h.Hdr.Namelen = uint32(unsafe.Sizeof(r.names[i]))
		h.Hdr.Control = &r.oob[i*r.oobSz]
		h.Hdr.SetControllen(r.oobSz)
		h.Hdr.Flags = 0
		h.Len = 0
	}
	r.want, r.got, r.errno, r.waited = n, 0, 0, false
	err := r.rc.Read(r.fn)
	// Do not keep the caller's buffers reachable from the headers.
	for i := range n {
		r.iovs[i].Base = nil
	}
	if err != nil {
		return 0, err
	}
	if r.errno != 0 {
		return 0, r.errno
	}
	return r.got, nil
}

// recv is the RawConn.Read callback: false asks the poller to wait for the
// socket to become readable.
func (r *mmsgReader) recv(fd uintptr) bool {
	for {
		n, _, e := unix.Syscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&r.hdrs[0])), uintptr(r.want),
			0, 0, 0)
		switch e {
		case 0:
			r.got = int(n)
			return true
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			r.waited = true
			return false
		default:
			r.errno = e
			return true
		}
	}
}

// datagram returns message i's length, sender, control bytes and whether
// it was truncated.
func (r *mmsgReader) datagram(i int) (n int, from netip.AddrPort, oob []byte, trunc bool) {
	h := &r.hdrs[i]
	oob = r.oob[i*r.oobSz : i*r.oobSz+int(h.Hdr.Controllen)]
	return int(h.Len), sockaddrPort(&r.names[i]), oob, h.Hdr.Flags&unix.MSG_TRUNC != 0
}

// sockaddrPort decodes a sockaddr_in or sockaddr_in6 (IPv4-mapped
// addresses unmapped) without allocating.
func sockaddrPort(sa *unix.RawSockaddrInet6) netip.AddrPort {
	pb := (*[2]byte)(unsafe.Pointer(&sa.Port))
	port := uint16(pb[0])<<8 | uint16(pb[1]) // network byte order
	switch sa.Family {
	case unix.AF_INET:
		sa4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
		return netip.AddrPortFrom(netip.AddrFrom4(sa4.Addr), port)
	case unix.AF_INET6:
		return netip.AddrPortFrom(netip.AddrFrom16(sa.Addr).Unmap(), port)
	}
	return netip.AddrPort{}
}
