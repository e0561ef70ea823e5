package metaroce

import (
	crand "crypto/rand"
	"encoding/binary"
	"math/rand/v2"
	"time"

	"github.com/mrgw/mrgw/cc"

	"github.com/mrgw/mrgw/units"
)

// PeerID names a remote endpoint for the driver. The state machine never
// interprets it: the driver maps it to an address (a host in the simulator, a
// UDP address in production).
type PeerID uint32

// RecvMeta is what the driver knows about a received datagram beyond its bytes.
type RecvMeta struct {
	Peer PeerID
	// Entropy is the datagram's source port as the receiver saw it.
	Entropy uint16
	// CE is true if the datagram arrived marked ECN congestion-experienced.
	CE bool
}

// Transmit describes a datagram that Poll wrote into the caller's buffer.
type Transmit struct {
	Peer PeerID
	Conn *Conn
	Path int
	// Entropy is a UDP port that identifies the path to the fabric. When
	// Reply is false the datagram leaves from the local path socket whose
	// port is Entropy, towards the peer's listening port; when Reply is true
	// (acks, probe answers, errors) it leaves from the listening port towards
	// the peer's port Entropy, so that it follows the path being answered.
	Entropy uint16
	Reply   bool
	// ECT asks the driver to send the datagram ECN-capable (ECT(0)).
	ECT bool
	Len int
	// Tracked marks a DATA datagram recorded in its path's sent history
	// as sequence Seq: what a driver with Config.DepartureWait reports to
	// Conn.Departed once it has left.
	Tracked bool
	Seq     uint64
	// Payload, when not nil, is the rest of the datagram, left where it
	// lies (a driver that asked for it: Endpoint.LendPayloads): the
	// datagram is the Len bytes written into the buffer followed by
	// Payload, which the driver appends to them (the buffer has room).
	Payload []byte
}

// EndpointStats counts what the Endpoint dropped before any connection saw it.
type EndpointStats struct {
	Received, Truncated, BadVersion, BadType, UnknownConn, Malformed, Refused uint64
	VersionSent                                                               uint64
}

// Endpoint is one MetaRoCE stack: its connections, the memory they place
// into, and the receiver loop's fair share. It is a pure state machine: the
// driver feeds it datagrams and the time, and polls it for datagrams to send,
// events and the next timer. It is not safe for concurrent use.
type Endpoint struct {
	cfg   Config
	mem   *Memory
	share *cc.FairShare
	rng   *rand.Rand

	conns map[uint64]*Conn
	// tags holds the connections that speak, or offered, wire version 2 by
	// their connection tag (the low 32 bits of the id), which is all a
	// version-2 DATA carries of the id (PROTOCOL.md §12).
	tags     map[uint32]*Conn
	lastTag  *Conn // the connection a version-2 DATA named last, nil if none: DATA comes in runs of one connection
	versions uint8 // Config.WireVersions, bit i = version i+1
	list     []*Conn
	// ready and timers are the scheduler (sched.go); closing counts closed
	// connections not yet reaped.
	ready     []*Conn
	readyHead int
	timers    timerHeap
	dirty     []*Conn // touched since the timers were last read (retimeDirty)
	due       []*Conn
	closing   int

	// replies the endpoint owes to packets of no connection (VERSION,
	// CLOSE-ack), bounded: beyond the bound they are dropped and counted.
	replies []reply
	events  []Event
	evHead  int
	sinks   map[uint32]Sink // streams bound on every connection (BindSinkAll)

	// lend: Poll hands DATA payloads out by reference (LendPayloads).
	// lentMsgs[lentHead:] are the messages of the payloads lent and not
	// yet done with, in the order they were lent (PayloadsDone counts
	// them off). held[heldHead:] are the events waiting for a message's
	// lent payloads (its completion), and those behind one, in order.
	lend     bool
	lentMsgs []*txMessage
	lentHead int
	lentDone uint64
	held     []heldEvent
	heldHead int
	// rxBuf is the buffer of the datagram Receive is processing, while
	// a BufferSink may keep it; rxKept says one did.
	rxBuf  []byte
	rxKept bool

	Stats EndpointStats
}

