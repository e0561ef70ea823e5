package metaroce

import (
	"encoding/binary"
	"errors"

	"github.com/mrgw/mrgw/units"
)

// Version is the version byte of every packet but a version-2 DATA: the
// handshake and control packets are the same in both wire versions
// (PROTOCOL.md §12; wirev2.go).
const Version = 1

// PacketType is the second byte of every packet.
type PacketType uint8

// Packet types. docs/PROTOCOL.md gives each layout byte by byte.
const (
	TypeData     PacketType = 1
	TypeAck      PacketType = 2
	TypeInit     PacketType = 3
	TypeAccept   PacketType = 4
	TypeClose    PacketType = 5
	TypeProbe    PacketType = 6
	TypeProbeAck PacketType = 7
	TypeVersion  PacketType = 8
	TypeError    PacketType = 9
)

func (t PacketType) String() string {
	switch t {
	case TypeData:
		return "DATA"
	case TypeAck:
		return "ACK"
	case TypeInit:
		return "INIT"
	case TypeAccept:
		return "ACCEPT"
	case TypeClose:
		return "CLOSE"
	case TypeProbe:
		return "PROBE"
	case TypeProbeAck:
		return "PROBE_ACK"
	case TypeVersion:
		return "VERSION"
	case TypeError:
		return "ERROR"
	}
	return "UNKNOWN"
}

// Op is the operation of a DATA packet.
type Op uint8

const (
	// OpWrite places the payload at (Key, Addr+Offset) in a registered region.
	OpWrite Op = 1
	// OpSend places the payload at Offset in the receive buffer posted with
	// the tag carried in Addr.
	OpSend Op = 2
)

// Header and fixed packet lengths in bytes.
const (
	CommonHeaderLen = 12
	DataHeaderLen   = 76
	AckFixedLen     = 96
	AckStreamLen    = 12
	InitLen         = 24
	AcceptLen       = 40
	CloseLen        = 16
	ProbeLen        = 24
	ErrorLen        = 32
	// MaxAckStreams bounds the stream completions carried by one ACK.
	MaxAckStreams = 32
	// SackBits is the width of an ACK's selective-ack bitvector.
	SackBits = 256
	// MaxPayload is the largest payload a DATA packet may carry.
	MaxPayload = 65000
)

// Data flags.
const (
	// FlagRetransmit marks a DATA packet that carries a chunk sent before.
	FlagRetransmit = 1 << 0
	// FlagAckNak marks an ACK that is a go-back-N negative acknowledgement.
	FlagAckNak = 1 << 0
	// FlagAckAtCum marks an ACK that reports the SACK window at its
	// cumulative point: its largest is that window's last sequence, not
	// the largest received, and it echoes no timestamp (PROTOCOL.md §3).
	FlagAckAtCum = 1 << 1
	// FlagCloseAck marks a CLOSE that answers a CLOSE.
	FlagCloseAck = 1 << 0
)

// Decoding errors. Every decoder returns one of these (wrapped errors are not
// used on the hot path, so errors.Is and == both work).
var (
	ErrTruncated   = errors.New("metaroce: packet truncated")
	ErrBadVersion  = errors.New("metaroce: unsupported version")
	ErrBadType     = errors.New("metaroce: unknown packet type")
	ErrBadLength   = errors.New("metaroce: length field inconsistent with packet")
	ErrBadField    = errors.New("metaroce: field out of range")
	ErrShortBuffer = errors.New("metaroce: buffer too small to encode packet")
)

var be = binary.BigEndian

// Peek reads the common header: version, type and connection id. It checks
// the length only, so a VERSION packet can be built for any version. For a
// version-2 DATA (version 2, type DATA, PROTOCOL.md §12) conn is its 32-bit
// connection tag, which is all the packet carries of the id.
func Peek(b []byte) (version uint8, t PacketType, conn uint64, err error) {
	if len(b) < CommonHeaderLen {
		return 0, 0, 0, ErrTruncated
	}
	if b[0] == Version2 && PacketType(b[1]) == TypeData {
		return b[0], PacketType(b[1]), uint64(be.Uint32(b[8:12])), nil
	}
	return b[0], PacketType(b[1]), be.Uint64(b[4:12]), nil
}

func putCommon(b []byte, t PacketType, flags, spare uint8, conn uint64) {
	b[0] = Version
	b[1] = byte(t)
	b[2] = flags
	b[3] = spare
	be.PutUint64(b[4:12], conn)
}

