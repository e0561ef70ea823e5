package metaroce

import (
	"math/rand/v2"
	"time"

	"github.com/mrgw/mrgw/cc"
	"github.com/mrgw/mrgw/pathmgr"
)

type connState uint8

const (
	stateConnecting connState = iota
	stateEstablished
	stateClosing
	stateClosed
)

// ConnStats counts a connection's work. All fields only grow.
type ConnStats struct {
	// Sender side.
	DataSent, Retransmits, PayloadBytesSent, AcksReceived, PacketsLost, Timeouts, ProbesSent uint64
	MessagesSent, MessagesFailed                                                             uint64
	// Retransmits by the cause of the loss that queued them: a gap in a
	// path's SACK vector (RetransmitsGap), or a probe timeout or a path
	// taken down (RetransmitsTimeout); they sum to Retransmits. Of the
	// packets resent, RetransmitsSpurious were not lost: an ACK that
	// predates the sender giving them up acknowledged them afterwards.
	RetransmitsGap, RetransmitsTimeout, RetransmitsSpurious uint64
	// PacingForfeitNs is sending time the pacer gave up: the connection was
	// waiting for its next pacing slot, and the driver came back so late
	// that more than PacingSlack had fallen due (what is beyond the slack
	// is never sent). It measures a driver whose timers or CPU cannot keep
	// up with the pacing rate.
	PacingForfeitNs uint64
	// Receiver side.
	DataReceived, Duplicates, PayloadBytesPlaced, AcksSent, MessagesReceived uint64
	OutOfOrderDropped                                                        uint64 // RoCEv2 mode only
	PlacementErrors, Malformed, WindowViolations                             uint64
	// Wire version 2 (PROTOCOL.md §12): DATA packets that carried a
	// message descriptor (DescriptorsSent, of which DescriptorOnlySent had
	// no payload), and DATA of a message whose descriptor had not arrived,
	// dropped unrecorded so that the sender resends them (Orphans).
	DescriptorsSent, DescriptorOnlySent, Orphans uint64
	// Path MTU discovery (pmtu_conn.go): probes sent and answered.
	PMTUProbesSent, PMTUProbesAcked uint64
}

// maxControl bounds each queue of control packets a connection owes
// (probe answers, errors); beyond it they are dropped and counted, and the
// peer's timers recover.
const maxControl = 64