// heldEvent is an event held back: its message (nil if none) still has
// payloads lent, or an event ahead of it does.
type heldEvent struct {
	m  *txMessage
	ev Event
}

// LendPayloads makes Poll leave the payload of a DATA datagram where it
// lies (the message's data, a relay buffer) and hand it in
// Transmit.Payload instead of copying it into the buffer: the driver
// appends it, on another goroutine if it likes, so that the copy leaves
// the goroutine running the protocol. The driver must then report with
// PayloadsDone when it no longer reads them: until then the endpoint
// holds back what would let their memory be reused, the release of a
// relay buffer of the message and the message's completion (with the
// events after it, which keep their order).
func (e *Endpoint) LendPayloads() { e.lend = true }

// lendOut records that a payload of m was lent.
func (e *Endpoint) lendOut(m *txMessage) {
	e.lentMsgs = append(e.lentMsgs, m)
	m.lentOut++
}

// PayloadsDone tells the endpoint that the driver no longer reads the
// payloads of the first n Transmits that carried one (counted in the
// order Poll returned them): releases and events held for them go ahead.
func (e *Endpoint) PayloadsDone(n uint64) {
	for e.lentDone < n && e.lentHead < len(e.lentMsgs) {
		m := e.lentMsgs[e.lentHead]
		e.lentMsgs[e.lentHead] = nil
		e.lentHead++
		e.lentDone++
		if m.lentOut--; m.lentOut == 0 && len(m.heldBufs) > 0 {
			for i, b := range m.heldBufs {
				m.release(b)
				m.heldBufs[i] = nil
			}
			m.heldBufs = m.heldBufs[:0]
		}
	}
	// Compact once the done prefix dominates: under steady load the
	// queues are never empty, and appends must not keep the prefix alive.
	if e.lentHead > 0 && e.lentHead*2 >= len(e.lentMsgs) {
		k := copy(e.lentMsgs, e.lentMsgs[e.lentHead:])
		clear(e.lentMsgs[k:])
		e.lentMsgs = e.lentMsgs[:k]
		e.lentHead = 0
	}
	for e.heldHead < len(e.held) {
		h := e.held[e.heldHead]
		if h.m != nil && h.m.lentOut > 0 {
			break
		}
		e.held[e.heldHead] = heldEvent{}
		e.heldHead++
		e.push(h.ev)
	}
	if e.heldHead > 0 && e.heldHead*2 >= len(e.held) {
		k := copy(e.held, e.held[e.heldHead:])
		clear(e.held[k:])
		e.held = e.held[:k]
		e.heldHead = 0
	}
}

// releaseBuf gives a relay buffer of m back through m's release (nil:
// nobody wants it), once no lent payload of m may still be read.
func (e *Endpoint) releaseBuf(m *txMessage, b []byte) {
	if m.release == nil {
		return
	}
	if m.lentOut > 0 {
		m.heldBufs = append(m.heldBufs, b)
		return
	}
	m.release(b)
}

type reply struct {
	peer    PeerID
	entropy uint16
	pkt     [CommonHeaderLen + 2 + CloseLen]byte
	n       int
}

const maxReplies = 64

// NewEndpoint creates an Endpoint that places into mem (which may be shared).
func NewEndpoint(cfg Config, mem *Memory) (*Endpoint, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if mem == nil {
		mem = NewMemory()
	}
	if cfg.Seed == 0 {
		var b [8]byte
		_, _ = crand.Read(b[:])
		cfg.Seed = binary.LittleEndian.Uint64(b[:]) | 1
	}
	e := &Endpoint{
		cfg:   cfg,
		mem:   mem,
		rng:   rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)),
		conns: make(map[uint64]*Conn),
		tags:  make(map[uint32]*Conn),
	}
	e.versions = cfg.versionSet()
	if cfg.ReceiveCapacity > 0 {
		e.share = cc.NewFairShare(cfg.ReceiveCapacity, 100*cfg.Path.InitialRTT+10*time.Millisecond)
		// Measure demand and marks over a couple of round trips, so that
		// the receiver loop reacts within round trips, not idle periods.
		e.share.MarkWindow = 2 * cfg.Path.InitialRTT
	}
	return e, nil
}