func checkCommon(b []byte, t PacketType, minLen int) error {
	if len(b) < minLen {
		return ErrTruncated
	}
	if b[0] != Version {
		return ErrBadVersion
	}
	if PacketType(b[1]) != t {
		return ErrBadType
	}
	return nil
}

// DataHeader is the fixed part of a DATA packet.
type DataHeader struct {
	Flags     uint8
	Op        Op
	Conn      uint64
	Path      uint16
	Stream    uint32
	Seq       uint64 // the path's own sequence number
	FloorGap  uint32 // Seq - FloorGap is the path's ack floor (see PROTOCOL.md)
	MsgSeq    uint64
	MsgLen    uint64
	Offset    uint64 // of the payload within the message
	Key       uint32 // WRITE: memory key; SEND: 0
	Addr      uint64 // WRITE: region offset of the message's first byte; SEND: receive tag
	Timestamp uint64 // sender's clock in ns, echoed in ACKs
}

// AppendData encodes a DATA packet with payload into b[:0] and returns the
// packet. It does not allocate if cap(b) is large enough.
func AppendData(b []byte, h *DataHeader, payload []byte) ([]byte, error) {
	return appendData(b, h, payload, false)
}

// appendData is AppendData; with headerOnly it checks the room for the
// payload and writes the header that describes it, but not the payload
// (which the driver appends: Endpoint.LendPayloads).
func appendData(b []byte, h *DataHeader, payload []byte, headerOnly bool) ([]byte, error) {
	if len(payload) > MaxPayload {
		return b, ErrBadField
	}
	n := DataHeaderLen + len(payload)
	if cap(b) < n {
		return b, ErrShortBuffer
	}
	b = b[:n]
	putCommon(b, TypeData, h.Flags, uint8(h.Op), h.Conn)
	be.PutUint16(b[12:], h.Path)
	be.PutUint16(b[14:], uint16(len(payload)))
	be.PutUint32(b[16:], h.Stream)
	be.PutUint64(b[20:], h.Seq)
	be.PutUint32(b[28:], h.FloorGap)
	be.PutUint64(b[32:], h.MsgSeq)
	be.PutUint64(b[40:], h.MsgLen)
	be.PutUint64(b[48:], h.Offset)
	be.PutUint32(b[56:], h.Key)
	be.PutUint64(b[60:], h.Addr)
	be.PutUint64(b[68:], h.Timestamp)
	if headerOnly {
		return b[:DataHeaderLen], nil
	}
	copy(b[DataHeaderLen:], payload)
	return b, nil
}

// DecodeData decodes a DATA packet. The payload aliases b.
func DecodeData(b []byte, h *DataHeader) (payload []byte, err error) {
	if err := checkCommon(b, TypeData, DataHeaderLen); err != nil {
		return nil, err
	}
	plen := int(be.Uint16(b[14:]))
	if DataHeaderLen+plen != len(b) {
		return nil, ErrBadLength
	}
	h.Flags = b[2]
	h.Op = Op(b[3])
	h.Conn = be.Uint64(b[4:])
	h.Path = be.Uint16(b[12:])
	h.Stream = be.Uint32(b[16:])
	h.Seq = be.Uint64(b[20:])
	h.FloorGap = be.Uint32(b[28:])
	h.MsgSeq = be.Uint64(b[32:])
	h.MsgLen = be.Uint64(b[40:])
	h.Offset = be.Uint64(b[48:])
	h.Key = be.Uint32(b[56:])
	h.Addr = be.Uint64(b[60:])
	h.Timestamp = be.Uint64(b[68:])
	if h.Op != OpWrite && h.Op != OpSend {
		return nil, ErrBadField
	}
	if uint64(h.FloorGap) > h.Seq {
		return nil, ErrBadField
	}
	// The payload must lie inside the message; an empty payload is allowed
	// only for an empty message.
	if h.Offset > h.MsgLen || uint64(plen) > h.MsgLen-h.Offset || (plen == 0 && h.MsgLen != 0) {
		return nil, ErrBadField
	}
	return b[DataHeaderLen:], nil
}

// StreamAck reports that the receiver completed, in order, every message of
// Stream with a sequence number below Completed.
type StreamAck struct {
	Stream    uint32
	Completed uint64
}

