// Package flowctl is the end-to-end control protocol of mrgw's host flows:
// the small messages that hosts and gateways exchange on the reserved
// control stream (stream 0) of every MetaRoCE connection to open a flow
// towards an endpoint in another region, grant credit, report end-to-end
// completion and reset a flow whose route broke. docs/GATEWAY.md describes
// how they are used; this package only encodes and decodes them.
//
// Wire layout (big-endian): version (1 byte, = 1), type (1 byte), then the
// type's fields in the order of the Msg struct's documentation; strings are
// a 1-byte length and that many bytes of UTF-8. A message is at most
// MaxLen bytes, so it always fits in one MetaRoCE packet (MTU ≥ 512).
//
// flowctl must not import metaroce, gateway or host: it is a leaf.
package flowctl

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"unicode/utf8"
)

// Version of the control protocol.
const Version = 1

// ControlStream is the MetaRoCE stream that carries control messages.
const ControlStream = 0

// MaxLen bounds an encoded message.
const MaxLen = 480

// Type is a message type.
type Type uint8

// Message types.
const (
	// Register (host → gateway): Endpoint and Region name the host.
	Register Type = 1
	// RegisterOK (gateway → host).
	RegisterOK Type = 2
	// Open (upstream → downstream): open Flow on Stream of this connection
	// from SrcRegion/SrcEndpoint to DstRegion/DstEndpoint, in scheduling
	// Class; its first message is Resume (0 for a new flow).
	Open Type = 3
	// OpenOK (downstream → upstream): Flow may send with at most Credit
	// bytes of messages not yet completed end to end.
	OpenOK Type = 4
	// OpenErr (downstream → upstream): Flow cannot be opened (Code, Reason).
	OpenErr Type = 5
	// Done (destination → source, relayed): every message of Flow below
	// Below has completed at the destination.
	Done Type = 6
	// Reset (downstream → upstream): Flow's route broke (Code, Reason);
	// the source re-opens it, possibly through another gateway, and
	// re-sends what is not Done.
	Reset Type = 7
	// Close (upstream → downstream): Flow is finished.
	Close Type = 8
	// Ping and Pong (either way): liveness of the control stream.
	Ping Type = 9
	Pong Type = 10
	// RegisterErr (gateway → host): the registration was refused or is
	// gone (Code, Reason): a duplicate name, no valid credential, taken
	// over by another host, or not registered (the host re-registers).
	RegisterErr Type = 11
)

// Register flags.
const (
	// FlagTakeover: replace a live registration of the same name (the
	// operator said so); without it a duplicate is refused.
	FlagTakeover uint8 = 1 << 0
)

func (t Type) String() string {
	switch t {
	case Register:
		return "REGISTER"
	case RegisterOK:
		return "REGISTER_OK"
	case Open:
		return "OPEN"
	case OpenOK:
		return "OPEN_OK"
	case OpenErr:
		return "OPEN_ERR"
	case Done:
		return "DONE"
	case Reset:
		return "RESET"
	case Close:
		return "CLOSE"
	case Ping:
		return "PING"
	case Pong:
		return "PONG"
	case RegisterErr:
		return "REGISTER_ERR"
	}
	return fmt.Sprintf("type(%d)", uint8(t))
}

// Code says why a flow was refused or reset.
type Code uint16

// Codes.
const (
	CodeUnknownRegion     Code = 1 // no such region in the gossip view
	CodeRegionUnreachable Code = 2 // every gateway of the region is down
	CodeUnknownEndpoint   Code = 3 // the destination endpoint is not registered
	CodeNoCapacity        Code = 4 // the gateway cannot grant credit (memory limit, max flows)
	CodeRouteLost         Code = 5 // a hop of the flow failed
	CodeDraining          Code = 6 // the gateway is shutting down
	CodeBadRequest        Code = 7
	CodeDuplicate         Code = 8  // REGISTER: another live host holds the endpoint name
	CodeUnauthenticated   Code = 9  // REGISTER: no valid credential (lan.host_keys)
	CodeNotRegistered     Code = 10 // the connection has no registration: register again
	CodeTakenOver         Code = 11 // another host took the name over explicitly
)

