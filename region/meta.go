package region

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"unicode/utf8"

	"github.com/hashicorp/memberlist"
)

// Meta is what a gateway tells every other gateway about itself, carried in
// its memberlist node metadata.
type Meta struct {
	// Region is the region the gateway serves. Required.
	Region string
	// Control is the gateway's QUIC control listener; the zero value means
	// it has none (for example a gateway being drained).
	Control netip.AddrPort
	// Planes are the gateway's WAN endpoints, one per network plane.
	Planes []Plane
	// Capabilities are feature names the gateway supports, so mixed
	// versions can agree on what to use.
	Capabilities []string

	// Version 2 (a gateway of a fleet: peers are built from the view).

	// Wire lists the MetaRoCE wire-protocol versions the gateway speaks
	// on its WAN planes (metaroce.Version1, ...), at most 255; empty when
	// it did not say (version-1 metadata).
	Wire []uint8
	// Capacity is the gateway's relative capacity (node.capacity): flows
	// are placed on a region's gateways in proportion to it. 0 when it
	// did not say (version-1 metadata); readers take that as
	// DefaultCapacity.
	Capacity uint32
}

// DefaultCapacity is the capacity of a gateway that announces none.
const DefaultCapacity = 100

// Weight is the capacity placement uses: Capacity, or DefaultCapacity
// when none was announced.
func (m Meta) Weight() uint32 {
	if m.Capacity == 0 {
		return DefaultCapacity
	}
	return m.Capacity
}

// Plane is one WAN endpoint of a gateway.
type Plane struct {
	Name string
	WAN  netip.AddrPort
}

// MaxMetaSize is memberlist's limit on node metadata: longer metadata makes
// memberlist panic, so EncodeMeta refuses it.
const MaxMetaSize = memberlist.MetaMaxSize

// metaVersion is the version EncodeMeta writes.
const metaVersion = 2

// ErrMetaTooLarge is returned when metadata does not fit MaxMetaSize.
var ErrMetaTooLarge = errors.New("region: metadata larger than memberlist's 512-byte limit")

// errMalformed marks every decoding failure.
var errMalformed = errors.New("region: malformed message")

// Wire layout of version 2 (all lengths and counts one byte, so a name is
// at most 255 bytes and there are at most 255 planes, capabilities or wire
// versions; the 512-byte cap is hit long before):
//
//	version   1 byte (2)
//	region    len + bytes
//	control   addrport
//	planes    count, then per plane: name (len + bytes), addrport
//	caps      count, then per capability: len + bytes
//	--- version 2 ---
//	wire      count, then one byte per wire-protocol version
//	capacity  4 bytes, big-endian
//
// addrport is a tag byte (0 none, 4 IPv4, 6 IPv6), the address bytes and a
// big-endian port, which must not be 0. Version 1 is the same without the
// version-2 fields. A reader reads a newer version's fields up to its own
// version and ignores what follows them (a version-1 reader reads version
// 2 as version 1); it refuses trailing bytes only in its own version.

// EncodeMeta encodes m compactly. It fails for an empty region or plane
// name, a name that is not UTF-8 or longer than 255 bytes, a plane without
// an address, an address with a zone or port 0, or a result over
// MaxMetaSize.
func EncodeMeta(m Meta) ([]byte, error) { return EncodeMetaVersion(m, metaVersion) }

// EncodeMetaVersion encodes m as a writer of metadata version v (1 or 2)
// would: version 1 leaves out Wire and Capacity. A gateway announces
// version 1 only to stand in for a release before version 2 (tests of a
// fleet in the middle of an upgrade).
func EncodeMetaVersion(m Meta, v int) ([]byte, error) {
	if v < 1 || v > metaVersion {
		return nil, fmt.Errorf("region: metadata version %d (this writer knows 1..%d)", v, metaVersion)
	}
	if m.Region == "" {
		return nil, errors.New("region: Meta.Region is required")
	}
	if len(m.Planes) > 255 || len(m.Capabilities) > 255 || len(m.Wire) > 255 {
		return nil, ErrMetaTooLarge
	}
	b := make([]byte, 0, 64)
	b = append(b, byte(v))
	var err error
	if b, err = appendString(b, "region", m.Region, false); err != nil {
		return nil, err
	}
	if b, err = appendAddrPort(b, "control", m.Control, true); err != nil {
		return nil, err
	}
	b = append(b, byte(len(m.Planes)))
	for i, p := range m.Planes {
		if b, err = appendString(b, fmt.Sprintf("plane[%d] name", i), p.Name, false); err != nil {
			return nil, err
		}
		if b, err = appendAddrPort(b, fmt.Sprintf("plane %q address", p.Name), p.WAN, false); err != nil {
			return nil, err
		}
	}
	b = append(b, byte(len(m.Capabilities)))
	for i, c := range m.Capabilities {
		if b, err = appendString(b, fmt.Sprintf("capability[%d]", i), c, false); err != nil {
			return nil, err
		}
	}
	if v >= 2 {
		b = append(b, byte(len(m.Wire)))
		b = append(b, m.Wire...)
		b = binary.BigEndian.AppendUint32(b, m.Capacity)
	}
	if len(b) > MaxMetaSize {
		return nil, fmt.Errorf("%w (%d bytes)", ErrMetaTooLarge, len(b))
	}
	return b, nil
}

