//go:build linux

package netio

import (
	"net/netip"
	"slices"
	"time"

	"golang.org/x/sys/cpu"

	"github.com/mrgw/mrgw/metaroce"
	"github.com/mrgw/mrgw/netio/seal"
	"github.com/mrgw/mrgw/netio/udp"
)

// The send side is a pipeline: the owner goroutine polls datagrams out of
// the state machine into buffers and hands them, in batches, to sender
// goroutines that complete them (a DATA's payload is lent by the state
// machine, copied behind its header by the sender: metaroce
// Endpoint.LendPayloads), seal them (the AEAD is the costliest step per
// datagram) and write them with one WriteBatch per socket. So the protocol and the
// sealing run on different cores, and with several senders the sealing
// itself runs in parallel.
//
// Order: the protocol declares a packet lost as soon as a later one on the
// same path is acknowledged, so datagrams of one socket must leave in the
// order they were polled. Every socket therefore belongs to exactly one
// sender (its shard); a sender serves its batches in order.
//
// Memory is bounded: a fixed number of batches, each with a fixed number of
// buffers, circulate between the owner and the senders (a DATA whose
// payload is lent travels without one: txItem), and each sender holds at
// most a batch's worth of buffers of its own. The owner polls a
// datagram only when it has a buffer for it and a batch for whichever
// sender it turns out to need; otherwise it dispatches what it holds and
// stops sending until a sender returns a batch (backpressure), serving
// received datagrams, commands and timers meanwhile: an owner blocked on
// its senders would let acknowledgements pile up unread and its paths time
// out.

// txItem is one polled datagram: plaintext at buf[maxOverhead:][:n],
// followed by payload, which its sender copies there (the payload is lent
// by the state machine: metaroce.Transmit.Payload). A DATA with a lent
// payload has no buffer of the owner's (buf nil): its header is hdr[:n],
// and its sender puts header and payload in a buffer of its own (txSender.
// bufs). So the owner writes every DATA header into the one buffer it
// polls into, which stays in its cache, and a sender's buffers stay in
// its: a buffer that went from the owner's core to a sender's and back
// had its lines fetched from the other core at both ends, and the first
// load behind those stores that the store buffer could not serve (Poll's
// result, the AEAD's nonce) waited for them, on the owner and on the
// sender, for every datagram.
type txItem struct {
	buf     []byte
	n       int
	payload []byte
	hdr     [lentHeaderMax]byte
	sealer  Sealer // nil: sent as it is
	s       *sock
	dst     netip.AddrPort
	// conn and path name the path a non-reply datagram was sent on, so
	// that a send the kernel refuses for its size (EMSGSIZE) can be told
	// to the connection's path MTU discovery; a tracked one (DATA) is the
	// path's sequence seq, whose departure the owner reports (returned).
	conn    *metaroce.Conn
	path    int32
	tracked bool
	seq     uint64
}

// lentHeaderMax bounds the header of a DATA with a lent payload that
// travels in its txItem (version 1's is the longest); a longer one keeps
// its buffer.
const lentHeaderMax = metaroce.DataHeaderLen + 4

// sendBatch is a run of datagrams for one sender.
type sendBatch struct {
	items []txItem // datagrams in the batch, at most txBatch
	// left is when the sender finished writing it, on the endpoint's
	// clock (Endpoint.Now).
	left time.Duration
	// lends: an item carries a lent payload, the first of them the
	// lentFrom-th the owner polled (counted from 0).
	lends    bool
	lentFrom uint64
}

// txSender is one sender goroutine's queue and its scratch state.
type txSender struct {
	in chan *sendBatch // the owner sends on it; never written after initTx
	// What follows is written by the sender alone, run for every datagram
	// it seals: on cache lines of its own, so that the two senders (whose
	// structs are allocated side by side) and the owner do not pass a line
	// back and forth per datagram (false sharing, as the one counter every
	// sender took a datagram's counter from was: the line run replaces).
	_     cpu.CacheLinePad
	dirty []*sock // sockets with datagrams waiting
	// bufs[i] holds the i-th datagram of a batch when it is a lent DATA
	// (txItem.hdr): made on first use, at most txBatch of bufLen bytes,
	// reused by every batch once its WriteBatch calls have returned.
	bufs   [][]byte
	bufLen int
	// run holds the counters this sender reserved for the rest of its
	// batch from a RunSealer: one reservation per batch and peer, and a
	// nonce buffer of its own.
	run seal.Run
	_   cpu.CacheLinePad
}