// SetReceiveCapacity changes ReceiveCapacity while the endpoint runs
// (a live reload of the operator's capacity): the receiver loop divides
// the new capacity from the next ack on. 0 stops the hints.
func (e *Endpoint) SetReceiveCapacity(capacity units.BitRate) {
	e.cfg.ReceiveCapacity = max(capacity, 0)
	switch {
	case capacity <= 0:
		e.share = nil
	case e.share != nil:
		e.share.SetCapacity(capacity)
	default:
		e.share = cc.NewFairShare(capacity, 100*e.cfg.Path.InitialRTT+10*time.Millisecond)
		e.share.MarkWindow = 2 * e.cfg.Path.InitialRTT
	}
}

// Config returns the endpoint's configuration with defaults applied.
func (e *Endpoint) Config() Config { return e.cfg }

// Memory returns the registry WRITEs place into.
func (e *Endpoint) Memory() *Memory { return e.mem }

// ConnPeer returns the peer of connection id, if the Endpoint has it. A
// driver that cannot tell two peers apart by address (several hosts behind
// one IP) uses it to attribute a datagram by its connection id, as Peek
// returns it: for a version-2 DATA that is its 32-bit tag, which ConnPeer
// looks up among the version-2 connections when no connection has the id.
func (e *Endpoint) ConnPeer(id uint64) (PeerID, bool) {
	if c := e.conns[id]; c != nil {
		return c.peer, true
	}
	if id <= 0xffffffff {
		if c := e.tags[uint32(id)]; c != nil {
			return c.peer, true
		}
	}
	return 0, false
}

// speaks reports whether the endpoint speaks wire version v.
func (e *Endpoint) speaks(v uint8) bool { return v >= 1 && v <= 8 && e.versions&(1<<(v-1)) != 0 }

// Conns returns the endpoint's connections (do not modify the slice).
func (e *Endpoint) Conns() []*Conn { return e.list }

// Connect starts a connection to peer. It is established when
// EventConnected is reported.
func (e *Endpoint) Connect(now time.Duration, peer PeerID) (*Conn, error) {
	return e.ConnectWith(now, peer, ConnOptions{})
}

// ConnOptions are per-connection choices that differ from the Endpoint's
// Config: one Endpoint can then carry connections of different kinds (a
// gateway's LAN connections under a data-center controller and its WAN
// connections under a long-RTT one). Zero fields take the Config's value.
type ConnOptions struct {
	// CC builds the connection's congestion controller.
	CC cc.Factory
	// Paths is the number of paths (at most Config.Paths).
	Paths int
	// NoRateHint leaves the connection out of the receiver loop
	// (ReceiveCapacity): its sender gets no rate hint and its data
	// takes no share. A gateway uses it for its hosts: the capacity it
	// divides is its WAN's, which only peer gateways send over.
	NoRateHint bool
	// RateHintScale multiplies the share the connection's sender is told
	// (0 means 1): a gateway tells its hosts more than their share of its
	// WAN, so that the queue forms in the gateway, where its scheduler
	// weighs classes, while the hosts stay paced well below their LAN
	// rate (an incast of hosts is still held back).
	RateHintScale float64
	// PMTU turns on path MTU discovery per group of paths (Groups > 0;
	// see PMTUSearch and pmtu_conn.go).
	PMTU PMTUConfig
}

