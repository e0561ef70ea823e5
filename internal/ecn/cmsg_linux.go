//go:build linux

package ecn

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"syscall"

	"golang.org/x/sys/unix"
)

// Linux lays control messages out as a struct cmsghdr {size_t len; int level;
// int type} followed by the data, each element padded to the word size
// (CMSG_ALIGN). We encode and decode that layout by hand with
// binary.NativeEndian instead of unix.ParseSocketControlMessage, which
// allocates a slice per call: this runs once per received datagram.
const (
	wordSize = unix.SizeofPtr
	hdrSize  = (unix.SizeofCmsghdr + wordSize - 1) &^ (wordSize - 1)
)

func align(n int) int { return (n + wordSize - 1) &^ (wordSize - 1) }

// space is CMSG_SPACE(datalen) as a constant expression.
func space(datalen int) int { return hdrSize + align(datalen) }

// Buffer sizes for the OOB (control) part of a message.
const (
	// SendSpace is enough OOB room for the cmsgs one outgoing datagram can
	// carry here: an IP_TOS/IPV6_TCLASS int and a UDP_SEGMENT uint16.
	SendSpace = hdrSize + (4+wordSize-1)&^(wordSize-1) + hdrSize + (2+wordSize-1)&^(wordSize-1)
	// RecvSpace is enough OOB room for what the kernel reports on a socket
	// configured by EnableReceive plus UDP_GRO: the TOS/TCLASS and the GRO
	// segment size (both int), with room to spare for one more int-sized
	// cmsg so that an extra option enabled elsewhere does not truncate ours.
	RecvSpace = 3 * (hdrSize + (4+wordSize-1)&^(wordSize-1))
)

// ErrMalformed is returned by ParseControl when a cmsg header claims a length
// that does not fit the buffer. The kernel never produces that; it means the
// buffer was not what the kernel wrote (for example a wrong NN).
var ErrMalformed = errors.New("ecn: malformed control message")

// appendCmsg appends one cmsg header with room for datalen bytes and returns
// the extended buffer and the (zeroed) data part to fill in. It allocates only
// when b lacks capacity.
func appendCmsg(b []byte, level, typ int32, datalen int) (out, data []byte) {
	n := len(b)
	total := space(datalen)
	b = slices.Grow(b, total)[:n+total]
	h := b[n:]
	clear(h)
	length := hdrSize + datalen // cmsg_len is CMSG_LEN: header plus unpadded data
	if wordSize == 8 {
		binary.NativeEndian.PutUint64(h[0:], uint64(length))
		binary.NativeEndian.PutUint32(h[8:], uint32(level))
		binary.NativeEndian.PutUint32(h[12:], uint32(typ))
	} else {
		binary.NativeEndian.PutUint32(h[0:], uint32(length))
		binary.NativeEndian.PutUint32(h[4:], uint32(level))
		binary.NativeEndian.PutUint32(h[8:], uint32(typ))
	}
	return b, h[hdrSize : hdrSize+datalen]
}

// AppendTrafficClass appends a cmsg that sets the whole TOS (IPv4) or Traffic
// Class (IPv6) byte of one outgoing datagram, DSCP and ECN. v6 must be true
// exactly when the datagram goes to a native IPv6 destination; for IPv4 and
// for IPv4-mapped destinations on a dual-stack socket the kernel takes the
// IPv4 IP_TOS cmsg and ignores IPV6_TCLASS.
func AppendTrafficClass(oob []byte, v6 bool, tc byte) []byte {
	level, typ := int32(unix.IPPROTO_IP), int32(unix.IP_TOS)
	if v6 {
		level, typ = unix.IPPROTO_IPV6, unix.IPV6_TCLASS
	}
	// Both accept an int; IPV6_TCLASS accepts nothing else.
	oob, data := appendCmsg(oob, level, typ, 4)
	binary.NativeEndian.PutUint32(data, uint32(tc))
	return oob
}

// AppendECN appends a cmsg that sends one datagram with codepoint cp (and a
// zero DSCP). See AppendTrafficClass for v6.
func AppendECN(oob []byte, v6 bool, cp Codepoint) []byte {
	return AppendTrafficClass(oob, v6, byte(cp&Mask))
}

// MaxGSOSegments is the most segments Linux accepts in one UDP_SEGMENT send
// (UDP_MAX_SEGMENTS).
const MaxGSOSegments = 128

