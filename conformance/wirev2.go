package conformance

import (
	"bytes"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"reflect"

	"github.com/mrgw/mrgw/internal/ecn"
)

// This file is the suite's codec of wire version 2 (PROTOCOL.md §12), written
// from the specification like wire.go, its check against
// testdata/vectors_v2.json (a copy of metaroce's), and what a client does
// differently on a connection that agreed version 2: it sends DATA in the
// compact layout with the descriptor where the spec requires it, and takes
// the target's compact DATA (its reports) apart.

const (
	data2HdrLen = 28
	data2Desc   = 18
	flag2Retx   = 1 << 0
	flag2Desc   = 1 << 1
	flag2Send   = 1 << 2
)

// data2Pkt is a version-2 DATA packet (§12), as on the wire.
type data2Pkt struct {
	Flags    uint8 // all of byte 2
	Tag      uint32
	Path     uint16
	Seq      uint32
	FloorGap uint32
	Stream   uint32
	MsgSeq   uint32
	Chunk    uint32
	Key      uint32 // descriptor: with flag2Desc
	Addr     uint64
	MsgLen   uint64
	Payload  []byte
}

func (d *data2Pkt) desc() bool { return d.Flags&flag2Desc != 0 }

func (d *data2Pkt) encode() []byte {
	n := data2HdrLen
	if d.desc() {
		n += data2Desc
	}
	b := make([]byte, n+len(d.Payload))
	b[0], b[1], b[2] = 2, tData, d.Flags
	b[3], b[4], b[5] = byte(d.FloorGap>>16), byte(d.FloorGap>>8), byte(d.FloorGap)
	be.PutUint16(b[6:], d.Path)
	be.PutUint32(b[8:], d.Tag)
	be.PutUint32(b[12:], d.Seq)
	be.PutUint32(b[16:], d.Stream)
	be.PutUint32(b[20:], d.MsgSeq)
	be.PutUint32(b[24:], d.Chunk)
	if d.desc() {
		be.PutUint32(b[28:], d.Key)
		be.PutUint64(b[32:], d.Addr)
		be.PutUint16(b[40:], uint16(d.MsgLen>>32))
		be.PutUint32(b[42:], uint32(d.MsgLen))
	}
	copy(b[n:], d.Payload)
	return b
}

func decodeData2(b []byte) (*data2Pkt, error) {
	if len(b) < data2HdrLen {
		return nil, errShort
	}
	if b[0] != 2 || b[1] != tData {
		return nil, fmt.Errorf("version %d type %d, want a version-2 DATA", b[0], b[1])
	}
	d := &data2Pkt{Flags: b[2], FloorGap: uint32(b[3])<<16 | uint32(b[4])<<8 | uint32(b[5]), Path: be.Uint16(b[6:]),
		Tag: be.Uint32(b[8:]), Seq: be.Uint32(b[12:]), Stream: be.Uint32(b[16:]), MsgSeq: be.Uint32(b[20:]), Chunk: be.Uint32(b[24:])}
	n := data2HdrLen
	if d.desc() {
		n += data2Desc
		if len(b) < n {
			return nil, fmt.Errorf("descriptor cut off: %d bytes", len(b))
		}
		d.Key, d.Addr = be.Uint32(b[28:]), be.Uint64(b[32:])
		d.MsgLen = uint64(be.Uint16(b[40:]))<<32 | uint64(be.Uint32(b[42:]))
		if d.MsgLen > 1<<40 {
			return nil, fmt.Errorf("message length %d above 2^40", d.MsgLen)
		}
		if len(b) == n && d.Chunk != 0 {
			return nil, fmt.Errorf("empty payload in chunk %d", d.Chunk)
		}
		if len(b) > n && (uint64(len(b)-n) > d.MsgLen || uint64(d.Chunk)*256 >= d.MsgLen) {
			return nil, fmt.Errorf("payload of %d bytes in chunk %d outside a message of %d", len(b)-n, d.Chunk, d.MsgLen)
		}
	}
	d.Payload = b[n:]
	return d, nil
}

// unwrap32 returns the 64-bit number with low 32 bits v nearest to expected (§12).
func unwrap32(expected uint64, v uint32) uint64 {
	c := expected&^0xffffffff | uint64(v)
	if c <= expected && expected-c >= 1<<31 && c <= ^uint64(0)-1<<32 {
		return c + 1<<32
	}
	if c > expected && c-expected > 1<<31 && c >= 1<<32 {
		return c - 1<<32
	}
	return c
}