// txState is the owner goroutine's side of the pipeline.
type txState struct {
	senders []*txSender
	cur     []*sendBatch // per sender: the batch being filled, or nil
	free    []*sendBatch // empty batches
	spare   [][]byte     // buffers not in any batch
	// made counts the buffers allocated so far, at most maxBufs of bufLen
	// bytes: they are made when a datagram finds none spare, so an
	// endpoint that sends little (an idle host) holds a few, not the
	// txBatch per batch a busy one needs.
	made, maxBufs, bufLen int
	done                  chan *sendBatch
	// filling counts the senders with a batch being filled.
	filling int
	// starved: the last flush stopped for want of a buffer or a batch.
	starved bool
	// lent counts the polled datagrams that carried a lent payload;
	// lending holds the batches, being filled or with a sender, that
	// carry one. Every lent payload before the oldest of them is no
	// longer read (metaroce.Endpoint.PayloadsDone).
	lent    uint64
	lending []*sendBatch
}

// txBatchesPerSender is how many batches circulate per sender (one being
// sent, one queued behind it, one being filled).
const txBatchesPerSender = 3

func (e *Endpoint) initTx(bufLen int) {
	t := &e.owner.tx
	n := e.cfg.TxSenders
	nb := n*txBatchesPerSender + 1
	t.done = make(chan *sendBatch, nb)
	t.senders = make([]*txSender, n)
	t.cur = make([]*sendBatch, n)
	for i := range t.senders {
		t.senders[i] = &txSender{in: make(chan *sendBatch, nb), bufLen: bufLen}
	}
	// A batch's items grow with use, up to txBatch (queue sends it then).
	for range nb {
		t.free = append(t.free, &sendBatch{})
	}
	t.maxBufs, t.bufLen = nb*txBatch, bufLen
}

func (e *Endpoint) startSenders() {
	for _, s := range e.owner.tx.senders {
		e.wg.Add(1)
		go e.sendLoop(s)
	}
}

// sendLoop is a sender goroutine.
func (e *Endpoint) sendLoop(w *txSender) {
	defer e.wg.Done()
	done := e.owner.tx.done
	for {
		select {
		case b := <-w.in:
			e.writeBatch(w, b)
			b.left = e.Now()
			done <- b // never blocks: done has room for every batch
		case <-e.quit:
			return
		}
	}
}

// writeBatch seals b's datagrams and writes them, one WriteBatch per socket.
func (e *Endpoint) writeBatch(w *txSender, b *sendBatch) {
	// runFor is the Sealer w.run's counters came from this batch, and rs
	// it as a RunSealer (nil: it is not one, so each datagram takes its
	// counter through Seal).
	var runFor Sealer
	var rs RunSealer
	for i := range b.items {
		it := &b.items[i]
		n := it.n
		buf := it.buf
		if buf == nil {
			buf = w.buf(i)
			copy(buf[maxOverhead:], it.hdr[:n])
		}
		if it.payload != nil {
			// The payload goes behind its header here, not on the owner
			// goroutine, and just before the seal reads it.
			n += copy(buf[maxOverhead+n:], it.payload)
		}
		wire := buf[maxOverhead : maxOverhead+n]
		if it.sealer != nil {
			start := maxOverhead - it.sealer.Prefix()
			if it.sealer != runFor {
				runFor = it.sealer
				rs, _ = it.sealer.(RunSealer)
				if rs != nil {
					rs.Reserve(&w.run, sealedFor(b.items[i:], it.sealer))
				}
			}
			var out []byte
			var err error
			if rs != nil {
				out, err = w.run.Seal(buf[start:start], wire)
			} else {
				out, err = it.sealer.Seal(buf[start:start], wire)
			}
			if err != nil {
				e.ctr.sealErr.Add(1)
				continue
			}
			wire = out
		}
		s := it.s
		s.out = append(s.out, udp.Message{Buf: wire, N: len(wire), Addr: it.dst})
		if !s.dirty {
			s.dirty = true
			w.dirty = append(w.dirty, s)
		}
	}
	for _, s := range w.dirty {
		for out := s.out; len(out) > 0; {
			sent, err := s.c.WriteBatch(out)
			var bytes uint64
			for _, m := range out[:sent] {
				bytes += uint64(m.N)
			}
			e.ctr.txDatagrams.Add(uint64(sent))
			e.ctr.txWrites.Add(1)
			e.ctr.txBytes.Add(bytes)
			if err == nil {
				break
			}
			if udp.IsTooBig(err) && sent < len(out) {
				// Too big for the local stack (DF set: Config.UDP.
				// DontFragment): lost, and the path's MTU discovery
				// learns it; the rest of the batch still goes.
				e.ctr.txErr.Add(1)
				e.tooBig(sentFrom(w, b, out[sent].Buf), out[sent].N)
				out = out[sent+1:]
				continue
			}
			// The protocol treats these as lost and recovers; a socket
			// error is no reason to stop the others.
			e.ctr.txErr.Add(uint64(len(out) - sent))
			e.log.Debug("netio: send failed", "local", s.c.LocalAddr(), "err", err)
			break
		}
		clear(s.out) // drop the references to the buffers
		s.out = s.out[:0]
		s.dirty = false
	}
	clear(w.dirty)
	w.dirty = w.dirty[:0]
}