// Conn is one MetaRoCE connection: a sender and a receiver half that share
// paths, a congestion controller and a set of ordered streams.
type Conn struct {
	ep        *Endpoint
	id        uint64
	peer      PeerID
	initiator bool
	state     connState
	mode      Mode
	mtu       int
	closeErr  error
	// wire is the DATA wire version the connection agreed (PROTOCOL.md
	// §4); 0 while an initiator waits for the ACCEPT. offer is what an
	// initiator offered (bit i = version i+1).
	wire, offer uint8

	paths    *pathmgr.Set
	ctl      cc.Controller
	windowFn func(int) int
	// weightFn is the controller's split (cc.Splitter), when it has one:
	// the sprayer then sends by it (pathmgr.Set.PickWeighted).
	weightFn func(int) float64
	// rxHdr is the header of the DATA packet being received: a field
	// rather than a local, because a stream Sink is handed a pointer to it
	// and a local would then escape, one allocation per packet. rxHdr2 is
	// a version-2 DATA as decoded, before rx.go widens it into rxHdr.
	rxHdr  DataHeader
	rxHdr2 DataHeaderV2

	// sender
	tx        []sentHistory // per path (sent.go)
	streams   map[uint32]*txStream
	active    []*txStream
	activeCur int
	retx      []chunkRef
	retxHead  int
	// retxCause[i] is why retx[i] is queued (lossGap, lossTimeout), set
	// from lossCause while a sent history reports losses.
	retxCause []uint8
	lossCause uint8
	queued    int
	nextSend  time.Duration
	paceStart time.Duration // when the pacing clock started (the ACCEPT)
	paceWait  bool          // stopped for the pacer, and not out of data or window since: a late driver may catch up
	paceHold  bool          // a burst used Config.PacingBurst: nothing more until the pacing clock is due
	minRTT    time.Duration // smallest RTT sample of any path (0: none yet); sizes the pacer's slack
	// rttHi is the largest recent RTT sample of any path, decaying towards
	// the newer ones over rttHiMemory (rttHiAt: its last update): the
	// probe timeout's floor (ptoDeadline).
	rttHi, rttHiAt time.Duration
	cwndLimit      bool     // the last attempt to send found no path with room
	descNext       descNext // version 2: the chunk whose descriptor just went alone, and its path
	// newsOwed: some path's floor passed a lost packet while packets
	// after it are unreported (sentHistory.owesFloor); its next DATA
	// goes on that path (floorPath).
	newsOwed bool

	// receiver
	rx     []rxPath // per path (rx.go)
	placer placer   // streams, messages, posted buffers (placement.go)
	// acksOwed is false only when no path owes an acknowledgement (no
	// packet pending, no NAK): set by whatever owes one, cleared by
	// pollAck when it finds none.
	acksOwed bool

	// control packets owed
	needInit, needAccept, needClose, needCloseAck bool
	acceptEcho                                    uint64
	closeAckPort                                  uint16
	hsDeadline                                    time.Duration
	hsTries                                       int
	hsRTO                                         time.Duration
	closeSends                                    int
	closeReason                                   CloseReason
	probeAcks                                     []probeAck
	errsOut                                       []errOut
	trans                                         []pathmgr.Transition
	allDownSince                                  time.Duration // -1 while some path is usable
	lastHint                                      uint64        // rate hint (bits/s) last sent to the peer
	noHint                                        bool          // ConnOptions.NoRateHint
	hintScale                                     float64       // ConnOptions.RateHintScale
	pmtu                                          *pmtuConn     // path MTU discovery (pmtu_conn.go); nil: off
	ackedLargest                                  int           // the largest packet the ACK being handled acknowledged (pmtuProgress)

	// Scheduler state (sched.go).
	inReady    bool
	timerDirty bool // queued in the endpoint's dirty list (sched.go)
	removed    bool
	deadline   time.Duration
	timerGen   uint64

	Stats ConnStats
}

type probeAck struct {
	path uint16
	port uint16
	ts   uint64
}

type errOut struct {
	e    MessageError
	port uint16
}

func newConn(e *Endpoint, id uint64, peer PeerID, initiator bool, paths, mtu int, now time.Duration, factory cc.Factory) *Conn {
	cfg := &e.cfg
	if factory == nil {
		factory = cfg.CC
	}
	c := &Conn{
		ep:        e,
		id:        id,
		peer:      peer,
		initiator: initiator,
		mode:      cfg.Mode,
		mtu:       mtu,
		streams:   make(map[uint32]*txStream),
		hsRTO:     3 * cfg.Path.InitialRTT,
	}
	c.allDownSince = -1
	c.deadline = -1
	seed := e.rng.Uint64()
	c.paths = pathmgr.NewSet(paths, cfg.Path, rand.New(rand.NewPCG(seed, id)))
	c.ctl = factory(paths, mtu+DataHeaderLen)
	c.windowFn = c.window
	if sp, ok := c.ctl.(cc.Splitter); ok && sp.Splits() {
		c.weightFn = sp.SplitWeight
	}
	c.placer = newPlacer(mtu, cfg.MaxMessagesAhead, e.mem, &e.sinks, &c.Stats, c)
	c.placer.relayOnly = e.cfg.RelayOnly
	c.tx = make([]sentHistory, paths)
	c.rx = make([]rxPath, paths)
	for i := range c.rx {
		c.rx[i].ackDeadline = -1
	}
	if initiator {
		c.needInit = true
	}
	return c
}

// ID returns the connection id.
func (c *Conn) ID() uint64 { return c.id }

// Peer returns the peer the connection talks to.
func (c *Conn) Peer() PeerID { return c.peer }

// Established reports whether the handshake has completed and the
// connection is not closing.
func (c *Conn) Established() bool { return c.state == stateEstablished }

// Closed reports whether the connection is closed.
func (c *Conn) Closed() bool { return c.state == stateClosed }

// WireVersion returns the wire version the connection agreed (1 or 2), or
// 0 while the handshake has not decided it.
func (c *Conn) WireVersion() int { return int(c.wire) }