// Ack is an ACK packet: the state of one path plus connection-wide news.
type Ack struct {
	Flags uint8
	Conn  uint64
	Path  uint16
	// Cum: every path sequence number below Cum was received or abandoned by
	// the sender (below its ack floor).
	Cum uint64
	// Largest is the largest sequence number received on the path.
	Largest uint64
	// Sack bit i (byte i/8, bit i%8, least significant first) reports
	// sequence SackBase()+i as received.
	Sack [SackBits / 8]byte
	// EchoTimestamp is the Timestamp of the DATA packet with sequence Largest.
	EchoTimestamp uint64
	// CECount and RxCount are the cumulative numbers of DATA packets received
	// on the path marked CE and in total.
	CECount, RxCount uint64
	// RateHintBps is the receiver's allocated share for this sender in bits/s (0 = none).
	RateHintBps uint64
	NStreams    int
	Streams     [MaxAckStreams]StreamAck
}

// SackBase is the sequence number that bit 0 of Sack stands for: the
// bitvector ends at Largest, but never starts below Cum.
func (a *Ack) SackBase() uint64 {
	if a.Largest+1 > SackBits && a.Largest+1-SackBits > a.Cum {
		return a.Largest + 1 - SackBits
	}
	return a.Cum
}

// Acked reports whether the ACK acknowledges path sequence seq.
func (a *Ack) Acked(seq uint64) bool {
	if seq < a.Cum {
		return true
	}
	base := a.SackBase()
	if seq < base || seq-base >= SackBits {
		return false
	}
	i := seq - base
	return a.Sack[i/8]&(1<<(i%8)) != 0
}

// AppendAck encodes a into b[:0].
func AppendAck(b []byte, a *Ack) ([]byte, error) {
	if a.NStreams < 0 || a.NStreams > MaxAckStreams {
		return b, ErrBadField
	}
	n := AckFixedLen + AckStreamLen*a.NStreams
	if cap(b) < n {
		return b, ErrShortBuffer
	}
	b = b[:n]
	putCommon(b, TypeAck, a.Flags, uint8(a.NStreams), a.Conn)
	be.PutUint16(b[12:], a.Path)
	be.PutUint16(b[14:], 0)
	be.PutUint64(b[16:], a.Cum)
	be.PutUint64(b[24:], a.Largest)
	copy(b[32:64], a.Sack[:])
	be.PutUint64(b[64:], a.EchoTimestamp)
	be.PutUint64(b[72:], a.CECount)
	be.PutUint64(b[80:], a.RxCount)
	be.PutUint64(b[88:], a.RateHintBps)
	for i := 0; i < a.NStreams; i++ {
		o := AckFixedLen + i*AckStreamLen
		be.PutUint32(b[o:], a.Streams[i].Stream)
		be.PutUint64(b[o+4:], a.Streams[i].Completed)
	}
	return b, nil
}

// DecodeAck decodes an ACK packet into a.
func DecodeAck(b []byte, a *Ack) error {
	if err := checkCommon(b, TypeAck, AckFixedLen); err != nil {
		return err
	}
	ns := int(b[3])
	if ns > MaxAckStreams {
		return ErrBadField
	}
	if len(b) != AckFixedLen+AckStreamLen*ns {
		return ErrBadLength
	}
	a.Flags = b[2]
	a.NStreams = ns
	a.Conn = be.Uint64(b[4:])
	a.Path = be.Uint16(b[12:])
	a.Cum = be.Uint64(b[16:])
	a.Largest = be.Uint64(b[24:])
	copy(a.Sack[:], b[32:64])
	a.EchoTimestamp = be.Uint64(b[64:])
	a.CECount = be.Uint64(b[72:])
	a.RxCount = be.Uint64(b[80:])
	a.RateHintBps = be.Uint64(b[88:])
	if a.CECount > a.RxCount {
		return ErrBadField
	}
	for i := 0; i < ns; i++ {
		o := AckFixedLen + i*AckStreamLen
		a.Streams[i] = StreamAck{Stream: be.Uint32(b[o:]), Completed: be.Uint64(b[o+4:])}
	}
	return nil
}

// Handshake is the body of INIT and ACCEPT.
type Handshake struct {
	Conn      uint64
	MTU       uint16 // largest DATA payload the sender of this packet accepts
	Paths     uint16
	Timestamp uint64
	// INIT only: the wire versions the initiator speaks, bit i = version
	// i+1 (the INIT's flags byte); 0 means version 1 only.
	Offer uint8 `json:",omitempty"`
	// ACCEPT only:
	EchoTimestamp uint64
	RateHintBps   uint64
	// Version is the wire version the responder chose (ACCEPT byte 3); 0
	// means 1. See Chosen.
	Version uint8 `json:",omitempty"`
}

