package conformance

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// This file is the suite's own codec for the packets of docs/PROTOCOL.md. It
// is written from the specification, independently of metaroce/wire.go, so
// that a fault shared by an implementation and its codec cannot pass
// unnoticed; it is checked against the golden vectors before every run.

var be = binary.BigEndian

// Packet types (PROTOCOL.md §1).
const (
	tData     = 1
	tAck      = 2
	tInit     = 3
	tAccept   = 4
	tClose    = 5
	tProbe    = 6
	tProbeAck = 7
	tVersion  = 8
	tError    = 9
)

// Fixed lengths (PROTOCOL.md §2–8).
const (
	hdrLen     = 12
	dataHdrLen = 76
	ackLen     = 96
	ackEntry   = 12
	initLen    = 24
	acceptLen  = 40
	closeLen   = 16
	probeLen   = 24
	errorLen   = 32
	sackBits   = 256
	maxEntries = 32
)

// DATA ops (PROTOCOL.md §2).
const (
	opWrite = 1
	opSend  = 2
)

var typeNames = map[uint8]string{tData: "DATA", tAck: "ACK", tInit: "INIT", tAccept: "ACCEPT", tClose: "CLOSE",
	tProbe: "PROBE", tProbeAck: "PROBE_ACK", tVersion: "VERSION", tError: "ERROR"}

func typeName(t uint8) string {
	if n, ok := typeNames[t]; ok {
		return n
	}
	return fmt.Sprintf("type %d", t)
}

var errShort = errors.New("packet shorter than its type's fixed length")

// dataPkt is a DATA packet (§2).
type dataPkt struct {
	Version   uint8 // 0 means 1; set to craft a wrong-version packet
	Flags     uint8
	Op        uint8
	Conn      uint64
	Path      uint16
	Stream    uint32
	Seq       uint64
	FloorGap  uint32
	MsgSeq    uint64
	MsgLen    uint64
	Offset    uint64
	Key       uint32
	Addr      uint64
	Timestamp uint64
	Payload   []byte
	descOnly  bool // a version-2 descriptor-only DATA taken apart (wirev2.go)
}

func putHdr(b []byte, ver, typ, flags, spare uint8, conn uint64) {
	if ver == 0 {
		ver = 1
	}
	b[0], b[1], b[2], b[3] = ver, typ, flags, spare
	be.PutUint64(b[4:], conn)
}

func (d *dataPkt) encode() []byte {
	b := make([]byte, dataHdrLen+len(d.Payload))
	putHdr(b, d.Version, tData, d.Flags, d.Op, d.Conn)
	be.PutUint16(b[12:], d.Path)
	be.PutUint16(b[14:], uint16(len(d.Payload)))
	be.PutUint32(b[16:], d.Stream)
	be.PutUint64(b[20:], d.Seq)
	be.PutUint32(b[28:], d.FloorGap)
	be.PutUint64(b[32:], d.MsgSeq)
	be.PutUint64(b[40:], d.MsgLen)
	be.PutUint64(b[48:], d.Offset)
	be.PutUint32(b[56:], d.Key)
	be.PutUint64(b[60:], d.Addr)
	be.PutUint64(b[68:], d.Timestamp)
	copy(b[dataHdrLen:], d.Payload)
	return b
}

func decodeData(b []byte) (*dataPkt, error) {
	if len(b) < dataHdrLen {
		return nil, errShort
	}
	n := int(be.Uint16(b[14:]))
	if dataHdrLen+n != len(b) {
		return nil, fmt.Errorf("payload length %d but datagram carries %d", n, len(b)-dataHdrLen)
	}
	d := &dataPkt{Version: b[0], Flags: b[2], Op: b[3], Conn: be.Uint64(b[4:]), Path: be.Uint16(b[12:]),
		Stream: be.Uint32(b[16:]), Seq: be.Uint64(b[20:]), FloorGap: be.Uint32(b[28:]), MsgSeq: be.Uint64(b[32:]),
		MsgLen: be.Uint64(b[40:]), Offset: be.Uint64(b[48:]), Key: be.Uint32(b[56:]), Addr: be.Uint64(b[60:]),
		Timestamp: be.Uint64(b[68:]), Payload: b[dataHdrLen:]}
	if d.Op != opWrite && d.Op != opSend {
		return nil, fmt.Errorf("op %d", d.Op)
	}
	if uint64(d.FloorGap) > d.Seq {
		return nil, fmt.Errorf("floor gap %d above seq %d", d.FloorGap, d.Seq)
	}
	if d.Offset > d.MsgLen || uint64(n) > d.MsgLen-d.Offset {
		return nil, fmt.Errorf("payload [%d,+%d) outside message of %d bytes", d.Offset, n, d.MsgLen)
	}
	return d, nil
}

// streamEntry is one (stream, completed) entry of an ACK.
type streamEntry struct {
	Stream    uint32
	Completed uint64
}

