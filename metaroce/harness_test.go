package metaroce

import (
	"bytes"
	"container/heap"
	"math/rand/v2"
	"testing"
	"time"
)

// testNet is a tiny deterministic network for the state machine's own tests:
// two endpoints, P planes chosen by hashing a datagram's ports, a per-plane
// one-way delay (so paths on different planes reorder against each other),
// random loss and duplication, and planes that can go black. The full
// simulator lives in sim/; this one keeps metaroce's tests self-contained.
type testNet struct {
	t     testing.TB
	now   time.Duration
	eps   [2]*Endpoint
	q     dgramHeap
	seq   uint64
	rng   *rand.Rand
	delay []time.Duration // per plane
	loss  float64
	dup   float64
	black []bool
	// tap, if set, sees every datagram an endpoint sends (before loss).
	tap func(from int, b []byte)
	// drop, if set, drops what it returns true for (from: the sender).
	drop func(from int, tx Transmit, b []byte) bool
	// paused[i]: endpoint i runs nothing before this time (stall): a
	// descheduled process, whose timers and received datagrams wait.
	paused [2]time.Duration

	// lendLag > 0: the driver reads a payload an endpoint lent it
	// (LendPayloads, which the test turns on) lendLag after the poll, as a
	// sender goroutine running behind the protocol does, and checks it
	// still holds what it held then; the datagram carries that. Then it
	// reports the payload done (PayloadsDone).
	lendLag time.Duration
	// rxBufs: each datagram is received in a buffer of its own of
	// rxBufTestLen bytes, offered to BufferSinks (ReceiveIn); keptN
	// counts those kept. One not kept is scribbled on once Receive
	// returns, as a driver reuses it.
	rxBufs bool
	keptN  int
	lends  [2][]lentPayload
	lentN  [2]uint64

	sent, lost, delivered int
}

// lentPayload is a payload an endpoint lent, due to be read at due.
type lentPayload struct {
	due           time.Duration
	payload, sent []byte
}

// readLent reads endpoint i's lent payloads that are due and reports
// them done.
func (n *testNet) readLent(i int) {
	l := n.lends[i]
	k := 0
	for k < len(l) && l[k].due <= n.now {
		if !bytes.Equal(l[k].payload, l[k].sent) {
			n.t.Errorf("endpoint %d: a lent payload changed before the driver read it", i)
		}
		k++
	}
	if k == 0 {
		return
	}
	n.lends[i] = l[k:]
	n.lentN[i] += uint64(k)
	n.eps[i].PayloadsDone(n.lentN[i])
}

// stall stops endpoint i until the simulated time until: it sends nothing,
// its timers do not run, and the datagrams sent to it wait (in order), as
// in the socket buffer of a process the scheduler left off the CPU. When
// it wakes, its timers run first, then it reads what waited.
func (n *testNet) stall(i int, until time.Duration) { n.paused[i] = until }

type dgram struct {
	at   time.Duration
	seq  uint64
	to   int
	data []byte
	meta RecvMeta
}

type dgramHeap []*dgram