// goldenV2JSON is a byte-for-byte copy of metaroce/testdata/vectors_v2.json.
//
//go:embed testdata/vectors_v2.json
var goldenV2JSON []byte

// vector2 mirrors an entry of vectors_v2.json.
type vector2 struct {
	Name  string `json:"name"`
	Type  string `json:"type"`
	Hex   string `json:"hex"`
	Pay   string `json:"payload_hex"`
	Data2 *struct {
		Flags, Op                     uint8
		Tag                           uint32
		Path                          uint16
		Seq, FloorGap, Stream, MsgSeq uint32
		Chunk                         uint32
		Desc                          bool
		Key                           uint32
		Addr, MsgLen                  uint64
	} `json:"data2"`
	Hs *struct {
		Conn                                  uint64
		MTU, Paths                            uint16
		Timestamp, EchoTimestamp, RateHintBps uint64
		Offer, Version                        uint8
	} `json:"handshake"`
	Ver *struct {
		Conn     uint64
		Versions []byte
	} `json:"version"`
}

// checkVectorsV2 checks the suite's codec against the version-2 vectors
// as checkVectors does against version 1's.
func checkVectorsV2(raw []byte) ([]string, int, error) {
	var vs []vector2
	if err := json.Unmarshal(raw, &vs); err != nil {
		return nil, 0, fmt.Errorf("version-2 golden vectors: %w", err)
	}
	var bad []string
	seen := map[string]bool{}
	for _, v := range vs {
		seen[v.Type] = true
		want, err := hex.DecodeString(v.Hex)
		if err != nil {
			bad = append(bad, fmt.Sprintf("%s: bad hex: %v", v.Name, err))
			continue
		}
		var got []byte
		same := false
		switch {
		case v.Type == "DATA2" && v.Data2 != nil:
			f := v.Data2
			pay, _ := hex.DecodeString(v.Pay)
			flags := f.Flags
			if f.Desc {
				flags |= flag2Desc
			}
			if f.Op == opSend {
				flags |= flag2Send
			}
			d := data2Pkt{Flags: flags, Tag: f.Tag, Path: f.Path, Seq: f.Seq, FloorGap: f.FloorGap, Stream: f.Stream,
				MsgSeq: f.MsgSeq, Chunk: f.Chunk, Key: f.Key, Addr: f.Addr, MsgLen: f.MsgLen, Payload: pay}
			got = d.encode()
			g, err := decodeData2(want)
			if err != nil {
				bad = append(bad, fmt.Sprintf("%s: %v", v.Name, err))
				continue
			}
			same = bytes.Equal(g.Payload, d.Payload)
			g.Payload, d.Payload = nil, nil
			same = same && reflect.DeepEqual(*g, d)
		case (v.Type == "INIT" || v.Type == "ACCEPT") && v.Hs != nil:
			f := v.Hs
			h := hsPkt{Version: 1, Type: tInit, Conn: f.Conn, MTU: f.MTU, Paths: f.Paths, TS: f.Timestamp, Offer: f.Offer}
			if v.Type == "ACCEPT" {
				h = hsPkt{Version: 1, Type: tAccept, Conn: f.Conn, MTU: f.MTU, Paths: f.Paths, TS: f.Timestamp,
					EchoTS: f.EchoTimestamp, RateHint: f.RateHintBps, Choice: f.Version}
			}
			got = h.encode()
			g, err := decodeHandshake(want)
			if err != nil {
				bad = append(bad, fmt.Sprintf("%s: %v", v.Name, err))
				continue
			}
			same = *g == h
		case v.Type == "VERSION" && v.Ver != nil:
			x := versionPkt{Conn: v.Ver.Conn, Versions: v.Ver.Versions}
			got = x.encode()
			g, err := decodeVersion(want)
			if err != nil {
				bad = append(bad, fmt.Sprintf("%s: %v", v.Name, err))
				continue
			}
			same = g.Conn == x.Conn && bytes.Equal(g.Versions, x.Versions)
		default:
			bad = append(bad, fmt.Sprintf("%s: unknown vector type %q or no fields", v.Name, v.Type))
			continue
		}
		if !bytes.Equal(got, want) {
			bad = append(bad, fmt.Sprintf("%s: suite encodes %x, vector is %x", v.Name, got, want))
		}
		if !same {
			bad = append(bad, fmt.Sprintf("%s: decoding %x does not give the vector's fields", v.Name, want))
		}
	}
	for _, t := range []string{"DATA2", "INIT", "ACCEPT"} {
		if !seen[t] {
			bad = append(bad, fmt.Sprintf("no version-2 vector of type %s", t))
		}
	}
	return bad, len(vs), nil
}