func (c Code) String() string {
	switch c {
	case CodeUnknownRegion:
		return "unknown region"
	case CodeRegionUnreachable:
		return "region unreachable"
	case CodeUnknownEndpoint:
		return "unknown endpoint"
	case CodeNoCapacity:
		return "no capacity"
	case CodeRouteLost:
		return "route lost"
	case CodeDraining:
		return "gateway draining"
	case CodeBadRequest:
		return "bad request"
	case CodeDuplicate:
		return "endpoint name in use"
	case CodeUnauthenticated:
		return "not authenticated"
	case CodeNotRegistered:
		return "not registered"
	case CodeTakenOver:
		return "taken over"
	}
	return fmt.Sprintf("code %d", uint16(c))
}

// Msg is one control message; which fields are on the wire depends on Type:
//
//	Register:   Endpoint, Region [, Instance, Flags, KeyID, Time, MAC]
//	RegisterOK: (none)
//	RegisterErr: Code, Reason
//	Open:       Flow, Stream, Resume, SrcRegion, SrcEndpoint, DstRegion, DstEndpoint, Class
//	OpenOK:     Flow, Credit
//	OpenErr:    Flow, Code, Reason
//	Done:       Flow, Below
//	Reset:      Flow, Code, Reason
//	Close:      Flow
//	Ping, Pong: Seq
type Msg struct {
	Type                   Type
	Flow                   uint64
	Stream                 uint32
	Resume, Credit, Below  uint64
	Seq                    uint64
	Code                   Code
	Endpoint, Region       string
	SrcRegion, SrcEndpoint string
	DstRegion, DstEndpoint string
	Class, Reason          string
	// Register's optional tail (a REGISTER without it is a v1 host's):
	// Instance is random per host process (a registration from the same
	// instance replaces its own), Flags (FlagTakeover), and the
	// credential: KeyID names the lan.host_keys entry, Time is Unix
	// seconds, MAC is RegisterMAC's.
	Instance uint64
	Flags    uint8
	KeyID    string
	Time     uint64
	MAC      []byte
}

// MACLen is the length of a REGISTER's MAC.
const MACLen = 32

// Errors.
var (
	ErrTruncated = errors.New("flowctl: message truncated")
	ErrVersion   = errors.New("flowctl: unsupported version")
	ErrType      = errors.New("flowctl: unknown message type")
	ErrTrailing  = errors.New("flowctl: bytes after the message")
	ErrString    = errors.New("flowctl: string too long or not UTF-8")
	ErrTooLong   = errors.New("flowctl: message longer than MaxLen")
	ErrMAC       = errors.New("flowctl: REGISTER MAC of the wrong length")
)

// RegisterMAC is the MAC a host puts in its REGISTER: HMAC-SHA256 under
// its lan.host_keys secret over the registration (endpoint, region,
// instance, flags, key id, time) and the MetaRoCE connection id it is
// sent on, so that a captured REGISTER is worth nothing on another
// connection, and stale after the gateway's time window.
func RegisterMAC(key []byte, m *Msg, conn uint64) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte("mrgw register v1\x00"))
	for _, s := range []string{m.Endpoint, m.Region, m.KeyID} {
		h.Write([]byte{byte(len(s))})
		h.Write([]byte(s))
	}
	var t [25]byte
	be.PutUint64(t[0:], m.Instance)
	t[8] = m.Flags
	be.PutUint64(t[9:], m.Time)
	be.PutUint64(t[17:], conn)
	h.Write(t[:])
	return h.Sum(nil)
}

// CheckRegisterMAC reports whether m's MAC is RegisterMAC's under key.
func CheckRegisterMAC(key []byte, m *Msg, conn uint64) bool {
	return len(m.MAC) == MACLen && hmac.Equal(m.MAC, RegisterMAC(key, m, conn))
}

var be = binary.BigEndian

