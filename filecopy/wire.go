package filecopy

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"
)

// The control messages travel over the stream as frames: a type byte, a
// 4-byte big-endian payload length, the payload. Each type has a fixed
// list of fields (layouts), so encoding and decoding share one
// description and a decoded frame re-encodes to the same bytes.

type msgType uint8

const (
	tHello       msgType = 1  // sender: version, chunk size, entries, destination directory
	tHelloOK     msgType = 2  // receiver: version, window, windows at once, inline limit
	tEntry       msgType = 3  // sender: one manifest entry
	tManifestEnd msgType = 4  // sender: entries sent
	tHave        msgType = 5  // receiver: what it holds of an entry already
	tInline      msgType = 6  // sender: a small file's bytes and SHA-256
	tOpen        msgType = 7  // sender: start sending a large file
	tMap         msgType = 8  // sender: map a window, with the chunks it will WRITE there
	tMapped      msgType = 9  // receiver: the window's memory key
	tZero        msgType = 10 // sender: chunks that are holes at the source
	tChunk       msgType = 11 // sender: a chunk's WRITE completed, with its CRC32C
	tChunkAck    msgType = 12 // receiver: the chunk's CRC matched (or not)
	tUnmap       msgType = 13 // sender: every chunk of the window is acknowledged
	tFileEnd     msgType = 14 // sender: the file's SHA-256; commit it
	tFileDone    msgType = 15 // receiver: committed (or not), with its SHA-256
	tEnd         msgType = 16 // sender: nothing more
	tBye         msgType = 17 // receiver: directories finished, the copy is durable
	tError       msgType = 18 // either: the copy fails, Code and Text say why
	tPing        msgType = 19 // sender: keepalive while nothing else is due
)

func (t msgType) String() string {
	if int(t) < len(typeNames) && typeNames[t] != "" {
		return typeNames[t]
	}
	return fmt.Sprintf("type %d", uint8(t))
}

var typeNames = [...]string{tHello: "HELLO", tHelloOK: "HELLO_OK", tEntry: "ENTRY", tManifestEnd: "MANIFEST_END",
	tHave: "HAVE", tInline: "INLINE", tOpen: "OPEN", tMap: "MAP", tMapped: "MAPPED", tZero: "ZERO",
	tChunk: "CHUNK", tChunkAck: "CHUNK_ACK", tUnmap: "UNMAP", tFileEnd: "FILE_END", tFileDone: "FILE_DONE",
	tEnd: "END", tBye: "BYE", tError: "ERROR", tPing: "PING"}

// Entry kinds.
const (
	kindFile uint8 = 1
	kindDir  uint8 = 2
)

// HAVE states.
const (
	haveNone     uint8 = 0 // nothing: send it all
	haveComplete uint8 = 1 // the destination holds the file already (size, mode and mtime match)
	havePartial  uint8 = 2 // Bits: the chunks verified by an interrupted copy
)

// Error codes of an ERROR message.
const (
	codeProtocol   uint16 = 1 // a malformed or unexpected message
	codeNotAllowed uint16 = 2 // a path escapes the receiver's root
	codeDiskFull   uint16 = 3 // no space for the data
	codeIO         uint16 = 4 // the receiver's file system failed
	codeBusy       uint16 = 5 // superseded by a newer copy of the same path
	codeLimit      uint16 = 6 // over a limit of the receiver (entries, sizes)
	codeVersion    uint16 = 8 // protocol version not spoken
	codeShutdown   uint16 = 9 // the receiver is shutting down
)

// msg is one control message; only the fields of its type's layout are
// carried.
type msg struct {
	Type      msgType
	Version   uint32
	Idx       uint32 // manifest entry
	N         uint64 // chunk (CHUNK, CHUNK_ACK, ZERO: the first), window (MAP, MAPPED, UNMAP)
	Count     uint64 // entries (HELLO, MANIFEST_END), chunks (ZERO)
	Key       uint32
	CRC       uint32
	Mask      uint64 // MAP: the window's chunks the sender WRITEs
	OK        bool
	Code      uint16
	Kind      uint8 // ENTRY: kindFile or kindDir; HAVE: the state
	Mode      uint32
	Size      uint64 // ENTRY: file size; HELLO: chunk size
	DataBytes uint64 // ENTRY: bytes in data extents (holes excluded)
	Window    uint64
	InlineMax uint64
	MaxWin    uint32
	Mtime     int64 // Unix nanoseconds
	Path      string
	Text      string
	Sum       [32]byte
	Bytes     []byte // HAVE: chunk bitmap; INLINE: the file; aliases the reader's buffer
}

