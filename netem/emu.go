package netem

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"

	"github.com/mrgw/mrgw/internal/ecn"
)

// ErrClosed is returned by methods called after Close.
var ErrClosed = errors.New("emu: emulator closed")

// Emulator is a running link emulator. All methods are safe for concurrent
// use.
type Emulator struct {
	cfg   Config
	start time.Time
	pool  sync.Pool // *[]byte of cfg.MaxDatagram bytes

	mu      sync.RWMutex
	eps     map[epKey]*endpoint // every stand-in, by its real endpoint
	dynamic int                 // stand-ins created on demand (bounded)
	closed  bool

	// ownPorts marks the ports of the emulator's own sockets on cfg.Bind,
	// read lock-free on every datagram to refuse forwarding loops.
	ownPorts [65536 / 64]atomic.Uint64

	dirs     [2]*direction
	buffered atomic.Int64
	// pairs maps (site A address, site B address) to its wire: 1 +
	// its index in Config.PairDelays (0, absent: the planes' own).
	pairs map[[2]netip.Addr]int // datagrams in all FIFOs (Config.MaxBuffered)

	mappingDrops, loopDrops, overflowDrops atomic.Uint64
	truncated, sendErrors, readErrors      atomic.Uint64

	wg       sync.WaitGroup
	quit     chan struct{}
	done     chan struct{}
	once     sync.Once
	stopCtx  func() bool
	closeErr error
}

type epKey struct {
	site Site
	addr netip.AddrPort
}

// endpoint is the stand-in of one real endpoint: the socket through which
// the other site sees it. Datagrams arriving on s are forwarded to real;
// datagrams that real sends to the other site leave from s.
type endpoint struct {
	site     Site
	real     netip.AddrPort
	realUDP  *net.UDPAddr
	s        *sock
	static   bool         // made by Expose; guarded by Emulator.mu
	lastUsed atomic.Int64 // emulator clock, ns
	closed   atomic.Bool
}

// direction holds the planes of one direction; its Sched delivers their
// datagrams on time. sched.Mu guards links and rng.
type direction struct {
	em    *Emulator
	dir   Dir
	sched *Sched[packet]
	links []link
	// pairLast is the last delivery time per pair wire and plane
	// ([wire-1][plane]): each wire keeps its own order. Sched queue
	// wire*planes+plane holds the wire's datagrams of that plane.
	pairLast [][]time.Duration
	rng      *rand.Rand
	w        *writer // the dispatcher's sendmmsg scratch space

	lateN, lateSum, lateMax atomic.Int64
}

// New starts an emulator. It runs until Close is called or ctx is done;
// either way, Close waits until every goroutine has stopped.
func New(ctx context.Context, cfg Config) (*Emulator, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	em := &Emulator{
		pairs: map[[2]netip.Addr]int{},
		cfg:   cfg,
		start: time.Now(),
		eps:   map[epKey]*endpoint{},
		quit:  make(chan struct{}),
		done:  make(chan struct{}),
	}
	for i, p := range cfg.PairDelays {
		em.pairs[[2]netip.Addr{p.A.Unmap(), p.B.Unmap()}] = i + 1
	}
	size := cfg.MaxDatagram
	em.pool.New = func() any { b := make([]byte, size); return &b }
	for d := range em.dirs {
		dd := &direction{
			em:    em,
			dir:   Dir(d),
			links: make([]link, cfg.Planes),
			rng:   rand.New(rand.NewPCG(cfg.Seed, uint64(d)+0x5eed)),
			w:     newWriter(cfg.Batch),
		}
		for i := range dd.links {
			dd.links[i].cfg = cfg.Link
		}
		dd.pairLast = make([][]time.Duration, len(cfg.PairDelays))
		for i := range dd.pairLast {
			dd.pairLast[i] = make([]time.Duration, cfg.Planes)
		}
		np := cfg.Planes
		dd.sched, err = NewSched(SchedConfig[packet]{
			Queues: np * (1 + len(cfg.PairDelays)), Now: em.now, Batch: cfg.Batch,
			Stale: func(q int, it *Item[packet]) bool { return it.Epoch != dd.links[q%np].epoch },
			Drop: func(q int, it Item[packet]) {
				plane := q % np
				// Was in flight when the plane failed.
				dd.links[plane].c.downDrops.Add(1)
				em.buffered.Add(-1)
				em.putBuf(it.V.buf)
			},
			Send: dd.send,
		})
		if err != nil {
			for _, prev := range em.dirs[:d] {
				prev.sched.Mu.Lock()
				prev.sched.Close()
				prev.sched.Mu.Unlock()
			}
			return nil, err
		}
		em.dirs[d] = dd
	}
	em.wg.Add(3)
	for _, d := range em.dirs {
		go func() {
			defer em.wg.Done()
			d.sched.Run()
		}()
	}
	go em.janitor()
	em.stopCtx = context.AfterFunc(ctx, em.shutdown)
	return em, nil
}