// ConnectWith is Connect with per-connection options.
func (e *Endpoint) ConnectWith(now time.Duration, peer PeerID, o ConnOptions) (*Conn, error) {
	paths := e.cfg.Paths
	if o.Paths > 0 && o.Paths < paths {
		paths = o.Paths
	}
	if len(e.conns) >= e.cfg.MaxConns {
		return nil, ErrQueueFull
	}
	// An initiator that offers version 2 needs a connection tag no other
	// connection of its endpoint uses (PROTOCOL.md §12).
	v2 := e.speaks(Version2)
	var id uint64
	for id == 0 || e.conns[id] != nil || (v2 && e.tags[uint32(id)] != nil) {
		id = e.rng.Uint64()
	}
	c := newConn(e, id, peer, true, paths, e.cfg.MTU, now, o.CC)
	c.offer = e.versions
	if v2 {
		e.tags[uint32(id)] = c
	}
	c.setPMTU(o.PMTU)
	e.add(c)
	return c, nil
}

func (e *Endpoint) add(c *Conn) {
	e.conns[c.id] = c
	e.list = append(e.list, c)
	c.touch()
}

// remove forgets a closed connection.
func (e *Endpoint) remove(c *Conn) {
	c.removed = true
	c.timerGen++
	delete(e.conns, c.id)
	e.untag(c)
	for i, x := range e.list {
		if x == c {
			e.list = append(e.list[:i], e.list[i+1:]...)
			break
		}
	}
	if e.share != nil {
		e.share.Forget(c.id)
	}
}

// untag takes c out of the version-2 table (it agreed version 1, or is gone).
func (e *Endpoint) untag(c *Conn) {
	if e.lastTag == c {
		e.lastTag = nil
	}
	if e.tags[uint32(c.id)] == c {
		delete(e.tags, uint32(c.id))
	}
}

func (e *Endpoint) emit(ev Event) { e.emitFor(nil, ev) }

// emitFor queues ev, an event about message m (nil: none); it waits
// while m has payloads lent, or while an event ahead of it waits.
func (e *Endpoint) emitFor(m *txMessage, ev Event) {
	if e.heldHead < len(e.held) || m != nil && m.lentOut > 0 {
		e.held = append(e.held, heldEvent{m: m, ev: ev})
		return
	}
	e.push(ev)
}

// push queues ev for PollEvent.
func (e *Endpoint) push(ev Event) {
	if e.evHead > 0 && e.evHead == len(e.events) {
		e.events = e.events[:0]
		e.evHead = 0
	}
	e.events = append(e.events, ev)
}

// PollEvent returns the next event, if any.
func (e *Endpoint) PollEvent() (Event, bool) {
	if e.evHead >= len(e.events) {
		return Event{}, false
	}
	ev := e.events[e.evHead]
	e.events[e.evHead] = Event{}
	e.evHead++
	return ev, true
}

func (e *Endpoint) queueReply(peer PeerID, entropy uint16, pkt []byte) {
	if len(e.replies) >= maxReplies {
		e.Stats.Refused++
		return
	}
	r := reply{peer: peer, entropy: entropy, n: len(pkt)}
	copy(r.pkt[:], pkt)
	e.replies = append(e.replies, r)
}

// ReceiveIn is Receive for a datagram that lies in buf, a buffer the
// caller gives up if a BufferSink keeps it: kept reports that one did, and
// the caller must not use buf again.
func (e *Endpoint) ReceiveIn(now time.Duration, b, buf []byte, m RecvMeta) (kept bool) {
	e.rxBuf = buf
	e.Receive(now, b, m)
	kept = e.rxKept
	e.rxBuf, e.rxKept = nil, false
	return kept
}

