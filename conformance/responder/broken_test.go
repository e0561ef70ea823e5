package responder

import (
	"encoding/binary"
	"strings"
	"testing"

	"github.com/mrgw/mrgw/conformance"
	"github.com/mrgw/mrgw/metaroce"
)

var be = binary.BigEndian

// The tests below prove that every case can fail: each runs the suite
// against a responder broken in one way (a datagram-level middleware around
// the unchanged endpoint, or a configuration) and asserts that the case
// aimed at that fault fails, with a detail that says what was expected.

// mangleAck rewrites every ACK the responder sends.
func mangleAck(f func(a *metaroce.Ack)) func(*Responder, []byte, *metaroce.Transmit) []byte {
	return func(_ *Responder, b []byte, _ *metaroce.Transmit) []byte {
		var a metaroce.Ack
		if len(b) < 2 || b[1] != byte(metaroce.TypeAck) || metaroce.DecodeAck(b, &a) != nil {
			return b
		}
		f(&a)
		out, err := metaroce.AppendAck(make([]byte, 0, 1024), &a)
		if err != nil {
			return b
		}
		return out
	}
}

// ackedSeqs lists what an ACK acknowledges within its window.
func ackedSeqs(a *metaroce.Ack) []uint64 {
	var out []uint64
	base := a.SackBase()
	for s := base; s <= a.Largest && s-base < metaroce.SackBits; s++ {
		if a.Acked(s) {
			out = append(out, s)
		}
	}
	return out
}

// setSack rewrites the bitvector to acknowledge exactly seqs (relative to
// base, dropping those outside the window).
func setSack(a *metaroce.Ack, base uint64, seqs []uint64) {
	a.Sack = [32]byte{}
	for _, s := range seqs {
		if s >= base && s-base < metaroce.SackBits {
			i := s - base
			a.Sack[i/8] |= 1 << (i % 8)
		}
	}
}

// dropType drops every outgoing packet of type t (and, for VERSION, byte 0 = 0).
func dropType(t metaroce.PacketType, pred func(b []byte) bool) func(*Responder, []byte, *metaroce.Transmit) []byte {
	return func(_ *Responder, b []byte, _ *metaroce.Transmit) []byte {
		if len(b) > 1 && metaroce.PacketType(b[1]) == t && (pred == nil || pred(b)) {
			return nil
		}
		return b
	}
}

// onData applies f to every received DATA that decodes.
func onData(f func(r *Responder, b []byte, h *metaroce.DataHeader, pay []byte, m *metaroce.RecvMeta) [][]byte) func(*Responder, []byte, *metaroce.RecvMeta) [][]byte {
	return func(r *Responder, b []byte, m *metaroce.RecvMeta) [][]byte {
		var h metaroce.DataHeader
		if len(b) < 2 || b[1] != byte(metaroce.TypeData) {
			return [][]byte{b}
		}
		pay, err := metaroce.DecodeData(b, &h)
		if err != nil {
			return [][]byte{b}
		}
		return f(r, b, &h, pay, m)
	}
}

func connByID(r *Responder, id uint64) *metaroce.Conn {
	for _, c := range r.ep.Conns() {
		if c.ID() == id {
			return c
		}
	}
	return nil
}

type variant struct {
	name  string
	brk   *breakage
	cfg   func(*metaroce.Config)
	cases map[string]string // case id -> substring of the failure detail
}

