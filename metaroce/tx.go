package metaroce

import (
	"math/bits"
	"time"

	"github.com/mrgw/mrgw/cc"
	"github.com/mrgw/mrgw/pathmgr"
)

// txMessage is a message being sent. Its bytes belong to the application
// until the message completes.
type txMessage struct {
	stream      *txStream
	seq         uint64
	op          Op
	key         uint32
	addr        uint64
	data        []byte
	length      uint64
	nChunks     int
	nextChunk   int      // first chunk never sent (whole messages)
	acked       []uint64 // bitmap of acknowledged chunks
	ackedChunks int
	err         error
	inSendable  bool // queued in its stream's sendable list

	// Version 2 (PROTOCOL.md §12 "The descriptor rule"): descAcked once a
	// DATA that carried the descriptor was acknowledged; descPaths, the
	// paths with such a DATA sent and not declared lost.
	descAcked bool
	descPaths []uint64

	// Relayed messages (WriteRelay) get their chunks one by one through
	// Supply: bufs holds each supplied chunk until it is acknowledged,
	// supplied lists chunks ready to send, in the order they came.
	relay    bool
	bufs     relayBufs
	supplied []int
	supHead  int
	release  func([]byte)

	// lentOut counts the payloads of m lent to the driver and not yet
	// done with (Endpoint.LendPayloads); while it is not zero, m's
	// released buffers wait in heldBufs and its completion is held.
	lentOut  int
	heldBufs [][]byte
}

func (m *txMessage) done() bool { return m.ackedChunks == m.nChunks }

// needsDesc reports whether a version-2 DATA of m sent on path must carry
// the descriptor: the receiver may not have it yet, and no DATA that
// carries it is on its way on that path, ahead of this one.
func (m *txMessage) needsDesc(path int) bool {
	return !m.descAcked && m.descPaths[path/64]&(1<<(path%64)) == 0
}

func (m *txMessage) setDescPath(path int)   { m.descPaths[path/64] |= 1 << (path % 64) }
func (m *txMessage) clearDescPath(path int) { m.descPaths[path/64] &^= 1 << (path % 64) }

// hasReady reports whether the message has a chunk ready that was never sent.
func (m *txMessage) hasReady() bool {
	if m.err != nil {
		return false
	}
	if m.relay {
		return m.supHead < len(m.supplied)
	}
	return m.nextChunk < m.nChunks
}

// peekReady returns the next chunk ready to send (hasReady must be true).
func (m *txMessage) peekReady() int {
	if m.relay {
		return m.supplied[m.supHead]
	}
	return m.nextChunk
}

// consumeReady marks the chunk peekReady returned as sent.
func (m *txMessage) consumeReady() {
	if m.relay {
		m.supHead++
		if m.supHead == len(m.supplied) {
			m.supplied, m.supHead = m.supplied[:0], 0
		}
		return
	}
	m.nextChunk++
}

// chunk returns the payload of chunk i.
func (m *txMessage) chunk(i, mtu int) []byte {
	if m.relay {
		b, _ := m.bufs.get(i)
		return b
	}
	lo := i * mtu
	hi := lo + mtu
	if hi > len(m.data) {
		hi = len(m.data)
	}
	return m.data[lo:hi]
}

type txStream struct {
	id      uint32
	msgs    []*txMessage // not yet completed, in sequence order
	head    int
	nextSeq uint64
	active  bool
	// sendable lists messages that have chunks ready to send, oldest first.
	sendable []*txMessage
	sHead    int
	// weight is how many chunks the stream may send per round of the
	// round robin over streams; credits is what is left of this round.
	weight, credits int
}

func (s *txStream) pushSendable(m *txMessage) {
	if m.inSendable {
		return
	}
	m.inSendable = true
	if s.sHead > 0 && s.sHead*2 >= len(s.sendable) {
		n := copy(s.sendable, s.sendable[s.sHead:])
		clear(s.sendable[n:])
		s.sendable = s.sendable[:n]
		s.sHead = 0
	}
	s.sendable = append(s.sendable, m)
}

type chunkRef struct {
	msg *txMessage
	idx int
}

// Write queues a WRITE of data to (key, addr) at the peer on stream. The
// data must stay untouched until EventSendComplete for the returned sequence.
func (c *Conn) Write(now time.Duration, stream uint32, key uint32, addr uint64, data []byte) (uint64, error) {
	return c.enqueue(stream, OpWrite, key, addr, data)
}