// Receive processes one datagram. Malformed or unexpected datagrams are
// dropped and counted; Receive never panics on any input.
func (e *Endpoint) Receive(now time.Duration, b []byte, m RecvMeta) {
	e.Stats.Received++
	ver, t, id, err := Peek(b)
	if err != nil {
		e.Stats.Truncated++
		return
	}
	if ver == 0 && t == TypeVersion {
		_, vers, err := DecodeVersion(b)
		if err != nil {
			e.Stats.Malformed++
			return
		}
		if c := e.conns[id]; c != nil && c.state == stateConnecting {
			for _, v := range vers {
				if v == Version {
					return // the peer does speak ours: a stray reply
				}
			}
			c.fail(now, ErrNoCommonVersion)
		}
		return
	}
	if ver == Version2 && t == TypeData && e.speaks(Version2) {
		// A version-2 DATA names its connection by tag only.
		c := e.lastTag
		if c == nil || uint32(c.id) != uint32(id) {
			if c = e.tags[uint32(id)]; c != nil {
				e.lastTag = c
			}
		}
		if c == nil || c.peer != m.Peer {
			e.Stats.UnknownConn++
			return
		}
		c.receive(now, t, b, m)
		c.touch()
		return
	}
	if ver != Version {
		e.Stats.BadVersion++
		var tmp [CommonHeaderLen + 1 + MaxVersion]byte
		var vers [MaxVersion]uint8
		n := 0
		for v := uint8(1); v <= MaxVersion; v++ {
			if e.speaks(v) {
				vers[n] = v
				n++
			}
		}
		if p, err := AppendVersion(tmp[:0], id, vers[:n]); err == nil {
			e.Stats.VersionSent++
			e.queueReply(m.Peer, m.Entropy, p)
		}
		return
	}
	if (t < TypeData || t > TypeError) && t != TypePMTUProbe && t != TypePMTUAck {
		e.Stats.BadType++
		return
	}
	c := e.conns[id]
	if c == nil || c.peer != m.Peer {
		switch t {
		case TypeInit:
			e.accept(now, b, m)
		case TypeClose:
			if _, _, ack, err := DecodeClose(b); err == nil && !ack {
				var tmp [CloseLen]byte
				p, _ := AppendClose(tmp[:0], id, CloseNormal, true)
				e.queueReply(m.Peer, m.Entropy, p)
			}
			e.Stats.UnknownConn++
		default:
			e.Stats.UnknownConn++
		}
		return
	}
	c.receive(now, t, b, m)
	c.touch()
}

func (e *Endpoint) accept(now time.Duration, b []byte, m RecvMeta) {
	var h Handshake
	if err := DecodeHandshake(b, TypeInit, &h); err != nil {
		e.Stats.Malformed++
		return
	}
	wire := e.chooseVersion(&h)
	if !e.cfg.Listen || len(e.conns) >= e.cfg.MaxConns || e.conns[h.Conn] != nil || wire == 0 {
		e.Stats.Refused++
		var tmp [CloseLen]byte
		p, _ := AppendClose(tmp[:0], h.Conn, CloseRefused, false)
		e.queueReply(m.Peer, m.Entropy, p)
		return
	}
	paths := int(h.Paths)
	if paths > e.cfg.Paths {
		paths = e.cfg.Paths
	}
	mtu := int(h.MTU)
	if mtu > e.cfg.MTU {
		mtu = e.cfg.MTU
	}
	var o ConnOptions
	if e.cfg.AcceptOptions != nil {
		o = e.cfg.AcceptOptions(m.Peer)
	}
	if o.Paths > 0 && o.Paths < paths {
		paths = o.Paths
	}
	c := newConn(e, h.Conn, m.Peer, false, paths, mtu, now, o.CC)
	c.wire = wire
	if wire == Version2 {
		e.tags[uint32(h.Conn)] = c
	}
	c.noHint = o.NoRateHint
	c.hintScale = o.RateHintScale
	c.setPMTU(o.PMTU)
	c.rx[0].peerPort = m.Entropy
	c.state = stateEstablished
	c.needAccept = true
	c.acceptEcho = h.Timestamp
	e.add(c)
	e.emit(Event{Kind: EventConnected, Conn: c, At: now})
	if e.share != nil && !c.noHint {
		e.share.Observe(now, c.id)
		e.pushHints(now, c)
	}
}