// AppendGSO appends a UDP_SEGMENT cmsg: the kernel (or the NIC) cuts the
// datagram's payload into segments of segSize bytes, the last one possibly
// shorter, and sends each as its own UDP datagram. At most MaxGSOSegments
// segments and 65,507 bytes of payload per send.
func AppendGSO(oob []byte, segSize uint16) []byte {
	oob, data := appendCmsg(oob, unix.SOL_UDP, unix.UDP_SEGMENT, 2)
	binary.NativeEndian.PutUint16(data, segSize)
	return oob
}

// Control is what ParseControl found in a received OOB buffer.
type Control struct {
	// ECN is the datagram's ECN codepoint; valid only if HasECN.
	ECN Codepoint
	// HasECN reports that the kernel delivered the TOS / Traffic Class
	// (EnableReceive was called). Without it ECN is NotECT.
	HasECN bool
	// TrafficClass is the full TOS / Traffic Class byte (DSCP and ECN).
	TrafficClass byte
	// GROSize is the segment size when the kernel coalesced several
	// datagrams of one flow into this buffer (UDP_GRO); 0 otherwise. Every
	// segment has GROSize bytes except possibly the last.
	GROSize int
}

// ParseControl walks the cmsgs in oob (the first NN bytes of a received
// message's OOB buffer) and extracts the ECN bits and the GRO segment size.
// Unknown cmsgs are skipped. It does not allocate.
func ParseControl(oob []byte) (Control, error) {
	var c Control
	for len(oob) >= hdrSize {
		var length uint64
		var level, typ int32
		if wordSize == 8 {
			length = binary.NativeEndian.Uint64(oob[0:])
			level = int32(binary.NativeEndian.Uint32(oob[8:]))
			typ = int32(binary.NativeEndian.Uint32(oob[12:]))
		} else {
			length = uint64(binary.NativeEndian.Uint32(oob[0:]))
			level = int32(binary.NativeEndian.Uint32(oob[4:]))
			typ = int32(binary.NativeEndian.Uint32(oob[8:]))
		}
		if length < hdrSize || length > uint64(len(oob)) {
			return c, ErrMalformed
		}
		data := oob[hdrSize:length]
		switch {
		case level == unix.IPPROTO_IP && typ == unix.IP_TOS,
			level == unix.IPPROTO_IPV6 && typ == unix.IPV6_TCLASS:
			// IPv4 delivers IP_TOS as one byte, IPv6 IPV6_TCLASS as an int.
			if v, ok := cmsgInt(data); ok {
				c.TrafficClass = byte(v)
				c.ECN = FromTOS(byte(v))
				c.HasECN = true
			}
		case level == unix.SOL_UDP && typ == unix.UDP_GRO:
			if v, ok := cmsgInt(data); ok && v > 0 {
				c.GROSize = v
			}
		}
		next := align(int(length))
		if next >= len(oob) {
			break
		}
		oob = oob[next:]
	}
	return c, nil
}

// cmsgInt decodes a cmsg payload that the kernel writes as a u8, u16 or int.
func cmsgInt(data []byte) (int, bool) {
	switch len(data) {
	case 1:
		return int(data[0]), true
	case 2:
		return int(binary.NativeEndian.Uint16(data)), true
	case 4:
		return int(int32(binary.NativeEndian.Uint32(data))), true
	}
	return 0, false
}

// EnableReceive asks the kernel to report the TOS (IP_RECVTOS) or Traffic
// Class (IPV6_RECVTCLASS) of every datagram received on c, typically a
// *net.UDPConn, so that ParseControl can read the ECN bits. On an IPv6 socket
// it also enables IP_RECVTOS when the socket accepts it, for IPv4-mapped
// traffic on a dual-stack socket.
func EnableReceive(c syscall.Conn) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return fmt.Errorf("ecn: %w", err)
	}
	var opErr error
	err = rc.Control(func(fd uintptr) {
		domain, err := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_DOMAIN)
		if err != nil {
			opErr = fmt.Errorf("ecn: getsockopt SO_DOMAIN: %w", err)
			return
		}
		switch domain {
		case unix.AF_INET:
			if err := unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_RECVTOS, 1); err != nil {
				opErr = fmt.Errorf("ecn: setsockopt IP_RECVTOS: %w", err)
			}
		case unix.AF_INET6:
			if err := unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_RECVTCLASS, 1); err != nil {
				opErr = fmt.Errorf("ecn: setsockopt IPV6_RECVTCLASS: %w", err)
				return
			}
			// Best effort: a v6-only socket never sees IPv4, so a
			// refusal here costs nothing.
			_ = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_RECVTOS, 1)
		default:
			opErr = fmt.Errorf("ecn: socket family %d is neither IPv4 nor IPv6", domain)
		}
	})
	if err != nil {
		return fmt.Errorf("ecn: %w", err)
	}
	return opErr
}