// MTU returns the negotiated payload size.
func (c *Conn) MTU() int { return c.mtu }

// MaxDataLen returns the length of the largest DATA packet the connection
// sends: a full payload behind its wire version's header (a version-2
// descriptor never makes a DATA longer: it travels beside a shorter
// payload or alone, PROTOCOL.md §12). Before the version is agreed it is
// version 1's, the larger.
func (c *Conn) MaxDataLen() int {
	if c.wire == Version2 {
		return DataHeaderLenV2 + c.mtu
	}
	return DataHeaderLen + c.mtu
}

// Paths returns the connection's path set (read-only use: states, RTTs, counters).
func (c *Conn) Paths() *pathmgr.Set { return c.paths }

// Controller returns the connection's congestion controller.
func (c *Conn) Controller() cc.Controller { return c.ctl }

// scale is the factor of the connection's rate hints (RateHintScale).
func (c *Conn) scale() float64 {
	if c.hintScale > 0 {
		return c.hintScale
	}
	return 1
}

// Queued returns the number of messages sent and not yet completed.
func (c *Conn) Queued() int { return c.queued }

// InflightBytes returns the bytes in flight on all paths.
func (c *Conn) InflightBytes() int {
	n := 0
	for i := range c.paths.Paths {
		n += c.paths.Paths[i].InflightBytes
	}
	return n
}

// MarkPathDown takes path out of service at once (for example on a peer
// gateway's report that its plane failed). Its packets in flight are resent
// on other paths; it is probed back like any failed path.
func (c *Conn) MarkPathDown(now time.Duration, path int, reason string) {
	if path < 0 || path >= len(c.tx) || !c.paths.Paths[path].State.Usable() {
		return
	}
	c.loseAll(now, path)
	c.paths.MarkDown(now, path, reason)
	c.flushTransitions(now)
	c.touch()
}

// Close starts a graceful close: a CLOSE is sent (and repeated until
// answered or the retries run out); messages not yet complete fail with
// ErrClosed.
func (c *Conn) Close(now time.Duration) {
	if c.state == stateClosed || c.state == stateClosing {
		return
	}
	c.state = stateClosing
	c.closeReason = CloseNormal
	c.closeSends = c.ep.cfg.HandshakeRetries
	c.needClose = true
	c.touch()
}

func (c *Conn) fail(now time.Duration, err error) {
	if c.state == stateClosed {
		return
	}
	c.state = stateClosed
	c.ep.closing++
	c.closeErr = err
	c.closeSends = 0
	c.needClose = false
	c.failAll(now, ErrClosed)
	c.ep.emit(Event{Kind: EventClosed, Conn: c, Err: err, At: now})
}

func (c *Conn) hasControl() bool {
	return c.needInit || c.needAccept || c.needClose || c.needCloseAck || len(c.probeAcks) > 0 || len(c.errsOut) > 0
}

