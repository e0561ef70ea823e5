package metaroce

import (
	"errors"
	"time"
)

// This file is the receiver's placement, kept apart from the connection as
// the sent history (sent.go) and the receive bitmap (recvwin.go) are: a
// placer owns the receive streams, the messages arriving on them and the
// buffers posted for SENDs, and decides for each DATA payload that its
// path accepted where the bytes go (PROTOCOL.md §2 "Placement"), which
// messages are complete, in order per stream (§2 "Completion"), and what
// is refused. What a refusal or a completion means beyond that (an event
// for the application, an ERROR for the sender) is the connection's
// business, told through a placeHandler.

// placeHandler is told what a placer decides. Its arguments are only valid
// during the call.
type placeHandler interface {
	// placementRefused: a packet of message (h.Stream, h.MsgSeq) was
	// refused and nothing of it written; the sender must hear code
	// (PROTOCOL.md §2 "Placement", §8). port is the entropy the packet
	// came with.
	placementRefused(now time.Duration, h *DataHeader, port uint16, code ErrorCode)
	// messageComplete: message seq of stream is complete, or failed with
	// m.err; called once per message, in order per stream.
	messageComplete(now time.Duration, stream uint32, seq uint64, m *rxMessage)
	// sinkChunk hands a newly arrived chunk of a stream bound to s to it
	// (relay.go); a non-zero code refuses the chunk.
	sinkChunk(s Sink, h *DataHeader, payload []byte) ErrorCode
}

type rxMessage struct {
	op        Op
	len       uint64
	key       uint32
	addr      uint64
	buf       []byte // SEND: the posted buffer
	chunks    int
	got       []uint64
	gotChunks int
	err       error
}

type rxStream struct {
	id    uint32
	next  uint64 // the oldest message not yet completed
	msgs  map[uint64]*rxMessage
	dirty bool
	sink  Sink // if set, chunks go here instead of memory (relay.go)
	// last is the message looked up last (lastSeq), nil if none: the
	// packets of one message come in runs, and each looked its message
	// up in msgs two or three times (BenchmarkDatapath).
	last    *rxMessage
	lastSeq uint64
}

// msg returns message seq of the stream, or nil.
func (rs *rxStream) msg(seq uint64) *rxMessage {
	if rs.last != nil && rs.lastSeq == seq {
		return rs.last
	}
	m := rs.msgs[seq]
	if m != nil {
		rs.last, rs.lastSeq = m, seq
	}
	return m
}

// maxStreams bounds the receive streams a peer may open on one connection.
const maxStreams = 1 << 16

// placer is the receiver's side of a connection's streams: the messages
// arriving on each stream, the buffers posted for SENDs, and which streams
// have completions the next ACK must report.
type placer struct {
	mtu      int    // the connection's payload size: Conn.mtu, lowered with it by the ACCEPT
	maxAhead uint64 // Config.MaxMessagesAhead
	mem      *Memory
	bound    *map[uint32]Sink // sinks a new stream starts bound to (Endpoint.BindSinkAll)
	stats    *ConnStats
	h        placeHandler

	streams map[uint32]*rxStream
	last    *rxStream // the stream looked up last, nil if none (see rxStream.last)
	dirty   []uint32  // streams whose completion point the next ACK reports
	posted  map[uint64][]byte
	// relayOnly refuses WRITEs outside a Sink as ErrCodeNotRelayed
	// (Config.RelayOnly).
	relayOnly bool
}

func newPlacer(mtu, maxAhead int, mem *Memory, bound *map[uint32]Sink, stats *ConnStats, h placeHandler) placer {
	return placer{
		mtu:      mtu,
		maxAhead: uint64(maxAhead),
		mem:      mem,
		bound:    bound,
		stats:    stats,
		h:        h,
		streams:  make(map[uint32]*rxStream),
		posted:   make(map[uint64][]byte),
	}
}

// post posts buf to receive the SEND whose tag is tag.
func (p *placer) post(tag uint64, buf []byte) error {
	if _, ok := p.posted[tag]; ok {
		return ErrDuplicateTag
	}
	p.posted[tag] = buf
	return nil
}

// chunkIndex returns the index of the chunk a DATA packet's offset names,
// and whether the offset and the payload length n are exactly one of the
// message's MTU-sized chunks (chunkFits).
func (p *placer) chunkIndex(h *DataHeader, n int) (int, bool) {
	mtu := uint64(p.mtu)
	idx := h.Offset / mtu
	if idx*mtu != h.Offset {
		return 0, false
	}
	return int(idx), p.chunkFits(h, n)
}

// chunkFits checks that a payload of n bytes at h.Offset, a multiple of
// the MTU, is exactly that chunk of the message. The offset must lie
// inside the message (offset 0 of the empty message aside): a version-2
// DATA without descriptor takes its message's length from the receiver,
// so nothing before this bounds its chunk index, and a chunk past the
// message's end would name a bit beyond the message's bitmap. A version-2
// DATA's offset is its chunk index times the MTU: it needs no division.
func (p *placer) chunkFits(h *DataHeader, n int) bool {
	if h.Offset >= h.MsgLen && (h.Offset != 0 || h.MsgLen != 0) {
		return false
	}
	return uint64(n) == min(h.MsgLen-h.Offset, uint64(p.mtu))
}