// buf returns the sender's buffer for the i-th datagram of its batch.
func (w *txSender) buf(i int) []byte {
	for len(w.bufs) <= i {
		w.bufs = append(w.bufs, make([]byte, w.bufLen))
	}
	return w.bufs[i]
}

// sealedFor counts the datagrams of items that s seals: the counters a
// sender reserves when it meets s in its batch. A batch mostly holds one
// peer's datagrams; those of another peer in between make s's run be
// reserved again when s comes back (its unused counters are skipped, never
// reused).
func sealedFor(items []txItem, s Sealer) int {
	n := 0
	for i := range items {
		if items[i].sealer == s {
			n++
		}
	}
	return n
}

// txFrom is the path a queued datagram was sent on (conn nil: a reply).
type txFrom struct {
	conn *metaroce.Conn
	path int
}

// sentFrom finds the path of the datagram wire in b, which w sent: the
// item whose buffer it lies in (wire runs to the end of its buffer, as
// every datagram the sender queues does). Only a refused send needs the
// path, so it is looked up then instead of being recorded beside every
// datagram queued.
func sentFrom(w *txSender, b *sendBatch, wire []byte) txFrom {
	end := wire[:cap(wire)]
	for i := range b.items {
		it := &b.items[i]
		buf := it.buf
		if buf == nil && i < len(w.bufs) {
			buf = w.bufs[i]
		}
		buf = buf[:cap(buf)]
		if len(buf) > 0 && len(end) > 0 && &buf[len(buf)-1] == &end[len(end)-1] {
			return txFrom{conn: it.conn, path: int(it.path)}
		}
	}
	return txFrom{}
}

// tooBig tells the connection's path MTU discovery, on the owner
// goroutine, that the kernel refused a datagram of size bytes on a path.
// It never blocks the sender: when the command queue is full the news is
// dropped (the probe is then judged lost, which is merely slower).
func (e *Endpoint) tooBig(f txFrom, size int) {
	e.ctr.tooBig.Add(1)
	if f.conn == nil {
		return
	}
	select {
	case e.cmds <- command{fn: func(now time.Duration, _ *metaroce.Endpoint) { f.conn.OnTooBig(now, f.path, size) }}:
	default:
	}
}