type field uint8

const (
	fVersion field = iota
	fIdx
	fN
	fCount
	fKey
	fCRC
	fMask
	fOK
	fCode
	fKind
	fMode
	fSize
	fDataBytes
	fWindow
	fInlineMax
	fMaxWin
	fMtime
	fPath
	fText
	fSum
	fBytes
)

var layouts = map[msgType][]field{
	tHello:       {fVersion, fSize, fCount, fPath},
	tHelloOK:     {fVersion, fWindow, fMaxWin, fInlineMax},
	tEntry:       {fIdx, fKind, fMode, fSize, fDataBytes, fMtime, fPath},
	tManifestEnd: {fCount},
	tHave:        {fIdx, fKind, fBytes},
	tInline:      {fIdx, fSum, fBytes},
	tOpen:        {fIdx},
	tMap:         {fIdx, fN, fMask},
	tMapped:      {fIdx, fN, fKey},
	tZero:        {fIdx, fN, fCount},
	tChunk:       {fIdx, fN, fCRC},
	tChunkAck:    {fIdx, fN, fOK},
	tUnmap:       {fIdx, fN},
	tFileEnd:     {fIdx, fSum},
	tFileDone:    {fIdx, fOK, fSum, fText},
	tEnd:         {},
	tBye:         {fCount},
	tError:       {fCode, fIdx, fText},
	tPing:        {},
}

// Limits of the wire format.
const (
	protocolVersion = 1
	maxPath         = 4096
	maxText         = 4096
	// maxFrame bounds a frame's payload: an inline file (at most
	// maxInline) or a chunk bitmap (at most maxChunks/8) with the fields.
	maxFrame  = 1<<20 + 64<<10
	maxInline = 1 << 20
	// maxChunks bounds a file's chunks (16 TiB at 4 MiB).
	maxChunks = 1 << 22
	headerLen = 5
)

var errFrame = errors.New("filecopy: malformed message")

// appendMsg encodes m as a frame.
func appendMsg(b []byte, m *msg) []byte {
	lay, ok := layouts[m.Type]
	if !ok {
		panic(fmt.Sprintf("filecopy: encode %v", m.Type))
	}
	start := len(b)
	b = append(b, byte(m.Type), 0, 0, 0, 0)
	be := binary.BigEndian
	for _, f := range lay {
		switch f {
		case fVersion:
			b = be.AppendUint32(b, m.Version)
		case fIdx:
			b = be.AppendUint32(b, m.Idx)
		case fN:
			b = be.AppendUint64(b, m.N)
		case fCount:
			b = be.AppendUint64(b, m.Count)
		case fKey:
			b = be.AppendUint32(b, m.Key)
		case fCRC:
			b = be.AppendUint32(b, m.CRC)
		case fMask:
			b = be.AppendUint64(b, m.Mask)
		case fOK:
			v := byte(0)
			if m.OK {
				v = 1
			}
			b = append(b, v)
		case fCode:
			b = be.AppendUint16(b, m.Code)
		case fKind:
			b = append(b, m.Kind)
		case fMode:
			b = be.AppendUint32(b, m.Mode)
		case fSize:
			b = be.AppendUint64(b, m.Size)
		case fDataBytes:
			b = be.AppendUint64(b, m.DataBytes)
		case fWindow:
			b = be.AppendUint64(b, m.Window)
		case fInlineMax:
			b = be.AppendUint64(b, m.InlineMax)
		case fMaxWin:
			b = be.AppendUint32(b, m.MaxWin)
		case fMtime:
			b = be.AppendUint64(b, uint64(m.Mtime))
		case fPath:
			b = be.AppendUint16(b, uint16(len(m.Path)))
			b = append(b, m.Path...)
		case fText:
			t := m.Text
			if len(t) > maxText {
				t = t[:maxText]
			}
			b = be.AppendUint16(b, uint16(len(t)))
			b = append(b, t...)
		case fSum:
			b = append(b, m.Sum[:]...)
		case fBytes:
			b = be.AppendUint32(b, uint32(len(m.Bytes)))
			b = append(b, m.Bytes...)
		}
	}
	be.PutUint32(b[start+1:], uint32(len(b)-start-headerLen))
	return b
}