// Send queues a SEND of data on stream, to land in the receive buffer the
// peer posted with tag.
func (c *Conn) Send(now time.Duration, stream uint32, tag uint64, data []byte) (uint64, error) {
	return c.enqueue(stream, OpSend, 0, tag, data)
}

func (c *Conn) enqueue(stream uint32, op Op, key uint32, addr uint64, data []byte) (uint64, error) {
	if c.state == stateClosing || c.state == stateClosed {
		return 0, ErrClosed
	}
	if c.queued >= c.ep.cfg.MaxQueuedMessages {
		return 0, ErrQueueFull
	}
	if uint64(len(data)) > 1<<40 {
		return 0, ErrMessageTooLarge
	}
	s := c.stream(stream)
	m := c.newTxMessage(s, s.nextSeq, op, key, addr, uint64(len(data)))
	m.data = data
	s.nextSeq++
	s.msgs = append(s.msgs, m)
	c.queued++
	c.Stats.MessagesSent++
	s.pushSendable(m)
	c.activate(s)
	c.touch()
	return m.seq, nil
}

// stream returns the send state of stream id, creating it.
func (c *Conn) stream(id uint32) *txStream {
	s := c.streams[id]
	if s == nil {
		s = &txStream{id: id, weight: 1, credits: 1}
		c.streams[id] = s
	}
	return s
}

func (c *Conn) newTxMessage(s *txStream, seq uint64, op Op, key uint32, addr, length uint64) *txMessage {
	n := int((length + uint64(c.mtu) - 1) / uint64(c.mtu))
	if n == 0 {
		n = 1
	}
	// One allocation for the acked chunks and the paths with a descriptor
	// in flight (version 2).
	aw := (n + 63) / 64
	words := make([]uint64, aw+(len(c.tx)+63)/64)
	return &txMessage{stream: s, seq: seq, op: op, key: key, addr: addr, length: length, nChunks: n,
		acked: words[:aw:aw], descPaths: words[aw:]}
}

// activate puts a stream with something to send into the round robin.
func (c *Conn) activate(s *txStream) {
	if !s.active {
		s.active = true
		c.active = append(c.active, s)
	}
	c.cwndLimit = false
}

// SetStreamWeight sets how many packets stream may send per round of the
// round robin over the connection's streams (default 1): a stream of
// weight 3 gets three times the share of a stream of weight 1 when both
// have data to send.
func (c *Conn) SetStreamWeight(stream uint32, weight int) {
	if weight < 1 {
		weight = 1
	}
	s := c.stream(stream)
	s.weight = weight
	if s.credits > weight {
		s.credits = weight
	}
}

func (c *Conn) hasDataToSend() bool {
	return len(c.active) > 0 || c.retxHead < len(c.retx) || c.gbnPending()
}

func (c *Conn) gbnPending() bool {
	return c.mode == ModeRoCEv2 && c.tx[0].gbnResend < c.tx[0].next
}

// window is the room a path may use: the controller's window, unless the
// path's sequence space is full or its group has not validated a full
// DATA datagram (path MTU discovery, pmtu_conn.go).
func (c *Conn) window(path int) int {
	if c.tx[path].span() >= uint64(c.ep.cfg.MaxPathInflight) || c.pmtu != nil && c.pmtuBlocks(path) {
		return 0
	}
	return c.ctl.Window(path)
}

// peekChunk returns the next chunk to send: retransmissions first, then new
// chunks round-robin over the streams.
func (c *Conn) peekChunk() (chunkRef, bool) {
	for c.retxHead < len(c.retx) {
		r := c.retx[c.retxHead]
		if r.msg.err != nil || r.msg.acked[r.idx/64]&(1<<(r.idx%64)) != 0 {
			c.retx[c.retxHead] = chunkRef{}
			c.retxHead++
			continue
		}
		return r, true
	}
	if c.retxHead > 0 && c.retxHead == len(c.retx) {
		c.retx = c.retx[:0]
		c.retxCause = c.retxCause[:0]
		c.retxHead = 0
	}
	blocked := 0
	for len(c.active) > 0 && blocked < len(c.active) {
		if c.activeCur >= len(c.active) {
			c.activeCur = 0
		}
		s := c.active[c.activeCur]
		for s.sHead < len(s.sendable) && !s.sendable[s.sHead].hasReady() {
			s.sendable[s.sHead].inSendable = false
			s.sendable[s.sHead] = nil
			s.sHead++
		}
		if s.sHead >= len(s.sendable) {
			s.sendable, s.sHead = s.sendable[:0], 0
			s.active = false
			s.credits = s.weight
			c.active = append(c.active[:c.activeCur], c.active[c.activeCur+1:]...)
			continue
		}
		m := s.sendable[s.sHead]
		// Keep the receiver's message window: never send a message too far
		// beyond the oldest incomplete one of its stream.
		if m.seq-s.msgs[s.head].seq >= uint64(c.ep.cfg.MaxMessagesAhead) {
			blocked++
			c.activeCur++
			continue
		}
		return chunkRef{msg: m, idx: m.peekReady()}, true
	}
	return chunkRef{}, false
}

