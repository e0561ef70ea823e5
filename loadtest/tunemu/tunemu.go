//go:build linux

package tunemu

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mrgw/mrgw/internal/ecn"
	"github.com/mrgw/mrgw/netem"
)

// Site and direction names are netem's.
type (
	Site = netem.Site
	Dir  = netem.Dir
)

// Sites and directions.
const (
	SiteA = netem.SiteA
	SiteB = netem.SiteB
	AtoB  = netem.AtoB
	BtoA  = netem.BtoA
)

// Defaults for Config's zero values.
const (
	DefaultMTU         = 1500
	DefaultMaxBuffered = 1 << 16
	// Device is the TUN device's name inside each namespace.
	Device = "mrgwt0"
	// DeviceQueueLen is each TUN device's ring (txqueuelen) in packets.
	// The kernel's default, 500, overflowed whenever the reader fell
	// behind on the loaded 2-core machine: at 200 Mbit/s TCP flows lost
	// hundreds of packets per run there (DeviceStats' TxDropped), losses
	// the link model never decided. 10,000 packets cover a 0.5 s stall at
	// 200 Mbit/s.
	DeviceQueueLen = 10000
	// HeaderCharge is subtracted from an IP packet's length to get the
	// size netem.Link.Admit takes (a UDP payload's, IPv4 20 + UDP 8
	// less); the model adds it back, so a link is charged every IP
	// packet's whole length, exactly as the UDP relay charges a datagram
	// with its headers.
	HeaderCharge = netem.IPHeaderLen
)

// The sites' addresses, inside their own namespaces only.
var (
	AddrA = netip.MustParseAddr("10.213.0.1")
	AddrB = netip.MustParseAddr("10.213.0.2")
)

// Config configures an Emulator; Planes, Seed and Link mean exactly what
// they mean in netem.Config.
type Config struct {
	Planes int
	Seed   uint64
	Link   netem.LinkConfig
	// MTU of both TUN devices (default 1500).
	MTU int
	// MaxBuffered caps the packets queued in all planes (default 65536).
	MaxBuffered int
	// Sysctls are extra per-namespace settings written in both namespaces
	// ("net.ipv4.tcp_ecn": "1"). Larger TCP buffers are always set, so
	// that a window can cover a long fat link.
	Sysctls map[string]string
	// Trace, if set, sees the model's decision for every packet; it runs
	// on the readers and must be fast.
	Trace func(netem.TraceEvent)
	// ExtraAddrsA gives site A this many more addresses (ExtraAddrA, at
	// most MaxExtraAddrsA), so that flows from one namespace can travel
	// with different PairDelays (see delays.go).
	ExtraAddrsA int
	// PairDelays give pairs (an address of site A, AddrB) their own
	// one-way delay in both directions instead of the planes' Delay,
	// exactly as netem.Config.PairDelays does for the UDP relay.
	PairDelays []netem.PairDelay
	// LossBeforeQueue draws Link.Loss when a packet arrives, before the
	// queue, so that a lost packet uses no link time and the survivors
	// can fill the whole rate (a lossy link upstream of the bottleneck;
	// Linux netem's `loss` drops on enqueue too). By default the loss is
	// netem.Link's: on the wire after the serialiser, so a lost packet
	// used its link time and no flow can deliver more than Rate·(1−Loss).
	LossBeforeQueue bool
	// LossForwardOnly applies Link.Loss (and SetLink's) to A→B only, the
	// data direction of every peer flow: B→A (TCP's ACKs) is lossless. By
	// default both directions lose, as netem's UDP relay does.
	LossForwardOnly bool
}

// dirLink returns the link the model of direction d runs for l, and the
// loss the emulator draws itself before the queue (LossBeforeQueue).
func (c *Config) dirLink(d Dir, l netem.LinkConfig) (netem.LinkConfig, float64) {
	if d == BtoA && c.LossForwardOnly {
		l.Loss = 0
	}
	if c.LossBeforeQueue {
		pre := l.Loss
		l.Loss = 0
		return l, pre
	}
	return l, 0
}