// decodeMsg decodes one frame's type and payload. Bytes aliases p.
func decodeMsg(t msgType, p []byte) (msg, error) {
	m := msg{Type: t}
	lay, ok := layouts[t]
	if !ok {
		return m, fmt.Errorf("%w: unknown type %d", errFrame, uint8(t))
	}
	d := decoder{b: p}
	for _, f := range lay {
		switch f {
		case fVersion:
			m.Version = d.u32()
		case fIdx:
			m.Idx = d.u32()
		case fN:
			m.N = d.u64()
		case fCount:
			m.Count = d.u64()
		case fKey:
			m.Key = d.u32()
		case fCRC:
			m.CRC = d.u32()
		case fMask:
			m.Mask = d.u64()
		case fOK:
			switch d.u8() {
			case 0:
			case 1:
				m.OK = true
			default:
				d.fail("flag not 0 or 1")
			}
		case fCode:
			m.Code = d.u16()
		case fKind:
			m.Kind = d.u8()
		case fMode:
			m.Mode = d.u32()
		case fSize:
			m.Size = d.u64()
		case fDataBytes:
			m.DataBytes = d.u64()
		case fWindow:
			m.Window = d.u64()
		case fInlineMax:
			m.InlineMax = d.u64()
		case fMaxWin:
			m.MaxWin = d.u32()
		case fMtime:
			m.Mtime = int64(d.u64())
		case fPath:
			m.Path = d.str(maxPath)
		case fText:
			m.Text = d.str(maxText)
		case fSum:
			copy(m.Sum[:], d.take(32))
		case fBytes:
			n := d.u32()
			if n > maxFrame {
				d.fail("byte field too long")
			}
			m.Bytes = d.take(int(n))
		}
	}
	if d.err != nil {
		return m, fmt.Errorf("%w: %v: %v", errFrame, t, d.err)
	}
	if len(d.b) != 0 {
		return m, fmt.Errorf("%w: %v: %d trailing bytes", errFrame, t, len(d.b))
	}
	return m, nil
}

type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(why string) {
	if d.err == nil {
		d.err = errors.New(why)
	}
	d.b = nil
}

func (d *decoder) take(n int) []byte {
	if d.err != nil {
		return nil
	}
	if n > len(d.b) {
		d.fail("truncated")
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

func (d *decoder) u8() uint8 {
	if v := d.take(1); v != nil {
		return v[0]
	}
	return 0
}

func (d *decoder) u16() uint16 {
	if v := d.take(2); v != nil {
		return binary.BigEndian.Uint16(v)
	}
	return 0
}

func (d *decoder) u32() uint32 {
	if v := d.take(4); v != nil {
		return binary.BigEndian.Uint32(v)
	}
	return 0
}

func (d *decoder) u64() uint64 {
	if v := d.take(8); v != nil {
		return binary.BigEndian.Uint64(v)
	}
	return 0
}

func (d *decoder) str(limit int) string {
	n := int(d.u16())
	if n > limit {
		d.fail("string too long")
		return ""
	}
	v := d.take(n)
	if d.err == nil && !utf8.Valid(v) {
		d.fail("string not UTF-8")
		return ""
	}
	return string(v)
}

// msgReader reads frames from a stream into one reused buffer.
type msgReader struct {
	r   *bufio.Reader
	buf []byte
}

func newMsgReader(r io.Reader) *msgReader {
	return &msgReader{r: bufio.NewReaderSize(r, 64<<10)}
}

// read returns the next message; its Bytes is valid until the next call.
func (mr *msgReader) read() (msg, error) {
	var h [headerLen]byte
	if _, err := io.ReadFull(mr.r, h[:]); err != nil {
		return msg{}, err
	}
	n := binary.BigEndian.Uint32(h[1:])
	if n > maxFrame {
		return msg{}, fmt.Errorf("%w: %v of %d bytes (at most %d)", errFrame, msgType(h[0]), n, maxFrame)
	}
	if cap(mr.buf) < int(n) {
		mr.buf = make([]byte, n)
	}
	p := mr.buf[:n]
	if _, err := io.ReadFull(mr.r, p); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return msg{}, err
	}
	return decodeMsg(msgType(h[0]), p)
}

// decodeFrames decodes a byte string of whole frames (the fuzz target's
// view of a stream).
func decodeFrames(b []byte) ([]msg, error) {
	var out []msg
	for len(b) > 0 {
		if len(b) < headerLen {
			return out, fmt.Errorf("%w: truncated header", errFrame)
		}
		n := binary.BigEndian.Uint32(b[1:])
		if n > maxFrame || int(n) > len(b)-headerLen {
			return out, fmt.Errorf("%w: frame of %d bytes", errFrame, n)
		}
		m, err := decodeMsg(msgType(b[0]), b[headerLen:headerLen+int(n)])
		if err != nil {
			return out, err
		}
		out = append(out, m)
		b = b[headerLen+int(n):]
	}
	return out, nil
}