// now is the emulator clock: monotonic time since New.
func (em *Emulator) now() time.Duration { return time.Since(em.start) }

func (em *Emulator) isOwn(p uint16) bool {
	return em.ownPorts[p/64].Load()&(1<<(p%64)) != 0
}

func (em *Emulator) setOwn(p uint16, own bool) {
	if own {
		em.ownPorts[p/64].Or(1 << (p % 64))
	} else {
		em.ownPorts[p/64].And(^uint64(1 << (p % 64)))
	}
}

func (em *Emulator) getBuf() *[]byte { return em.pool.Get().(*[]byte) }

func (em *Emulator) putBuf(b *[]byte) {
	*b = (*b)[:cap(*b)]
	em.pool.Put(b)
}

// Expose makes the real endpoint real at site reachable from the other
// site and returns its stand-in address: endpoints of the other site send
// to that address to reach real, and everything real sends to the other
// site's stand-ins arrives there from that same address. Exposing an
// endpoint twice returns the same address; an endpoint that was already
// seen as a source keeps its on-demand stand-in, which stops expiring.
// real must be an IPv4 loopback address with a non-zero port.
func (em *Emulator) Expose(site Site, real netip.AddrPort) (netip.AddrPort, error) {
	real = netip.AddrPortFrom(real.Addr().Unmap(), real.Port())
	if site > SiteB {
		return netip.AddrPort{}, invalid("site %d", site)
	}
	if !real.Addr().Is4() || !real.Addr().IsLoopback() || real.Port() == 0 {
		return netip.AddrPort{}, invalid("endpoint %v is not an IPv4 loopback address with a port", real)
	}
	if real.Addr() == em.cfg.Bind && em.isOwn(real.Port()) {
		return netip.AddrPort{}, invalid("endpoint %v is one of the emulator's own sockets", real)
	}
	em.mu.Lock()
	defer em.mu.Unlock()
	if em.closed {
		return netip.AddrPort{}, ErrClosed
	}
	if ep := em.eps[epKey{site, real}]; ep != nil {
		if !ep.static {
			ep.static = true
			em.dynamic--
		}
		return ep.s.addr, nil
	}
	ep, err := em.addEndpointLocked(site, real)
	if err != nil {
		return netip.AddrPort{}, err
	}
	ep.static = true
	return ep.s.addr, nil
}

// StandIn returns the address through which the other site sees the real
// endpoint real at site, if it has one (exposed or created on demand).
func (em *Emulator) StandIn(site Site, real netip.AddrPort) (netip.AddrPort, bool) {
	em.mu.RLock()
	defer em.mu.RUnlock()
	if ep := em.eps[epKey{site, netip.AddrPortFrom(real.Addr().Unmap(), real.Port())}]; ep != nil {
		return ep.s.addr, true
	}
	return netip.AddrPort{}, false
}

// addEndpointLocked opens a stand-in socket for real and starts its reader.
// em.mu must be held for writing and the emulator open.
func (em *Emulator) addEndpointLocked(site Site, real netip.AddrPort) (*endpoint, error) {
	s, err := listen(em.cfg.Bind)
	if err != nil {
		return nil, err
	}
	ep := &endpoint{site: site, real: real, realUDP: net.UDPAddrFromAddrPort(real), s: s}
	ep.lastUsed.Store(int64(em.now()))
	em.eps[epKey{site, real}] = ep
	em.setOwn(s.addr.Port(), true)
	em.wg.Add(1)
	go em.readLoop(ep)
	return ep, nil
}