// Stats are the emulator's counters.
type Stats struct {
	// Links is indexed [Dir][plane], as in netem.Stats.
	Links [2][]netem.LinkStats
	// NonIPv4: packets that were not IPv4 (dropped; IPv6 is disabled in
	// the namespaces, so these are rare). Overflow: dropped at the
	// MaxBuffered cap. WriteErrors: TUN writes that failed.
	NonIPv4, Overflow, WriteErrors uint64
	// Late is the release lateness per direction (see Health), as netem
	// reports its own dispatcher's.
	Late [2]netem.Lateness
	// MinTransit is, per direction, the shortest time between a packet's
	// arrival from one TUN and its write into the other, on the
	// emulator's own clock: it is at least the configured one-way delay.
	MinTransit [2]time.Duration
	Buffered   int
}

// Total sums one direction's planes.
func (s Stats) Total(d Dir) netem.LinkStats {
	return netem.Stats{Links: s.Links}.Total(d)
}

// Emulator is a running TUN emulator. Its methods are safe for concurrent use.
type Emulator struct {
	cfg   Config
	start time.Time
	ns    [2]string
	tun   [2]*os.File
	dirs  [2]*direction
	pool  sync.Pool
	pairs map[[2]netip.Addr]int // Config.PairDelays: (A, B) -> 1 + index

	buffered               atomic.Int64
	nonIP, overflow, wrErr atomic.Uint64

	wg       sync.WaitGroup
	once     sync.Once
	closeErr error
	stopCtx  func() bool
}

// packet is an IP packet waiting in a plane's FIFO (its delivery time and
// epoch are in the netem.Item that holds it).
type packet struct {
	buf     *[]byte
	n       int
	size    int // the model's size: IP length less HeaderCharge
	plane   int
	arrival time.Duration
}

// direction is one direction's planes; sched (emu's delivery scheduler)
// writes their packets into the other TUN on time. sched.Mu guards links
// and rng.
type direction struct {
	em    *Emulator
	dir   Dir
	out   *os.File
	sched *netem.Sched[packet]
	links []*netem.Link
	rng   *rand.Rand
	// pairLast is the last delivery per pair wire and plane
	// ([wire-1][plane]), as in netem.
	pairLast [][]time.Duration
	// preLoss is each plane's loss drawn before the queue
	// (Config.LossBeforeQueue); preDrops and preBytes count it.
	preLoss            []float64
	preDrops, preBytes []atomic.Uint64

	minTransit atomic.Int64
	// The self-check (selfcheck.go): release lateness, the loops' busy
	// time, packets forwarded.
	late                   latHist
	readerBusy, writerBusy atomic.Int64
	sent                   atomic.Uint64
}

var seq atomic.Uint64

