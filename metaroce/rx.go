package metaroce

import "time"

// rxPath is the receiver's side of one path: which of its sequence numbers
// arrived (the recvWindow), and the acknowledgement it owes.
type rxPath struct {
	win         recvWindow
	ce, count   uint64 // DATA packets received CE-marked, and in all
	peerPort    uint16 // the source port of the path's DATA: where ACKs go
	pending     int    // packets not yet acknowledged
	ackDeadline time.Duration
	immediate   bool
	nak         bool // RoCEv2: a NAK is owed
	nakSent     bool // RoCEv2: a NAK was sent for the current gap
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
}

// maxStreams bounds the receive streams a peer may open on one connection.
const maxStreams = 1 << 16

// PostRecv posts buf to receive the SEND whose tag is tag.
func (c *Conn) PostRecv(tag uint64, buf []byte) error {
	if _, ok := c.posted[tag]; ok {
		return ErrDuplicateTag
	}
	c.posted[tag] = buf
	return nil
}

// validChunk checks that a DATA packet's offset and length are exactly one of
// the message's MTU-sized chunks.
func (c *Conn) validChunk(h *DataHeader, n int) bool {
	mtu := uint64(c.mtu)
	if h.Offset%mtu != 0 {
		return false
	}
	want := h.MsgLen - h.Offset
	if want > mtu {
		want = mtu
	}
	return uint64(n) == want
}

// onData processes one DATA packet: path bookkeeping, then placement.
func (c *Conn) onData(now time.Duration, h *DataHeader, payload []byte, m RecvMeta) {
	path := int(h.Path)
	if path >= len(c.rx) || !c.validChunk(h, len(payload)) {
		c.Stats.Malformed++
		return
	}
	if c.state == stateConnecting {
		// Data before our ACCEPT arrived: the ACCEPT was lost or reordered.
		c.state = stateEstablished
		c.needInit = false
		c.ep.emit(Event{Kind: EventConnected, Conn: c, At: now})
	}
	c.Stats.DataReceived++
	if c.ep.share != nil && !c.noHint {
		// The receiver loop measures each sender's demand (max-min shares).
		c.ep.share.Account(now, c.id, DataHeaderLen+len(payload), m.CE)
	}
	r := &c.rx[path]
	r.peerPort = m.Entropy
	if c.mode == ModeRoCEv2 {
		c.onDataGBN(now, r, h, payload, m)
		return
	}
	switch r.win.receive(h.Seq, h.Seq-uint64(h.FloorGap), h.Timestamp, uint64(c.ep.cfg.MaxPathInflight)) {
	case rxDuplicate:
		c.Stats.Duplicates++
		r.immediate = true
		c.owe(now, r)
		return
	case rxTooFar:
		c.Stats.WindowViolations++
		return
	case rxGap:
		r.immediate = true // a gap: tell the sender at once
	}
	r.count++
	if m.CE {
		r.ce++
		r.immediate = true
	}
	c.owe(now, r)
	c.place(now, h, payload, r.peerPort)
}

// owe records one more packet to acknowledge on r.
func (c *Conn) owe(now time.Duration, r *rxPath) {
	r.pending++
	if r.pending >= c.ep.cfg.AckEvery {
		r.immediate = true
	}
	if r.ackDeadline < 0 {
		r.ackDeadline = now + c.ep.cfg.MaxAckDelay
	}
}

// place writes a payload straight into its destination, whatever order it
// arrives in, and completes messages in order per stream.
func (c *Conn) place(now time.Duration, h *DataHeader, payload []byte, port uint16) {
	rs := c.rxStream(h.Stream)
	if rs == nil {
		c.Stats.PlacementErrors++
		return
	}
	if h.MsgSeq < rs.next {
		c.Stats.Duplicates++ // a late copy of a completed message: its buffer is the application's again
		return
	}
	if h.MsgSeq-rs.next >= uint64(c.ep.cfg.MaxMessagesAhead) {
		c.refuse(now, h, port, nil, ErrCodeTooFarAhead)
		return
	}
	m := rs.msgs[h.MsgSeq]
	if m == nil && rs.sink != nil {
		m = c.newSinkMessage(h)
		rs.msgs[h.MsgSeq] = m
	} else if m == nil {
		m = c.newRxMessage(h)
		rs.msgs[h.MsgSeq] = m
		if m.err != nil {
			c.refuse(now, h, port, m, errCode(m.err))
			// A refused message completes (with its error) like any other,
			// so it never stalls the messages behind it on the stream.
			c.completeRx(now, rs)
		}
	} else if m.len != h.MsgLen || m.op != h.Op || m.key != h.Key || m.addr != h.Addr {
		c.Stats.Malformed++
		return
	}
	if m.err != nil {
		return
	}
	idx := int(h.Offset / uint64(c.mtu))
	w, bit := idx/64, uint64(1)<<(idx%64)
	if m.got[w]&bit != 0 {
		c.Stats.Duplicates++
		return
	}
	var dst []byte
	if rs.sink != nil {
		if code := rs.sink.Chunk(c, h, payload); code != 0 {
			m.err = code.Err()
			c.refuse(now, h, port, m, code)
			c.completeRx(now, rs)
			return
		}
	} else if m.op == OpWrite {
		var code ErrorCode
		dst, code = c.ep.mem.place(m.key, m.addr+h.Offset, len(payload))
		if code != 0 { // deregistered while the message was arriving
			m.err = code.Err()
			c.refuse(now, h, port, m, code)
			c.completeRx(now, rs)
			return
		}
	} else {
		dst = m.buf[h.Offset : h.Offset+uint64(len(payload))]
	}
	copy(dst, payload) // (a sink already took it: dst is nil)
	c.Stats.PayloadBytesPlaced += uint64(len(payload))
	m.got[w] |= bit
	m.gotChunks++
	if m.gotChunks == m.chunks && h.MsgSeq == rs.next {
		c.completeRx(now, rs)
	}
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
	}
	return ErrCodeTooFarAhead
}