// returned takes back a batch a sender has finished with, and tells each
// connection that its DATA datagrams in it have left, and when: the
// protocol's probe timeouts and round trips run from there, not from the
// poll. A sender the machine did not run for tens of milliseconds made its
// datagrams' paths look silent (their whole flights declared lost) when
// the send time was the poll's (TestStalledSenderIsNotASilentPath). One
// report per run of a path's datagrams (a batch holds long runs of one
// path), in sequence order: one socket, hence one sender, per path.
func (e *Endpoint) returned(b *sendBatch) {
	t := &e.owner.tx
	var conn *metaroce.Conn
	var path int32
	var upTo uint64
	for i := range b.items {
		it := &b.items[i]
		if it.tracked {
			if it.conn != conn || it.path != path {
				if conn != nil {
					conn.Departed(int(path), upTo, b.left)
				}
				conn, path = it.conn, it.path
			}
			upTo = it.seq + 1
		}
		if it.buf != nil {
			t.spare = append(t.spare, it.buf)
		}
		*it = txItem{}
	}
	if conn != nil {
		conn.Departed(int(path), upTo, b.left)
	}
	b.items = b.items[:0]
	if b.lends {
		b.lends = false
		if i := slices.Index(t.lending, b); i >= 0 {
			t.lending = slices.Delete(t.lending, i, i+1)
		}
		e.payloadsDone()
	}
	t.free = append(t.free, b)
	t.starved = false
}

// payloadsDone tells the state machine which lent payloads no sender reads
// any more: all those polled before the oldest one still in a batch.
func (e *Endpoint) payloadsDone() {
	t := &e.owner.tx
	done := t.lent
	for _, b := range t.lending {
		done = min(done, b.lentFrom)
	}
	e.ep.PayloadsDone(done)
}

// reclaimAll takes back every batch the senders have finished with.
func (e *Endpoint) reclaimAll() {
	for {
		select {
		case b := <-e.owner.tx.done:
			e.returned(b)
		default:
			return
		}
	}
}

// dispatch hands every non-empty batch being filled to its sender.
func (e *Endpoint) dispatch() {
	t := &e.owner.tx
	for i, b := range t.cur {
		if b == nil || len(b.items) == 0 {
			continue
		}
		e.send(i, b)
	}
}

func (e *Endpoint) send(w int, b *sendBatch) {
	t := &e.owner.tx
	t.senders[w].in <- b // never blocks: in has room for every batch
	t.cur[w] = nil
	t.filling--
}

// room reports whether a datagram can be polled now: a free buffer, and a
// batch for whichever sender it goes to (one being filled, or a free one
// for every sender without).
func (e *Endpoint) room() bool {
	t := &e.owner.tx
	if len(t.spare) == 0 || len(t.free) < len(t.senders)-t.filling {
		e.reclaimAll()
	}
	if len(t.spare) == 0 && t.made < t.maxBufs {
		t.spare = append(t.spare, make([]byte, t.bufLen))
		t.made++
	}
	return len(t.spare) > 0 && len(t.free) >= len(t.senders)-t.filling
}

// queue adds a datagram to its socket's sender, dispatching the sender's
// batch when it is full. room must have reported true.
func (e *Endpoint) queue(it txItem) {
	p := e.add(it.s)
	*p = it
	e.queued(p)
}

// add appends an empty item to the batch of socket s's sender and returns
// it, for the caller to fill (s included) and pass to queued: a datagram
// is written where its sender reads it, not built and copied there.
func (e *Endpoint) add(s *sock) *txItem {
	t := &e.owner.tx
	w := s.shard
	b := t.cur[w]
	if b == nil {
		n := len(t.free)
		b = t.free[n-1]
		t.free = t.free[:n-1]
		t.cur[w] = b
		t.filling++
	}
	b.items = append(b.items, txItem{})
	return &b.items[len(b.items)-1]
}

// queued completes the item add returned, dispatching the sender's batch
// when it is full.
func (e *Endpoint) queued(it *txItem) {
	t := &e.owner.tx
	w := it.s.shard
	b := t.cur[w]
	if it.payload != nil && !b.lends {
		b.lends, b.lentFrom = true, t.lent-1
		t.lending = append(t.lending, b)
	}
	if len(b.items) == txBatch {
		e.send(w, b)
	}
}

