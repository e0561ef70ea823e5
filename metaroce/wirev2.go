package metaroce

// This file is wire version 2 (PROTOCOL.md §12): the compact DATA packet,
// the only packet whose layout differs from version 1, and the unwrapping
// of its 32-bit sequence numbers. Which version a connection speaks is
// agreed in the handshake (§4; conn.go, endpoint.go).

// Wire versions.
const (
	// Version1 is the original wire format: every packet as in PROTOCOL.md §1–§11.
	Version1 = 1
	// Version2 is version 1 with the compact DATA packet of PROTOCOL.md §12.
	Version2 = 2
	// MaxVersion is the highest wire version this package speaks.
	MaxVersion = Version2
)

// Version 2 DATA sizes in bytes.
const (
	// DataHeaderLenV2 is the header of a version-2 DATA without descriptor.
	DataHeaderLenV2 = 28
	// DataDescLen is the length of the descriptor a version-2 DATA may carry.
	DataDescLen = 18
	// MaxMessageLen is the longest message, in bytes.
	MaxMessageLen = 1 << 40
	// maxFloorGapV2 bounds a version-2 floor gap (24 bits).
	maxFloorGapV2 = 1<<24 - 1
)

// Version-2 DATA flag bits (byte 2). FlagRetransmit is bit 0, as in version 1.
const (
	// FlagDescriptor marks a version-2 DATA that carries the message's descriptor.
	FlagDescriptor = 1 << 1
	// flagSendV2 marks a version-2 DATA whose op is SEND.
	flagSendV2 = 1 << 2
)

// DataHeaderV2 is the fixed part of a version-2 DATA packet, as on the
// wire: the sequence numbers are the low 32 bits of the 64-bit ones
// (Unwrap32 restores them), the offset is a chunk index.
type DataHeaderV2 struct {
	// Flags holds FlagRetransmit and any bit this version does not define
	// (kept so that a packet re-encodes to its own bytes); the descriptor
	// and op bits are Desc and Op.
	Flags    uint8
	Op       Op
	Tag      uint32 // the low 32 bits of the connection id
	Path     uint16
	Seq      uint32 // low 32 bits of the path sequence
	FloorGap uint32 // < 2^24
	Stream   uint32
	MsgSeq   uint32 // low 32 bits of the message sequence
	Chunk    uint32 // the payload's offset in the message is Chunk*MTU
	// Desc says the descriptor follows: Key, Addr and MsgLen are valid.
	Desc   bool
	Key    uint32
	Addr   uint64
	MsgLen uint64 // ≤ MaxMessageLen
}

// Len returns the header's length on the wire.
func (h *DataHeaderV2) Len() int {
	if h.Desc {
		return DataHeaderLenV2 + DataDescLen
	}
	return DataHeaderLenV2
}

// DescriptorOnly reports whether the packet only announces its message (a
// descriptor-only DATA: a descriptor, an empty payload, a message that is
// not empty).
func (h *DataHeaderV2) DescriptorOnly(payloadLen int) bool {
	return h.Desc && payloadLen == 0 && h.MsgLen > 0
}

