// Package wire is the codec of the mrgw control channel: the messages two peer
// gateways exchange on their QUIC control stream (see tunnel/control). It is
// pure: no sockets, no QUIC, no clock, so it can be fuzzed, reused by the
// conformance suite and reasoned about alone.
//
// # Framing
//
// Every message is one frame. All integers are big-endian.
//
//	offset  size  field
//	0       1     frame version, always 1 (FrameVersion); anything else is ErrVersion
//	1       1     message type (Type)
//	2       4     payload length N, 0 <= N <= MaxPayload (16384), else ErrTooLarge
//	6       N     payload, laid out per type below; every payload byte must be
//	              consumed (trailing bytes are ErrMalformed)
//
// The size is checked from the header, before the payload is read or any
// memory allocated, so a peer cannot make us buffer more than MaxPayload.
//
// # Payloads
//
// str8 means a 1-byte length L followed by L bytes. addr means a 1-byte
// length A (4 for IPv4, 16 for IPv6), A address bytes, then a 2-byte port.
//
//	0x01 Hello, 0x02 HelloAck (same layout)
//	     2  protocol version (ProtocolVersion)
//	     str8 gateway name
//	     str8 region
//	     1  capability count C (<= MaxCapabilities), then C × str8
//	     1  plane count P (<= MaxPlanes), then P × addr: the data-plane UDP
//	        address of plane 0, 1, ... in that order
//	     2  number of data-plane paths
//	0x03 PathSetup
//	     4  request sequence number
//	     2  path count K (<= MaxPaths), then K × (2 path id, 2 UDP source port)
//	0x04 PathSetupAck
//	     4  sequence number of the PathSetup acknowledged
//	     2  count K (<= MaxPaths), then K × 2 accepted path id
//	0x05 KeyUpdate      4  new epoch the sender will switch its sending key to
//	0x06 KeyUpdateAck   4  epoch whose receive key is now installed
//	0x07 Ping           8  sequence number
//	0x08 Pong           8  sequence number of the Ping answered
//	0x09 Drain          (empty) the sender stops opening new flows; please do too
//	0x0A DrainAck       (empty) the receiver has stopped opening new flows
//
// A new message type or field means a new FrameVersion or ProtocolVersion;
// unknown types are rejected (ErrUnknownType), never skipped, so two
// gateways never silently disagree about what was said.
package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
)

// Sizes and limits of the wire format.
const (
	FrameVersion    = 1
	ProtocolVersion = 1
	HeaderLen       = 6
	MaxPayload      = 16 << 10
	MaxCapabilities = 32
	MaxPlanes       = 16
	MaxPaths        = 1024
	maxStr8         = 255
)

// Type is the message type byte.
type Type uint8

// Message types; see the package documentation for their layout.
const (
	TypeHello        Type = 0x01
	TypeHelloAck     Type = 0x02
	TypePathSetup    Type = 0x03
	TypePathSetupAck Type = 0x04
	TypeKeyUpdate    Type = 0x05
	TypeKeyUpdateAck Type = 0x06
	TypePing         Type = 0x07
	TypePong         Type = 0x08
	TypeDrain        Type = 0x09
	TypeDrainAck     Type = 0x0A
)

var typeNames = map[Type]string{
	TypeHello: "Hello", TypeHelloAck: "HelloAck", TypePathSetup: "PathSetup",
	TypePathSetupAck: "PathSetupAck", TypeKeyUpdate: "KeyUpdate", TypeKeyUpdateAck: "KeyUpdateAck",
	TypePing: "Ping", TypePong: "Pong", TypeDrain: "Drain", TypeDrainAck: "DrainAck",
}

func (t Type) String() string {
	if n, ok := typeNames[t]; ok {
		return n
	}
	return fmt.Sprintf("Type(0x%02x)", uint8(t))
}

// Errors. Decoders wrap exactly one of these.
var (
	ErrVersion     = errors.New("wire: unsupported frame version")
	ErrUnknownType = errors.New("wire: unknown message type")
	ErrTooLarge    = errors.New("wire: message too large")
	ErrTruncated   = errors.New("wire: message truncated")
	ErrMalformed   = errors.New("wire: malformed payload")
	// ErrInvalid is returned by Append for a message that cannot be encoded
	// (a string over 255 bytes, too many entries, a zero address).
	ErrInvalid = errors.New("wire: message cannot be encoded")
)