func variants() []variant {
	deferred := deferredPlacement()
	seen := map[string]bool{}
	stuck := map[[2]uint64]uint16{}
	stalled := map[uint32]bool{}
	return []variant{
		{name: "sack reports every sequence up to largest", brk: &breakage{out: mangleAck(func(a *metaroce.Ack) {
			base := a.SackBase()
			for s := base; s <= a.Largest && s-base < metaroce.SackBits; s++ {
				i := s - base
				a.Sack[i/8] |= 1 << (i % 8)
			}
		})}, cases: map[string]string{
			"sack-exact":       "was never sent but the ACK reports it received",
			"path-gap-is-loss": "must show as a hole below largest 3",
		}},
		{name: "cum moves over gaps", brk: &breakage{out: mangleAck(func(a *metaroce.Ack) {
			if a.RxCount > 0 {
				a.Cum = a.Largest + 1
			}
		})}, cases: map[string]string{
			"cum-contiguous": "with seq 2 missing: want cum 2",
			"sack-exact":     "want 5 (the first missing sequence)",
		}},
		{name: "sack window based at cum, not at largest-255", brk: &breakage{out: mangleAck(func(a *metaroce.Ack) {
			setSack(a, a.Cum, ackedSeqs(a))
		})}, cases: map[string]string{"sack-window-edge": "seq 44 was sent but the ACK does not report it"}},
		{name: "cross-path reordering reported as loss", brk: &breakage{out: mangleAck(func(a *metaroce.Ack) {
			if a.Largest < 1 || a.RxCount < 2 {
				return
			}
			if a.Cum > a.Largest-1 {
				a.Cum = a.Largest - 1
			}
			var keep []uint64
			for s := a.Cum; s <= a.Largest; s++ {
				if s != a.Largest-1 {
					keep = append(keep, s)
				}
			}
			setSack(a, a.SackBase(), keep)
		})}, cases: map[string]string{"path-reorder-no-loss": "cross-path reordering produced a loss signal"}},
		{name: "duplicates rewrite memory", brk: &breakage{in: onData(func(r *Responder, b []byte, h *metaroce.DataHeader, pay []byte, _ *metaroce.RecvMeta) [][]byte {
			if h.Op == metaroce.OpWrite && h.Key == conformance.RegionKey && h.Addr+h.Offset+uint64(len(pay)) <= conformance.RegionSize {
				copy(r.region[h.Addr+h.Offset:], pay) // a naive receiver: no duplicate check
			}
			return [][]byte{b}
		})}, cases: map[string]string{"duplicate-not-redelivered": "a duplicate of a completed WRITE was written"}},
		{name: "duplicates not acknowledged", brk: &breakage{in: func(_ *Responder, b []byte, _ *metaroce.RecvMeta) [][]byte {
			if len(b) > 1 && b[1] == byte(metaroce.TypeData) {
				if seen[string(b)] {
					return nil
				}
				seen[string(b)] = true
			}
			return [][]byte{b}
		}}, cases: map[string]string{"duplicate-not-redelivered": "duplicate DATA (path 1 seq 0) not acknowledged"}},
		{name: "a refused message stalls its stream", brk: &breakage{in: onData(func(_ *Responder, b []byte, h *metaroce.DataHeader, _ []byte, _ *metaroce.RecvMeta) [][]byte {
			// Mimics a receiver that never completes a refused message, so
			// nothing behind it on the stream completes either.
			if h.Key == 0x7EAD_BEEF {
				stalled[h.Stream] = true
				return [][]byte{b}
			}
			if stalled[h.Stream] {
				return nil
			}
			return [][]byte{b}
		})}, cases: map[string]string{"refused-head-no-stall": "blocks the stream"}},
		{name: "CE marks ignored", brk: &breakage{in: func(_ *Responder, b []byte, m *metaroce.RecvMeta) [][]byte {
			m.CE = false
			return [][]byte{b}
		}}, cases: map[string]string{"ecn-ce-echo": "after one CE-marked DATA: want seq"}},
		{name: "no receive capacity: no rate hints", cfg: func(c *metaroce.Config) { c.ReceiveCapacity = 0 },
			cases: map[string]string{"rate-hint-present": "ACK carries no rate hint (0)"}},
		{name: "rate hint fixed", brk: &breakage{out: mangleAck(func(a *metaroce.Ack) { a.RateHintBps = 10e9 })},
			cases: map[string]string{"rate-hint-falls": "did not fall when sender B started"}},
		{name: "any version accepted", brk: &breakage{in: func(_ *Responder, b []byte, _ *metaroce.RecvMeta) [][]byte {
			if len(b) > 0 && b[0] > metaroce.MaxVersion {
				b = append([]byte(nil), b...)
				b[0] = 1
			}
			return [][]byte{b}
		}}, cases: map[string]string{
			"version-unknown-refused": "answered with ACCEPT, want VERSION",
			"bad-wrong-version":       "DATA of version 9 (path",
		}},
		{name: "no VERSION sent", brk: &breakage{out: dropType(metaroce.TypeVersion, func(b []byte) bool { return b[0] == 0 })},
			cases: map[string]string{"version-unknown-refused": "not answered with VERSION"}},
		{name: "WRITE to an unknown key lands in key 1", brk: &breakage{in: onData(func(_ *Responder, b []byte, h *metaroce.DataHeader, _ []byte, _ *metaroce.RecvMeta) [][]byte {
			if h.Op == metaroce.OpWrite && h.Key != conformance.RegionKey {
				b = append([]byte(nil), b...)
				be.PutUint32(b[56:], conformance.RegionKey)
			}
			return [][]byte{b}
		})}, cases: map[string]string{"bad-unknown-key": "not answered with ERROR code 1"}},
		{name: "placement deferred until the message and its predecessors are whole (reorder buffer)", brk: deferred,
			cases: map[string]string{
				"write-scrambled":     "of an incomplete WRITE not placed on arrival",
				"send-before-earlier": "while msg 0 is incomplete: not placed in the buffer of its tag",
			}},
		{name: "ack floor ignored", brk: &breakage{in: func(_ *Responder, b []byte, _ *metaroce.RecvMeta) [][]byte {
			if len(b) >= metaroce.DataHeaderLen && b[1] == byte(metaroce.TypeData) {
				b = append([]byte(nil), b...)
				be.PutUint32(b[28:], uint32(min(be.Uint64(b[20:]), 1<<32-1))) // floor 0: nothing ever given up
			}
			return [][]byte{b}
		}}, cases: map[string]string{"cum-ack-floor": "after DATA seq 3 with ack floor 2: cum 1, want 4"}},
		{name: "stream completion claimed early", brk: &breakage{out: mangleAck(func(a *metaroce.Ack) {
			if a.NStreams == 0 {
				a.Streams[0], a.NStreams = metaroce.StreamAck{Stream: 1, Completed: 1}, 1
			}
		})}, cases: map[string]string{"completion-order": "ACK says stream 1 completed 1 messages while its msg 0 was never sent"}},
		{name: "ACKs stay on a path's first port", brk: &breakage{out: func(_ *Responder, b []byte, tx *metaroce.Transmit) []byte {
			if tx.Conn != nil && tx.Reply && len(b) > 1 && b[1] == byte(metaroce.TypeAck) {
				k := [2]uint64{tx.Conn.ID(), uint64(tx.Path)}
				if p, ok := stuck[k]; ok {
					tx.Entropy = p
				} else {
					stuck[k] = tx.Entropy
				}
			}
			return b
		}}, cases: map[string]string{"entropy-change": "went to the old port"}},
		{name: "CLOSE not answered", brk: &breakage{out: dropType(metaroce.TypeClose, func(b []byte) bool { return b[2]&1 != 0 })},
			cases: map[string]string{"close": "CLOSE not answered with a CLOSE-ack"}},
		{name: "truncated DATA padded and accepted", brk: &breakage{in: func(_ *Responder, b []byte, _ *metaroce.RecvMeta) [][]byte {
			if len(b) >= metaroce.DataHeaderLen && b[1] == byte(metaroce.TypeData) {
				if want := metaroce.DataHeaderLen + int(be.Uint16(b[14:])); want > len(b) {
					b = append(append([]byte(nil), b...), make([]byte, want-len(b))...)
				}
			}
			return [][]byte{b}
		}}, cases: map[string]string{"bad-truncated": "DATA missing its last payload byte (path"}},
		{name: "trailing bytes trimmed and accepted", brk: &breakage{in: func(_ *Responder, b []byte, _ *metaroce.RecvMeta) [][]byte {
			if len(b) >= metaroce.DataHeaderLen && b[1] == byte(metaroce.TypeData) {
				if want := metaroce.DataHeaderLen + int(be.Uint16(b[14:])); want < len(b) {
					b = b[:want]
				}
			}
			return [][]byte{b}
		}}, cases: map[string]string{"bad-oversized": "DATA with a trailing byte beyond its payload length (path"}},
		{name: "DATA of unknown connections adopted", brk: &breakage{in: func(r *Responder, b []byte, _ *metaroce.RecvMeta) [][]byte {
			if len(b) >= 12 && b[0] == 1 && b[1] == byte(metaroce.TypeData) && connByID(r, be.Uint64(b[4:])) == nil && len(r.ep.Conns()) > 0 {
				b = append([]byte(nil), b...)
				be.PutUint64(b[4:], r.ep.Conns()[len(r.ep.Conns())-1].ID())
			}
			return [][]byte{b}
		}}, cases: map[string]string{"bad-unknown-conn": "memory written by DATA of an unknown connection"}},
		{name: "out-of-bounds WRITE partly written", brk: &breakage{in: onData(func(r *Responder, b []byte, h *metaroce.DataHeader, pay []byte, _ *metaroce.RecvMeta) [][]byte {
			if h.Op == metaroce.OpWrite && h.Key == conformance.RegionKey && h.Addr+h.Offset < conformance.RegionSize && h.Addr+h.Offset+uint64(len(pay)) > conformance.RegionSize {
				copy(r.region[h.Addr+h.Offset:], pay)
			}
			return [][]byte{b}
		})}, cases: map[string]string{"bad-out-of-bounds": "memory written by a refused WRITE"}},
		{name: "no ERROR sent", brk: &breakage{out: dropType(metaroce.TypeError, nil)},
			cases: map[string]string{"bad-send-buffer": "not answered with ERROR code 3", "bad-unknown-key": "not answered with ERROR code 1"}},
		{name: "INIT below the minimum MTU accepted", brk: &breakage{in: func(_ *Responder, b []byte, _ *metaroce.RecvMeta) [][]byte {
			if len(b) == metaroce.InitLen && b[1] == byte(metaroce.TypeInit) && be.Uint16(b[12:]) < metaroce.MinMTU {
				b = append([]byte(nil), b...)
				be.PutUint16(b[12:], metaroce.MinMTU)
			}
			return [][]byte{b}
		}}, cases: map[string]string{"handshake-bad-init": "INIT with MTU 100 (< 256) was accepted"}},
		{name: "ACCEPT does not echo the INIT timestamp", brk: &breakage{out: func(_ *Responder, b []byte, _ *metaroce.Transmit) []byte {
			if len(b) == metaroce.AcceptLen && b[1] == byte(metaroce.TypeAccept) {
				b = append([]byte(nil), b...)
				clear(b[24:32])
			}
			return b
		}}, cases: map[string]string{"handshake": "ACCEPT echoes timestamp 0"}},
		{name: "PROBE not answered", brk: &breakage{out: dropType(metaroce.TypeProbeAck, nil)},
			cases: map[string]string{"probe-answered": "not answered within"}},
		{name: "ACCEPT chooses version 2 whatever the INIT offered", brk: &breakage{out: func(_ *Responder, b []byte, _ *metaroce.Transmit) []byte {
			if len(b) == metaroce.AcceptLen && b[1] == byte(metaroce.TypeAccept) {
				b[3] = metaroce.Version2
			}
			return b
		}}, cases: map[string]string{"version-v1-only-client": "did not offer"}},
		{name: "version-2 DATA dropped", brk: &breakage{in: func(_ *Responder, b []byte, _ *metaroce.RecvMeta) [][]byte {
			if len(b) > 1 && b[0] == metaroce.Version2 && b[1] == byte(metaroce.TypeData) {
				return nil
			}
			return [][]byte{b}
		}}, cases: map[string]string{"version-v2-offered": "(no ACK at all)"}},
		{name: "orphans adopted", brk: adoptOrphans(), cases: map[string]string{"v2-orphan-not-acked": "was acknowledged"}},
	}
}