// New creates the namespaces and TUN devices and starts forwarding. It runs
// until Close or until ctx is done; Close must be called either way (it
// deletes the namespaces).
func New(ctx context.Context, cfg Config) (*Emulator, error) {
	if err := Check(); err != nil {
		return nil, err
	}
	if cfg.Planes == 0 {
		cfg.Planes = 1
	}
	if cfg.Planes < 1 || cfg.Planes > netem.MaxPlanes {
		return nil, fmt.Errorf("%w: planes %d outside [1, %d]", netem.ErrInvalid, cfg.Planes, netem.MaxPlanes)
	}
	if err := cfg.Link.Validate(); err != nil {
		return nil, err
	}
	if cfg.MTU == 0 {
		cfg.MTU = DefaultMTU
	}
	if cfg.MTU < 576 || cfg.MTU > 65535 {
		return nil, fmt.Errorf("%w: mtu %d outside [576, 65535]", netem.ErrInvalid, cfg.MTU)
	}
	if cfg.MaxBuffered <= 0 {
		cfg.MaxBuffered = DefaultMaxBuffered
	}
	if err := cfg.validateDelays(); err != nil {
		return nil, err
	}
	cleanStale()
	n := seq.Add(1)
	e := &Emulator{cfg: cfg, start: time.Now(), pairs: cfg.pairIndex()}
	e.ns[SiteA] = fmt.Sprintf("%sa-%d-%d", Prefix, os.Getpid(), n)
	e.ns[SiteB] = fmt.Sprintf("%sb-%d-%d", Prefix, os.Getpid(), n)
	size := cfg.MTU + 64
	e.pool.New = func() any { b := make([]byte, size); return &b }
	if err := e.setup(); err != nil {
		e.teardown()
		return nil, err
	}
	for d := range e.dirs {
		dd := &direction{
			em: e, dir: Dir(d), out: e.tun[Site(d).Other()],
			links:    make([]*netem.Link, cfg.Planes),
			rng:      rand.New(rand.NewPCG(cfg.Seed, uint64(d)+0x7e57)),
			preLoss:  make([]float64, cfg.Planes),
			preDrops: make([]atomic.Uint64, cfg.Planes), preBytes: make([]atomic.Uint64, cfg.Planes),
		}
		dd.minTransit.Store(math.MaxInt64)
		lc, pre := cfg.dirLink(Dir(d), cfg.Link)
		for i := range dd.links {
			dd.links[i], _ = netem.NewLink(lc)
			dd.preLoss[i] = pre
		}
		dd.pairLast = make([][]time.Duration, len(cfg.PairDelays))
		for i := range dd.pairLast {
			dd.pairLast[i] = make([]time.Duration, cfg.Planes)
		}
		np := cfg.Planes
		var err error
		// Queue wire*np+plane holds one wire's packets of one plane.
		dd.sched, err = netem.NewSched(netem.SchedConfig[packet]{
			Queues: np * (1 + len(cfg.PairDelays)), Now: e.now, Batch: 64,
			Stale: func(q int, it *netem.Item[packet]) bool { return it.Epoch != dd.links[q%np].Epoch() },
			Drop: func(q int, it netem.Item[packet]) {
				dd.links[q%np].DroppedInFlight() // was in flight when the plane failed
				e.buffered.Add(-1)
				e.pool.Put(it.V.buf)
			},
			Send: dd.send,
		})
		if err != nil {
			e.teardown()
			return nil, err
		}
		e.dirs[d] = dd
	}
	e.wg.Add(4)
	for d := range e.dirs {
		go func() {
			defer e.wg.Done()
			e.dirs[d].sched.Run()
		}()
		go e.readLoop(Site(d))
	}
	e.stopCtx = context.AfterFunc(ctx, func() { e.shutdown() })
	return e, nil
}

func (e *Emulator) nsPath(s Site) string { return filepath.Join(netnsDir, e.ns[s]) }

// Namespace returns the name of site s's namespace.
func (e *Emulator) Namespace(s Site) string { return e.ns[s] }

// Addr returns site s's address (inside its namespace).
func (e *Emulator) Addr(s Site) netip.Addr {
	if s == SiteA {
		return AddrA
	}
	return AddrB
}

// Planes returns the number of planes.
func (e *Emulator) Planes() int { return e.cfg.Planes }

func (e *Emulator) setup() error {
	for s := range e.ns {
		if err := ipCmd("netns", "add", e.ns[s]); err != nil {
			return unavailable("cannot create a network namespace", err)
		}
	}
	sysctls := map[string]string{
		"net.ipv4.tcp_rmem":                  "4096 131072 33554432",
		"net.ipv4.tcp_wmem":                  "4096 16384 33554432",
		"net.ipv6.conf.all.disable_ipv6":     "1",
		"net.ipv6.conf.default.disable_ipv6": "1",
		"net.ipv4.tcp_no_metrics_save":       "1",
	}
	for k, v := range e.cfg.Sysctls {
		sysctls[k] = v
	}
	for s := range e.ns {
		site := Site(s)
		err := e.Do(site, func() error {
			for k, v := range sysctls {
				if err := writeSysctl(k, v); err != nil && k != "net.ipv6.conf.all.disable_ipv6" && k != "net.ipv6.conf.default.disable_ipv6" {
					return fmt.Errorf("tunemu: sysctl %s: %w", k, err)
				}
			}
			f, err := openTUN(Device)
			if err != nil {
				return err
			}
			e.tun[s] = f
			return nil
		})
		if err != nil {
			return err
		}
		me, peer := e.Addr(site), e.Addr(site.Other())
		for _, args := range [][]string{
			{"-n", e.ns[s], "link", "set", "lo", "up"},
			{"-n", e.ns[s], "link", "set", Device, "mtu", fmt.Sprint(e.cfg.MTU), "txqueuelen", fmt.Sprint(DeviceQueueLen)},
			{"-n", e.ns[s], "addr", "add", me.String(), "peer", peer.String() + "/32", "dev", Device},
			{"-n", e.ns[s], "link", "set", Device, "up"},
		} {
			if err := ipCmd(args...); err != nil {
				return fmt.Errorf("tunemu: %w", err)
			}
		}
		for _, args := range e.extraAddrCmds(site) {
			if err := ipCmd(args...); err != nil {
				return fmt.Errorf("tunemu: %w", err)
			}
		}
	}
	return nil
}

