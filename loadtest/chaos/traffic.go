//go:build linux

package chaos

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"net/netip"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mrgw/mrgw/host"
	"github.com/mrgw/mrgw/loadtest/lab"
	"github.com/mrgw/mrgw/metaroce"
)

// Every message a writer sends is self-describing, so that the receiver can
// tell a lost, duplicated or corrupted one apart:
//
//	magic "MRCH" | writer id (4) | message number n (8) | flow id (8) | CRC-32C of the body (4) | size (4) | body
//
// The body is a pseudo-random function of (writer, n). Writer w owns the
// area [w*areaSize, (w+1)*areaSize) of every receiver's registered memory
// and writes message n to slot n mod slots of it: a slot is only written
// again slots-window messages later, long after it was checked.
const (
	hdrSize   = 32
	msgMagic  = 0x4d524348
	memoryKey = 1
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// layout is how writers place messages.
type layout struct {
	size, slots, window int
}

func (l layout) areaSize() uint64 { return uint64(l.size) * uint64(l.slots) }

func (l layout) addr(id int, n uint64) uint64 {
	return uint64(id)*l.areaSize() + (n%uint64(l.slots))*uint64(l.size)
}

// fill writes message n of writer id on flow into buf.
func fill(buf []byte, id int, n, flow uint64) {
	x := uint64(id)<<40 ^ n*0x9e3779b97f4a7c15 ^ 0xdeadbeefcafef00d
	body := buf[hdrSize:]
	for i := 0; i+8 <= len(body); i += 8 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		binary.LittleEndian.PutUint64(body[i:], x)
	}
	for i := len(body) &^ 7; i < len(body); i++ {
		body[i] = byte(n + uint64(i))
	}
	binary.BigEndian.PutUint32(buf[0:], msgMagic)
	binary.BigEndian.PutUint32(buf[4:], uint32(id))
	binary.BigEndian.PutUint64(buf[8:], n)
	binary.BigEndian.PutUint64(buf[16:], flow)
	binary.BigEndian.PutUint32(buf[24:], crc32.Checksum(body, castagnoli))
	binary.BigEndian.PutUint32(buf[28:], uint32(len(buf)))
}

// parse checks a message read back from memory: it returns the writer,
// the message number and the flow it names, or an error if the bytes are
// not a whole, intact message.
func parse(buf []byte) (id int, n, flow uint64, err error) {
	if len(buf) < hdrSize {
		return 0, 0, 0, fmt.Errorf("%d bytes, shorter than the header", len(buf))
	}
	if m := binary.BigEndian.Uint32(buf[0:]); m != msgMagic {
		return 0, 0, 0, fmt.Errorf("bad magic %#x", m)
	}
	id = int(binary.BigEndian.Uint32(buf[4:]))
	n = binary.BigEndian.Uint64(buf[8:])
	flow = binary.BigEndian.Uint64(buf[16:])
	if sz := binary.BigEndian.Uint32(buf[28:]); int(sz) != len(buf) {
		return id, n, flow, fmt.Errorf("size %d in the header, %d delivered", sz, len(buf))
	}
	if c := crc32.Checksum(buf[hdrSize:], castagnoli); c != binary.BigEndian.Uint32(buf[24:]) {
		return id, n, flow, errors.New("body checksum mismatch")
	}
	return id, n, flow, nil
}

// hostKey is the scenario's host credential, in every gateway's
// lan.host_keys. A fixed one: the host processes know it without being
// told, and the scenario only ever runs on loopback.
var hostKey = host.Key{ID: "chaos", Secret: []byte("mrgw-chaos-host-credential-32byt")}

// hostKeyEntry is hostKey as a lan.host_keys entry.
func hostKeyEntry() string {
	return hostKey.ID + ":" + base64.StdEncoding.EncodeToString(hostKey.Secret)
}

// hostConfig is a scenario host's configuration.
func hostConfig(name, region string, gws []netip.AddrPort, listen netip.AddrPort, deadAfter time.Duration, log *slog.Logger) host.Config {
	return host.Config{Name: name, Region: region, Gateways: gws, Listen: listen, DeadAfter: deadAfter,
		Key: &hostKey, Protocol: lab.HostProtocol(), MaxFlowMessages: 1024, Logger: log}
}

// writer sends messages on one flow with at most window in flight, each
// completion awaited in order; on a failed Write it opens a new flow.
type writer struct {
	id     int
	lay    layout
	h      *host.Host
	region string // destination
	dst    string
	onFlow func(id int, flow uint64)
	onDone func(id int, flow, seq, n uint64)
	onFail func(id int, flow, n uint64, err error)
	// onGateway, if set, is told the flow's gateway whenever it changes
	// (checked at every completion).
	onGateway func(id int, gw netip.AddrPort)

	cur atomic.Pointer[host.Flow]
	gw  netip.AddrPort // last reported to onGateway
}

// gateway returns the LAN address of the gateway the writer's flow goes
// through now (zero if none is open).
func (w *writer) gateway() netip.AddrPort {
	if f := w.cur.Load(); f != nil {
		return f.Gateway()
	}
	return netip.AddrPort{}
}

