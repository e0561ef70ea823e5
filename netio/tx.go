//go:build linux

package netio

import (
	"net/netip"
	"time"

	"github.com/mrgw/mrgw/metaroce"
	"github.com/mrgw/mrgw/tunnel/udp"
)

// The send side is a pipeline: the owner goroutine polls datagrams out of
// the state machine into buffers and hands them, in batches, to sender
// goroutines that seal them (the AEAD is the costliest step per datagram)
// and write them with one WriteBatch per socket. So the protocol and the
// sealing run on different cores, and with several senders the sealing
// itself runs in parallel.
//
// Order: the protocol declares a packet lost as soon as a later one on the
// same path is acknowledged, so datagrams of one socket must leave in the
// order they were polled. Every socket therefore belongs to exactly one
// sender (its shard); a sender serves its batches in order.
//
// Memory is bounded: a fixed number of batches, each with a fixed number of
// buffers, circulate between the owner and the senders. When none is free
// the owner waits for a sender to return one (backpressure), after first
// dispatching what it holds, so that some batch is always in flight.

// txItem is one polled datagram: plaintext at buf[maxOverhead:][:n].
type txItem struct {
	buf    []byte
	n      int
	sealer Sealer // nil: sent as it is
	s      *sock
	dst    netip.AddrPort
}

// sendBatch is a run of datagrams for one sender.
type sendBatch struct {
	items []txItem // len: datagrams in the batch; cap: txBatch
}

// txSender is one sender goroutine's queue and its scratch state.
type txSender struct {
	in    chan *sendBatch
	dirty []*sock // sockets with datagrams waiting (sender only)
}

// txState is the owner goroutine's side of the pipeline.
type txState struct {
	senders []*txSender
	cur     []*sendBatch // per sender: the batch being filled, or nil
	free    []*sendBatch // empty batches
	spare   [][]byte     // buffers not in any batch
	done    chan *sendBatch
	// inFlight counts batches handed to senders and not yet returned.
	inFlight int
}

// txBatches is how many batches circulate per sender (one being sent, one
// queued behind it, one being filled).
const txBatchesPerSender = 3

func (e *Endpoint) initTx(bufLen int) {
	t := &e.owner.tx
	n := e.cfg.TxSenders
	nb := n*txBatchesPerSender + 1
	t.done = make(chan *sendBatch, nb)
	t.senders = make([]*txSender, n)
	t.cur = make([]*sendBatch, n)
	for i := range t.senders {
		t.senders[i] = &txSender{in: make(chan *sendBatch, nb)}
	}
	for range nb {
		t.free = append(t.free, &sendBatch{items: make([]txItem, 0, txBatch)})
		for range txBatch {
			t.spare = append(t.spare, make([]byte, bufLen))
		}
	}
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
			done <- b // never blocks: done has room for every batch
		case <-e.quit:
			return
		}
	}
}

