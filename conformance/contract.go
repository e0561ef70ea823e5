package conformance

import (
	"crypto/sha256"
	"fmt"
)

// The test contract (docs/CONFORMANCE.md §2): what an implementation under
// test provides so that the suite, which sees only the wire, can observe
// placement and completion. Everything here is plain MetaRoCE traffic.
const (
	// RegionKey is the memory key the target registers on start.
	RegionKey uint32 = 1
	// RegionSize is the size of region RegionKey in bytes.
	RegionSize = 1 << 20
	// FirstTag and LastTag bound the receive tags the target posts on every
	// connection it accepts, each with a buffer of TagBufSize bytes.
	FirstTag, LastTag uint64 = 1, 16
	// TagBufSize is the size of each posted data receive buffer.
	TagBufSize = 16 << 10
	// CtlStream is the reserved stream of the contract in both directions:
	// the suite's requests and the target's reports travel on it.
	CtlStream uint32 = 0xFFFF_FFFF
	// CtlTag is the receive tag of control requests (the target posts a
	// buffer of CtlBufSize bytes for it, and posts a fresh one after each
	// request) and of the target's reports (the suite accepts any tag).
	CtlTag uint64 = 0xFFFF_FFFF_FFFF_FFFF
	// CtlBufSize is the size of the control receive buffer.
	CtlBufSize = 4096
	// MaxRead is the most bytes one READ request may ask for.
	MaxRead = 1024
)

// Request and report layouts (big-endian). The kinds, spaces and status
// values are exported for implementations of the contract (the responder in
// conformance/responder is one).
const (
	reqMagic  = "MRCQ" // request magic
	repMagic  = "MRCR" // report magic
	reqLen    = 32
	repHdrLen = 72

	// Request kinds.
	ReqRead = 1

	// Report kinds.
	RepComplete = 1 // a message completed (or failed) on a data stream
	RepRead     = 2 // the answer to a READ

	// READ spaces.
	SpaceRegion = 1 // (key, region offset)
	SpaceTag    = 2 // (tag, buffer offset) of a posted receive buffer

	// Report status values other than the ERROR codes 1..5 of PROTOCOL.md §8.
	StatusOK       = 0
	StatusBadReq   = 0xFFFE // a READ the target could not serve
	StatusOtherErr = 0xFFFF
)

// Request is a control request, sent as a SEND of reqLen bytes on CtlStream
// to CtlTag:
//
//	0  4 "MRCQ"
//	4  1 kind (1 READ)
//	5  1 space (1 region, 2 posted buffer)
//	6  2 zero
//	8  4 key (space 1)
//	12 8 region offset (space 1) or tag (space 2)
//	20 4 offset in the posted buffer (space 2)
//	24 4 length (≤ MaxRead)
//	28 4 request id, echoed
type Request struct {
	Kind, Space uint8
	Key         uint32
	Addr        uint64
	BufOff      uint32
	Len         uint32
	ID          uint32
}

// Encode returns the request's reqLen bytes.
func (r *Request) Encode() []byte {
	b := make([]byte, reqLen)
	copy(b, reqMagic)
	b[4], b[5] = r.Kind, r.Space
	be.PutUint32(b[8:], r.Key)
	be.PutUint64(b[12:], r.Addr)
	be.PutUint32(b[20:], r.BufOff)
	be.PutUint32(b[24:], r.Len)
	be.PutUint32(b[28:], r.ID)
	return b
}

// DecodeRequest parses a control request.
func DecodeRequest(b []byte) (*Request, error) {
	if len(b) != reqLen || string(b[:4]) != reqMagic {
		return nil, fmt.Errorf("not a control request (%d bytes)", len(b))
	}
	return &Request{Kind: b[4], Space: b[5], Key: be.Uint32(b[8:]), Addr: be.Uint64(b[12:]),
		BufOff: be.Uint32(b[20:]), Len: be.Uint32(b[24:]), ID: be.Uint32(b[28:])}, nil
}

// Report is what the target sends back, as a SEND on CtlStream to CtlTag:
//
//	0  4 "MRCR"
//	4  1 kind (1 COMPLETE, 2 READ answer)
//	5  1 op of the completed message (1 WRITE, 2 SEND); READ: the space
//	6  2 status: 0, an ERROR code of PROTOCOL.md §8, 0xFFFE bad request, 0xFFFF other
//	8  4 stream (READ: request id)
//	12 8 message seq (READ: 0)
//	20 4 key (WRITE) / READ key
//	24 8 region offset (WRITE), tag (SEND) / READ address
//	32 8 message length / READ: bytes returned
//	40 32 COMPLETE with status 0: SHA-256 of the message's bytes as they now
//	      stand at their destination; otherwise zero
//	72 n READ: the bytes read
type Report struct {
	Kind, Op uint8
	Status   uint16
	Stream   uint32
	MsgSeq   uint64
	Key      uint32
	Addr     uint64
	Len      uint64
	Digest   [32]byte
	Data     []byte
}

// Encode returns the report's bytes.
func (r *Report) Encode() []byte {
	b := make([]byte, repHdrLen+len(r.Data))
	copy(b, repMagic)
	b[4], b[5] = r.Kind, r.Op
	be.PutUint16(b[6:], r.Status)
	be.PutUint32(b[8:], r.Stream)
	be.PutUint64(b[12:], r.MsgSeq)
	be.PutUint32(b[20:], r.Key)
	be.PutUint64(b[24:], r.Addr)
	be.PutUint64(b[32:], r.Len)
	copy(b[40:72], r.Digest[:])
	copy(b[repHdrLen:], r.Data)
	return b
}

// DecodeReport parses a report; Data aliases b.
func DecodeReport(b []byte) (*Report, error) {
	if len(b) < repHdrLen || string(b[:4]) != repMagic {
		return nil, fmt.Errorf("not a contract report (%d bytes, starts %x)", len(b), b[:min(4, len(b))])
	}
	r := &Report{Kind: b[4], Op: b[5], Status: be.Uint16(b[6:]), Stream: be.Uint32(b[8:]), MsgSeq: be.Uint64(b[12:]),
		Key: be.Uint32(b[20:]), Addr: be.Uint64(b[24:]), Len: be.Uint64(b[32:]), Data: b[repHdrLen:]}
	copy(r.Digest[:], b[40:72])
	if r.Kind == RepRead && uint64(len(r.Data)) != r.Len {
		return nil, fmt.Errorf("READ answer says %d bytes and carries %d", r.Len, len(r.Data))
	}
	return r, nil
}

// Digest is the SHA-256 a COMPLETE report carries.
func Digest(b []byte) [32]byte { return sha256.Sum256(b) }