// Offers reports whether an INIT offers wire version v.
func (h *Handshake) Offers(v uint8) bool {
	if h.Offer == 0 {
		return v == Version1
	}
	return v >= 1 && v <= 8 && h.Offer&(1<<(v-1)) != 0
}

// Chosen returns the wire version an ACCEPT chose (1 when it says 0).
func (h *Handshake) Chosen() uint8 {
	if h.Version == 0 {
		return Version1
	}
	return h.Version
}

// AppendInit encodes an INIT.
func AppendInit(b []byte, h *Handshake) ([]byte, error) {
	if cap(b) < InitLen {
		return b, ErrShortBuffer
	}
	b = b[:InitLen]
	putCommon(b, TypeInit, h.Offer, 0, h.Conn)
	be.PutUint16(b[12:], h.MTU)
	be.PutUint16(b[14:], h.Paths)
	be.PutUint64(b[16:], h.Timestamp)
	return b, nil
}

// AppendAccept encodes an ACCEPT.
func AppendAccept(b []byte, h *Handshake) ([]byte, error) {
	if cap(b) < AcceptLen {
		return b, ErrShortBuffer
	}
	b = b[:AcceptLen]
	putCommon(b, TypeAccept, 0, h.Version, h.Conn)
	be.PutUint16(b[12:], h.MTU)
	be.PutUint16(b[14:], h.Paths)
	be.PutUint64(b[16:], h.Timestamp)
	be.PutUint64(b[24:], h.EchoTimestamp)
	be.PutUint64(b[32:], h.RateHintBps)
	return b, nil
}

// DecodeHandshake decodes an INIT or ACCEPT (t says which).
func DecodeHandshake(b []byte, t PacketType, h *Handshake) error {
	n := InitLen
	if t == TypeAccept {
		n = AcceptLen
	} else if t != TypeInit {
		return ErrBadType
	}
	if err := checkCommon(b, t, n); err != nil {
		return err
	}
	if len(b) != n {
		return ErrBadLength
	}
	h.Conn = be.Uint64(b[4:])
	h.MTU = be.Uint16(b[12:])
	h.Paths = be.Uint16(b[14:])
	h.Timestamp = be.Uint64(b[16:])
	h.EchoTimestamp, h.RateHintBps, h.Offer, h.Version = 0, 0, 0, 0
	if t == TypeAccept {
		h.EchoTimestamp = be.Uint64(b[24:])
		h.RateHintBps = be.Uint64(b[32:])
		h.Version = b[3]
	} else {
		h.Offer = b[2]
	}
	if h.Paths == 0 || h.MTU < MinMTU {
		return ErrBadField
	}
	return nil
}

// CloseReason says why a connection was closed.
type CloseReason uint16

// Close reasons.
const (
	CloseNormal      CloseReason = 0
	CloseRefused     CloseReason = 1 // the responder would not accept the connection
	CloseProtocol    CloseReason = 2 // the peer broke the protocol
	CloseIdleTimeout CloseReason = 3
)

// AppendClose encodes a CLOSE.
func AppendClose(b []byte, conn uint64, reason CloseReason, ack bool) ([]byte, error) {
	if cap(b) < CloseLen {
		return b, ErrShortBuffer
	}
	b = b[:CloseLen]
	var f uint8
	if ack {
		f = FlagCloseAck
	}
	putCommon(b, TypeClose, f, 0, conn)
	be.PutUint16(b[12:], uint16(reason))
	be.PutUint16(b[14:], 0)
	return b, nil
}

// DecodeClose decodes a CLOSE.
func DecodeClose(b []byte) (conn uint64, reason CloseReason, ack bool, err error) {
	if err := checkCommon(b, TypeClose, CloseLen); err != nil {
		return 0, 0, false, err
	}
	if len(b) != CloseLen {
		return 0, 0, false, ErrBadLength
	}
	return be.Uint64(b[4:]), CloseReason(be.Uint16(b[12:])), b[2]&FlagCloseAck != 0, nil
}

// AppendProbe encodes a PROBE (or, with t = TypeProbeAck, its answer).
func AppendProbe(b []byte, t PacketType, conn uint64, path uint16, ts uint64) ([]byte, error) {
	if t != TypeProbe && t != TypeProbeAck {
		return b, ErrBadType
	}
	if cap(b) < ProbeLen {
		return b, ErrShortBuffer
	}
	b = b[:ProbeLen]
	putCommon(b, t, 0, 0, conn)
	be.PutUint16(b[12:], path)
	be.PutUint16(b[14:], 0)
	be.PutUint64(b[16:], ts)
	return b, nil
}