// receive dispatches one packet of this connection.
func (c *Conn) receive(now time.Duration, t PacketType, b []byte, m RecvMeta) {
	switch t {
	case TypeData:
		if !c.dataVersion(b[0]) {
			c.Stats.Malformed++
			return
		}
		if b[0] == Version2 {
			h := &c.rxHdr2
			payload, err := DecodeDataV2(b, h)
			if err != nil {
				c.Stats.Malformed++
				return
			}
			if c.state == stateClosed {
				return
			}
			c.onDataV2(now, h, payload, m)
			return
		}
		h := &c.rxHdr
		*h = DataHeader{}
		payload, err := DecodeData(b, h)
		if err != nil {
			c.Stats.Malformed++
			return
		}
		if c.state == stateClosed {
			return
		}
		c.onData(now, h, payload, m)
	case TypeAck:
		var a Ack
		if err := DecodeAck(b, &a); err != nil {
			c.Stats.Malformed++
			return
		}
		c.onAck(now, &a)
	case TypeInit:
		// A retransmitted INIT: our ACCEPT was lost.
		if !c.initiator && c.state == stateEstablished {
			c.needAccept = true
			c.rx[0].peerPort = m.Entropy
		}
	case TypeAccept:
		var h Handshake
		if err := DecodeHandshake(b, TypeAccept, &h); err != nil {
			c.Stats.Malformed++
			return
		}
		c.onAccept(now, &h, m)
	case TypeClose:
		_, reason, ack, err := DecodeClose(b)
		if err != nil {
			c.Stats.Malformed++
			return
		}
		if ack {
			if c.state == stateClosing {
				c.fail(now, nil)
			}
			return
		}
		c.needCloseAck = true
		c.closeAckPort = m.Entropy
		var cerr error
		switch reason {
		case CloseNormal:
		case CloseRefused:
			cerr = ErrRefused
		default:
			cerr = ErrClosed
		}
		c.fail(now, cerr)
	case TypeProbe:
		_, path, ts, err := DecodeProbe(b, TypeProbe)
		if err != nil {
			c.Stats.Malformed++
			return
		}
		if len(c.probeAcks) < maxControl {
			c.probeAcks = append(c.probeAcks, probeAck{path: path, port: m.Entropy, ts: ts})
		}
	case TypePMTUProbe:
		c.onPMTUProbe(b, m)
	case TypePMTUAck:
		c.onPMTUAck(now, b)
	case TypeProbeAck:
		_, path, ts, err := DecodeProbe(b, TypeProbeAck)
		if err != nil || int(path) >= len(c.tx) || ts == 0 || ts-1 > uint64(now) {
			c.Stats.Malformed++
			return
		}
		c.paths.OnProbeAck(now, int(path), now-time.Duration(ts-1))
		c.flushTransitions(now)
	case TypeError:
		var me MessageError
		if err := DecodeError(b, &me); err != nil {
			c.Stats.Malformed++
			return
		}
		c.onPeerError(now, &me)
	}
}

// dataVersion reports whether a DATA of wire version v belongs on this
// connection: the version it agreed, or, before the ACCEPT came (it was
// lost), one the initiator offered, which then is the version
// (PROTOCOL.md §4 "Version").
func (c *Conn) dataVersion(v uint8) bool {
	if c.wire == 0 && c.initiator && c.state == stateConnecting && v >= 1 && v <= MaxVersion && c.offer&(1<<(v-1)) != 0 {
		c.setWire(v)
	}
	return v == c.wire
}

// setWire records the version the handshake agreed.
func (c *Conn) setWire(v uint8) {
	c.wire = v
	if v != Version2 {
		c.ep.untag(c)
	}
}

func (c *Conn) onAccept(now time.Duration, h *Handshake, m RecvMeta) {
	if c.initiator && c.state == stateEstablished {
		// A repeated ACCEPT: the receiver re-announces our share.
		if h.RateHintBps > 0 {
			c.ctl.OnRateHint(now, hintRate(h.RateHintBps))
			if c.Stats.DataSent == 0 {
				// Not started yet: the first packet's phase is drawn
				// over the gap at the new share.
				c.startPacing(c.paceStart)
			}
		}
		return
	}
	if !c.initiator || c.state != stateConnecting {
		return
	}
	if v := h.Chosen(); v > MaxVersion || c.offer&(1<<(v-1)) == 0 {
		// The responder chose a version we did not offer.
		var tmp [CloseLen]byte
		if p, err := AppendClose(tmp[:0], c.id, CloseProtocol, false); err == nil {
			c.ep.queueReply(c.peer, m.Entropy, p)
		}
		c.fail(now, ErrNoCommonVersion)
		return
	}
	c.setWire(h.Chosen())
	if int(h.MTU) < c.mtu {
		c.mtu = int(h.MTU)
		c.placer.mtu = c.mtu
	}
	if n := int(h.Paths); n < len(c.tx) {
		c.paths.Paths = c.paths.Paths[:n]
		c.tx = c.tx[:n]
		c.rx = c.rx[:n]
	}
	if h.EchoTimestamp > 0 && h.EchoTimestamp-1 <= uint64(now) {
		c.paths.Paths[0].OnRTTSample(now - time.Duration(h.EchoTimestamp-1))
	}
	if h.RateHintBps > 0 {
		c.ctl.OnRateHint(now, hintRate(h.RateHintBps))
	}
	c.startPacing(now)
	c.state = stateEstablished
	c.needInit = false
	c.ep.emit(Event{Kind: EventConnected, Conn: c, At: now})
}