// adoptOrphans is a version-2 receiver that places a DATA without
// descriptor of a message it never heard of, instead of leaving it
// unrecorded (PROTOCOL.md §12 "Orphans"): it makes up a descriptor (the
// contract's region, offset 0, the message ending with this chunk).
func adoptOrphans() *breakage {
	seen := map[[3]uint32]bool{}
	return &breakage{in: func(r *Responder, b []byte, _ *metaroce.RecvMeta) [][]byte {
		var h metaroce.DataHeaderV2
		pay, err := metaroce.DecodeDataV2(b, &h)
		if err != nil {
			return [][]byte{b}
		}
		k := [3]uint32{h.Tag, h.Stream, h.MsgSeq}
		if h.Desc {
			seen[k] = true
			return [][]byte{b}
		}
		if seen[k] {
			return [][]byte{b}
		}
		mtu := 0
		for _, c := range r.ep.Conns() {
			if uint32(c.ID()) == h.Tag {
				mtu = c.MTU()
			}
		}
		h.Desc, h.Key, h.Addr, h.MsgLen = true, conformance.RegionKey, 0, uint64(h.Chunk)*uint64(mtu)+uint64(len(pay))
		out, err := metaroce.AppendDataV2(make([]byte, 0, len(b)+metaroce.DataDescLen), &h, pay)
		if err != nil {
			return [][]byte{b}
		}
		return [][]byte{out}
	}}
}