// standIn returns the stand-in for a source endpoint, creating one on
// demand, or nil when the source may not have one (mapping table full,
// emulator closing, or the source is one of our own sockets).
func (em *Emulator) standIn(site Site, src netip.AddrPort) *endpoint {
	k := epKey{site, src}
	em.mu.RLock()
	ep := em.eps[k]
	em.mu.RUnlock()
	if ep != nil {
		return ep
	}
	em.mu.Lock()
	defer em.mu.Unlock()
	if ep := em.eps[k]; ep != nil {
		return ep
	}
	if em.closed || em.dynamic >= em.cfg.MaxMappings || !src.Addr().Is4() || src.Port() == 0 {
		return nil
	}
	ep, err := em.addEndpointLocked(site, src)
	if err != nil {
		em.readErrors.Add(1)
		return nil
	}
	em.dynamic++
	return ep
}

// removeLocked closes a stand-in; em.mu must be held for writing.
func (em *Emulator) removeLocked(ep *endpoint) {
	delete(em.eps, epKey{ep.site, ep.real})
	if !ep.static {
		em.dynamic--
	}
	ep.closed.Store(true)
	em.setOwn(ep.s.addr.Port(), false)
	ep.s.uc.Close()
}

// janitor expires idle on-demand stand-ins.
func (em *Emulator) janitor() {
	defer em.wg.Done()
	every := min(max(em.cfg.IdleTimeout/4, 10*time.Millisecond), time.Second)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-em.quit:
			return
		case <-t.C:
		}
		cutoff := int64(em.now() - em.cfg.IdleTimeout)
		em.mu.Lock()
		for _, ep := range em.eps {
			if !ep.static && ep.lastUsed.Load() < cutoff {
				em.removeLocked(ep)
			}
		}
		em.mu.Unlock()
	}
}

// pending is a received datagram on its way into a plane.
type pending struct {
	idx   int // index in the reader's batch
	plane int
	wire  int // 0: the plane's delay; else 1 + index in Config.PairDelays
	size  int
	tos   byte
	out   *sock
	to    *net.UDPAddr
	taken bool // the FIFO now owns the buffer
}