// AppendDataV2 encodes a version-2 DATA packet with payload into b[:0] and
// returns the packet. It does not allocate if cap(b) is large enough.
func AppendDataV2(b []byte, h *DataHeaderV2, payload []byte) ([]byte, error) {
	if len(payload) > MaxPayload || h.FloorGap > maxFloorGapV2 || (h.Op != OpWrite && h.Op != OpSend) {
		return b, ErrBadField
	}
	if h.Desc && h.MsgLen > MaxMessageLen {
		return b, ErrBadField
	}
	hl := h.Len()
	n := hl + len(payload)
	if cap(b) < n {
		return b, ErrShortBuffer
	}
	b = b[:n]
	f := h.Flags &^ (FlagDescriptor | flagSendV2)
	if h.Desc {
		f |= FlagDescriptor
	}
	if h.Op == OpSend {
		f |= flagSendV2
	}
	b[0], b[1], b[2] = Version2, byte(TypeData), f
	b[3], b[4], b[5] = byte(h.FloorGap>>16), byte(h.FloorGap>>8), byte(h.FloorGap)
	be.PutUint16(b[6:], h.Path)
	be.PutUint32(b[8:], h.Tag)
	be.PutUint32(b[12:], h.Seq)
	be.PutUint32(b[16:], h.Stream)
	be.PutUint32(b[20:], h.MsgSeq)
	be.PutUint32(b[24:], h.Chunk)
	if h.Desc {
		be.PutUint32(b[28:], h.Key)
		be.PutUint64(b[32:], h.Addr)
		be.PutUint16(b[40:], uint16(h.MsgLen>>32))
		be.PutUint32(b[42:], uint32(h.MsgLen))
	}
	copy(b[hl:], payload)
	return b, nil
}

// DecodeDataV2 decodes a version-2 DATA packet. The payload aliases b. It
// checks what the packet alone can show; that the payload is exactly its
// chunk of the message needs the connection's MTU and, without a
// descriptor, the message the receiver holds (PROTOCOL.md §12 "Checks").
func DecodeDataV2(b []byte, h *DataHeaderV2) (payload []byte, err error) {
	if len(b) < DataHeaderLenV2 {
		return nil, ErrTruncated
	}
	if b[0] != Version2 {
		return nil, ErrBadVersion
	}
	if PacketType(b[1]) != TypeData {
		return nil, ErrBadType
	}
	f := b[2]
	h.Flags = f &^ (FlagDescriptor | flagSendV2)
	h.Desc = f&FlagDescriptor != 0
	h.Op = OpWrite
	if f&flagSendV2 != 0 {
		h.Op = OpSend
	}
	h.FloorGap = uint32(b[3])<<16 | uint32(b[4])<<8 | uint32(b[5])
	h.Path = be.Uint16(b[6:])
	h.Tag = be.Uint32(b[8:])
	h.Seq = be.Uint32(b[12:])
	h.Stream = be.Uint32(b[16:])
	h.MsgSeq = be.Uint32(b[20:])
	h.Chunk = be.Uint32(b[24:])
	h.Key, h.Addr, h.MsgLen = 0, 0, 0
	hl := DataHeaderLenV2
	if h.Desc {
		hl += DataDescLen
		if len(b) < hl {
			return nil, ErrTruncated
		}
		h.Key = be.Uint32(b[28:])
		h.Addr = be.Uint64(b[32:])
		h.MsgLen = uint64(be.Uint16(b[40:]))<<32 | uint64(be.Uint32(b[42:]))
	}
	plen := len(b) - hl
	if plen > MaxPayload {
		return nil, ErrBadLength
	}
	if h.Desc {
		switch {
		case h.MsgLen > MaxMessageLen:
			return nil, ErrBadField
		case plen == 0:
			// The empty message's one chunk, or a descriptor-only DATA.
			if h.Chunk != 0 {
				return nil, ErrBadField
			}
		case uint64(plen) > h.MsgLen || uint64(h.Chunk)*MinMTU >= h.MsgLen:
			return nil, ErrBadField
		}
	}
	return b[hl:], nil
}

// Unwrap32 returns the 64-bit number whose low 32 bits are v that is
// nearest to expected (PROTOCOL.md §12): how a receiver restores a
// version-2 path sequence (expected: the path's largest received + 1) or
// message sequence (expected: the stream's completion point).
func Unwrap32(expected uint64, v uint32) uint64 {
	const win, half = 1 << 32, 1 << 31
	c := expected&^(win-1) | uint64(v)
	switch {
	case c <= expected && expected-c >= half && c <= ^uint64(0)-win:
		return c + win
	case c > expected && c-expected > half && c >= win:
		return c - win
	}
	return c
}