func (h dgramHeap) Len() int { return len(h) }
func (h dgramHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].seq < h[j].seq
}
func (h dgramHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *dgramHeap) Push(x any)   { *h = append(*h, x.(*dgram)) }
func (h *dgramHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

func newTestNet(t testing.TB, cfgA, cfgB Config, planes int, seed uint64) *testNet {
	t.Helper()
	n := &testNet{t: t, rng: rand.New(rand.NewPCG(seed, 7)), delay: make([]time.Duration, planes), black: make([]bool, planes)}
	for i := range n.delay {
		n.delay[i] = time.Duration(20+7*i) * time.Microsecond
	}
	cfgB.Listen = true
	var err error
	if n.eps[0], err = NewEndpoint(cfgA, NewMemory()); err != nil {
		t.Fatal(err)
	}
	if n.eps[1], err = NewEndpoint(cfgB, NewMemory()); err != nil {
		t.Fatal(err)
	}
	return n
}

// plane hashes the 5-tuple's ports onto a plane, as ECMP would.
func (n *testNet) plane(src, dst uint16) int {
	h := uint32(src)*0x9e3779b1 ^ uint32(dst)*0x85ebca6b
	h ^= h >> 15
	h *= 0x2c1b3c6d
	h ^= h >> 12
	return int(h % uint32(len(n.delay)))
}

const listenPort = 4791

func (n *testNet) flush(from int) {
	if n.paused[from] > n.now {
		return
	}
	ep := n.eps[from]
	n.readLent(from)
	scratch := make([]byte, 0, 70000)
	for {
		tx, ok := ep.Poll(n.now, scratch)
		if !ok {
			return
		}
		buf := append([]byte(nil), scratch[:tx.Len]...)
		if tx.Payload != nil {
			if n.lendLag <= 0 {
				n.t.Fatal("a payload lent to a driver that did not ask for it")
			}
			buf = append(buf, tx.Payload...)
			n.lends[from] = append(n.lends[from], lentPayload{due: n.now + n.lendLag, payload: tx.Payload, sent: buf[tx.Len:]})
		}
		if n.tap != nil {
			n.tap(from, buf)
		}
		src, dst := tx.Entropy, uint16(listenPort)
		if tx.Reply {
			src, dst = listenPort, tx.Entropy
		}
		n.sent++
		pl := n.plane(src, dst)
		if n.black[pl] || n.rng.Float64() < n.loss || n.drop != nil && n.drop(from, tx, buf) {
			n.lost++
			continue
		}
		copies := 1
		if n.rng.Float64() < n.dup {
			copies = 2
		}
		for k := 0; k < copies; k++ {
			d := &dgram{at: n.now + n.delay[pl] + time.Duration(k)*time.Microsecond, to: 1 - from, data: buf,
				meta: RecvMeta{Peer: PeerID(from), Entropy: src}}
			n.seq++
			d.seq = n.seq
			heap.Push(&n.q, d)
		}
	}
}

// run advances virtual time until cond holds or limit passes; it reports
// whether cond held.
func (n *testNet) run(limit time.Duration, cond func() bool) bool {
	n.flush(0)
	n.flush(1)
	for !cond() {
		next := time.Duration(-1)
		if n.q.Len() > 0 {
			next = n.q[0].at
		}
		for i, ep := range n.eps {
			t := ep.NextTimeout()
			if t >= 0 && t < n.paused[i] {
				t = n.paused[i]
			}
			if t >= 0 && (next < 0 || t < next) {
				next = t
			}
			if l := n.lends[i]; len(l) > 0 && (next < 0 || l[0].due < next) {
				next = l[0].due
			}
		}
		if next < 0 || next > limit {
			return cond()
		}
		if next > n.now {
			n.now = next
		}
		for i, ep := range n.eps {
			if n.paused[i] > 0 && n.paused[i] <= n.now {
				// Waking from a stall, the timers run before the
				// datagrams that waited are read (the driver's reader
				// was stalled too: they are still in the socket).
				n.paused[i] = 0
				if t := ep.NextTimeout(); t >= 0 && t <= n.now {
					ep.HandleTimeout(n.now)
				}
			}
		}
		for n.q.Len() > 0 && n.q[0].at <= n.now {
			d := heap.Pop(&n.q).(*dgram)
			if n.paused[d.to] > n.now {
				d.at = n.paused[d.to] // waits, in order (its seq)
				heap.Push(&n.q, d)
				continue
			}
			n.delivered++
			if !n.rxBufs {
				n.eps[d.to].Receive(n.now, d.data, d.meta)
				continue
			}
			buf := make([]byte, rxBufTestLen)
			pkt := buf[rxBufTestPrefix : rxBufTestPrefix+copy(buf[rxBufTestPrefix:], d.data)]
			if n.eps[d.to].ReceiveIn(n.now, pkt, buf, d.meta) {
				n.keptN++
				continue
			}
			for i := range buf {
				buf[i] = 0xdd
			}
		}
		for i, ep := range n.eps {
			if n.paused[i] > n.now {
				continue
			}
			if t := ep.NextTimeout(); t >= 0 && t <= n.now {
				ep.HandleTimeout(n.now)
			}
			n.flush(i)
		}
	}
	return true
}

// events drains an endpoint's events.
func drain(ep *Endpoint) []Event {
	var out []Event
	for {
		ev, ok := ep.PollEvent()
		if !ok {
			return out
		}
		out = append(out, ev)
	}
}

// rxBufTestLen and rxBufTestPrefix shape the receive buffers of a testNet
// with rxBufs: a datagram lies past a prefix (a seal's header, in netio),
// in a buffer longer than it.
const (
	rxBufTestLen    = 2048
	rxBufTestPrefix = 16
)
