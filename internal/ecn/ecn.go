// Package ecn reads and writes the per-datagram metadata that mrgw's UDP
// datapath exchanges with the Linux kernel through socket control messages
// (cmsgs): the two ECN bits of the IPv4 TOS byte / IPv6 Traffic Class, and
// the UDP segmentation offload sizes (UDP_SEGMENT on send, UDP_GRO on
// receive).
//
// ECN is the only congestion signal MetaRoCE asks of switches (DESIGN.md §1,
// §4), so every datagram the gateway sends carries an ECN-capable codepoint
// and every datagram it receives must report whether a queue marked it CE.
// golang.org/x/net/ipv4 has no TOS field in its ControlMessage, hence this
// package: it builds and parses the cmsgs itself.
//
// The helpers are deliberately tiny and allocation-free: Append* functions
// append to a caller-owned OOB buffer, ParseControl walks a received OOB
// buffer once. Sockets are configured with EnableReceive (and, in
// netio/udp, with the GRO socket option).
//
// This package imports no other mrgw package. The cmsg helpers are Linux
// only; on other systems only the Codepoint type is available.
package ecn

// Codepoint is the 2-bit ECN field of an IP header (RFC 3168 §5): the low two
// bits of the IPv4 TOS byte or of the IPv6 Traffic Class.
type Codepoint uint8

// The four ECN codepoints (RFC 3168 §5).
const (
	NotECT Codepoint = 0b00 // not ECN-capable transport
	ECT1   Codepoint = 0b01 // ECN-capable transport, ECT(1) (L4S)
	ECT0   Codepoint = 0b10 // ECN-capable transport, ECT(0)
	CE     Codepoint = 0b11 // congestion experienced: a queue marked this packet
)

// Mask selects the ECN bits of a TOS / Traffic Class byte.
const Mask = 0b11

// FromTOS returns the ECN codepoint carried in an IPv4 TOS or IPv6 Traffic
// Class byte.
func FromTOS(tos byte) Codepoint { return Codepoint(tos & Mask) }

// IsECT reports whether c marks an ECN-capable transport (ECT(0), ECT(1)
// or CE): a router may mark such a packet CE instead of dropping it.
func (c Codepoint) IsECT() bool { return c&Mask != NotECT }

// String returns the RFC 3168 name of c.
func (c Codepoint) String() string {
	switch c & Mask {
	case NotECT:
		return "Not-ECT"
	case ECT1:
		return "ECT(1)"
	case ECT0:
		return "ECT(0)"
	default:
		return "CE"
	}
}
