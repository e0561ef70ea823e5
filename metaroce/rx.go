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
	// While the largest is a SACK window or more past the cumulative
	// point, an ACK is followed by one of the window at the cumulative
	// point (recvWindow.fillAck, PROTOCOL.md §3 "Loss") when the point
	// moved since the last such ACK, or atCumEvery ACKs went without one:
	// atCumOwed says it is due, lastAtCum and sinceAtCum (ACKs since,
	// 0: none sent yet) when the last went.
	atCumOwed  bool
	lastAtCum  uint64
	sinceAtCum int
}

// PostRecv posts buf to receive the SEND whose tag is tag.
func (c *Conn) PostRecv(tag uint64, buf []byte) error {
	return c.placer.post(tag, buf)
}

// onData processes one version-1 DATA packet: path bookkeeping, then
// placement.
func (c *Conn) onData(now time.Duration, h *DataHeader, payload []byte, m RecvMeta) {
	path := int(h.Path)
	idx, ok := c.placer.chunkIndex(h, len(payload))
	if path >= len(c.rx) || !ok {
		c.Stats.Malformed++
		return
	}
	c.dataArrived(now, h, idx, payload, m, DataHeaderLen+len(payload), false)
}

// onDataV2 processes one version-2 DATA packet (PROTOCOL.md §12): it
// unwraps the sequences against what the path and the stream expect,
// completes the header from the descriptor the packet carries or the one
// the receiver holds for its message, drops an orphan before its path
// records it, and goes on as for version 1.
func (c *Conn) onDataV2(now time.Duration, d *DataHeaderV2, payload []byte, m RecvMeta) {
	path := int(d.Path)
	if path >= len(c.rx) {
		c.Stats.Malformed++
		return
	}
	seq := Unwrap32(c.rx[path].win.expected(), d.Seq)
	if uint64(d.FloorGap) > seq {
		c.Stats.Malformed++
		return
	}
	// Field by field: a composite literal is built on the stack and
	// copied, the header's size again per datagram.
	h := &c.rxHdr
	h.Flags, h.Op, h.Conn, h.Path, h.Stream = d.Flags&FlagRetransmit, d.Op, c.id, d.Path, d.Stream
	h.Seq, h.FloorGap, h.Offset = seq, d.FloorGap, uint64(d.Chunk)*uint64(c.mtu)
	h.Key, h.Addr, h.MsgLen, h.Timestamp = 0, 0, 0, 0
	h.MsgSeq = Unwrap32(c.placer.completionPoint(d.Stream), d.MsgSeq)
	descOnly := d.DescriptorOnly(len(payload))
	if d.Desc {
		h.Key, h.Addr, h.MsgLen = d.Key, d.Addr, d.MsgLen
		if !descOnly && !c.placer.chunkFits(h, len(payload)) {
			c.Stats.Malformed++
			return
		}
	} else {
		switch rm, dup := c.placer.known(h.Stream, h.MsgSeq); {
		case dup:
			// A late copy of a completed message: recorded on its path
			// and dropped by placement, as in version 1.
		case rm == nil:
			c.Stats.Orphans++ // unrecorded: the sender sees it lost and resends it
			return
		default:
			if rm.op != h.Op {
				c.Stats.Malformed++
				return
			}
			h.Key, h.Addr, h.MsgLen = rm.key, rm.addr, rm.len
			if !c.placer.chunkFits(h, len(payload)) {
				c.Stats.Malformed++
				return
			}
		}
	}
	c.dataArrived(now, h, int(d.Chunk), payload, m, d.Len()+len(payload), descOnly)
}