// deferredPlacement is a receiver with a reorder buffer: chunks are
// acknowledged on arrival but reach memory (a WRITE's region, a SEND's
// posted buffer) only once their message and every earlier message of the
// stream are whole. The endpoint places them; the middleware undoes that
// until then and replays them in order.
func deferredPlacement() *breakage {
	type skey struct {
		conn   uint64
		stream uint32
	}
	type chunk struct {
		dst []byte
		pay []byte
	}
	type msgState struct {
		chunks map[uint64]chunk
		n      int
	}
	streams := map[skey]map[uint64]*msgState{}
	heads := map[skey]uint64{}
	var snap []byte
	var dst []byte
	var cur *skey
	return &breakage{
		in: func(r *Responder, b []byte, _ *metaroce.RecvMeta) [][]byte {
			cur = nil
			var h metaroce.DataHeader
			if len(b) < 2 || b[1] != byte(metaroce.TypeData) {
				return [][]byte{b}
			}
			pay, err := metaroce.DecodeData(b, &h)
			if err != nil || h.Stream == conformance.CtlStream {
				return [][]byte{b}
			}
			c := connByID(r, h.Conn)
			if c == nil || len(pay) == 0 {
				return [][]byte{b}
			}
			var region []byte
			switch {
			case h.Op == metaroce.OpWrite && h.Key == conformance.RegionKey && h.Addr+h.MsgLen <= conformance.RegionSize:
				region = r.region[h.Addr:]
			case h.Op == metaroce.OpSend && r.bufs[h.Conn][h.Addr] != nil && h.MsgLen <= uint64(len(r.bufs[h.Conn][h.Addr])):
				region = r.bufs[h.Conn][h.Addr]
			default:
				return [][]byte{b}
			}
			k := skey{h.Conn, h.Stream}
			if streams[k] == nil {
				streams[k] = map[uint64]*msgState{}
			}
			m := streams[k][h.MsgSeq]
			if m == nil {
				m = &msgState{chunks: map[uint64]chunk{}, n: max(1, int((h.MsgLen+uint64(c.MTU())-1)/uint64(c.MTU())))}
				streams[k][h.MsgSeq] = m
			}
			dst = region[h.Offset : h.Offset+uint64(len(pay))]
			m.chunks[h.Offset] = chunk{dst, append([]byte(nil), pay...)}
			snap = append(snap[:0], dst...)
			cur = &k
			return [][]byte{b}
		},
		after: func(r *Responder, _ []byte) {
			if cur == nil {
				return
			}
			copy(dst, snap) // undo; replay below what is deliverable
			ms := streams[*cur]
			for {
				m := ms[heads[*cur]]
				if m == nil || len(m.chunks) < m.n {
					return
				}
				for _, ch := range m.chunks {
					copy(ch.dst, ch.pay)
				}
				delete(ms, heads[*cur])
				heads[*cur]++
			}
		},
	}
}