// startPacing starts the pacing clock of a connection that was just
// accepted at a random phase within one packet's gap at its starting rate,
// and with no catch-up credit (a lower hint pushed before the first packet
// went out draws the phase again over the longer gap). Senders that an incast starts together would
// otherwise each send their first packet the moment the ACCEPT arrives: 64
// senders whose share is half a packet per round trip make a queue of 64
// packets (two BDPs at 100 Gbit/s and 10 µs) before any hint can help. The
// phase comes from the connection id, so it costs no draw from the
// endpoint's random stream.
func (c *Conn) startPacing(now time.Duration) {
	r := float64(c.ctl.PacingRate())
	if r <= 0 {
		return
	}
	gap := float64(DataHeaderLen+c.mtu) / r
	phase := float64((c.id*0x9e3779b97f4a7c15)>>11) / (1 << 53)
	c.paceStart = now
	c.nextSend = now + time.Duration(phase*gap*1e9)
}

// poll builds this connection's next datagram into buf.
func (c *Conn) poll(now time.Duration, buf []byte, out *Transmit) bool {
	if c.pollControl(now, buf, out) {
		return true
	}
	if c.state == stateClosed {
		return false
	}
	if c.pollAck(now, buf, out) {
		return true
	}
	if c.state != stateEstablished {
		return false
	}
	if c.pollProbe(now, buf, out) {
		return true
	}
	if c.pollPMTU(now, buf, out) {
		return true
	}
	return c.pollData(now, buf, out)
}

func (c *Conn) pollControl(now time.Duration, buf []byte, out *Transmit) bool {
	t := Transmit{Peer: c.peer, Conn: c}
	var p []byte
	var err error
	switch {
	case c.needCloseAck:
		c.needCloseAck = false
		p, err = AppendClose(buf[:0], c.id, CloseNormal, true)
		t.Reply, t.Entropy = true, c.closeAckPort
	case c.needClose && c.state == stateClosing:
		c.needClose = false
		p, err = AppendClose(buf[:0], c.id, c.closeReason, false)
		t.Entropy = c.paths.Paths[0].Entropy
		c.hsDeadline = now + c.rto()
	case c.needInit && c.state == stateConnecting:
		c.needInit = false
		h := Handshake{Conn: c.id, MTU: uint16(c.mtu), Paths: uint16(len(c.tx)), Timestamp: uint64(now) + 1}
		if c.offer != 1<<(Version1-1) {
			h.Offer = c.offer // version 1 only is sent as 0, as a version-1 initiator does
		}
		p, err = AppendInit(buf[:0], &h)
		t.Entropy = c.paths.Paths[0].Entropy
		c.hsDeadline = now + c.hsRTO
	case c.needAccept:
		c.needAccept = false
		h := Handshake{Conn: c.id, MTU: uint16(c.mtu), Paths: uint16(len(c.tx)), Timestamp: uint64(now) + 1,
			EchoTimestamp: c.acceptEcho, RateHintBps: c.ep.rateHintBps(now, c)}
		if c.wire != Version1 {
			h.Version = c.wire // version 1 is sent as 0, as a version-1 responder does
		}
		c.lastHint = h.RateHintBps
		p, err = AppendAccept(buf[:0], &h)
		t.Reply, t.Entropy = true, c.rx[0].peerPort
	case len(c.probeAcks) > 0:
		pa := c.probeAcks[0]
		c.probeAcks = c.probeAcks[1:]
		p, err = AppendProbe(buf[:0], TypeProbeAck, c.id, pa.path, pa.ts)
		t.Reply, t.Entropy = true, pa.port
	case len(c.errsOut) > 0:
		eo := c.errsOut[0]
		c.errsOut = c.errsOut[1:]
		p, err = AppendError(buf[:0], &eo.e)
		t.Reply, t.Entropy = true, eo.port
	default:
		return false
	}
	if err != nil {
		return false
	}
	t.Len = len(p)
	*out = t
	return true
}