// dataArrived does the bookkeeping of a DATA packet whose header is valid:
// the connection established if it was waiting for its ACCEPT, the
// receiver loop's demand, the path's window and owed acknowledgement, then
// placement (or, for a descriptor-only DATA, the message recorded).
func (c *Conn) dataArrived(now time.Duration, h *DataHeader, idx int, payload []byte, m RecvMeta, wireLen int, descOnly bool) {
	path := int(h.Path)
	if c.state == stateConnecting {
		// Data before our ACCEPT arrived: the ACCEPT was lost or reordered.
		c.state = stateEstablished
		c.needInit = false
		c.ep.emit(Event{Kind: EventConnected, Conn: c, At: now})
	}
	c.Stats.DataReceived++
	if c.ep.share != nil && !c.noHint {
		// The receiver loop measures each sender's demand (max-min shares).
		c.ep.share.Account(now, c.id, wireLen, m.CE)
	}
	r := &c.rx[path]
	r.peerPort = m.Entropy
	if c.mode == ModeRoCEv2 {
		c.onDataGBN(now, r, h, idx, payload, m)
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
	if descOnly {
		c.placer.announce(now, h, r.peerPort)
		return
	}
	c.placer.place(now, h, idx, payload, r.peerPort)
}

// atCumEvery: while a path's largest stays a SACK window or more past its
// cumulative point, at least every atCumEvery-th ACK is followed by one
// of the window at the cumulative point, in case one was lost; otherwise
// one follows only when the point moved, since its report changes only
// then (or when a resent packet fills a hole in it).
const atCumEvery = 8

// owe records one more packet to acknowledge on r.
func (c *Conn) owe(now time.Duration, r *rxPath) {
	r.pending++
	c.acksOwed = true
	if r.pending >= c.ep.cfg.AckEvery {
		r.immediate = true
	}
	if r.ackDeadline < 0 {
		r.ackDeadline = now + c.ep.cfg.MaxAckDelay
	}
}

// placementRefused tells the application and the sender of a refused
// packet (placeHandler).
func (c *Conn) placementRefused(now time.Duration, h *DataHeader, port uint16, code ErrorCode) {
	c.ep.emit(Event{Kind: EventPlacementError, Conn: c, Stream: h.Stream, Seq: h.MsgSeq, Op: h.Op, Key: h.Key, Addr: h.Addr, Len: h.MsgLen, Err: code.Err(), At: now})
	if len(c.errsOut) < maxControl {
		c.errsOut = append(c.errsOut, errOut{e: MessageError{Conn: c.id, Stream: h.Stream, MsgSeq: h.MsgSeq, Code: code}, port: port})
	}
}

// messageComplete tells the application of a received message
// (placeHandler).
func (c *Conn) messageComplete(now time.Duration, stream uint32, seq uint64, m *rxMessage) {
	c.ep.emit(Event{Kind: EventRecvComplete, Conn: c, Stream: stream, Seq: seq, Op: m.op, Key: m.key, Addr: m.addr, Len: m.len, Err: m.err, At: now})
}

// sinkChunk hands a chunk to the sink its stream is bound to (placeHandler).
// The buffer of the datagram being received is offered to a BufferSink,
// once.
func (c *Conn) sinkChunk(s Sink, h *DataHeader, payload []byte) ErrorCode {
	if e := c.ep; e.rxBuf != nil {
		if bs, ok := s.(BufferSink); ok {
			code, kept := bs.ChunkIn(c, h, payload, e.rxBuf)
			if kept {
				e.rxBuf, e.rxKept = nil, true
			}
			return code
		}
	}
	return s.Chunk(c, h, payload)
}

// pollAck sends the acknowledgement a path owes, if it is due. Unless
// some path may owe one (acksOwed), it looks at none: a connection that
// only sends asked every path for each datagram it polled.
func (c *Conn) pollAck(now time.Duration, buf []byte, out *Transmit) bool {
	if !c.acksOwed {
		return false
	}
	owed := false
	for i := range c.rx {
		r := &c.rx[i]
		atCum := r.atCumOwed
		if r.pending == 0 && !r.nak && !atCum {
			continue
		}
		owed = true
		if !atCum && !r.immediate && !r.nak && (r.ackDeadline < 0 || now < r.ackDeadline) {
			continue
		}
		var a Ack
		a.Conn = c.id
		a.Path = uint16(i)
		r.atCumOwed = false
		far := r.win.fillAck(&a, c.mode != ModeRoCEv2, atCum)
		switch {
		case atCum:
			r.lastAtCum, r.sinceAtCum = a.Cum, 1
		case far:
			r.atCumOwed = r.sinceAtCum == 0 || a.Cum != r.lastAtCum || r.sinceAtCum >= atCumEvery
			r.sinceAtCum++
		}
		a.CECount, a.RxCount = r.ce, r.count
		a.RateHintBps = c.ep.rateHintBps(now, c)
		c.lastHint = a.RateHintBps
		if c.mode == ModeRoCEv2 && r.nak {
			a.Flags = FlagAckNak
			r.nak = false
		}
		c.placer.fillStreamAcks(&a)
		p, err := AppendAck(buf[:0], &a)
		if err != nil {
			return false
		}
		r.pending = 0
		r.immediate = false
		r.ackDeadline = -1
		c.Stats.AcksSent++
		*out = Transmit{Peer: c.peer, Conn: c, Path: i, Entropy: r.peerPort, Reply: true, Len: len(p)}
		return true
	}
	c.acksOwed = owed
	return false
}