// teardown closes the TUN devices and deletes the namespaces.
func (e *Emulator) teardown() {
	for s, f := range e.tun {
		if f != nil {
			if err := f.Close(); err != nil && e.closeErr == nil {
				e.closeErr = err
			}
			e.tun[s] = nil
		}
	}
	for _, name := range e.ns {
		if name == "" {
			continue
		}
		if _, err := os.Stat(filepath.Join(netnsDir, name)); err != nil {
			continue
		}
		if err := ipCmd("netns", "del", name); err != nil && e.closeErr == nil {
			e.closeErr = err
		}
	}
}

func (e *Emulator) now() time.Duration { return time.Since(e.start) }

// flowOf parses an IPv4 packet's 5-tuple.
func flowOf(b []byte) (proto uint8, src, dst netip.AddrPort, ok bool) {
	if len(b) < 20 || b[0]>>4 != 4 {
		return 0, src, dst, false
	}
	ihl := int(b[0]&0xf) * 4
	if ihl < 20 || len(b) < ihl {
		return 0, src, dst, false
	}
	proto = b[9]
	sa := netip.AddrFrom4([4]byte(b[12:16]))
	da := netip.AddrFrom4([4]byte(b[16:20]))
	var sp, dp uint16
	frag := binary.BigEndian.Uint16(b[6:8]) & 0x1fff
	if frag == 0 && (proto == netem.ProtoTCP || proto == netem.ProtoUDP) && len(b) >= ihl+4 {
		sp = binary.BigEndian.Uint16(b[ihl:])
		dp = binary.BigEndian.Uint16(b[ihl+2:])
	}
	return proto, netip.AddrPortFrom(sa, sp), netip.AddrPortFrom(da, dp), true
}

// setCE marks an IPv4 header CE and recomputes its checksum.
func setCE(b []byte) {
	b[1] |= byte(ecn.CE)
	ihl := int(b[0]&0xf) * 4
	b[10], b[11] = 0, 0
	var sum uint32
	for i := 0; i+1 < ihl; i += 2 {
		sum += uint32(b[i])<<8 | uint32(b[i+1])
	}
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	binary.BigEndian.PutUint16(b[10:12], ^uint16(sum))
}