// consumed records that a new chunk of ref's stream was sent, and moves the
// round robin on when the stream has used its weight for this round.
func (c *Conn) consumed(ref chunkRef) {
	ref.msg.consumeReady()
	s := ref.msg.stream
	s.credits--
	if s.credits <= 0 {
		s.credits = s.weight
		c.activeCur++
	}
}

func (c *Conn) pollData(now time.Duration, buf []byte, out *Transmit) bool {
	rate := float64(c.ctl.PacingRate())
	if c.paceHeld(now, rate) {
		c.paceWait = true
		return false
	}
	if c.mode == ModeRoCEv2 && c.gbnPending() {
		return c.gbnResend(now, buf, rate, out)
	}
	ref, ok := c.peekChunk()
	if !ok {
		c.paceWait = false // idle: what follows is a new start, not a catch-up
		return false
	}
	payload := ref.msg.chunk(ref.idx, c.mtu)
	size := DataHeaderLen + len(payload)
	if c.wire == Version2 {
		size = DataHeaderLenV2 + len(payload)
	}
	path := -1
	if c.descNext.ref == ref && ref.msg != nil && c.paths.Paths[c.descNext.path].State.Usable() {
		// The chunk whose descriptor just went alone follows it on its path.
		path = c.descNext.path
	} else if q := c.floorPath(); q >= 0 {
		path = q
	} else if c.weightFn != nil {
		path = c.paths.PickWeighted(size, c.windowFn, c.weightFn)
	} else {
		path = c.paths.Pick(size, c.windowFn)
	}
	c.descNext = descNext{}
	if path < 0 {
		c.cwndLimit = true
		c.paceWait = false // window-limited, not pacing-limited
		return false
	}
	var desc uint8
	if c.wire == Version2 && ref.msg.needsDesc(path) {
		desc = recDesc
		if len(payload)+DataDescLen > c.mtu {
			if q := c.descPathWithRoom(ref.msg, size); q >= 0 {
				path, desc = q, 0
			} else {
				// No room beside a full chunk: the descriptor goes
				// alone, ahead of it on the same path (PROTOCOL.md §12).
				c.descNext = descNext{ref: ref, path: path}
				return c.sendDescriptor(now, buf, path, ref, rate, out)
			}
		}
	}
	retransmit := c.retxHead < len(c.retx) && c.retx[c.retxHead] == ref
	h := &c.tx[path]
	if !h.reserve(c.ep.cfg.MaxPathInflight) {
		c.cwndLimit = true
		return false
	}
	lend := c.ep.lend && len(payload) > 0
	p, err := c.encodeData(buf, path, h.next, h.floor, ref, payload, retransmit, desc != 0, lend, now)
	if err != nil {
		return false
	}
	// The chunk leaves its queue only once its packet is built: taken
	// before a refusal (the path's sequence space full, a driver's buffer
	// too short), it was neither queued nor in flight, so nothing ever
	// sent it again and its message never completed
	// (TestPollRefusalKeepsChunk).
	if retransmit {
		if c.retxCause[c.retxHead] == lossTimeout {
			c.Stats.RetransmitsTimeout++
		} else {
			c.Stats.RetransmitsGap++
		}
		c.retx[c.retxHead] = chunkRef{}
		c.retxHead++
	} else {
		c.consumed(ref)
	}
	size = len(p)
	if lend {
		size += len(payload)
	}
	seq := h.add(now, &c.paths.Paths[path], ref.msg, ref.idx, size)
	if desc != 0 {
		c.descSent(h.rec(seq), path, desc)
	}
	if c.mode == ModeRoCEv2 {
		h.gbnResend = h.next // nothing to go back over
	}
	c.sent(out, now, path, size, len(payload), retransmit, rate, len(p))
	if lend {
		out.Payload = payload
		c.ep.lendOut(ref.msg)
	}
	return true
}