func TestSuiteFailsAgainstBrokenResponders(t *testing.T) {
	for _, v := range variants() {
		t.Run(v.name, func(t *testing.T) {
			cfg := DefaultConfig()
			if v.cfg != nil {
				v.cfg(&cfg)
			}
			addr := startResponder(t, Options{Config: &cfg, brk: v.brk})
			var ids []string
			for id := range v.cases {
				ids = append(ids, id)
			}
			res := runSuite(t, addr, ids...)
			for _, r := range res {
				want, ok := v.cases[r.Case]
				if !ok {
					continue
				}
				if r.Verdict != conformance.Fail {
					t.Errorf("%s passed against a responder whose %s (%s)", r.Case, v.name, r.Detail)
				} else if !strings.Contains(r.Detail, want) {
					t.Errorf("%s failed, but not precisely:\n got  %s\n want a detail containing %q", r.Case, r.Detail, want)
				} else {
					t.Logf("%s: FAIL as it must: %s", r.Case, r.Detail)
				}
			}
		})
	}
}

// TestEveryCaseCanFail checks that the broken variants cover every wire
// case (but any listed in knownFailures).
func TestEveryCaseCanFail(t *testing.T) {
	covered := map[string]bool{}
	for _, v := range variants() {
		for id := range v.cases {
			covered[id] = true
		}
	}
	for _, id := range conformance.CaseIDs() {
		if id == "wire-golden-vectors" { // the suite's own codec check: no wire traffic
			continue
		}
		if !covered[id] && knownFailures[id] == "" {
			t.Errorf("no broken responder makes case %s fail", id)
		}
	}
}