// readLoop reads what site s sends and runs the model of its direction.
func (e *Emulator) readLoop(s Site) {
	defer e.wg.Done()
	d := e.dirs[netem.From(s)]
	f := e.tun[s]
	limit := int64(e.cfg.MaxBuffered)
	for {
		bp := e.pool.Get().(*[]byte)
		b := (*bp)[:cap(*bp)]
		n, err := f.Read(b)
		if err != nil {
			e.pool.Put(bp)
			if errors.Is(err, os.ErrClosed) {
				return
			}
			if d.isClosed() {
				return
			}
			time.Sleep(time.Millisecond)
			continue
		}
		now := e.now()
		b = b[:n]
		proto, src, dst, ok := flowOf(b)
		if !ok {
			e.nonIP.Add(1)
			e.pool.Put(bp)
			d.readerBusy.Add(int64(e.now() - now))
			continue
		}
		plane := netem.PlaneFor(netem.FlowHash(e.cfg.Seed, d.dir, proto, src, dst), e.cfg.Planes)
		size := max(n-HeaderCharge, 1)
		d.sched.Mu.Lock()
		if d.sched.Closed() {
			d.sched.Mu.Unlock()
			e.pool.Put(bp)
			return
		}
		l := d.links[plane]
		if p := d.preLoss[plane]; p > 0 && d.rng.Float64() < p {
			// Lost on arrival (Config.LossBeforeQueue): no link time.
			d.sched.Mu.Unlock()
			d.preDrops[plane].Add(1)
			d.preBytes[plane].Add(uint64(n)) // wire bytes, as the model counts
			e.pool.Put(bp)
			if tr := e.cfg.Trace; tr != nil {
				tr(netem.TraceEvent{Dir: d.dir, Plane: plane, Size: size, Verdict: netem.DroppedLoss, Arrival: now,
					ECNIn: ecn.FromTOS(b[1]), ECNOut: ecn.FromTOS(b[1])})
			}
			d.readerBusy.Add(int64(e.now() - now))
			continue
		}
		ev, q := d.admit(now, plane, e.wireOf(d.dir, src.Addr(), dst.Addr()), size, ecn.FromTOS(b[1]), e.buffered.Load() >= limit)
		ev.Dir, ev.Plane = d.dir, plane
		taken := false
		switch ev.Verdict {
		case netem.DroppedOverflow:
			e.overflow.Add(1)
		case netem.Forwarded:
			if ev.ECNOut == ecn.CE && ev.ECNIn != ecn.CE {
				setCE(b)
			}
			d.sched.Push(q, netem.Item[packet]{Deliver: ev.Deliver, Epoch: l.Epoch(),
				V: packet{buf: bp, n: n, size: size, plane: plane, arrival: now}})
			e.buffered.Add(1)
			taken = true
		}
		d.sched.Mu.Unlock()
		if taken {
			d.sched.Kick()
		} else {
			e.pool.Put(bp)
		}
		if tr := e.cfg.Trace; tr != nil {
			tr(ev)
		}
		d.readerBusy.Add(int64(e.now() - now))
	}
}

func (d *direction) isClosed() bool {
	d.sched.Mu.Lock()
	defer d.sched.Mu.Unlock()
	return d.sched.Closed()
}

// send writes due packets into the other TUN (on the dispatcher).
func (d *direction) send(items []netem.Item[packet]) {
	em := d.em
	start := em.now()
	now := start
	for i := range items {
		p := &items[i].V
		if t := int64(now - p.arrival); t < d.minTransit.Load() {
			d.minTransit.Store(t) // only this goroutine writes it
		}
		// Lateness is taken as each write starts: the writes of a batch
		// are sequential, and the last one's wait is lateness too.
		d.late.add(now - items[i].Deliver)
		if _, err := d.out.Write((*p.buf)[:p.n]); err != nil {
			em.wrErr.Add(1)
		}
		d.links[p.plane].Delivered(p.size)
		em.pool.Put(p.buf)
		now = em.now()
	}
	em.buffered.Add(-int64(len(items)))
	d.sent.Add(uint64(len(items)))
	d.writerBusy.Add(int64(now - start))
}

// PlaneOf returns the plane that carries packets of protocol proto from src
// to dst in direction d.
func (e *Emulator) PlaneOf(d Dir, proto uint8, src, dst netip.AddrPort) int {
	return netem.PlaneFor(netem.FlowHash(e.cfg.Seed, d, proto, src, dst), e.cfg.Planes)
}

func (e *Emulator) checkPlane(plane int) error {
	if plane < 0 || plane >= e.cfg.Planes {
		return fmt.Errorf("%w: plane %d outside [0, %d)", netem.ErrInvalid, plane, e.cfg.Planes)
	}
	return nil
}

// SetLink re-tunes one plane in one direction while traffic flows.
func (e *Emulator) SetLink(d Dir, plane int, l netem.LinkConfig) error {
	if err := e.checkPlane(plane); err != nil {
		return err
	}
	if d > BtoA {
		return fmt.Errorf("%w: direction %d", netem.ErrInvalid, d)
	}
	dd := e.dirs[d]
	if err := l.Validate(); err != nil {
		return err
	}
	lc, pre := e.cfg.dirLink(d, l)
	dd.sched.Mu.Lock()
	defer dd.sched.Mu.Unlock()
	if err := dd.links[plane].SetConfig(e.now(), lc); err != nil {
		return err
	}
	dd.preLoss[plane] = pre
	return nil
}