// readLoop receives what the other site sends to ep's stand-in socket and
// hands it to the direction's planes. It exits when the socket is closed.
func (em *Emulator) readLoop(ep *endpoint) {
	defer em.wg.Done()
	srcSite := ep.site.Other()
	d := em.dirs[From(srcSite)]
	n := em.cfg.Batch
	msgs := make([]ipv4.Message, n)
	bufs := make([]*[]byte, n)
	hdrs := make([][1][]byte, n)
	oob := make([]byte, n*ecn.RecvSpace)
	for i := range msgs {
		bufs[i] = em.getBuf()
		hdrs[i][0] = *bufs[i]
		msgs[i].Buffers = hdrs[i][:]
	}
	defer func() {
		for _, b := range bufs {
			em.putBuf(b)
		}
	}()
	pend := make([]pending, 0, n)
	var events []TraceEvent
	// Consecutive datagrams usually come from the same source: remember its
	// stand-in to skip the map lookup.
	var lastSrc netip.AddrPort
	var lastPeer *endpoint
	for {
		for i := range msgs {
			msgs[i].OOB = oob[i*ecn.RecvSpace : (i+1)*ecn.RecvSpace]
		}
		k, err := ep.s.pc.ReadBatch(msgs, 0)
		if err != nil {
			if ep.closed.Load() || errors.Is(err, net.ErrClosed) {
				return
			}
			em.readErrors.Add(1)
			time.Sleep(time.Millisecond) // never spin on a persistent error
			continue
		}
		now := em.now()
		ep.lastUsed.Store(int64(now))
		pend = pend[:0]
		for i := 0; i < k; i++ {
			m := &msgs[i]
			if m.Flags&unix.MSG_TRUNC != 0 {
				em.truncated.Add(1)
				continue
			}
			ua, ok := m.Addr.(*net.UDPAddr)
			if !ok {
				continue
			}
			src := ua.AddrPort()
			src = netip.AddrPortFrom(src.Addr().Unmap(), src.Port())
			if src.Addr() == em.cfg.Bind && em.isOwn(src.Port()) {
				// One stand-in sent to another: a real endpoint's port was
				// taken over by one of ours. Forwarding would loop forever.
				em.loopDrops.Add(1)
				continue
			}
			peer := lastPeer
			if src != lastSrc || peer == nil || peer.closed.Load() {
				peer = em.standIn(srcSite, src)
				if peer == nil {
					em.mappingDrops.Add(1)
					continue
				}
				lastSrc, lastPeer = src, peer
			}
			peer.lastUsed.Store(int64(now))
			ctl, _ := ecn.ParseControl(m.OOB[:m.NN])
			wire := 0
			if len(em.pairs) > 0 {
				k := [2]netip.Addr{src.Addr(), ep.real.Addr()}
				if srcSite == SiteB {
					k[0], k[1] = k[1], k[0]
				}
				wire = em.pairs[k]
			}
			pend = append(pend, pending{
				idx:   i,
				wire:  wire,
				plane: planeOf(ecmpHash(em.cfg.Seed, d.dir, src, ep.real), em.cfg.Planes),
				size:  m.N,
				tos:   ctl.TrafficClass,
				out:   peer.s,
				to:    ep.realUDP,
			})
		}
		if len(pend) == 0 {
			continue
		}
		events = d.enqueue(now, pend, bufs, events[:0])
		for _, p := range pend {
			if p.taken {
				bufs[p.idx] = em.getBuf()
				hdrs[p.idx][0] = *bufs[p.idx]
			}
		}
		if tr := em.cfg.Trace; tr != nil {
			for _, ev := range events {
				tr(ev)
			}
		}
	}
}

// enqueue runs the link model for a batch of datagrams under one lock
// acquisition, moves the forwarded ones into their planes' FIFOs (marking
// them taken) and returns the trace events if tracing is on.
func (d *direction) enqueue(now time.Duration, pend []pending, bufs []*[]byte, events []TraceEvent) []TraceEvent {
	em := d.em
	limit := int64(em.cfg.MaxBuffered)
	forwarded := false
	d.sched.Mu.Lock()
	if d.sched.Closed() {
		d.sched.Mu.Unlock()
		return events
	}
	for i := range pend {
		p := &pend[i]
		l := &d.links[p.plane]
		ev := TraceEvent{Dir: d.dir, Plane: p.plane}
		full := em.buffered.Load() >= limit
		var v Verdict
		if p.wire == 0 {
			v = l.admit(now, p.size, ecn.FromTOS(p.tos), full, d.rng, &ev)
		} else {
			v = l.admitVia(now, p.size, ecn.FromTOS(p.tos), full, d.rng, &ev,
				em.cfg.PairDelays[p.wire-1].Delay, &d.pairLast[p.wire-1][p.plane])
		}
		ev.Verdict = v
		switch v {
		case DroppedOverflow:
			em.overflowDrops.Add(1)
		case Forwarded:
			d.sched.Push(p.wire*len(d.links)+p.plane, Item[packet]{Deliver: ev.Deliver, Epoch: l.epoch, V: packet{
				buf:   bufs[p.idx],
				n:     p.size,
				tos:   p.tos&^ecn.Mask | byte(ev.ECNOut),
				plane: uint8(p.plane),
				out:   p.out,
				to:    p.to,
			}})
			em.buffered.Add(1)
			p.taken = true
			forwarded = true
		}
		if em.cfg.Trace != nil {
			events = append(events, ev)
		}
	}
	d.sched.Mu.Unlock()
	if forwarded {
		d.sched.Kick()
	}
	return events
}

// writer holds the dispatcher's reusable sendmmsg scratch space.
type writer struct {
	msgs []ipv4.Message
	hdrs [][1][]byte
	oob  [][]byte
	idx  []int
	done []bool
}