// flush polls the state machine and hands the datagrams to the senders. It
// returns true if it stopped with more to send; when it stops for want of
// buffers it sets starved instead, and the owner waits for a sender.
func (e *Endpoint) flush(now time.Duration) bool {
	o := &e.owner
	t := &o.tx
	table := e.peers.Load()
	// Take back what the senders have finished with first, so that
	// buffers are reused while they are still in the cache.
	e.reclaimAll()
	polled := 0
	// Deferred calls run last first: the batches go to their senders,
	// then the payloads no batch holds are reported done.
	defer e.payloadsDone()
	defer e.dispatch()
	tally := &o.txTally
	defer tally.flush(e)
	// Most datagrams of a flush go to one peer: look it up once.
	var lastID PeerID
	var lastPeer *Peer
	// tries bounds the loop even if every datagram were dropped.
	for tries := 0; polled < txRounds*txBatch && tries < 4*txRounds*txBatch; tries++ {
		if !e.room() {
			t.starved = true
			return false
		}
		buf := t.spare[len(t.spare)-1]
		tx, ok := e.ep.Poll(now, buf[maxOverhead:maxOverhead:maxOverhead+o.room])
		if !ok {
			return false
		}
		if tx.Payload != nil {
			t.lent++
		}
		p := lastPeer
		if tx.Peer != lastID || p == nil {
			p = table.byID[tx.Peer]
			lastID, lastPeer = tx.Peer, p
		}
		if p == nil {
			// Not a want of sockets: the peer was removed (a gateway
			// stopping, a host reclaimed) while its connection still
			// had packets to send.
			e.ctr.noPeer.Add(1)
			e.gone(now, &tx)
			continue
		}
		var s *sock
		var dst netip.AddrPort
		if tx.Reply {
			s, dst = e.replyAddr(p, tx.Entropy)
		} else {
			s, dst = e.pathSock(now, p, &tx), p.dest(tx.Path)
			if s == nil {
				e.ctr.noSocket.Add(1)
				e.gone(now, &tx)
				continue
			}
		}
		if p.Sealer == nil && tx.Len == metaroce.InitLen && !tx.Reply {
			tx.Len = e.noteInit(p.ID, buf[maxOverhead:], s, dst)
		}
		it := e.add(s)
		it.n, it.payload, it.sealer, it.s, it.dst = tx.Len, tx.Payload, p.Sealer, s, dst
		if tx.Payload != nil && tx.Len <= len(it.hdr) {
			// Its sender completes it in a buffer of its own; the
			// owner's stays for the next poll.
			copy(it.hdr[:], buf[maxOverhead:maxOverhead+tx.Len])
		} else {
			it.buf = buf
			t.spare = t.spare[:len(t.spare)-1]
		}
		if !tx.Reply {
			it.conn, it.path = tx.Conn, int32(tx.Path)
			it.tracked, it.seq = tx.Tracked, tx.Seq
		}
		e.queued(it)
		// Counted per plane here, by the owner (whose cache of the
		// counters needs no lock), when the datagram is handed to its
		// sender, a run of one peer and plane at once: plaintext
		// length, not the sealed wire length.
		tally.add(e, p.ID, s.plane, tx.Len+len(tx.Payload))
		polled++
	}
	return polled >= txRounds*txBatch
}

// gone reports a DATA datagram that was polled but will never be written
// (no socket for it) as departed now: lost on the way, its path's probe
// timeout runs as if it had left.
func (e *Endpoint) gone(now time.Duration, tx *metaroce.Transmit) {
	if tx.Tracked && tx.Conn != nil {
		tx.Conn.Departed(tx.Path, tx.Seq+1, now)
	}
}

// txBufLen is the size of a send buffer: room for the largest envelope in
// front of the packet and behind it.
func txBufLen(cfg metaroce.Config) int {
	return maxOverhead + cfg.MTU + metaroce.DataHeaderLen + maxOverhead
}

// noteInit records an INIT to an unsealed peer (pkt: its buffer, the INIT
// at its start) and appends the peer's admission cookie, if it sent one
// (cookie.go). It returns the datagram's length.
func (e *Endpoint) noteInit(peer PeerID, pkt []byte, s *sock, dst netip.AddrPort) int {
	if metaroce.PacketType(pkt[1]) != metaroce.TypeInit {
		return metaroce.InitLen
	}
	in := sentInit{s: s, dst: dst}
	copy(in.pkt[:], pkt)
	e.owner.lastInit[peer] = in
	ck, ok := e.owner.cookies[peer]
	if !ok || len(pkt) < initWithCookie {
		return metaroce.InitLen
	}
	copy(pkt[metaroce.InitLen:], ck[:])
	return initWithCookie
}
