package metaroce

import "encoding/binary"

// The packets of path MTU discovery (PROTOCOL.md §6a). They are new
// types rather than a padded PROBE because a version-1 decoder refuses a
// PROBE of any length but 24 and counts it malformed; a peer that does not
// know these types drops them (counted as BadType) and never answers, so
// a sender's search simply stays at its base size, which is safe.
const (
	// TypePMTUProbe is a padded probe: its length is the size probed.
	TypePMTUProbe PacketType = 10
	// TypePMTUAck answers a PMTU_PROBE with the length that arrived.
	TypePMTUAck PacketType = 11
)

// PMTUProbeLen is the PMTU_PROBE header (the smallest probe); PMTUAckLen
// the PMTU_ACK.
const (
	PMTUProbeLen = 24
	PMTUAckLen   = 28
)

// Flags of PMTU_PROBE and PMTU_ACK (offset 14, u16).
const (
	// PMTUFlagMeasure marks a measurement probe (Conn.Measure, `mrgw
	// probe`) rather than a search's; the answer echoes it.
	PMTUFlagMeasure uint16 = 1 << 0
	// PMTUFlagCE, in an answer: the probe arrived marked ECN-CE.
	PMTUFlagCE uint16 = 1 << 1
)

// AppendPMTUProbe encodes a PMTU_PROBE of exactly size bytes (at least
// PMTUProbeLen): the header, then zero padding, in b's spare capacity
// (ErrShortBuffer when that is too small: it never allocates).
func AppendPMTUProbe(b []byte, conn uint64, path, flags uint16, ts uint64, size int) ([]byte, error) {
	if size < PMTUProbeLen || size > MaxPMTUSize {
		return b, ErrBadField
	}
	n := len(b)
	if cap(b)-n < size {
		return b, ErrShortBuffer
	}
	b = b[:n+size]
	p := b[n:]
	clear(p)
	p[0], p[1] = Version, byte(TypePMTUProbe)
	binary.BigEndian.PutUint64(p[4:], conn)
	binary.BigEndian.PutUint16(p[12:], path)
	binary.BigEndian.PutUint16(p[14:], flags)
	binary.BigEndian.PutUint64(p[16:], ts)
	return b, nil
}

// DecodePMTUProbe decodes a PMTU_PROBE; the padding is not inspected.
func DecodePMTUProbe(b []byte) (conn uint64, path, flags uint16, ts uint64, err error) {
	if err := checkCommon(b, TypePMTUProbe, PMTUProbeLen); err != nil {
		return 0, 0, 0, 0, err
	}
	be := binary.BigEndian
	return be.Uint64(b[4:]), be.Uint16(b[12:]), be.Uint16(b[14:]), be.Uint64(b[16:]), nil
}

// AppendPMTUAck encodes the answer to a PMTU_PROBE of length n that
// arrived on path with timestamp ts.
func AppendPMTUAck(b []byte, conn uint64, path, flags uint16, ts uint64, n int) []byte {
	var p [PMTUAckLen]byte
	p[0], p[1] = Version, byte(TypePMTUAck)
	binary.BigEndian.PutUint64(p[4:], conn)
	binary.BigEndian.PutUint16(p[12:], path)
	binary.BigEndian.PutUint16(p[14:], flags)
	binary.BigEndian.PutUint64(p[16:], ts)
	binary.BigEndian.PutUint32(p[24:], uint32(n))
	return append(b, p[:]...)
}

// DecodePMTUAck decodes a PMTU_ACK.
func DecodePMTUAck(b []byte) (conn uint64, path, flags uint16, ts uint64, n int, err error) {
	if err := checkCommon(b, TypePMTUAck, PMTUAckLen); err != nil {
		return 0, 0, 0, 0, 0, err
	}
	if len(b) != PMTUAckLen {
		return 0, 0, 0, 0, 0, ErrBadLength
	}
	be := binary.BigEndian
	return be.Uint64(b[4:]), be.Uint16(b[12:]), be.Uint16(b[14:]), be.Uint64(b[16:]), int(be.Uint32(b[24:])), nil
}