// ackPkt is an ACK packet (§3).
type ackPkt struct {
	Flags     uint8
	Conn      uint64
	Path      uint16
	Cum       uint64
	Largest   uint64
	Sack      [sackBits / 8]byte
	EchoTS    uint64
	CE, RX    uint64
	RateHint  uint64
	Streams   []streamEntry
	sock      int // suite socket it arrived on
	arrivalNo int
}

// flagAckAtCum: the ACK reports the SACK window at its cumulative point,
// its largest that window's last sequence (§3 "Loss").
const flagAckAtCum = 1 << 1

// atCum reports whether the ACK is one of the window at its cumulative point.
func (a *ackPkt) atCum() bool { return a.Flags&flagAckAtCum != 0 }

// base is the sequence that SACK bit 0 stands for: max(cum, largest+1-256).
func (a *ackPkt) base() uint64 {
	if a.Largest+1 > sackBits && a.Largest+1-sackBits > a.Cum {
		return a.Largest + 1 - sackBits
	}
	return a.Cum
}

// acked reports whether the ACK acknowledges seq.
func (a *ackPkt) acked(seq uint64) bool {
	if seq < a.Cum {
		return true
	}
	b := a.base()
	if seq < b || seq-b >= sackBits {
		return false
	}
	i := seq - b
	return a.Sack[i/8]&(1<<(i%8)) != 0
}

// setBit marks seq as received in the bitvector (seq must lie in the window).
func (a *ackPkt) setBit(seq uint64) {
	i := seq - a.base()
	a.Sack[i/8] |= 1 << (i % 8)
}

// completed returns the stream's completed count if the ACK carries it.
func (a *ackPkt) completed(stream uint32) (uint64, bool) {
	for _, e := range a.Streams {
		if e.Stream == stream {
			return e.Completed, true
		}
	}
	return 0, false
}

func (a *ackPkt) encode() []byte {
	b := make([]byte, ackLen+ackEntry*len(a.Streams))
	putHdr(b, 1, tAck, a.Flags, uint8(len(a.Streams)), a.Conn)
	be.PutUint16(b[12:], a.Path)
	be.PutUint64(b[16:], a.Cum)
	be.PutUint64(b[24:], a.Largest)
	copy(b[32:64], a.Sack[:])
	be.PutUint64(b[64:], a.EchoTS)
	be.PutUint64(b[72:], a.CE)
	be.PutUint64(b[80:], a.RX)
	be.PutUint64(b[88:], a.RateHint)
	for i, e := range a.Streams {
		o := ackLen + i*ackEntry
		be.PutUint32(b[o:], e.Stream)
		be.PutUint64(b[o+4:], e.Completed)
	}
	return b
}

func decodeAck(b []byte) (*ackPkt, error) {
	if len(b) < ackLen {
		return nil, errShort
	}
	n := int(b[3])
	if n > maxEntries {
		return nil, fmt.Errorf("%d stream entries (at most %d)", n, maxEntries)
	}
	if len(b) != ackLen+ackEntry*n {
		return nil, fmt.Errorf("%d bytes for %d stream entries, want %d", len(b), n, ackLen+ackEntry*n)
	}
	a := &ackPkt{Flags: b[2], Conn: be.Uint64(b[4:]), Path: be.Uint16(b[12:]), Cum: be.Uint64(b[16:]),
		Largest: be.Uint64(b[24:]), EchoTS: be.Uint64(b[64:]), CE: be.Uint64(b[72:]), RX: be.Uint64(b[80:]),
		RateHint: be.Uint64(b[88:])}
	copy(a.Sack[:], b[32:64])
	if be.Uint16(b[14:]) != 0 {
		return nil, fmt.Errorf("reserved bytes 14..15 are %#04x, want 0", be.Uint16(b[14:]))
	}
	if a.CE > a.RX {
		return nil, fmt.Errorf("CE count %d above RX count %d", a.CE, a.RX)
	}
	for i := 0; i < n; i++ {
		o := ackLen + i*ackEntry
		a.Streams = append(a.Streams, streamEntry{be.Uint32(b[o:]), be.Uint64(b[o+4:])})
	}
	return a, nil
}

// hsPkt is an INIT or ACCEPT (§4).
type hsPkt struct {
	Version  uint8 // 0 means 1
	Type     uint8
	Conn     uint64
	MTU      uint16
	Paths    uint16
	TS       uint64
	EchoTS   uint64 // ACCEPT only
	RateHint uint64 // ACCEPT only
	Offer    uint8  // INIT only (flags): versions offered, bit i = version i+1; 0 = version 1 only
	Choice   uint8  // ACCEPT only (byte 3): the version chosen; 0 = version 1
	sock     int
}

