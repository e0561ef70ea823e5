package conformance

import (
	"bytes"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"reflect"
)

// goldenJSON is a byte-for-byte copy of metaroce/testdata/vectors.json (a
// test keeps the two identical): one encoding of every packet type with its
// decoded fields.
//
//go:embed testdata/vectors.json
var goldenJSON []byte

// vector mirrors one entry of vectors.json. Field names follow the file, not
// metaroce's Go types, so that the file is the interface.
type vector struct {
	Name string `json:"name"`
	Type string `json:"type"`
	Hex  string `json:"hex"`
	Data *struct {
		Flags, Op              uint8
		Conn                   uint64
		Path                   uint16
		Stream                 uint32
		Seq                    uint64
		FloorGap               uint32
		MsgSeq, MsgLen, Offset uint64
		Key                    uint32
		Addr, Timestamp        uint64
	} `json:"data"`
	Pay string `json:"payload_hex"`
	Ack *struct {
		Flags                                        uint8
		Conn                                         uint64
		Path                                         uint16
		Cum, Largest                                 uint64
		Sack                                         [sackBits / 8]byte
		EchoTimestamp, CECount, RxCount, RateHintBps uint64
		NStreams                                     int
		Streams                                      []streamEntry
	} `json:"ack"`
	Hs *struct {
		Conn                                  uint64
		MTU, Paths                            uint16
		Timestamp, EchoTimestamp, RateHintBps uint64
	} `json:"handshake"`
	Cl *struct {
		Conn   uint64
		Reason uint16
		Ack    bool
	} `json:"close"`
	Pr *struct {
		Conn      uint64
		Path      uint16
		Timestamp uint64
	} `json:"probe"`
	Err *struct {
		Conn   uint64
		Stream uint32
		MsgSeq uint64
		Code   uint16
	} `json:"error"`
	Ver *struct {
		Conn     uint64
		Versions []byte
	} `json:"version"`
}

// vectorTypes lists every packet type; each must have at least one vector.
var vectorTypes = []string{"DATA", "ACK", "INIT", "ACCEPT", "CLOSE", "PROBE", "PROBE_ACK", "VERSION", "ERROR"}

// checkVectors encodes every golden vector's fields with the suite's codec
// and compares the bytes, then decodes the bytes and compares the fields. It
// returns one line per mismatch.
func checkVectors(raw []byte) ([]string, int, error) {
	var vs []vector
	if err := json.Unmarshal(raw, &vs); err != nil {
		return nil, 0, fmt.Errorf("golden vectors: %w", err)
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
		got, dec, err := roundTrip(&v, want)
		if err != nil {
			bad = append(bad, fmt.Sprintf("%s: %v", v.Name, err))
			continue
		}
		if !bytes.Equal(got, want) {
			bad = append(bad, fmt.Sprintf("%s: suite encodes %x, vector is %x", v.Name, got, want))
		}
		if !dec {
			bad = append(bad, fmt.Sprintf("%s: decoding %x does not give the vector's fields", v.Name, want))
		}
	}
	for _, t := range vectorTypes {
		if !seen[t] {
			bad = append(bad, fmt.Sprintf("no vector of type %s", t))
		}
	}
	return bad, len(vs), nil
}