// Append encodes m onto b.
func Append(b []byte, m *Msg) ([]byte, error) {
	start := len(b)
	b = append(b, Version, byte(m.Type))
	var err error
	str := func(s string) {
		if err != nil {
			return
		}
		if len(s) > 255 || !utf8.ValidString(s) {
			err = ErrString
			return
		}
		b = append(b, byte(len(s)))
		b = append(b, s...)
	}
	switch m.Type {
	case Register:
		str(m.Endpoint)
		str(m.Region)
		if m.Instance != 0 || m.Flags != 0 || m.KeyID != "" || len(m.MAC) != 0 {
			b = be.AppendUint64(b, m.Instance)
			b = append(b, m.Flags)
			str(m.KeyID)
			b = be.AppendUint64(b, m.Time)
			if len(m.MAC) != 0 && len(m.MAC) != MACLen {
				return b[:start], ErrMAC
			}
			b = append(b, byte(len(m.MAC)))
			b = append(b, m.MAC...)
		}
	case RegisterOK:
	case RegisterErr:
		b = be.AppendUint16(b, uint16(m.Code))
		str(m.Reason)
	case Open:
		b = be.AppendUint64(b, m.Flow)
		b = be.AppendUint32(b, m.Stream)
		b = be.AppendUint64(b, m.Resume)
		str(m.SrcRegion)
		str(m.SrcEndpoint)
		str(m.DstRegion)
		str(m.DstEndpoint)
		str(m.Class)
	case OpenOK:
		b = be.AppendUint64(b, m.Flow)
		b = be.AppendUint64(b, m.Credit)
	case OpenErr, Reset:
		b = be.AppendUint64(b, m.Flow)
		b = be.AppendUint16(b, uint16(m.Code))
		str(m.Reason)
	case Done:
		b = be.AppendUint64(b, m.Flow)
		b = be.AppendUint64(b, m.Below)
	case Close:
		b = be.AppendUint64(b, m.Flow)
	case Ping, Pong:
		b = be.AppendUint64(b, m.Seq)
	default:
		return b[:start], ErrType
	}
	if err != nil {
		return b[:start], err
	}
	if len(b)-start > MaxLen {
		return b[:start], ErrTooLong
	}
	return b, nil
}

type reader struct {
	b   []byte
	err error
}

func (r *reader) take(n int) []byte {
	if r.err != nil {
		return nil
	}
	if len(r.b) < n {
		r.err = ErrTruncated
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

func (r *reader) u16() uint16 {
	if v := r.take(2); v != nil {
		return be.Uint16(v)
	}
	return 0
}

func (r *reader) u32() uint32 {
	if v := r.take(4); v != nil {
		return be.Uint32(v)
	}
	return 0
}

func (r *reader) u64() uint64 {
	if v := r.take(8); v != nil {
		return be.Uint64(v)
	}
	return 0
}

func (r *reader) str() string {
	n := r.take(1)
	if n == nil {
		return ""
	}
	v := r.take(int(n[0]))
	if v == nil {
		return ""
	}
	if !utf8.Valid(v) {
		r.err = ErrString
		return ""
	}
	return string(v)
}

// Decode decodes one message that is exactly b.
func Decode(b []byte) (Msg, error) {
	var m Msg
	if len(b) > MaxLen {
		return m, ErrTooLong
	}
	if len(b) < 2 {
		return m, ErrTruncated
	}
	if b[0] != Version {
		return m, ErrVersion
	}
	m.Type = Type(b[1])
	r := reader{b: b[2:]}
	switch m.Type {
	case Register:
		m.Endpoint = r.str()
		m.Region = r.str()
		if r.err == nil && len(r.b) > 0 {
			m.Instance = r.u64()
			if f := r.take(1); f != nil {
				m.Flags = f[0]
			}
			m.KeyID = r.str()
			m.Time = r.u64()
			if n := r.take(1); n != nil {
				if int(n[0]) != 0 && int(n[0]) != MACLen {
					return Msg{}, ErrMAC
				}
				if v := r.take(int(n[0])); len(v) > 0 {
					m.MAC = append([]byte(nil), v...)
				}
			}
		}
	case RegisterOK:
	case RegisterErr:
		m.Code = Code(r.u16())
		m.Reason = r.str()
	case Open:
		m.Flow = r.u64()
		m.Stream = r.u32()
		m.Resume = r.u64()
		m.SrcRegion = r.str()
		m.SrcEndpoint = r.str()
		m.DstRegion = r.str()
		m.DstEndpoint = r.str()
		m.Class = r.str()
	case OpenOK:
		m.Flow = r.u64()
		m.Credit = r.u64()
	case OpenErr, Reset:
		m.Flow = r.u64()
		m.Code = Code(r.u16())
		m.Reason = r.str()
	case Done:
		m.Flow = r.u64()
		m.Below = r.u64()
	case Close:
		m.Flow = r.u64()
	case Ping, Pong:
		m.Seq = r.u64()
	default:
		return Msg{}, ErrType
	}
	if r.err != nil {
		return Msg{}, r.err
	}
	if len(r.b) != 0 {
		return Msg{}, ErrTrailing
	}
	return m, nil
}

// Error is a refused or reset flow, as an error a host can return.
type Error struct {
	Code   Code
	Reason string
}

func (e *Error) Error() string {
	if e.Reason == "" {
		return "flow refused: " + e.Code.String()
	}
	return "flow refused: " + e.Code.String() + ": " + e.Reason
}