func (h *hsPkt) encode() []byte {
	n := initLen
	if h.Type == tAccept {
		n = acceptLen
	}
	b := make([]byte, n)
	if h.Type == tAccept {
		putHdr(b, h.Version, h.Type, 0, h.Choice, h.Conn)
	} else {
		putHdr(b, h.Version, h.Type, h.Offer, 0, h.Conn)
	}
	be.PutUint16(b[12:], h.MTU)
	be.PutUint16(b[14:], h.Paths)
	be.PutUint64(b[16:], h.TS)
	if h.Type == tAccept {
		be.PutUint64(b[24:], h.EchoTS)
		be.PutUint64(b[32:], h.RateHint)
	}
	return b
}

func decodeHandshake(b []byte) (*hsPkt, error) {
	if len(b) < hdrLen {
		return nil, errShort
	}
	h := &hsPkt{Version: b[0], Type: b[1], Conn: be.Uint64(b[4:])}
	want := initLen
	if h.Type == tAccept {
		want = acceptLen
	}
	if len(b) != want {
		return nil, fmt.Errorf("%s of %d bytes, want %d", typeName(h.Type), len(b), want)
	}
	h.MTU, h.Paths, h.TS = be.Uint16(b[12:]), be.Uint16(b[14:]), be.Uint64(b[16:])
	if h.Type == tAccept {
		h.EchoTS, h.RateHint = be.Uint64(b[24:]), be.Uint64(b[32:])
		h.Choice = b[3]
	} else {
		h.Offer = b[2]
	}
	return h, nil
}

// closePkt is a CLOSE (§5).
type closePkt struct {
	Conn   uint64
	Reason uint16
	Ack    bool
	sock   int
}

func (c *closePkt) encode() []byte {
	b := make([]byte, closeLen)
	var f uint8
	if c.Ack {
		f = 1
	}
	putHdr(b, 1, tClose, f, 0, c.Conn)
	be.PutUint16(b[12:], c.Reason)
	return b
}

func decodeClose(b []byte) (*closePkt, error) {
	if len(b) != closeLen {
		return nil, fmt.Errorf("CLOSE of %d bytes, want %d", len(b), closeLen)
	}
	return &closePkt{Conn: be.Uint64(b[4:]), Reason: be.Uint16(b[12:]), Ack: b[2]&1 != 0}, nil
}

// probePkt is a PROBE or PROBE_ACK (§6).
type probePkt struct {
	Type uint8
	Conn uint64
	Path uint16
	TS   uint64
	sock int
}

func (p *probePkt) encode() []byte {
	b := make([]byte, probeLen)
	putHdr(b, 1, p.Type, 0, 0, p.Conn)
	be.PutUint16(b[12:], p.Path)
	be.PutUint64(b[16:], p.TS)
	return b
}

func decodeProbe(b []byte) (*probePkt, error) {
	if len(b) != probeLen {
		return nil, fmt.Errorf("%s of %d bytes, want %d", typeName(b[1]), len(b), probeLen)
	}
	return &probePkt{Type: b[1], Conn: be.Uint64(b[4:]), Path: be.Uint16(b[12:]), TS: be.Uint64(b[16:])}, nil
}

// versionPkt is a VERSION (§7).
type versionPkt struct {
	Conn     uint64
	Versions []uint8
	sock     int
}

func (v *versionPkt) encode() []byte {
	b := make([]byte, hdrLen+1+len(v.Versions))
	b[1] = tVersion
	be.PutUint64(b[4:], v.Conn)
	b[12] = uint8(len(v.Versions))
	copy(b[13:], v.Versions)
	return b
}

func decodeVersion(b []byte) (*versionPkt, error) {
	if len(b) < hdrLen+1 {
		return nil, errShort
	}
	if b[0] != 0 {
		return nil, fmt.Errorf("VERSION with byte 0 = %d, want 0", b[0])
	}
	n := int(b[12])
	if len(b) != hdrLen+1+n {
		return nil, fmt.Errorf("VERSION of %d bytes listing %d versions", len(b), n)
	}
	return &versionPkt{Conn: be.Uint64(b[4:]), Versions: append([]uint8(nil), b[13:]...)}, nil
}

// errorPkt is an ERROR (§8).
type errorPkt struct {
	Conn   uint64
	Stream uint32
	MsgSeq uint64
	Code   uint16
	sock   int
}

func (e *errorPkt) encode() []byte {
	b := make([]byte, errorLen)
	putHdr(b, 1, tError, 0, 0, e.Conn)
	be.PutUint32(b[12:], e.Stream)
	be.PutUint64(b[16:], e.MsgSeq)
	be.PutUint16(b[24:], e.Code)
	return b
}

func decodeError(b []byte) (*errorPkt, error) {
	if len(b) != errorLen {
		return nil, fmt.Errorf("ERROR of %d bytes, want %d", len(b), errorLen)
	}
	return &errorPkt{Conn: be.Uint64(b[4:]), Stream: be.Uint32(b[12:]), MsgSeq: be.Uint64(b[16:]), Code: be.Uint16(b[24:])}, nil
}