// rto is the retransmission timeout of handshake and close packets.
func (c *Conn) rto() time.Duration {
	return 2 * c.paths.Paths[0].PTO(c.paths.Config())
}

func (c *Conn) pollProbe(now time.Duration, buf []byte, out *Transmit) bool {
	for i := range c.paths.Paths {
		// An up path is never due a probe (pathmgr's ProbeDue says no
		// without changing anything); the check saves a call per path
		// for every datagram polled.
		if c.paths.Paths[i].State == pathmgr.Up || !c.paths.ProbeDue(now, i) {
			continue
		}
		p, err := AppendProbe(buf[:0], TypeProbe, c.id, uint16(i), uint64(now)+1)
		if err != nil {
			return false
		}
		c.Stats.ProbesSent++
		c.flushTransitions(now)
		*out = Transmit{Peer: c.peer, Conn: c, Path: i, Entropy: c.paths.Paths[i].Entropy, Len: len(p)}
		return true
	}
	return false
}

// nextTimeout returns the connection's earliest timer, or -1.
func (c *Conn) nextTimeout() time.Duration {
	t := time.Duration(-1)
	min := func(x time.Duration) {
		if x >= 0 && (t < 0 || x < t) {
			t = x
		}
	}
	switch c.state {
	case stateClosed:
		return -1
	case stateConnecting:
		min(c.hsDeadline)
	case stateClosing:
		min(c.hsDeadline)
	}
	for i := range c.rx {
		if c.rx[i].pending > 0 {
			min(c.rx[i].ackDeadline)
		}
	}
	if c.state != stateEstablished {
		return t
	}
	if !c.cwndLimit && c.hasDataToSend() && c.ctl.PacingRate() > 0 {
		min(c.nextSend)
	}
	for i := range c.tx {
		if d, ok := c.ptoDeadline(i); ok {
			min(d)
		}
	}
	min(c.paths.NextProbe())
	min(c.pmtuDeadline())
	if c.allDownSince >= 0 {
		min(c.allDownSince + c.ep.cfg.DeadAfter)
	}
	return t
}

// handleTimeout runs the connection's due timers.
func (c *Conn) handleTimeout(now time.Duration) {
	switch c.state {
	case stateClosed:
		return
	case stateConnecting:
		if now >= c.hsDeadline && !c.needInit {
			c.hsTries++
			if c.hsTries >= c.ep.cfg.HandshakeRetries {
				c.fail(now, ErrHandshakeTimeout)
				return
			}
			c.hsRTO *= 2
			c.needInit = true
		}
	case stateClosing:
		if now >= c.hsDeadline && !c.needClose {
			c.closeSends--
			if c.closeSends <= 0 {
				c.fail(now, nil)
				return
			}
			c.needClose = true
		}
	}
	for i := range c.rx {
		if r := &c.rx[i]; r.pending > 0 && r.ackDeadline >= 0 && now >= r.ackDeadline {
			r.immediate = true
		}
	}
	if c.state != stateEstablished {
		return
	}
	for i := range c.tx {
		if d, ok := c.ptoDeadline(i); ok && now >= d {
			c.onPTO(now, i)
		}
	}
	c.flushTransitions(now)
	c.checkDead(now)
}

// checkDead closes the connection once every path has been down for
// DeadAfter: the peer is gone or cut off.
func (c *Conn) checkDead(now time.Duration) {
	if c.paths.UsableCount() > 0 {
		c.allDownSince = -1
		return
	}
	if c.allDownSince < 0 {
		c.allDownSince = now
		return
	}
	if now-c.allDownSince >= c.ep.cfg.DeadAfter {
		c.fail(now, ErrPeerUnreachable)
	}
}

// flushTransitions turns recorded path transitions into events and tells
// the controller which paths are usable.
func (c *Conn) flushTransitions(now time.Duration) {
	c.trans = c.paths.DrainTransitions(c.trans[:0])
	for _, tr := range c.trans {
		if tr.From.Usable() != tr.To.Usable() {
			c.ctl.OnPathState(now, tr.Path, tr.To.Usable())
			c.cwndLimit = false
		}
		c.ep.emit(Event{Kind: EventPath, Conn: c, At: now, Transition: tr})
	}
}