// newRxMessage starts tracking a message, checking its destination once for
// the whole message.
func (c *Conn) newRxMessage(h *DataHeader) *rxMessage {
	n := int((h.MsgLen + uint64(c.mtu) - 1) / uint64(c.mtu))
	if n == 0 {
		n = 1
	}
	m := &rxMessage{op: h.Op, len: h.MsgLen, key: h.Key, addr: h.Addr, chunks: n}
	switch h.Op {
	case OpWrite:
		if _, code := c.ep.mem.place(h.Key, h.Addr, int(min(h.MsgLen, 1<<62))); code != 0 {
			m.err = code.Err()
			return m
		}
	case OpSend:
		buf, ok := c.posted[h.Addr]
		switch {
		case !ok:
			m.err = ErrNoPostedBuffer
			return m
		case uint64(len(buf)) < h.MsgLen:
			m.err = ErrBufferTooSmall
			return m
		}
		delete(c.posted, h.Addr)
		m.buf = buf
	}
	m.got = make([]uint64, (n+63)/64)
	return m
}

// refuse counts a refused packet, tells the application and the sender.
func (c *Conn) refuse(now time.Duration, h *DataHeader, port uint16, m *rxMessage, code ErrorCode) {
	c.Stats.PlacementErrors++
	c.ep.emit(Event{Kind: EventPlacementError, Conn: c, Stream: h.Stream, Seq: h.MsgSeq, Op: h.Op, Key: h.Key, Addr: h.Addr, Len: h.MsgLen, Err: code.Err(), At: now})
	if len(c.errsOut) < maxControl {
		c.errsOut = append(c.errsOut, errOut{e: MessageError{Conn: c.id, Stream: h.Stream, MsgSeq: h.MsgSeq, Code: code}, port: port})
	}
}

// completeRx reports the stream's messages that are complete, in order.
func (c *Conn) completeRx(now time.Duration, rs *rxStream) {
	for {
		m := rs.msgs[rs.next]
		if m == nil || (m.err == nil && m.gotChunks < m.chunks) {
			break
		}
		delete(rs.msgs, rs.next)
		c.Stats.MessagesReceived++
		c.ep.emit(Event{Kind: EventRecvComplete, Conn: c, Stream: rs.id, Seq: rs.next, Op: m.op, Key: m.key, Addr: m.addr, Len: m.len, Err: m.err, At: now})
		rs.next++
		if !rs.dirty {
			rs.dirty = true
			c.dirty = append(c.dirty, rs.id)
		}
	}
}

// pollAck sends the acknowledgement a path owes, if it is due.
func (c *Conn) pollAck(now time.Duration, buf []byte) (Transmit, bool) {
	for i := range c.rx {
		r := &c.rx[i]
		if r.pending == 0 && !r.nak {
			continue
		}
		if !r.immediate && !r.nak && (r.ackDeadline < 0 || now < r.ackDeadline) {
			continue
		}
		var a Ack
		a.Conn = c.id
		a.Path = uint16(i)
		r.win.fillAck(&a, c.mode != ModeRoCEv2)
		a.CECount, a.RxCount = r.ce, r.count
		a.RateHintBps = c.ep.rateHintBps(now, c)
		c.lastHint = a.RateHintBps
		if c.mode == ModeRoCEv2 && r.nak {
			a.Flags = FlagAckNak
			r.nak = false
		}
		for len(c.dirty) > 0 && a.NStreams < MaxAckStreams {
			id := c.dirty[len(c.dirty)-1]
			c.dirty = c.dirty[:len(c.dirty)-1]
			if rs := c.rstreams[id]; rs != nil {
				rs.dirty = false
				a.Streams[a.NStreams] = StreamAck{Stream: id, Completed: rs.next}
				a.NStreams++
			}
		}
		p, err := AppendAck(buf[:0], &a)
		if err != nil {
			return Transmit{}, false
		}
		r.pending = 0
		r.immediate = false
		r.ackDeadline = -1
		c.Stats.AcksSent++
		return Transmit{Peer: c.peer, Conn: c, Path: i, Entropy: r.peerPort, Reply: true, Len: len(p)}, true
	}
	return Transmit{}, false
}