// DecodeMeta decodes what EncodeMeta produced (or a newer version, see the
// package doc). Every malformed input is an error; it never panics.
func DecodeMeta(b []byte) (Meta, error) {
	r := reader{b: b}
	v := r.byte()
	if r.err == nil && v == 0 {
		return Meta{}, fmt.Errorf("%w: metadata version 0", errMalformed)
	}
	var m Meta
	m.Region = r.str(false)
	m.Control = r.addrPort(true)
	if n := int(r.byte()); n > 0 {
		m.Planes = make([]Plane, 0, min(n, len(b)))
		for range n {
			p := Plane{Name: r.str(false), WAN: r.addrPort(false)}
			if r.err != nil {
				break
			}
			m.Planes = append(m.Planes, p)
		}
	}
	if n := int(r.byte()); n > 0 {
		m.Capabilities = make([]string, 0, min(n, len(b)))
		for range n {
			c := r.str(false)
			if r.err != nil {
				break
			}
			m.Capabilities = append(m.Capabilities, c)
		}
	}
	if v >= 2 {
		if n := int(r.byte()); n > 0 {
			if p := r.take(n); p != nil {
				m.Wire = slices.Clone(p)
			}
		}
		m.Capacity = r.u32()
	}
	if r.err != nil {
		return Meta{}, fmt.Errorf("metadata: %w", r.err)
	}
	if v <= metaVersion && len(r.b) != 0 {
		return Meta{}, fmt.Errorf("%w: %d trailing bytes in version-%d metadata", errMalformed, len(r.b), v)
	}
	return m, nil
}

func appendString(b []byte, what, s string, optional bool) ([]byte, error) {
	switch {
	case s == "" && !optional:
		return nil, fmt.Errorf("region: %s is empty", what)
	case len(s) > 255:
		return nil, fmt.Errorf("region: %s is longer than 255 bytes", what)
	case !utf8.ValidString(s):
		return nil, fmt.Errorf("region: %s is not valid UTF-8", what)
	}
	b = append(b, byte(len(s)))
	return append(b, s...), nil
}

func appendAddrPort(b []byte, what string, ap netip.AddrPort, optional bool) ([]byte, error) {
	a := ap.Addr()
	switch {
	case !ap.IsValid() && !a.IsValid() && optional:
		return append(b, 0), nil
	case !a.IsValid():
		return nil, fmt.Errorf("region: %s is missing", what)
	case a.Zone() != "":
		return nil, fmt.Errorf("region: %s %s has a zone, which other hosts cannot use", what, ap)
	case ap.Port() == 0:
		return nil, fmt.Errorf("region: %s %s has port 0", what, ap)
	case a.Is4():
		b = append(b, 4)
		b = append(b, a.AsSlice()...)
	default:
		b = append(b, 6)
		b = append(b, a.AsSlice()...)
	}
	return binary.BigEndian.AppendUint16(b, ap.Port()), nil
}

// reader decodes with sticky errors: after the first failure every read
// returns a zero value, so decoders read straight through and check once.
type reader struct {
	b   []byte
	err error
}

func (r *reader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: "+format, append([]any{errMalformed}, args...)...)
	}
}

func (r *reader) take(n int) []byte {
	if r.err != nil {
		return nil
	}
	if len(r.b) < n {
		r.fail("need %d bytes, have %d", n, len(r.b))
		return nil
	}
	p := r.b[:n]
	r.b = r.b[n:]
	return p
}

func (r *reader) byte() byte {
	p := r.take(1)
	if p == nil {
		return 0
	}
	return p[0]
}

func (r *reader) u16() uint16 {
	p := r.take(2)
	if p == nil {
		return 0
	}
	return binary.BigEndian.Uint16(p)
}

func (r *reader) u32() uint32 {
	p := r.take(4)
	if p == nil {
		return 0
	}
	return binary.BigEndian.Uint32(p)
}

func (r *reader) u64() uint64 {
	p := r.take(8)
	if p == nil {
		return 0
	}
	return binary.BigEndian.Uint64(p)
}

func (r *reader) str(optional bool) string {
	n := int(r.byte())
	p := r.take(n)
	switch {
	case r.err != nil:
		return ""
	case n == 0 && !optional:
		r.fail("empty name")
	case !utf8.Valid(p):
		r.fail("name is not UTF-8")
	}
	return string(p)
}

func (r *reader) addrPort(optional bool) netip.AddrPort {
	var a netip.Addr
	switch tag := r.byte(); {
	case r.err != nil:
		return netip.AddrPort{}
	case tag == 0 && optional:
		return netip.AddrPort{}
	case tag == 4:
		if p := r.take(4); p != nil {
			a = netip.AddrFrom4([4]byte(p))
		}
	case tag == 6:
		if p := r.take(16); p != nil {
			// An IPv4-mapped address stays IPv6 (Is4 is false), so
			// it encodes back to the same 16 bytes.
			a = netip.AddrFrom16([16]byte(p))
		}
	default:
		r.fail("address tag %d", tag)
		return netip.AddrPort{}
	}
	port := r.u16()
	if r.err == nil && port == 0 {
		r.fail("port 0")
	}
	if r.err != nil {
		return netip.AddrPort{}
	}
	return netip.AddrPortFrom(a, port)
}
