package metaroce

import (
	"errors"
	"sort"
)

// This file holds what a gateway needs to relay traffic cut-through, packet
// by packet, without ever holding a whole message:
//
//   - a stream Sink on the receiving connection gets every newly arrived
//     chunk of the stream instead of having it placed in memory;
//   - a RelayMessage on the sending connection is a message whose length is
//     known up front but whose chunks are supplied one by one as they arrive,
//     in any order, and sent as soon as they are supplied;
//   - ResumeStream lets a stream start at a message sequence other than 0,
//     so a flow that moves to another gateway keeps its end-to-end numbering.

// Sink receives the chunks of a stream bound with BindSink. Chunk is called
// once for every chunk that arrives for the first time, in arrival order;
// h and payload are only valid during the call. Returning an error refuses the
// chunk: nothing is recorded and the sender's message fails with the code.
type Sink interface {
	Chunk(c *Conn, h *DataHeader, payload []byte) ErrorCode
}

// A BufferSink is a Sink that may keep the buffer a chunk arrived in
// instead of copying the payload out of it: a relay hands the chunk to
// the next hop where it lies. The receive path offers the buffer when it
// can give it up (Endpoint.ReceiveIn); otherwise Chunk is called.
type BufferSink interface {
	Sink
	// ChunkIn is Chunk with buf, the buffer payload lies in. If it
	// reports kept, buf is the sink's from then on (ReceiveIn reports it
	// to its caller, who uses another buffer).
	ChunkIn(c *Conn, h *DataHeader, payload, buf []byte) (code ErrorCode, kept bool)
}

// BindSink makes every chunk of stream go to sink instead of memory. Memory
// keys and posted buffers are not consulted for that stream: the sink
// decides. Completion events are reported as for any stream.
func (c *Conn) BindSink(stream uint32, sink Sink) {
	c.placer.bind(stream, sink)
}

// ResumeStream makes receive stream start at message sequence next, as if the
// messages before it had completed. It only works on a stream that has seen
// no data yet.
func (c *Conn) ResumeStream(stream uint32, next uint64) error {
	return c.placer.resume(stream, next)
}

// BindSinkAll binds stream on every connection, present and future, to
// sink: the stream exists before the first packet of a new connection can
// arrive (a control stream, say).
func (e *Endpoint) BindSinkAll(stream uint32, sink Sink) {
	if e.sinks == nil {
		e.sinks = make(map[uint32]Sink)
	}
	e.sinks[stream] = sink
	for _, c := range e.list {
		c.BindSink(stream, sink)
	}
}

// RelayMessage is a message sent as its chunks become available.
type RelayMessage struct {
	c *Conn
	m *txMessage
}

// Errors of the relay API.
var (
	ErrSeqUsed    = errors.New("metaroce: message sequence already used on the stream")
	ErrBadChunk   = errors.New("metaroce: chunk offset or length does not fit the message")
	ErrChunkTwice = errors.New("metaroce: chunk supplied twice")
)

// WriteRelay starts a WRITE (op OpWrite) or SEND (OpSend) of length bytes as
// message seq of stream. Messages of a stream may be started in any order,
// but each sequence only once. release, if not nil, is called with each
// supplied chunk buffer once the peer has acknowledged it (or the message
// failed), so the caller can recycle it.
func (c *Conn) WriteRelay(stream uint32, seq uint64, op Op, key uint32, addr, length uint64, release func([]byte)) (*RelayMessage, error) {
	if c.state == stateClosing || c.state == stateClosed {
		return nil, ErrClosed
	}
	if c.queued >= c.ep.cfg.MaxQueuedMessages {
		return nil, ErrQueueFull
	}
	if length > 1<<40 {
		return nil, ErrMessageTooLarge
	}
	s := c.stream(stream)
	i := sort.Search(len(s.msgs)-s.head, func(i int) bool { return s.msgs[s.head+i].seq >= seq }) + s.head
	if i < len(s.msgs) && s.msgs[i].seq == seq {
		return nil, ErrSeqUsed
	}
	m := c.newTxMessage(s, seq, op, key, addr, length)
	m.relay = true
	m.release = release
	// Room for every chunk held at once up front, up to a bound: grown
	// by appends from empty, the slice was reallocated a dozen times per
	// message on the owner goroutine.
	m.bufs.held = make([]heldChunk, 0, min(m.nChunks, maxHeldPresize))
	s.msgs = append(s.msgs, nil)
	copy(s.msgs[i+1:], s.msgs[i:])
	s.msgs[i] = m
	if seq >= s.nextSeq {
		s.nextSeq = seq + 1
	}
	c.queued++
	c.Stats.MessagesSent++
	return &RelayMessage{c: c, m: m}, nil
}

// Supply hands over the chunk at offset (a multiple of the connection's MTU;
// exactly MTU bytes except for the message's last chunk). The buffer belongs
// to the connection until release is called with it.
func (r *RelayMessage) Supply(offset uint64, chunk []byte) error {
	return r.SupplyIn(offset, chunk, nil)
}

// SupplyIn is Supply for a chunk that lies in buf, a larger buffer (the
// receive buffer a BufferSink kept): buf belongs to the connection until
// release is called with it, and only chunk is sent.
func (r *RelayMessage) SupplyIn(offset uint64, chunk, buf []byte) error {
	m, c := r.m, r.c
	mtu := uint64(c.mtu)
	if offset%mtu != 0 || offset > m.length {
		return ErrBadChunk
	}
	want := m.length - offset
	if want > mtu {
		want = mtu
	}
	if uint64(len(chunk)) != want || (m.length > 0 && offset == m.length) {
		return ErrBadChunk
	}
	idx := int(offset / mtu)
	if _, ok := m.bufs.get(idx); ok || m.acked[idx/64]&(1<<(idx%64)) != 0 {
		return ErrChunkTwice
	}
	if m.err != nil {
		return m.err
	}
	m.bufs.put(idx, chunk, buf)
	m.supplied = append(m.supplied, idx)
	m.stream.pushSendable(m)
	c.activate(m.stream)
	c.touch()
	return nil
}

// Fail abandons a relayed message (its source went away): it completes with
// err and its buffers are released.
func (r *RelayMessage) Fail(err error) {
	if r.m.err == nil && !r.m.done() {
		r.m.err = err
		r.c.completeStream(0, r.m.stream)
		r.c.touch()
	}
}

// Seq returns the message's sequence number.
func (r *RelayMessage) Seq() uint64 { return r.m.seq }

// releaseAll gives every buffer a failed relayed message still holds back.
func (m *txMessage) releaseAll(e *Endpoint) {
	m.bufs.all(func(b []byte) {
		e.releaseBuf(m, b)
	})
	m.supplied, m.supHead = nil, 0
}

// ForgetRecvStream drops the receive state of stream (its sink binding, its
// completion point) once the flow it carried has ended, so that a
// long-lived connection carrying many flows over time keeps state only for
// the live ones. A packet arriving later for the stream starts it afresh,
// unbound.
func (c *Conn) ForgetRecvStream(stream uint32) {
	c.placer.forget(stream)
}

// ForgetSendStream drops the send state of stream if none of its messages
// is still in flight (fail relayed ones first with RelayMessage.Fail). It
// reports whether the state was dropped.
func (c *Conn) ForgetSendStream(stream uint32) bool {
	s := c.streams[stream]
	if s == nil {
		return true
	}
	if s.head < len(s.msgs) {
		return false
	}
	// A stream still in the round robin holds no ready message (every
	// message is complete); peekChunk drops it from c.active lazily.
	delete(c.streams, stream)
	return true
}