// roundTrip encodes v's fields and reports whether decoding b gives them back.
func roundTrip(v *vector, b []byte) ([]byte, bool, error) {
	switch v.Type {
	case "DATA":
		if v.Data == nil {
			return nil, false, fmt.Errorf("DATA vector without fields")
		}
		f := v.Data
		pay, err := hex.DecodeString(v.Pay)
		if err != nil {
			return nil, false, err
		}
		d := dataPkt{Flags: f.Flags, Op: f.Op, Conn: f.Conn, Path: f.Path, Stream: f.Stream, Seq: f.Seq, FloorGap: f.FloorGap,
			MsgSeq: f.MsgSeq, MsgLen: f.MsgLen, Offset: f.Offset, Key: f.Key, Addr: f.Addr, Timestamp: f.Timestamp, Payload: pay}
		got := d.encode()
		g, err := decodeData(b)
		if err != nil {
			return got, false, err
		}
		d.Version = 1
		same := bytes.Equal(g.Payload, d.Payload)
		g.Payload, d.Payload = nil, nil
		return got, same && reflect.DeepEqual(*g, d), nil
	case "ACK":
		if v.Ack == nil {
			return nil, false, fmt.Errorf("ACK vector without fields")
		}
		f := v.Ack
		a := ackPkt{Flags: f.Flags, Conn: f.Conn, Path: f.Path, Cum: f.Cum, Largest: f.Largest, Sack: f.Sack,
			EchoTS: f.EchoTimestamp, CE: f.CECount, RX: f.RxCount, RateHint: f.RateHintBps}
		if f.NStreams < 0 || f.NStreams > len(f.Streams) {
			return nil, false, fmt.Errorf("NStreams %d with %d entries", f.NStreams, len(f.Streams))
		}
		a.Streams = append(a.Streams, f.Streams[:f.NStreams]...)
		got := a.encode()
		g, err := decodeAck(b)
		if err != nil {
			return got, false, err
		}
		return got, reflect.DeepEqual(*g, a), nil
	case "INIT", "ACCEPT":
		if v.Hs == nil {
			return nil, false, fmt.Errorf("%s vector without fields", v.Type)
		}
		f := v.Hs
		h := hsPkt{Version: 1, Type: tInit, Conn: f.Conn, MTU: f.MTU, Paths: f.Paths, TS: f.Timestamp}
		if v.Type == "ACCEPT" {
			h.Type, h.EchoTS, h.RateHint = tAccept, f.EchoTimestamp, f.RateHintBps
		}
		got := h.encode()
		g, err := decodeHandshake(b)
		if err != nil {
			return got, false, err
		}
		return got, *g == h, nil
	case "CLOSE":
		if v.Cl == nil {
			return nil, false, fmt.Errorf("CLOSE vector without fields")
		}
		c := closePkt{Conn: v.Cl.Conn, Reason: v.Cl.Reason, Ack: v.Cl.Ack}
		got := c.encode()
		g, err := decodeClose(b)
		if err != nil {
			return got, false, err
		}
		return got, *g == c, nil
	case "PROBE", "PROBE_ACK":
		if v.Pr == nil {
			return nil, false, fmt.Errorf("%s vector without fields", v.Type)
		}
		p := probePkt{Type: tProbe, Conn: v.Pr.Conn, Path: v.Pr.Path, TS: v.Pr.Timestamp}
		if v.Type == "PROBE_ACK" {
			p.Type = tProbeAck
		}
		got := p.encode()
		g, err := decodeProbe(b)
		if err != nil {
			return got, false, err
		}
		return got, *g == p, nil
	case "ERROR":
		if v.Err == nil {
			return nil, false, fmt.Errorf("ERROR vector without fields")
		}
		e := errorPkt{Conn: v.Err.Conn, Stream: v.Err.Stream, MsgSeq: v.Err.MsgSeq, Code: v.Err.Code}
		got := e.encode()
		g, err := decodeError(b)
		if err != nil {
			return got, false, err
		}
		return got, *g == e, nil
	case "VERSION":
		if v.Ver == nil {
			return nil, false, fmt.Errorf("VERSION vector without fields")
		}
		x := versionPkt{Conn: v.Ver.Conn, Versions: v.Ver.Versions}
		got := x.encode()
		g, err := decodeVersion(b)
		if err != nil {
			return got, false, err
		}
		return got, g.Conn == x.Conn && bytes.Equal(g.Versions, x.Versions), nil
	}
	return nil, false, fmt.Errorf("unknown vector type %q", v.Type)
}