// floorPath returns a usable path that owes its receiver its floor
// (sentHistory.owesFloor), or -1. The path takes the packet even when its
// window is full, as a probe would: the packets that fill it are
// acknowledged only once the receiver has the floor.
func (c *Conn) floorPath() int {
	if !c.newsOwed {
		return -1
	}
	for i := range c.tx {
		if c.tx[i].owesFloor() && c.paths.Paths[i].State.Usable() {
			return i
		}
	}
	c.newsOwed = false
	return -1
}

// descNext is a chunk whose descriptor went alone on path: the chunk goes
// next, on the same path.
type descNext struct {
	ref  chunkRef
	path int
}

// descPathWithRoom returns a usable path with room for size bytes that has
// m's descriptor on its way, when m has no more chunks left than the
// connection has usable paths (-1 otherwise, or if there is none): the last
// chunks of a message, and all of a small one, then cost no more
// descriptor-only DATA, while the chunks of a large message still spread
// over every path (PROTOCOL.md §12).
func (c *Conn) descPathWithRoom(m *txMessage, size int) int {
	if m.nChunks-m.ackedChunks > c.paths.UsableCount() {
		return -1
	}
	for w, word := range m.descPaths {
		for word != 0 {
			i := w*64 + bits.TrailingZeros64(word)
			word &= word - 1
			if i >= len(c.paths.Paths) {
				break
			}
			p := &c.paths.Paths[i]
			if p.State.Usable() && p.InflightBytes+size <= c.window(i) {
				return i
			}
		}
	}
	return -1
}

// sendDescriptor sends a version-2 descriptor-only DATA of ref's message on
// path; the chunk itself goes next (PROTOCOL.md §12).
func (c *Conn) sendDescriptor(now time.Duration, buf []byte, path int, ref chunkRef, rate float64, out *Transmit) bool {
	h := &c.tx[path]
	if !h.reserve(c.ep.cfg.MaxPathInflight) {
		c.cwndLimit = true
		return false
	}
	p, err := c.encodeDataV2(buf, path, h.next, h.floor, chunkRef{msg: ref.msg}, nil, false, true, false)
	if err != nil {
		return false
	}
	seq := h.add(now, &c.paths.Paths[path], ref.msg, ref.idx, len(p))
	c.descSent(h.rec(seq), path, recDesc|recDescOnly)
	c.Stats.DescriptorOnlySent++
	c.sent(out, now, path, len(p), 0, false, rate, len(p))
	return true
}

// descSent records that the packet r, sent on path, carries its message's
// descriptor.
func (c *Conn) descSent(r *txRecord, path int, desc uint8) {
	r.path, r.desc = uint16(path), desc
	r.msg.setDescPath(path)
	c.Stats.DescriptorsSent++
}

// sent does the connection's bookkeeping of a DATA packet sent (the path's
// is the sentHistory's) and describes it in out.
func (c *Conn) sent(out *Transmit, now time.Duration, path, size, payload int, retransmit bool, rate float64, n int) {
	c.ctl.OnSent(now, path, size)
	c.Stats.DataSent++
	c.Stats.PayloadBytesSent += uint64(payload)
	if retransmit {
		c.Stats.Retransmits++
	}
	c.pace(now, size, rate)
	// Every field, one by one, as sentHistory.add writes its record.
	out.Peer, out.Conn, out.Path, out.Entropy = c.peer, c, path, c.paths.Paths[path].Entropy
	out.Reply, out.ECT, out.Len, out.Tracked, out.Seq = false, true, n, true, c.tx[path].next-1
	out.Payload = nil
}

// maxPaceAhead bounds how far ahead of its schedule Config.PacingBurst
// lets a connection run: about what TCP puts in one TSO burst (a
// millisecond of the rate, at most 64 KiB), so that a slow connection's
// burst stays a few packets.
const maxPaceAhead = time.Millisecond

// paceHeld reports whether the pacer holds the next packet back at now
// (rate in bytes/s; 0: not paced). Without Config.PacingBurst a packet
// leaves at its slot (nextSend) and not before. With it, a driver that
// wakes at a slot sends a burst: packets go while the connection is at
// most PacingBurst bytes (and maxPaceAhead) ahead of its schedule, then
// none until the schedule has caught up with the burst, however often the
// driver polls meanwhile. The average rate is the same (every packet
// still moves the clock by its gap); what changes is that a driver pays
// its wake-up, its hand-offs and a system call per burst instead of per
// packet: a tunnel paced at 2 Gbit/s sent 1.3 datagrams per sendmmsg
// without bursts, at about 3 times the CPU per datagram it spends with them.
func (c *Conn) paceHeld(now time.Duration, rate float64) bool {
	if rate <= 0 || now >= c.nextSend {
		c.paceHold = false
		return false
	}
	b := c.ep.cfg.PacingBurst
	if b <= 0 || c.paceHold {
		return true
	}
	if c.nextSend-now > min(time.Duration(float64(b)/rate*1e9), maxPaceAhead) {
		c.paceHold = true // the burst is over
		return true
	}
	return false
}