// Message is one control message. The concrete types are the structs below.
type Message interface {
	Type() Type
	appendPayload(b []byte) ([]byte, error)
}

// Hello opens the session: the dialer sends Hello, the listener answers
// HelloAck with its own description in the same layout.
type Hello struct {
	Version      uint16
	Name         string
	Region       string
	Capabilities []string
	Planes       []netip.AddrPort // data-plane UDP address per plane, plane i at index i
	NumPaths     uint16
}

// HelloAck is the listener's answer to Hello.
type HelloAck struct{ Hello }

// Path is one data-plane path: its id and the UDP source port (its ECMP entropy).
type Path struct {
	ID         uint16
	SourcePort uint16
}

// PathSetup announces the sender's paths.
type PathSetup struct {
	Seq   uint32
	Paths []Path
}

// PathSetupAck acknowledges a PathSetup, listing the path ids accepted.
type PathSetupAck struct {
	Seq uint32
	IDs []uint16
}

// KeyUpdate announces that the sender will switch to Epoch for sending.
type KeyUpdate struct{ Epoch uint32 }

// KeyUpdateAck says the receive key for Epoch is installed.
type KeyUpdateAck struct{ Epoch uint32 }

// Ping asks for a Pong with the same Seq (RTT measurement, liveness).
type Ping struct{ Seq uint64 }

// Pong answers a Ping.
type Pong struct{ Seq uint64 }

// Drain asks the peer to stop opening new flows before the session closes.
type Drain struct{}

// DrainAck answers Drain.
type DrainAck struct{}

func (Hello) Type() Type        { return TypeHello }
func (HelloAck) Type() Type     { return TypeHelloAck }
func (PathSetup) Type() Type    { return TypePathSetup }
func (PathSetupAck) Type() Type { return TypePathSetupAck }
func (KeyUpdate) Type() Type    { return TypeKeyUpdate }
func (KeyUpdateAck) Type() Type { return TypeKeyUpdateAck }
func (Ping) Type() Type         { return TypePing }
func (Pong) Type() Type         { return TypePong }
func (Drain) Type() Type        { return TypeDrain }
func (DrainAck) Type() Type     { return TypeDrainAck }

// Append encodes m as one frame appended to b.
func Append(b []byte, m Message) ([]byte, error) {
	start := len(b)
	b = append(b, FrameVersion, byte(m.Type()), 0, 0, 0, 0)
	b, err := m.appendPayload(b)
	if err != nil {
		return b[:start], fmt.Errorf("%v: %w", m.Type(), err)
	}
	n := len(b) - start - HeaderLen
	if n > MaxPayload {
		return b[:start], fmt.Errorf("%w: %v payload %d > %d", ErrTooLarge, m.Type(), n, MaxPayload)
	}
	binary.BigEndian.PutUint32(b[start+2:], uint32(n))
	return b, nil
}

func appendStr8(b []byte, s string) ([]byte, error) {
	if len(s) > maxStr8 {
		return b, fmt.Errorf("%w: string of %d bytes > %d", ErrInvalid, len(s), maxStr8)
	}
	return append(append(b, byte(len(s))), s...), nil
}

func (h Hello) appendPayload(b []byte) ([]byte, error) {
	var err error
	b = binary.BigEndian.AppendUint16(b, h.Version)
	if b, err = appendStr8(b, h.Name); err != nil {
		return b, err
	}
	if b, err = appendStr8(b, h.Region); err != nil {
		return b, err
	}
	if len(h.Capabilities) > MaxCapabilities {
		return b, fmt.Errorf("%w: %d capabilities > %d", ErrInvalid, len(h.Capabilities), MaxCapabilities)
	}
	b = append(b, byte(len(h.Capabilities)))
	for _, c := range h.Capabilities {
		if b, err = appendStr8(b, c); err != nil {
			return b, err
		}
	}
	if len(h.Planes) > MaxPlanes {
		return b, fmt.Errorf("%w: %d planes > %d", ErrInvalid, len(h.Planes), MaxPlanes)
	}
	b = append(b, byte(len(h.Planes)))
	for _, ap := range h.Planes {
		a := ap.Addr()
		if !a.IsValid() || a.Zone() != "" {
			return b, fmt.Errorf("%w: plane address %v", ErrInvalid, ap)
		}
		if a.Is4In6() {
			a = a.Unmap() // one encoding per address, so decode(encode(x)) == x
		}
		raw := a.AsSlice()
		b = append(append(b, byte(len(raw))), raw...)
		b = binary.BigEndian.AppendUint16(b, ap.Port())
	}
	return binary.BigEndian.AppendUint16(b, h.NumPaths), nil
}