// DecodeProbe decodes a PROBE or PROBE_ACK.
func DecodeProbe(b []byte, t PacketType) (conn uint64, path uint16, ts uint64, err error) {
	if err := checkCommon(b, t, ProbeLen); err != nil {
		return 0, 0, 0, err
	}
	if len(b) != ProbeLen {
		return 0, 0, 0, ErrBadLength
	}
	return be.Uint64(b[4:]), be.Uint16(b[12:]), be.Uint64(b[16:]), nil
}

// ErrorCode says why the receiver refused a message.
type ErrorCode uint16

// Error codes carried by ERROR packets.
const (
	ErrCodeUnknownKey     ErrorCode = 1 // WRITE named a memory key that is not registered
	ErrCodeOutOfBounds    ErrorCode = 2 // WRITE reached outside its region
	ErrCodeNoBuffer       ErrorCode = 3 // SEND found no posted receive buffer (receiver not ready)
	ErrCodeBufferTooSmall ErrorCode = 4 // SEND is longer than the posted buffer
	ErrCodeTooFarAhead    ErrorCode = 5 // message sequence beyond the receiver's window
	ErrCodeNotRelayed     ErrorCode = 6 // WRITE on a stream the receiving gateway does not relay (Config.RelayOnly)
)

// MessageError is the body of an ERROR packet: the receiver refused message
// (Stream, MsgSeq) and wrote none of the refused packets.
type MessageError struct {
	Conn   uint64
	Stream uint32
	MsgSeq uint64
	Code   ErrorCode
}

// AppendError encodes an ERROR.
func AppendError(b []byte, e *MessageError) ([]byte, error) {
	if cap(b) < ErrorLen {
		return b, ErrShortBuffer
	}
	b = b[:ErrorLen]
	putCommon(b, TypeError, 0, 0, e.Conn)
	be.PutUint32(b[12:], e.Stream)
	be.PutUint64(b[16:], e.MsgSeq)
	be.PutUint16(b[24:], uint16(e.Code))
	clear(b[26:32])
	return b, nil
}

// DecodeError decodes an ERROR.
func DecodeError(b []byte, e *MessageError) error {
	if err := checkCommon(b, TypeError, ErrorLen); err != nil {
		return err
	}
	if len(b) != ErrorLen {
		return ErrBadLength
	}
	e.Conn = be.Uint64(b[4:])
	e.Stream = be.Uint32(b[12:])
	e.MsgSeq = be.Uint64(b[16:])
	e.Code = ErrorCode(be.Uint16(b[24:]))
	return nil
}

// AppendVersion encodes a VERSION packet: the answer to a packet of an
// unsupported version, listing the versions this side speaks. Its first byte
// is always 0 so that no implementation mistakes it for a packet of its own
// version.
func AppendVersion(b []byte, conn uint64, versions []uint8) ([]byte, error) {
	n := CommonHeaderLen + 1 + len(versions)
	if len(versions) > 255 {
		return b, ErrBadField
	}
	if cap(b) < n {
		return b, ErrShortBuffer
	}
	b = b[:n]
	b[0], b[1], b[2], b[3] = 0, byte(TypeVersion), 0, 0
	be.PutUint64(b[4:], conn)
	b[12] = uint8(len(versions))
	copy(b[13:], versions)
	return b, nil
}

// DecodeVersion decodes a VERSION packet. The returned slice aliases b.
func DecodeVersion(b []byte) (conn uint64, versions []uint8, err error) {
	if len(b) < CommonHeaderLen+1 {
		return 0, nil, ErrTruncated
	}
	if b[0] != 0 || PacketType(b[1]) != TypeVersion {
		return 0, nil, ErrBadType
	}
	n := int(b[12])
	if len(b) != CommonHeaderLen+1+n {
		return 0, nil, ErrBadLength
	}
	return be.Uint64(b[4:]), b[13:], nil
}

// Rate hints travel as whole bits per second (RateHintBps of ACK and
// ACCEPT); a receiver computes them as a bit rate, a sender's controller
// takes them in bytes per second. hintBps and hintRate are the only
// conversions between the wire's field and the rate types.

// hintBps is r as a rate hint on the wire (truncated to whole bit/s).
func hintBps(r units.BitRate) uint64 { return uint64(r) }

// hintRate is a rate hint from the wire as a sender paces.
func hintRate(bps uint64) units.ByteRate { return units.BitRate(bps).Bytes() }