// chooseVersion picks the wire version of a connection an INIT opens: the
// highest both sides speak, but version 1 when the initiator's connection
// tag is already in use here (PROTOCOL.md §4 "Version"); 0 when there is
// no common version.
func (e *Endpoint) chooseVersion(h *Handshake) uint8 {
	if h.Offers(Version2) && e.speaks(Version2) && e.tags[uint32(h.Conn)] == nil {
		return Version2
	}
	if h.Offers(Version1) && e.speaks(Version1) {
		return Version1
	}
	return 0
}

// Poll writes the next datagram to send into buf (which must have room for
// MTU+DataHeaderLen bytes) and describes it. It returns false when nothing
// may be sent now; NextTimeout says when to try again.
func (e *Endpoint) Poll(now time.Duration, buf []byte) (tx Transmit, ok bool) {
	if len(e.replies) > 0 {
		r := e.replies[0]
		e.replies = e.replies[1:]
		n := copy(buf[:cap(buf)], r.pkt[:r.n])
		return Transmit{Peer: r.peer, Entropy: r.entropy, Reply: true, Len: n}, true
	}
	// The layers below fill the result in place: returned by value through
	// each of them, its copies were a tenth of a datagram's protocol work
	// (BenchmarkDatapath). A named result, not a local returned: that one
	// was copied once more, with wide loads that stall on its fields'
	// narrow stores.
	if e.pollReady(now, buf, &tx) {
		return tx, true
	}
	if e.closing > 0 {
		e.reap()
	}
	return Transmit{}, false
}

// reap removes connections that finished closing.
func (e *Endpoint) reap() {
	e.closing = 0
	for i := 0; i < len(e.list); i++ {
		c := e.list[i]
		if c.state != stateClosed {
			continue
		}
		if c.hasControl() {
			e.closing++ // still owes a CLOSE-ack
			continue
		}
		e.remove(c)
		i--
	}
}

// NextTimeout returns when HandleTimeout should next be called, or a negative
// value if no timer is set.
func (e *Endpoint) NextTimeout() time.Duration {
	if len(e.replies) > 0 {
		return 0
	}
	if t, ok := e.nextTimer(); ok {
		return t.at
	}
	return -1
}

// HandleTimeout runs every timer that is due at now.
func (e *Endpoint) HandleTimeout(now time.Duration) {
	// Collect the due connections first and run each once: a timer a
	// connection sets for now or earlier while handling this one waits for
	// the next call, so this never spins.
	due := e.due[:0]
	for {
		t, ok := e.nextTimer()
		if !ok || t.at > now {
			break
		}
		e.timers.pop()
		t.c.deadline = -1 // consumed: touch files the next one
		t.c.timerGen++
		due = append(due, t.c)
	}
	for i, c := range due {
		c.handleTimeout(now)
		c.touch()
		due[i] = nil
	}
	e.due = due[:0]
}

func (e *Endpoint) rateHintBps(now time.Duration, c *Conn) uint64 {
	if e.share == nil || c.noHint {
		return 0
	}
	e.share.Observe(now, c.id)
	return hintBps(units.BitRate(float64(e.share.Share(now).Bits()) * c.scale()))
}

// pushHints re-announces the rate hint to the senders that were told a
// share well above the current one: when a burst of senders connects (an
// incast), the first ones were accepted with the whole capacity, and
// waiting for their data to be acknowledged would let them send a round
// trip at that rate. A repeated ACCEPT carries the new hint at once. It goes
// to every sender told more than 10% above the current share (the tolerance
// the incast settling is measured with); geometric steps keep it at about
// 44 repeats per sender for a 64-to-1 incast, each a 40-byte packet.
func (e *Endpoint) pushHints(now time.Duration, except *Conn) {
	if e.share == nil {
		return
	}
	share := hintBps(e.share.Share(now).Bits())
	for _, c := range e.list {
		if c == except || c.initiator || c.state != stateEstablished || c.lastHint == 0 {
			continue
		}
		if sc := uint64(float64(share) * c.scale()); c.lastHint > sc+sc/10 {
			c.needAccept = true
			c.touch()
		}
	}
}