// stream returns the receive state of stream id, creating it; nil when the
// peer has opened maxStreams already.
func (p *placer) stream(id uint32) *rxStream {
	rs := p.lookup(id)
	if rs == nil {
		if len(p.streams) >= maxStreams {
			return nil
		}
		var sink Sink
		if p.bound != nil {
			sink = (*p.bound)[id]
		}
		rs = &rxStream{id: id, msgs: make(map[uint64]*rxMessage), sink: sink}
		p.streams[id] = rs
		p.last = rs
	}
	return rs
}

// lookup returns the receive state of stream id, or nil.
func (p *placer) lookup(id uint32) *rxStream {
	if p.last != nil && p.last.id == id {
		return p.last
	}
	rs := p.streams[id]
	if rs != nil {
		p.last = rs
	}
	return rs
}

// bind makes every chunk of stream go to sink instead of memory.
func (p *placer) bind(stream uint32, sink Sink) {
	if rs := p.stream(stream); rs != nil {
		rs.sink = sink
	}
}

// resume makes stream start at message sequence next (ResumeStream).
func (p *placer) resume(stream uint32, next uint64) error {
	rs := p.stream(stream)
	if rs == nil {
		return ErrQueueFull
	}
	if len(rs.msgs) > 0 || rs.next > next {
		return errors.New("metaroce: stream already receiving")
	}
	rs.next = next
	return nil
}

// forget drops the receive state of stream (ForgetRecvStream).
func (p *placer) forget(stream uint32) {
	if p.last != nil && p.last.id == stream {
		p.last = nil
	}
	delete(p.streams, stream)
}

// place writes a payload straight into its destination, whatever order it
// arrives in, and completes messages in order per stream. h must be a valid
// chunk (chunkIndex, chunkFits), idx its index, that its path accepted;
// port is the entropy it came with, where a refusal is answered.
func (p *placer) place(now time.Duration, h *DataHeader, idx int, payload []byte, port uint16) {
	rs, m := p.message(now, h, port)
	if m == nil {
		return
	}
	w, bit := idx/64, uint64(1)<<(idx%64)
	if m.got[w]&bit != 0 {
		p.stats.Duplicates++
		return
	}
	var dst []byte
	if rs.sink != nil {
		if code := p.h.sinkChunk(rs.sink, h, payload); code != 0 {
			p.fail(now, rs, h, port, m, code)
			return
		}
	} else if m.op == OpWrite {
		var code ErrorCode
		dst, code = p.mem.place(m.key, m.addr+h.Offset, len(payload))
		if code != 0 { // deregistered while the message was arriving
			p.fail(now, rs, h, port, m, code)
			return
		}
	} else {
		dst = m.buf[h.Offset : h.Offset+uint64(len(payload))]
	}
	copy(dst, payload) // (a sink already took it: dst is nil)
	p.stats.PayloadBytesPlaced += uint64(len(payload))
	m.got[w] |= bit
	m.gotChunks++
	if m.gotChunks == m.chunks && h.MsgSeq == rs.next {
		p.complete(now, rs)
	}
}

// announce records the message a version-2 descriptor-only DATA describes
// (PROTOCOL.md §12): checked and refused as its first chunk would be,
// nothing placed.
func (p *placer) announce(now time.Duration, h *DataHeader, port uint16) {
	p.message(now, h, port)
}

// completionPoint is the oldest message of stream not yet complete (0 for
// a stream never heard of): what a version-2 message sequence is unwrapped
// against.
func (p *placer) completionPoint(stream uint32) uint64 {
	if rs := p.lookup(stream); rs != nil {
		return rs.next
	}
	return 0
}

// known returns the message (stream, seq) the receiver holds, and whether
// it completed already (dup). A version-2 DATA without descriptor can be
// placed only if one of the two is true (PROTOCOL.md §12 "Orphans").
func (p *placer) known(stream uint32, seq uint64) (m *rxMessage, dup bool) {
	rs := p.lookup(stream)
	if rs == nil {
		return nil, false
	}
	if seq < rs.next {
		return nil, true
	}
	return rs.msg(seq), false
}