// SetAllLinks re-tunes every plane in both directions.
func (e *Emulator) SetAllLinks(l netem.LinkConfig) error {
	if err := l.Validate(); err != nil {
		return err
	}
	for d := range e.dirs {
		for p := 0; p < e.cfg.Planes; p++ {
			if err := e.SetLink(Dir(d), p, l); err != nil {
				return err
			}
		}
	}
	return nil
}

// Fail black-holes a plane in both directions, including what is in flight.
func (e *Emulator) Fail(plane int) error { return e.setDown(plane, true) }

// Restore brings a failed plane back with empty queues.
func (e *Emulator) Restore(plane int) error { return e.setDown(plane, false) }

func (e *Emulator) setDown(plane int, down bool) error {
	if err := e.checkPlane(plane); err != nil {
		return err
	}
	for _, d := range e.dirs {
		d.sched.Mu.Lock()
		if down {
			d.links[plane].Fail(e.now())
		} else {
			d.links[plane].Restore()
		}
		d.sched.Mu.Unlock()
	}
	return nil
}

// Stats returns a snapshot of the counters.
func (e *Emulator) Stats() Stats {
	var s Stats
	for d, dd := range e.dirs {
		s.Links[d] = make([]netem.LinkStats, len(dd.links))
		for i, l := range dd.links {
			s.Links[d][i] = l.Stats()
			// Losses before the queue never reached the model.
			pre, preB := dd.preDrops[i].Load(), dd.preBytes[i].Load()
			s.Links[d][i].In += pre
			s.Links[d][i].BytesIn += preB
			s.Links[d][i].LossDrops += pre
		}
		if m := dd.minTransit.Load(); m != math.MaxInt64 {
			s.MinTransit[d] = time.Duration(m)
		}
		ls := dd.late.snapshot()
		s.Late[d] = netem.Lateness{Count: ls.Count(), Mean: ls.Mean(), Max: ls.Max}
	}
	s.NonIPv4, s.Overflow, s.WriteErrors = e.nonIP.Load(), e.overflow.Load(), e.wrErr.Load()
	s.Buffered = int(e.buffered.Load())
	return s
}

// Close stops forwarding, closes the TUN devices and deletes both
// namespaces (with every socket and process-less state left in them). It
// is idempotent.
func (e *Emulator) Close() error {
	if e.stopCtx != nil {
		e.stopCtx()
	}
	e.shutdown()
	return e.closeErr
}

func (e *Emulator) shutdown() {
	e.once.Do(func() {
		for _, d := range e.dirs {
			if d == nil {
				continue
			}
			d.sched.Mu.Lock()
			d.sched.Close()
			d.sched.Mu.Unlock()
		}
		for _, f := range e.tun {
			f.Close() // wakes the readers
		}
		e.wg.Wait()
		e.tun = [2]*os.File{}
		for _, d := range e.dirs {
			if d != nil {
				d.sched.Drain(func(it netem.Item[packet]) { e.pool.Put(it.V.buf) })
			}
		}
		e.buffered.Store(0)
		e.teardown()
	})
}

// Health returns the self-check's counters since New (see selfcheck.go);
// subtract two to get a run's window and Check the result. It reads the
// TUN devices' counters with `ip`, so it is for the edges of a run, not a
// hot loop.
func (e *Emulator) Health() Health {
	h := Health{At: e.now(), Overflow: e.overflow.Load()}
	for d, dd := range e.dirs {
		h.Late[d] = dd.late.snapshot()
		h.ReaderBusy[d] = time.Duration(dd.readerBusy.Load())
		h.WriterBusy[d] = time.Duration(dd.writerBusy.Load())
		h.Packets[d] = dd.sent.Load()
	}
	for _, s := range []Site{SiteA, SiteB} {
		ds, err := e.DeviceStats(s)
		if err != nil {
			h.TUNDrops = -1
			break
		}
		h.TUNDrops += int64(ds.TxDropped)
	}
	return h
}