type inflight struct {
	p    *host.Pending
	n    uint64
	flow uint64
}

// run writes until stop closes (or ctx ends), then waits for the messages
// in flight, at most until ctx ends.
func (w *writer) run(ctx context.Context, stop <-chan struct{}) {
	bufs := make([][]byte, w.lay.window)
	for i := range bufs {
		bufs[i] = make([]byte, w.lay.size)
	}
	var q []inflight
	complete := func(it inflight) {
		err := it.p.Wait(ctx)
		if err != nil {
			if ctx.Err() == nil {
				w.onFail(w.id, it.flow, it.n, err)
			}
			return
		}
		seq, k := it.p.Seqs()
		for s := range k {
			w.onDone(w.id, it.flow, seq+uint64(s), it.n)
		}
		if w.onGateway != nil {
			if g := w.gateway(); g != w.gw {
				w.gw = g
				w.onGateway(w.id, g)
			}
		}
	}
	defer func() {
		for _, it := range q {
			complete(it)
		}
	}()
	var f *host.Flow
	var n uint64
	for {
		select {
		case <-stop:
			return
		case <-ctx.Done():
			return
		default:
		}
		if f == nil {
			octx, cancel := context.WithTimeout(ctx, 10*time.Second)
			nf, err := w.h.OpenFlow(octx, w.region, w.dst, host.FlowOptions{})
			cancel()
			if err != nil {
				if ctx.Err() == nil {
					w.onFail(w.id, 0, n, fmt.Errorf("open flow: %w", err))
				}
				select {
				case <-time.After(200 * time.Millisecond):
				case <-stop:
					return
				case <-ctx.Done():
					return
				}
				continue
			}
			f = nf
			w.cur.Store(f)
			w.onFlow(w.id, f.ID())
		}
		if len(q) == w.lay.window {
			complete(q[0])
			q = q[1:]
		}
		buf := bufs[n%uint64(len(bufs))]
		fill(buf, w.id, n, f.ID())
		p, err := f.Write(ctx, memoryKey, w.lay.addr(w.id, n), buf)
		if p != nil {
			q = append(q, inflight{p, n, f.ID()})
		}
		if err != nil {
			if p == nil && ctx.Err() == nil {
				w.onFail(w.id, f.ID(), n, fmt.Errorf("write: %w", err))
			}
			if ctx.Err() != nil {
				return
			}
			// The flow is unusable: wait for what it has in flight, then
			// start a new one.
			for _, it := range q {
				complete(it)
			}
			q = q[:0]
			f.Close()
			f = nil
			w.cur.Store(nil)
		}
		n++
	}
}

type fkey struct{ flow, seq uint64 }

// corruptMsg stands in checker.seen for a delivery that failed its check.
const corruptMsg = ^uint64(0)

type doneRec struct {
	id int
	n  uint64
	at time.Time
}

// event is something the checker found, at a time.
type event struct {
	at   time.Time
	what string
}

// checker is the receivers' accounting: every delivery is read back from
// memory and checked, every source completion is matched with a delivery.
type checker struct {
	lay   layout
	start time.Time

	mu        sync.Mutex
	seen      map[fkey]uint64 // (flow, seq) -> message number read back
	done      map[fkey]doneRec
	doneOrder []fkey
	checked   int                 // doneOrder[:checked] have been matched
	lostCand  map[fkey]time.Time  // completed, not delivered when last checked
	times     map[int][]time.Time // writer -> delivery times
	bytes     uint64
	messages  uint64
	dups      []event
	corrupt   []event
	failed    []event
	overwrote int // slot rewritten before it was read back (not an error)
}

func newChecker(lay layout) *checker {
	return &checker{lay: lay, start: time.Now(), seen: map[fkey]uint64{}, done: map[fkey]doneRec{},
		lostCand: map[fkey]time.Time{}, times: map[int][]time.Time{}}
}

// receive drains h's deliveries until ctx ends, reading each message back
// from memory (Host.ReadMemory, on the host's own goroutine: no race with
// placement).
func (c *checker) receive(ctx context.Context, h *host.Host) {
	buf := make([]byte, c.lay.size)
	for {
		var d host.Delivery
		var ok bool
		select {
		case d, ok = <-h.Received():
			if !ok {
				return
			}
		case <-ctx.Done():
			return
		}
		var rerr error
		if d.Len == uint64(len(buf)) && d.Key == memoryKey {
			rerr = h.ReadMemory(ctx, memoryKey, d.Addr, buf)
			if rerr != nil && ctx.Err() != nil {
				return
			}
		}
		c.check(d, buf, rerr, time.Now())
	}
}