func (h HelloAck) appendPayload(b []byte) ([]byte, error) { return h.Hello.appendPayload(b) }

func (p PathSetup) appendPayload(b []byte) ([]byte, error) {
	if len(p.Paths) > MaxPaths {
		return b, fmt.Errorf("%w: %d paths > %d", ErrInvalid, len(p.Paths), MaxPaths)
	}
	b = binary.BigEndian.AppendUint32(b, p.Seq)
	b = binary.BigEndian.AppendUint16(b, uint16(len(p.Paths)))
	for _, x := range p.Paths {
		b = binary.BigEndian.AppendUint16(b, x.ID)
		b = binary.BigEndian.AppendUint16(b, x.SourcePort)
	}
	return b, nil
}

func (p PathSetupAck) appendPayload(b []byte) ([]byte, error) {
	if len(p.IDs) > MaxPaths {
		return b, fmt.Errorf("%w: %d paths > %d", ErrInvalid, len(p.IDs), MaxPaths)
	}
	b = binary.BigEndian.AppendUint32(b, p.Seq)
	b = binary.BigEndian.AppendUint16(b, uint16(len(p.IDs)))
	for _, id := range p.IDs {
		b = binary.BigEndian.AppendUint16(b, id)
	}
	return b, nil
}

func (k KeyUpdate) appendPayload(b []byte) ([]byte, error) {
	return binary.BigEndian.AppendUint32(b, k.Epoch), nil
}

func (k KeyUpdateAck) appendPayload(b []byte) ([]byte, error) {
	return binary.BigEndian.AppendUint32(b, k.Epoch), nil
}

func (p Ping) appendPayload(b []byte) ([]byte, error) {
	return binary.BigEndian.AppendUint64(b, p.Seq), nil
}
func (p Pong) appendPayload(b []byte) ([]byte, error) {
	return binary.BigEndian.AppendUint64(b, p.Seq), nil
}
func (Drain) appendPayload(b []byte) ([]byte, error) { return b, nil }
func (DrainAck) appendPayload(b []byte) ([]byte, error) {
	return b, nil
}

// ParseHeader checks a frame header and returns the type and payload length.
// It needs only the first HeaderLen bytes.
func ParseHeader(h []byte) (Type, int, error) {
	if len(h) < HeaderLen {
		return 0, 0, fmt.Errorf("%w: header of %d bytes", ErrTruncated, len(h))
	}
	if h[0] != FrameVersion {
		return 0, 0, fmt.Errorf("%w: %d", ErrVersion, h[0])
	}
	t := Type(h[1])
	if _, ok := typeNames[t]; !ok {
		return 0, 0, fmt.Errorf("%w: 0x%02x", ErrUnknownType, h[1])
	}
	n := binary.BigEndian.Uint32(h[2:])
	if n > MaxPayload {
		return 0, 0, fmt.Errorf("%w: %v payload %d > %d", ErrTooLarge, t, n, MaxPayload)
	}
	return t, int(n), nil
}

// Decode parses one frame from the front of b and returns the message and
// the number of bytes it took.
func Decode(b []byte) (Message, int, error) {
	t, n, err := ParseHeader(b)
	if err != nil {
		return nil, 0, err
	}
	if len(b)-HeaderLen < n {
		return nil, 0, fmt.Errorf("%w: %v needs %d payload bytes, have %d", ErrTruncated, t, n, len(b)-HeaderLen)
	}
	m, err := DecodePayload(t, b[HeaderLen:HeaderLen+n])
	if err != nil {
		return nil, 0, err
	}
	return m, HeaderLen + n, nil
}

// Read reads exactly one frame from r. A clean end of stream before the
// first header byte is io.EOF; an end inside a frame is ErrTruncated.
func Read(r io.Reader) (Message, error) {
	var h [HeaderLen]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		if err == io.EOF {
			return nil, io.EOF
		}
		if err == io.ErrUnexpectedEOF {
			return nil, fmt.Errorf("%w: in header", ErrTruncated)
		}
		return nil, err
	}
	t, n, err := ParseHeader(h[:])
	if err != nil {
		return nil, err
	}
	p := make([]byte, n) // n <= MaxPayload, checked above
	if _, err := io.ReadFull(r, p); err != nil {
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return nil, fmt.Errorf("%w: %v payload", ErrTruncated, t)
		}
		return nil, err
	}
	return DecodePayload(t, p)
}