// message returns the message h belongs to, recording it (its destination
// checked once for the whole message) at its first packet. It returns nil
// when the packet goes no further: a late duplicate, a refusal, a header
// that disagrees with the message.
func (p *placer) message(now time.Duration, h *DataHeader, port uint16) (*rxStream, *rxMessage) {
	rs := p.stream(h.Stream)
	if rs == nil {
		p.stats.PlacementErrors++
		return nil, nil
	}
	if h.MsgSeq < rs.next {
		p.stats.Duplicates++ // a late copy of a completed message: its buffer is the application's again
		return nil, nil
	}
	if h.MsgSeq-rs.next >= p.maxAhead {
		p.refuse(now, h, port, ErrCodeTooFarAhead)
		return nil, nil
	}
	m := rs.msg(h.MsgSeq)
	if m == nil && rs.sink != nil {
		m = p.newSinkMessage(h)
		rs.msgs[h.MsgSeq] = m
	} else if m == nil {
		m = p.newRxMessage(h)
		rs.msgs[h.MsgSeq] = m
		if m.err != nil {
			p.refuse(now, h, port, errCode(m.err))
			// A refused message completes (with its error) like any other,
			// so it never stalls the messages behind it on the stream.
			p.complete(now, rs)
		}
	} else if m.len != h.MsgLen || m.op != h.Op || m.key != h.Key || m.addr != h.Addr {
		p.stats.Malformed++
		return nil, nil
	}
	if m.err != nil {
		return nil, nil
	}
	return rs, m
}

// fail refuses a chunk of a message already under way, which fails the
// whole message.
func (p *placer) fail(now time.Duration, rs *rxStream, h *DataHeader, port uint16, m *rxMessage, code ErrorCode) {
	m.err = code.Err()
	p.refuse(now, h, port, code)
	p.complete(now, rs)
}

func errCode(err error) ErrorCode {
	switch err {
	case ErrUnknownKey:
		return ErrCodeUnknownKey
	case ErrOutOfBounds:
		return ErrCodeOutOfBounds
	case ErrNoPostedBuffer:
		return ErrCodeNoBuffer
	case ErrBufferTooSmall:
		return ErrCodeBufferTooSmall
	case ErrNotRelayed:
		return ErrCodeNotRelayed
	}
	return ErrCodeTooFarAhead
}

// chunks is the number of chunks of a message of n bytes (a message of 0
// bytes has one, empty).
func (p *placer) chunks(n uint64) int {
	c := int((n + uint64(p.mtu) - 1) / uint64(p.mtu))
	if c == 0 {
		c = 1
	}
	return c
}

// newRxMessage starts tracking a message, checking its destination once for
// the whole message.
func (p *placer) newRxMessage(h *DataHeader) *rxMessage {
	n := p.chunks(h.MsgLen)
	m := &rxMessage{op: h.Op, len: h.MsgLen, key: h.Key, addr: h.Addr, chunks: n}
	switch h.Op {
	case OpWrite:
		if p.relayOnly {
			m.err = ErrNotRelayed
			return m
		}
		if _, code := p.mem.place(h.Key, h.Addr, int(min(h.MsgLen, 1<<62))); code != 0 {
			m.err = code.Err()
			return m
		}
	case OpSend:
		buf, ok := p.posted[h.Addr]
		switch {
		case !ok:
			m.err = ErrNoPostedBuffer
			return m
		case uint64(len(buf)) < h.MsgLen:
			m.err = ErrBufferTooSmall
			return m
		}
		delete(p.posted, h.Addr)
		m.buf = buf
	}
	m.got = make([]uint64, (n+63)/64)
	return m
}

// newSinkMessage tracks a message of a sink-bound stream: the sink, not
// memory, decides where its bytes go.
func (p *placer) newSinkMessage(h *DataHeader) *rxMessage {
	n := p.chunks(h.MsgLen)
	return &rxMessage{op: h.Op, len: h.MsgLen, key: h.Key, addr: h.Addr, chunks: n, got: make([]uint64, (n+63)/64)}
}

// refuse counts a refused packet and reports it.
func (p *placer) refuse(now time.Duration, h *DataHeader, port uint16, code ErrorCode) {
	p.stats.PlacementErrors++
	p.h.placementRefused(now, h, port, code)
}

// complete reports the stream's messages that are complete, in order, and
// marks the stream for the next ACK.
func (p *placer) complete(now time.Duration, rs *rxStream) {
	for {
		m := rs.msg(rs.next)
		if m == nil || (m.err == nil && m.gotChunks < m.chunks) {
			break
		}
		delete(rs.msgs, rs.next)
		rs.last = nil
		p.stats.MessagesReceived++
		p.h.messageComplete(now, rs.id, rs.next, m)
		rs.next++
		if !rs.dirty {
			rs.dirty = true
			p.dirty = append(p.dirty, rs.id)
		}
	}
}

// fillStreamAcks moves the completion points of streams that changed since
// the last ACK into a, as many as it has room for, newest first.
func (p *placer) fillStreamAcks(a *Ack) {
	for len(p.dirty) > 0 && a.NStreams < MaxAckStreams {
		id := p.dirty[len(p.dirty)-1]
		p.dirty = p.dirty[:len(p.dirty)-1]
		if rs := p.lookup(id); rs != nil {
			rs.dirty = false
			a.Streams[a.NStreams] = StreamAck{Stream: id, Completed: rs.next}
			a.NStreams++
		}
	}
}