func newWriter(n int) *writer {
	w := &writer{
		msgs: make([]ipv4.Message, 0, n),
		hdrs: make([][1][]byte, n),
		oob:  make([][]byte, n),
		idx:  make([]int, 0, n),
		done: make([]bool, n),
	}
	for i := range w.oob {
		w.oob[i] = make([]byte, 0, ecn.SendSpace)
	}
	return w
}

// send writes a batch of due datagrams, one sendmmsg per stand-in socket,
// and updates delivery counters. It returns every buffer to the pool.
func (d *direction) send(items []Item[packet]) {
	em := d.em
	w := d.w
	now := em.now()
	for i := range items {
		late := int64(now - items[i].Deliver)
		d.lateN.Add(1)
		d.lateSum.Add(late)
		if late > d.lateMax.Load() {
			d.lateMax.Store(late) // only this goroutine writes it
		}
	}
	clear(w.done[:len(items)])
	for i := range items {
		if w.done[i] {
			continue
		}
		s := items[i].V.out
		w.msgs, w.idx = w.msgs[:0], w.idx[:0]
		for j := i; j < len(items); j++ {
			p := &items[j].V
			if w.done[j] || p.out != s {
				continue
			}
			w.done[j] = true
			k := len(w.msgs)
			w.hdrs[k][0] = (*p.buf)[:p.n]
			m := ipv4.Message{Buffers: w.hdrs[k][:], Addr: p.to}
			if p.tos != 0 {
				w.oob[k] = ecn.AppendTrafficClass(w.oob[k][:0], false, p.tos)
				m.OOB = w.oob[k]
			}
			w.msgs = append(w.msgs, m)
			w.idx = append(w.idx, j)
		}
		// Count the batch as delivered before handing it to the kernel, and
		// take back what the kernel refuses: counted after the write, a
		// receiver could see a datagram (and read Stats) before its count.
		count := func(j int, sign uint64) {
			c := &d.links[items[j].V.plane].c
			c.delivered.Add(sign)
			c.bytesDelivered.Add(uint64(wireBytes(items[j].V.n)) * sign)
		}
		for _, j := range w.idx {
			count(j, 1)
		}
		for sent := 0; sent < len(w.msgs); {
			n, err := s.pc.WriteBatch(w.msgs[sent:], 0)
			sent += n
			if err != nil {
				if errors.Is(err, net.ErrClosed) {
					// The stand-in expired under its queued datagrams.
					em.sendErrors.Add(uint64(len(w.msgs) - sent))
					for _, j := range w.idx[sent:] {
						count(j, ^uint64(0))
					}
					break
				}
				em.sendErrors.Add(1)
				if sent < len(w.msgs) {
					count(w.idx[sent], ^uint64(0))
				}
				sent++ // skip the datagram the kernel refused
			}
		}
	}
	for i := range items {
		em.putBuf(items[i].V.buf)
	}
	em.buffered.Add(-int64(len(items)))
	clear(w.hdrs)
	for i := range w.msgs {
		w.msgs[i] = ipv4.Message{}
	}
}

// PlaneOf returns the plane that carries datagrams from src to dst in
// direction d, where src and dst are the real endpoints (as the fabric
// hashes the packet's original 5-tuple, not the stand-in addresses).
func (em *Emulator) PlaneOf(d Dir, src, dst netip.AddrPort) int {
	src = netip.AddrPortFrom(src.Addr().Unmap(), src.Port())
	dst = netip.AddrPortFrom(dst.Addr().Unmap(), dst.Port())
	return planeOf(ecmpHash(em.cfg.Seed, d, src, dst), em.cfg.Planes)
}

// Planes returns the number of planes.
func (em *Emulator) Planes() int { return em.cfg.Planes }

func (em *Emulator) checkPlane(d Dir, plane int) error {
	if d > BtoA {
		return invalid("direction %d", d)
	}
	if plane < 0 || plane >= em.cfg.Planes {
		return invalid("plane %d outside [0, %d)", plane, em.cfg.Planes)
	}
	return nil
}