// check accounts one delivery whose message was read back into buf
// (readErr: the read failed).
func (c *checker) check(d host.Delivery, buf []byte, readErr error, now time.Time) {
	id := int(d.Addr / c.lay.areaSize())
	var perr error
	var n uint64
	switch {
	case d.Len != uint64(c.lay.size) || d.Key != memoryKey || d.Op != metaroce.OpWrite:
		perr = fmt.Errorf("op %v key %d len %d", d.Op, d.Key, d.Len)
	case readErr != nil:
		perr = fmt.Errorf("read back: %w", readErr)
	default:
		var hid int
		var hflow uint64
		hid, n, hflow, perr = parse(buf)
		switch {
		case perr != nil:
		case hid != id:
			perr = fmt.Errorf("writer %d's message in writer %d's area", hid, id)
		case hflow != d.Flow:
			perr = fmt.Errorf("message of flow %x delivered on flow %x", hflow, d.Flow)
		case c.lay.addr(hid, n) != d.Addr:
			perr = fmt.Errorf("message %d at the wrong address %d", n, d.Addr)
		}
	}
	k := fkey{d.Flow, d.Seq}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.messages++
	c.bytes += d.Len
	if _, dup := c.seen[k]; dup {
		c.dups = append(c.dups, event{now, fmt.Sprintf("flow %x seq %d delivered twice", d.Flow, d.Seq)})
	}
	if perr != nil {
		c.corrupt = append(c.corrupt, event{now, fmt.Sprintf("flow %x seq %d (writer %d): %v", d.Flow, d.Seq, id, perr)})
		// Delivered, not intact: counted as corrupted, not also as lost.
		if _, dup := c.seen[k]; !dup {
			c.seen[k] = corruptMsg
		}
	} else {
		c.seen[k] = n
		c.times[id] = append(c.times[id], now)
		if r, ok := c.done[k]; ok {
			c.match(k, r, n, now)
		}
	}
	delete(c.lostCand, k)
}

// match compares the message the source completed as (flow, seq) with the
// one read back: the same number, or a later one in the same slot (the slot
// was rewritten before it was read back).
func (c *checker) match(k fkey, r doneRec, got uint64, now time.Time) {
	switch {
	case got == corruptMsg: // counted already
	case got == r.n:
	case got > r.n && (got-r.n)%uint64(c.lay.slots) == 0:
		c.overwrote++
	default:
		c.corrupt = append(c.corrupt, event{now, fmt.Sprintf("flow %x seq %d: source sent message %d, memory held %d", k.flow, k.seq, r.n, got)})
	}
}

// completed records a source's completion of (flow, seq) as message n of
// writer id.
func (c *checker) completed(id int, flow, seq, n uint64) {
	now := time.Now()
	k := fkey{flow, seq}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, again := c.done[k]; again {
		c.corrupt = append(c.corrupt, event{now, fmt.Sprintf("flow %x seq %d completed twice at the source", flow, seq)})
		return
	}
	r := doneRec{id, n, now}
	c.done[k] = r
	c.doneOrder = append(c.doneOrder, k)
	if got, ok := c.seen[k]; ok {
		c.match(k, r, got, now)
	}
}

func (c *checker) fail(id int, flow, n uint64, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.failed = append(c.failed, event{time.Now(), fmt.Sprintf("writer %d flow %x message %d: %v", id, flow, n, err)})
}

// checkLost matches the completions older than before with deliveries:
// those not delivered become candidates for lost (a delivery may still be
// on its way through the receiver); lost returns the candidates.
func (c *checker) checkLost(before time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for ; c.checked < len(c.doneOrder); c.checked++ {
		k := c.doneOrder[c.checked]
		r := c.done[k]
		if r.at.After(before) {
			break
		}
		if _, ok := c.seen[k]; !ok {
			c.lostCand[k] = r.at
		}
	}
}

// lost returns the completion times of the messages completed at a source
// and not delivered (so far).
func (c *checker) lost() []time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []time.Time
	for _, at := range c.lostCand {
		out = append(out, at)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Before(out[j]) })
	return out
}

// countIn counts the events in [from, to).
func countIn(evs []event, from, to time.Time) (n int64) {
	for _, e := range evs {
		if !e.at.Before(from) && e.at.Before(to) {
			n++
		}
	}
	return n
}

// stall returns writer id's longest time without a delivery in [from, to]:
// from the fault (or the last delivery after it) to the next delivery, and
// from the last delivery to to. recovered is whether the writer delivered
// after from and within the last second before to.
func (c *checker) stall(id int, from, to time.Time) (worst time.Duration, recovered bool) {
	c.mu.Lock()
	ts := c.times[id]
	c.mu.Unlock()
	i := sort.Search(len(ts), func(i int) bool { return ts[i].After(from) })
	prev := from
	for ; i < len(ts) && !ts[i].After(to); i++ {
		worst = max(worst, ts[i].Sub(prev))
		prev = ts[i]
	}
	tail := to.Sub(prev)
	return max(worst, tail), prev.After(from) && tail < time.Second
}

// lastDelivery returns writer id's latest delivery (zero if none).
func (c *checker) lastDelivery(id int) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ts := c.times[id]; len(ts) > 0 {
		return ts[len(ts)-1]
	}
	return time.Time{}
}

// firstAfter returns writer id's first delivery after t (zero if none).
func (c *checker) firstAfter(id int, t time.Time) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ts := c.times[id]
	i := sort.Search(len(ts), func(i int) bool { return ts[i].After(t) })
	if i == len(ts) {
		return time.Time{}
	}
	return ts[i]
}

func (c *checker) totals() (messages, bytes uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.messages, c.bytes
}