// reader consumes a payload; the first short read sticks as an error so the
// decoders can read fields without checking each one.
type reader struct {
	b   []byte
	err error
}

func (r *reader) take(n int) []byte {
	if r.err != nil {
		return nil
	}
	if len(r.b) < n {
		r.err = fmt.Errorf("%w: payload ends %d bytes early", ErrMalformed, n-len(r.b))
		r.b = nil
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

func (r *reader) u8() uint8 {
	if v := r.take(1); v != nil {
		return v[0]
	}
	return 0
}

func (r *reader) u16() uint16 {
	if v := r.take(2); v != nil {
		return binary.BigEndian.Uint16(v)
	}
	return 0
}

func (r *reader) u32() uint32 {
	if v := r.take(4); v != nil {
		return binary.BigEndian.Uint32(v)
	}
	return 0
}

func (r *reader) u64() uint64 {
	if v := r.take(8); v != nil {
		return binary.BigEndian.Uint64(v)
	}
	return 0
}

func (r *reader) str8() string { return string(r.take(int(r.u8()))) }

func (r *reader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: "+format, append([]any{ErrMalformed}, args...)...)
	}
}

// DecodePayload decodes the payload p of a frame of type t.
func DecodePayload(t Type, p []byte) (Message, error) {
	r := &reader{b: p}
	var m Message
	switch t {
	case TypeHello:
		m = decodeHello(r)
	case TypeHelloAck:
		m = HelloAck{decodeHello(r)}
	case TypePathSetup:
		ps := PathSetup{Seq: r.u32()}
		k := int(r.u16())
		if k > MaxPaths {
			r.fail("%d paths > %d", k, MaxPaths)
		}
		for i := 0; i < k && r.err == nil; i++ {
			ps.Paths = append(ps.Paths, Path{ID: r.u16(), SourcePort: r.u16()})
		}
		m = ps
	case TypePathSetupAck:
		pa := PathSetupAck{Seq: r.u32()}
		k := int(r.u16())
		if k > MaxPaths {
			r.fail("%d paths > %d", k, MaxPaths)
		}
		for i := 0; i < k && r.err == nil; i++ {
			pa.IDs = append(pa.IDs, r.u16())
		}
		m = pa
	case TypeKeyUpdate:
		m = KeyUpdate{Epoch: r.u32()}
	case TypeKeyUpdateAck:
		m = KeyUpdateAck{Epoch: r.u32()}
	case TypePing:
		m = Ping{Seq: r.u64()}
	case TypePong:
		m = Pong{Seq: r.u64()}
	case TypeDrain:
		m = Drain{}
	case TypeDrainAck:
		m = DrainAck{}
	default:
		return nil, fmt.Errorf("%w: 0x%02x", ErrUnknownType, uint8(t))
	}
	if r.err == nil && len(r.b) != 0 {
		r.fail("%d trailing bytes after %v", len(r.b), t)
	}
	if r.err != nil {
		return nil, fmt.Errorf("%v: %w", t, r.err)
	}
	return m, nil
}

func decodeHello(r *reader) Hello {
	h := Hello{Version: r.u16(), Name: r.str8(), Region: r.str8()}
	nc := int(r.u8())
	if nc > MaxCapabilities {
		r.fail("%d capabilities > %d", nc, MaxCapabilities)
	}
	for i := 0; i < nc && r.err == nil; i++ {
		h.Capabilities = append(h.Capabilities, r.str8())
	}
	np := int(r.u8())
	if np > MaxPlanes {
		r.fail("%d planes > %d", np, MaxPlanes)
	}
	for i := 0; i < np && r.err == nil; i++ {
		alen := int(r.u8())
		if alen != 4 && alen != 16 {
			r.fail("plane %d: address length %d", i, alen)
			break
		}
		raw := r.take(alen)
		port := r.u16()
		if r.err != nil {
			break
		}
		a, _ := netip.AddrFromSlice(raw) // length checked: cannot fail
		if a.Is4In6() {
			// Append never produces this form; refusing it keeps one
			// encoding per address.
			r.fail("plane %d: IPv4-mapped IPv6 address", i)
			break
		}
		h.Planes = append(h.Planes, netip.AddrPortFrom(a, port))
	}
	h.NumPaths = r.u16()
	return h
}