// v2desc is what the suite keeps of a message for version 2: which paths
// carried its descriptor (sending), or its descriptor (receiving).
type v2desc struct {
	paths        map[int]bool
	key          uint32
	addr, length uint64
	op           uint8
}

// encodeV2 turns d (a version-1 DATA as the cases build it, with path, seq
// and floor filled in) into version 2's layout. A chunk carries the
// message's descriptor on the first DATA of the message on its path; when a
// full chunk leaves no room for it, the descriptor goes first on the same
// path as a descriptor-only DATA, which takes the sequence d.Seq (d's own
// goes one higher, returned). The suite never relies on an acknowledged
// descriptor, the simplest sender §12 allows.
func (c *client) encodeV2(d *dataPkt, sock int, cp ecn.Codepoint) ([]byte, uint64) {
	key := [2]uint64{uint64(d.Stream), d.MsgSeq}
	m := c.sentDesc[key]
	if m == nil {
		m = &v2desc{paths: map[int]bool{}}
		c.sentDesc[key] = m
	}
	p := c.paths[d.Path]
	x := data2Pkt{Tag: uint32(c.id), Path: d.Path, Seq: uint32(d.Seq), FloorGap: d.FloorGap, Stream: d.Stream,
		MsgSeq: uint32(d.MsgSeq), Chunk: uint32(d.Offset / uint64(c.mtu)), Payload: d.Payload}
	x.Flags = d.Flags & flag2Retx
	if d.Op == opSend {
		x.Flags |= flag2Send
	}
	seq := d.Seq
	if !m.paths[int(d.Path)] {
		m.paths[int(d.Path)] = true
		dx := x
		dx.Flags |= flag2Desc
		dx.Key, dx.Addr, dx.MsgLen = d.Key, d.Addr, d.MsgLen
		if len(d.Payload)+data2Desc <= c.mtu {
			return dx.encode(), seq
		}
		dx.Chunk, dx.Payload = 0, nil
		c.sendRaw(sock, dx.encode(), cp)
		seq++
		p.next++
		x.Seq, x.FloorGap = uint32(seq), d.FloorGap+1
	}
	return x.encode(), seq
}

// onData2 takes a version-2 DATA from the target apart into the version-1
// form onData works with: sequences unwrapped, the descriptor remembered
// or looked up. An orphan (no descriptor known) is dropped unrecorded, as
// §12 has the receiver do.
func (c *client) onData2(b []byte, d rxd) {
	x, err := decodeData2(b)
	if err != nil {
		c.violate("malformed version-2 DATA: %v", err)
		return
	}
	exp := uint64(0)
	if r := c.rx[x.Path]; r != nil {
		exp = r.cum
		if r.any {
			exp = r.largest + 1
		}
	}
	seq := unwrap32(exp, x.Seq)
	if uint64(x.FloorGap) > seq {
		c.violate("version-2 DATA with floor gap %d above seq %d", x.FloorGap, seq)
		return
	}
	msgSeq := unwrap32(c.nextRep, x.MsgSeq)
	key := [2]uint64{uint64(x.Stream), msgSeq}
	op := uint8(opWrite)
	if x.Flags&flag2Send != 0 {
		op = opSend
	}
	if x.desc() {
		c.rxDesc[key] = &v2desc{key: x.Key, addr: x.Addr, length: x.MsgLen, op: op}
	}
	m := c.rxDesc[key]
	if m == nil {
		if msgSeq >= c.nextRep {
			c.orphans++
			return // unrecorded: the target resends it
		}
		m = &v2desc{op: op} // a late copy of a completed report: recorded, ignored
	}
	if x.desc() && len(x.Payload) == 0 && x.MsgLen > 0 {
		// Descriptor-only: recorded on its path; nothing to place.
		c.onData(&dataPkt{Version: 2, Op: op, Conn: c.id, Path: x.Path, Stream: x.Stream, Seq: seq, FloorGap: x.FloorGap,
			MsgSeq: msgSeq, MsgLen: 0, Offset: 0, Payload: nil, descOnly: true}, d)
		return
	}
	c.onData(&dataPkt{Version: 2, Flags: x.Flags & flag2Retx, Op: op, Conn: c.id, Path: x.Path, Stream: x.Stream, Seq: seq,
		FloorGap: x.FloorGap, MsgSeq: msgSeq, MsgLen: m.length, Offset: uint64(x.Chunk) * uint64(c.mtu), Key: m.key,
		Addr: m.addr, Payload: x.Payload}, d)
}