// writeBatch seals b's datagrams and writes them, one WriteBatch per socket.
func (e *Endpoint) writeBatch(w *txSender, b *sendBatch) {
	for i := range b.items {
		it := &b.items[i]
		wire := it.buf[maxOverhead : maxOverhead+it.n]
		if it.sealer != nil {
			start := maxOverhead - it.sealer.Prefix()
			out, err := it.sealer.Seal(it.buf[start:start], wire)
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
		sent, err := s.c.WriteBatch(s.out)
		var bytes uint64
		for _, m := range s.out[:sent] {
			bytes += uint64(m.N)
		}
		e.ctr.txDatagrams.Add(uint64(sent))
		e.ctr.txBytes.Add(bytes)
		if err != nil {
			// The protocol treats these as lost and recovers; a socket
			// error is no reason to stop the others.
			e.ctr.txErr.Add(uint64(len(s.out) - sent))
			e.log.Debug("netio: send failed", "local", s.c.LocalAddr(), "err", err)
		}
		clear(s.out) // drop the references to the buffers
		s.out = s.out[:0]
		s.dirty = false
	}
	clear(w.dirty)
	w.dirty = w.dirty[:0]
}

// reclaim takes a batch a sender has finished with; wait says whether to
// block for one. It reports false if none was taken (or the Endpoint is
// closing).
func (e *Endpoint) reclaim(wait bool) bool {
	t := &e.owner.tx
	var b *sendBatch
	if wait {
		select {
		case b = <-t.done:
		case <-e.quit:
			return false
		}
	} else {
		select {
		case b = <-t.done:
		default:
			return false
		}
	}
	t.inFlight--
	for i := range b.items {
		t.spare = append(t.spare, b.items[i].buf)
		b.items[i] = txItem{}
	}
	b.items = b.items[:0]
	t.free = append(t.free, b)
	return true
}

// dispatch hands every non-empty batch being filled to its sender.
func (e *Endpoint) dispatch() {
	t := &e.owner.tx
	for i, b := range t.cur {
		if b == nil || len(b.items) == 0 {
			continue
		}
		t.senders[i].in <- b // never blocks: in has room for every batch
		t.inFlight++
		t.cur[i] = nil
	}
}

// txBuf returns a free buffer, waiting for a sender if there is none; nil
// if the Endpoint is closing.
func (e *Endpoint) txBuf() []byte {
	t := &e.owner.tx
	for len(t.spare) == 0 {
		for e.reclaim(false) {
		}
		if len(t.spare) > 0 {
			break
		}
		e.dispatch()
		if t.inFlight == 0 || !e.reclaim(true) {
			return nil
		}
	}
	buf := t.spare[len(t.spare)-1]
	t.spare = t.spare[:len(t.spare)-1]
	return buf
}

// queue adds a polled datagram to its socket's sender, dispatching the
// sender's batch when it is full. It reports false if the Endpoint is
// closing (the buffer is then kept as spare).
func (e *Endpoint) queue(it txItem) bool {
	t := &e.owner.tx
	w := it.s.shard
	b := t.cur[w]
	for b == nil {
		if n := len(t.free); n > 0 {
			b = t.free[n-1]
			t.free = t.free[:n-1]
			t.cur[w] = b
			break
		}
		if e.reclaim(false) {
			continue
		}
		e.dispatch()
		if t.inFlight == 0 || !e.reclaim(true) {
			t.spare = append(t.spare, it.buf)
			return false
		}
	}
	b.items = append(b.items, it)
	if len(b.items) == cap(b.items) {
		t.senders[w].in <- b
		t.inFlight++
		t.cur[w] = nil
	}
	return true
}

// flush polls the state machine and hands the datagrams to the senders. It
// returns true if it stopped with more to send.
func (e *Endpoint) flush(now time.Duration) bool {
	o := &e.owner
	table := e.peers.Load()
	// Return what the senders have finished with, so that buffers are
	// reused while they are still in the cache.
	for e.reclaim(false) {
	}
	polled := 0
	defer e.dispatch()
	// tries bounds the loop even if every datagram were dropped.
	for tries := 0; polled < txRounds*txBatch && tries < 4*txRounds*txBatch; tries++ {
		buf := e.txBuf()
		if buf == nil {
			return false // closing
		}
		tx, ok := e.ep.Poll(now, buf[maxOverhead:maxOverhead:maxOverhead+o.room])
		if !ok {
			o.tx.spare = append(o.tx.spare, buf)
			return false
		}
		p := table.byID[tx.Peer]
		if p == nil {
			o.tx.spare = append(o.tx.spare, buf)
			e.ctr.noSocket.Add(1)
			continue
		}
		var s *sock
		var dst netip.AddrPort
		if tx.Reply {
			s, dst = e.replyAddr(p, tx.Entropy)
		} else {
			s, dst = e.pathSock(now, p, &tx), p.dest(tx.Path)
			if s == nil {
				o.tx.spare = append(o.tx.spare, buf)
				e.ctr.noSocket.Add(1)
				continue
			}
		}
		if !e.queue(txItem{buf: buf, n: tx.Len, sealer: p.Sealer, s: s, dst: dst}) {
			return false
		}
		polled++
	}
	return polled >= txRounds*txBatch
}

// txBufLen is the size of a send buffer: room for the largest envelope in
// front of the packet and behind it.
func txBufLen(cfg metaroce.Config) int {
	return maxOverhead + cfg.MTU + metaroce.DataHeaderLen + maxOverhead
}