// pace advances the pacing clock by one packet of size bytes at rate bytes/s.
//
// After an idle spell (nothing to send, or no window) the pacer allows a
// burst of a few packets and no more: the larger of four packets and
// Config.PacingSlack. When the connection was waiting for its next pacing
// slot and the driver came back late, what fell due meanwhile is sent at
// once up to Config.PacingCatchUp of the connection's smallest round trip,
// if that is larger. A user-space driver on a busy machine comes back
// milliseconds late: measured on the 2-core test machine under load, a
// 200 Mbit/s, 50 ms connection paced at the link's rate with a 2 ms slack
// forfeited 10-30% of its sending time (Stats.PacingForfeitNs) and moved
// 0.72-0.74 of capacity against 0.83-0.85 unpaced; catching up RTT/8 gave
// 0.76-0.79, RTT/4 0.79-0.82, RTT/2 0.85-0.88, same runs. What is forfeited
// is lost link time; a catch-up burst puts back what the link would have
// carried, and the window still bounds what is in flight.
func (c *Conn) pace(now time.Duration, size int, rate float64) {
	if rate <= 0 {
		return
	}
	gap := time.Duration(float64(size) / rate * 1e9)
	slack := 4 * gap
	if s := c.ep.cfg.PacingSlack; s > slack {
		slack = s
	}
	if f := c.ep.cfg.PacingCatchUp; f > 0 && c.paceWait {
		if s := time.Duration(f * float64(c.minRTT)); s > slack {
			slack = s
		}
	}
	if c.paceWait && now-c.nextSend > 4*gap {
		// The driver came back late for a slot that fell due: tell a
		// controller that sizes its queue after the host's stalls.
		if o, ok := c.ctl.(cc.SendLateObserver); ok {
			o.OnSendLate(now, now-c.nextSend)
		}
	}
	if floor := now - slack; c.nextSend < floor {
		if c.paceWait {
			c.Stats.PacingForfeitNs += uint64(floor - c.nextSend)
		}
		c.nextSend = floor
	}
	// paceWait stays set while the connection catches up; pollData clears
	// it when the connection runs out of data or window.
	c.nextSend += gap
}

func ackSample(acked int, ps *pathmgr.Path) cc.AckSample {
	return cc.AckSample{AckedBytes: acked, RTT: ps.LatestRTT, SRTT: ps.SRTT, MinRTT: ps.MinRTT, InflightBytes: ps.InflightBytes}
}

// encodeData builds the DATA of chunk ref into buf; with lend, its header
// alone, the payload left to the driver (Endpoint.LendPayloads).
func (c *Conn) encodeData(buf []byte, path int, seq, floor uint64, ref chunkRef, payload []byte, retransmit, desc, lend bool, now time.Duration) ([]byte, error) {
	if c.wire == Version2 {
		return c.encodeDataV2(buf, path, seq, floor, ref, payload, retransmit, desc, lend)
	}
	m := ref.msg
	h := DataHeader{
		Op:        m.op,
		Conn:      c.id,
		Path:      uint16(path),
		Stream:    m.stream.id,
		Seq:       seq,
		FloorGap:  uint32(seq - floor),
		MsgSeq:    m.seq,
		MsgLen:    m.length,
		Offset:    uint64(ref.idx) * uint64(c.mtu),
		Key:       m.key,
		Addr:      m.addr,
		Timestamp: uint64(now) + 1,
	}
	if retransmit {
		h.Flags = FlagRetransmit
	}
	return appendData(buf[:0], &h, payload, lend)
}