// SetLink re-tunes one plane in one direction while traffic flows. What is
// already queued keeps its schedule; the bytes it represents still occupy
// the queue, at the new rate.
func (em *Emulator) SetLink(d Dir, plane int, l LinkConfig) error {
	if err := em.checkPlane(d, plane); err != nil {
		return err
	}
	if err := l.Validate(); err != nil {
		return err
	}
	dd := em.dirs[d]
	dd.sched.Mu.Lock()
	defer dd.sched.Mu.Unlock()
	dd.links[plane].setConfig(em.now(), l)
	return nil
}

// SetMTU clamps one plane's IP MTU in both directions while traffic
// flows (0: no clamp); see LinkConfig.MTU. What is already queued is
// delivered.
func (em *Emulator) SetMTU(plane, mtu int) error {
	if err := em.checkPlane(AtoB, plane); err != nil {
		return err
	}
	for _, d := range em.dirs {
		d.sched.Mu.Lock()
		l := d.links[plane].cfg
		l.MTU = mtu
		if err := l.Validate(); err != nil {
			d.sched.Mu.Unlock()
			return err
		}
		d.links[plane].cfg = l
		d.sched.Mu.Unlock()
	}
	return nil
}

// SetAllLinks re-tunes every plane in both directions (see SetLink).
func (em *Emulator) SetAllLinks(l LinkConfig) error {
	if err := l.Validate(); err != nil {
		return err
	}
	for _, d := range em.dirs {
		d.sched.Mu.Lock()
		now := em.now()
		for i := range d.links {
			d.links[i].setConfig(now, l)
		}
		d.sched.Mu.Unlock()
	}
	return nil
}

// Link returns the current configuration of a plane in a direction.
func (em *Emulator) Link(d Dir, plane int) (LinkConfig, error) {
	if err := em.checkPlane(d, plane); err != nil {
		return LinkConfig{}, err
	}
	dd := em.dirs[d]
	dd.sched.Mu.Lock()
	defer dd.sched.Mu.Unlock()
	return dd.links[plane].cfg, nil
}

// Fail black-holes a plane in both directions: datagrams hashed to it are
// dropped (DownDrops), including those already in flight on it.
func (em *Emulator) Fail(plane int) error { return em.setDown(plane, true) }

// Restore brings a failed plane back with empty queues.
func (em *Emulator) Restore(plane int) error { return em.setDown(plane, false) }

func (em *Emulator) setDown(plane int, down bool) error {
	if err := em.checkPlane(AtoB, plane); err != nil {
		return err
	}
	for _, d := range em.dirs {
		d.sched.Mu.Lock()
		l := &d.links[plane]
		if down {
			l.fail(em.now())
		} else {
			l.down = false
		}
		d.sched.Mu.Unlock()
	}
	return nil
}

// Down reports whether a plane is failed.
func (em *Emulator) Down(plane int) bool {
	if em.checkPlane(AtoB, plane) != nil {
		return false
	}
	d := em.dirs[AtoB]
	d.sched.Mu.Lock()
	defer d.sched.Mu.Unlock()
	return d.links[plane].down
}

// Close stops the emulator: it closes every socket, discards what is
// queued and waits for all its goroutines. It is idempotent.
func (em *Emulator) Close() error {
	em.stopCtx()
	em.shutdown()
	<-em.done
	return em.closeErr
}

// Done is closed once the emulator has fully stopped.
func (em *Emulator) Done() <-chan struct{} { return em.done }

func (em *Emulator) shutdown() {
	em.once.Do(func() {
		em.mu.Lock()
		em.closed = true
		for _, ep := range em.eps {
			ep.closed.Store(true)
			if err := ep.s.uc.Close(); err != nil && em.closeErr == nil {
				em.closeErr = fmt.Errorf("emu: close: %w", err)
			}
		}
		em.mu.Unlock()
		for _, d := range em.dirs {
			d.sched.Mu.Lock()
			d.sched.Close() // wakes a sleeping dispatcher
			d.sched.Mu.Unlock()
		}
		close(em.quit)
		em.wg.Wait()
		for _, d := range em.dirs {
			d.sched.Drain(func(it Item[packet]) {
				em.putBuf(it.V.buf)
				em.buffered.Add(-1)
			})
		}
		close(em.done)
	})
}