// encodeDataV2 builds a version-2 DATA (PROTOCOL.md §12): the low 32 bits
// of the sequences, the chunk index, the descriptor if desc. It writes
// AppendDataV2's layout straight from the message, with its checks, and
// no header struct between (TestEncodeDataV2IsAppendDataV2): filling one
// and reading it back was a fifth of the header's cost per datagram.
//
// With lend it writes the header alone and leaves the payload where it
// lies (Endpoint.LendPayloads): buf must still have room for it, which
// the driver appends.
func (c *Conn) encodeDataV2(buf []byte, path int, seq, floor uint64, ref chunkRef, payload []byte, retransmit, desc, lend bool) ([]byte, error) {
	m := ref.msg
	gap := uint32(seq - floor) // < MaxPathInflight ≤ 2^24
	if len(payload) > MaxPayload || gap > maxFloorGapV2 || (m.op != OpWrite && m.op != OpSend) || desc && m.length > MaxMessageLen {
		return buf[:0], ErrBadField
	}
	hl := DataHeaderLenV2
	if desc {
		hl += DataDescLen
	}
	n := hl + len(payload)
	if cap(buf) < n {
		return buf[:0], ErrShortBuffer
	}
	b := buf[:n]
	var f uint8
	if retransmit {
		f = FlagRetransmit
	}
	if desc {
		f |= FlagDescriptor
	}
	if m.op == OpSend {
		f |= flagSendV2
	}
	_ = b[DataHeaderLenV2-1]
	b[0], b[1], b[2] = Version2, byte(TypeData), f
	b[3], b[4], b[5] = byte(gap>>16), byte(gap>>8), byte(gap)
	be.PutUint16(b[6:], uint16(path))
	be.PutUint32(b[8:], uint32(c.id))
	be.PutUint32(b[12:], uint32(seq))
	be.PutUint32(b[16:], m.stream.id)
	be.PutUint32(b[20:], uint32(m.seq))
	be.PutUint32(b[24:], uint32(ref.idx))
	if desc {
		be.PutUint32(b[28:], m.key)
		be.PutUint64(b[32:], m.addr)
		be.PutUint16(b[40:], uint16(m.length>>32))
		be.PutUint32(b[42:], uint32(m.length))
	}
	if lend {
		return b[:hl], nil
	}
	copy(b[hl:], payload)
	return b, nil
}

// ackChunk records that chunk idx of m is in the receiver's memory.
func (c *Conn) ackChunk(now time.Duration, m *txMessage, idx int) {
	w, bit := idx/64, uint64(1)<<(idx%64)
	if m.acked[w]&bit != 0 || m.err != nil {
		return
	}
	m.acked[w] |= bit
	m.ackedChunks++
	if m.relay {
		if b, ok := m.bufs.take(idx); ok {
			c.ep.releaseBuf(m, b)
		}
	}
	if m.done() {
		c.completeStream(now, m.stream)
	}
}

// completeStream reports, in order, the stream's messages that are done.
func (c *Conn) completeStream(now time.Duration, s *txStream) {
	for s.head < len(s.msgs) {
		m := s.msgs[s.head]
		if !m.done() && m.err == nil {
			break
		}
		if m.err != nil {
			c.Stats.MessagesFailed++
		}
		if m.relay && m.err != nil {
			m.releaseAll(c.ep)
		}
		c.ep.emitFor(m, Event{Kind: EventSendComplete, Conn: c, Stream: s.id, Seq: m.seq, Op: m.op, Key: m.key, Addr: m.addr, Len: m.length, Err: m.err, At: now})
		s.msgs[s.head] = nil
		s.head++
		c.queued--
	}
	// Compact once the completed prefix dominates, keeping appends amortised O(1).
	if s.head > 0 && s.head*2 >= len(s.msgs) {
		n := copy(s.msgs, s.msgs[s.head:])
		clear(s.msgs[n:])
		s.msgs = s.msgs[:n]
		s.head = 0
	}
}

// onPeerError fails a message the receiver refused.
func (c *Conn) onPeerError(now time.Duration, e *MessageError) {
	s := c.streams[e.Stream]
	if s == nil {
		return
	}
	for i := s.head; i < len(s.msgs); i++ {
		if m := s.msgs[i]; m.seq == e.MsgSeq {
			if m.err == nil && !m.done() {
				m.err = &RemoteError{Code: e.Code}
				c.completeStream(now, s)
			}
			return
		}
	}
}

// failAll fails every message not yet complete (the connection is gone).
func (c *Conn) failAll(now time.Duration, err error) {
	for _, s := range c.streams {
		for i := s.head; i < len(s.msgs); i++ {
			if m := s.msgs[i]; !m.done() && m.err == nil {
				m.err = err
				if m.relay {
					m.releaseAll(c.ep)
				}
			}
		}
		c.completeStream(now, s)
	}
	c.active = c.active[:0]
}
