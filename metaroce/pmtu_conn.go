package metaroce

import "time"

// A connection's path MTU discovery (pmtu.go): one PMTUSearch per path
// group, its probes sent on a usable path of the group, and the answers
// this side owes the peer's probes.
//
// Data follows the searches: a path whose group has not validated the
// size of a full DATA datagram (MaxDataLen + Overhead: the header of the
// connection's wire version, the MTU and the driver's envelope) gets no
// window, so the connection never sends DATA larger than what the
// group's plane is known to carry. With the default sizes (a DATA
// datagram no larger than Base) every path is always eligible and the
// searches only measure.

type pmtuConn struct {
	cfg    PMTUConfig
	groups []PMTUSearch
	out    []pmtuOut     // probes of the rounds started, to send
	acks   []pmtuAckOwed // answers owed to the peer's probes
	sizes  []int         // scratch
	meas   *measure      // measurement in progress (measure.go)
}

type pmtuOut struct {
	group, size int
}

type pmtuAckOwed struct {
	path, port, flags uint16
	ts                uint64
	n                 int
}

// PMTUGroup is the state of one path group's search, for status.
type PMTUGroup struct {
	Group int
	State PMTUState
	// Size is the validated datagram size; Lo and Hi the interval in
	// doubt (Hi is Max+1 when nothing failed).
	Size, Lo, Hi int
	// Data reports whether the group carries DATA (its size holds a full
	// DATA datagram).
	Data  bool
	Stats PMTUStats
}

// setPMTU turns discovery on for c (o.Groups > 0). Max defaults to the
// datagram of a full DATA packet.
func (c *Conn) setPMTU(o PMTUConfig) {
	if o.Groups <= 0 || c.mode != ModeMetaRoCE || o.Validate() != nil {
		return
	}
	c.pmtu = &pmtuConn{cfg: o}
}

// start creates the searches once the connection is established (the
// MTU is then final).
func (p *pmtuConn) start(c *Conn, now time.Duration) {
	cfg := p.cfg
	if cfg.Max == 0 {
		cfg.Max = c.MaxDataLen() + cfg.Overhead
	}
	// A probe must fit the driver's buffers (Poll's buf: MTU+DataHeaderLen).
	cfg.Max = min(cfg.Max, DataHeaderLen+c.ep.cfg.MTU+cfg.Overhead)
	cfg = cfg.withDefaults()
	p.cfg = cfg
	p.groups = make([]PMTUSearch, cfg.Groups)
	for i := range p.groups {
		p.groups[i].init(cfg, now)
	}
	p.out = make([]pmtuOut, 0, cfg.Groups*(cfg.ProbesPerRound+1))
}

// pmtuDataSize is the datagram of a full DATA packet of the connection's
// wire version. (Version 2 connections used to require version 1's, 48
// bytes more than they send: a plane sized for version 2's datagram
// carried no data at all.)
func (c *Conn) pmtuDataSize() int { return c.MaxDataLen() + c.pmtu.cfg.Overhead }

// pmtuBlocks reports whether path may not carry DATA: its group has not
// validated a full DATA datagram.
func (c *Conn) pmtuBlocks(path int) bool {
	p := c.pmtu
	if p == nil || p.cfg.Groups == 0 {
		return false
	}
	if p.groups == nil {
		return c.pmtuDataSize() > p.cfg.withDefaults().Base
	}
	return p.groups[path%len(p.groups)].Size() < c.pmtuDataSize()
}

// pmtuProbePath is the usable path of group g that carries its probes (-1:
// none).
func (c *Conn) pmtuProbePath(g int) int {
	n := len(c.pmtu.groups)
	for i := g; i < len(c.paths.Paths); i += n {
		if c.paths.Paths[i].State.Usable() {
			return i
		}
	}
	return -1
}

// pollPMTU sends what discovery owes: answers first, then the probes of
// the rounds due.
func (c *Conn) pollPMTU(now time.Duration, buf []byte, out *Transmit) bool {
	p := c.pmtu
	if p == nil {
		return false
	}
	if len(p.acks) > 0 {
		a := p.acks[0]
		p.acks = p.acks[1:]
		if len(p.acks) == 0 {
			p.acks = p.acks[:0:cap(p.acks)]
		}
		b := AppendPMTUAck(buf[:0], c.id, a.path, a.flags, a.ts, a.n)
		*out = Transmit{Peer: c.peer, Conn: c, Path: int(a.path), Entropy: a.port, Reply: true, Len: len(b)}
		return true
	}
	if c.state != stateEstablished {
		return false
	}
	if p.groups == nil {
		p.start(c, now)
	}
	if c.pollMeasure(now, buf, out) {
		return true
	}
	if len(p.out) == 0 {
		for g := range p.groups {
			path := c.pmtuProbePath(g)
			if path < 0 {
				continue
			}
			pto := c.pmtuPTO(path)
			p.sizes = p.groups[g].Next(now, pto, p.sizes[:0])
			for _, s := range p.sizes {
				p.out = append(p.out, pmtuOut{group: g, size: s})
			}
		}
	}
	for len(p.out) > 0 {
		o := p.out[0]
		p.out = p.out[1:]
		if len(p.out) == 0 {
			p.out = p.out[:0:cap(p.out)]
		}
		path := c.pmtuProbePath(o.group)
		if path < 0 {
			continue // lost, as the round will tell
		}
		n := o.size - p.cfg.Overhead
		b, err := AppendPMTUProbe(buf[:0], c.id, uint16(path), 0, uint64(now)+1, n)
		if err != nil {
			p.groups[o.group].OnTooBig(now, o.size)
			continue
		}
		c.Stats.PMTUProbesSent++
		*out = Transmit{Peer: c.peer, Conn: c, Path: path, Entropy: c.paths.Paths[path].Entropy, ECT: true, Len: len(b)}
		return true
	}
	return false
}

// pmtuPTO is how long a round of probes on path waits for answers: twice
// the path's smoothed RTT (answers are not delayed), at least MinPTO; before
// the path has a sample, the largest probe timeout of the paths that have
// one (the initial RTT may be a data-center guess). A round that ends too
// early costs little: late answers still count.
func (c *Conn) pmtuPTO(path int) time.Duration {
	cfg := c.paths.Config()
	ps := &c.paths.Paths[path]
	if ps.HasRTT() {
		return max(2*ps.SRTT, cfg.MinPTO)
	}
	pto := ps.PTO(cfg)
	for i := range c.paths.Paths {
		if q := &c.paths.Paths[i]; q.HasRTT() {
			pto = max(pto, q.PTO(cfg))
		}
	}
	return pto
}

// pmtuDeadline is the earliest deadline of the searches that can run (a
// group without a usable path waits for one).
func (c *Conn) pmtuDeadline() time.Duration {
	p := c.pmtu
	if p == nil || c.state != stateEstablished {
		return -1
	}
	if p.groups == nil {
		return 0
	}
	t := time.Duration(-1)
	if p.meas != nil && p.meas.round < p.meas.count {
		t = p.meas.next
	}
	for g := range p.groups {
		if c.pmtuProbePath(g) < 0 {
			continue
		}
		if d := p.groups[g].Deadline(); d >= 0 && (t < 0 || d < t) {
			t = d
		}
	}
	return t
}

// onPMTUProbe answers a peer's probe with the length that arrived, on the
// path it came by. Answering keeps no state beyond the bounded queue.
func (c *Conn) onPMTUProbe(b []byte, m RecvMeta) {
	_, path, flags, ts, err := DecodePMTUProbe(b)
	if err != nil {
		c.Stats.Malformed++
		return
	}
	if c.pmtu == nil {
		c.pmtu = &pmtuConn{} // answers only: Groups 0 searches nothing
	}
	flags &= PMTUFlagMeasure
	if m.CE {
		flags |= PMTUFlagCE
	}
	if len(c.pmtu.acks) < maxControl {
		c.pmtu.acks = append(c.pmtu.acks, pmtuAckOwed{path: path, port: m.Entropy, flags: flags, ts: ts, n: len(b)})
	}
}

// onPMTUAck feeds an answer to its group's search.
func (c *Conn) onPMTUAck(now time.Duration, b []byte) {
	_, path, flags, ts, n, err := DecodePMTUAck(b)
	if err != nil || int(path) >= len(c.tx) || ts == 0 || ts-1 > uint64(now) {
		c.Stats.Malformed++
		return
	}
	p := c.pmtu
	if p == nil || p.groups == nil {
		return
	}
	rtt := now - time.Duration(ts-1)
	c.paths.Paths[path].OnRTTSample(rtt)
	if flags&PMTUFlagMeasure != 0 {
		c.onMeasureAck(int(path), rtt, flags&PMTUFlagCE != 0)
		return
	}
	if len(p.groups) == 0 {
		return
	}
	c.Stats.PMTUProbesAcked++
	p.groups[int(path)%len(p.groups)].OnAck(now, n+p.cfg.Overhead)
}

// pmtuProgress tells path's group that data was acknowledged on it, the
// largest packet of it largest bytes (on the wire, without the driver's
// overhead). Only that size is proven: a small packet acked (a control
// message, a PING) says the path is alive, not that a full datagram still
// fits. Taking every ack for a full one let the WAN PINGs hide a black
// hole after a plane's MTU shrank (gateway TestPMTUThroughEmulator).
func (c *Conn) pmtuProgress(now time.Duration, path, largest int) {
	if p := c.pmtu; p != nil && len(p.groups) > 0 && largest > 0 {
		p.groups[path%len(p.groups)].OnDataAcked(now, largest+p.cfg.Overhead)
	}
}

// pmtuTimeout tells path's group that its data timed out. Only a path
// with a round-trip sample counts: before it, its timeout is a guess.
func (c *Conn) pmtuTimeout(now time.Duration, path int) {
	if p := c.pmtu; p != nil && len(p.groups) > 0 && c.paths.Paths[path].HasRTT() {
		p.groups[path%len(p.groups)].OnDataTimeout(now, c.pmtuDataSize())
	}
}

// OnTooBig tells the connection that the driver could not send a datagram
// of size bytes (the packet plus the driver's overhead) on path: the local
// stack refused it (EMSGSIZE). The path's group stops searching above it
// and, if data of that size was allowed, goes back to its base.
func (c *Conn) OnTooBig(now time.Duration, path, size int) {
	if p := c.pmtu; p != nil && len(p.groups) > 0 && path >= 0 && path < len(c.tx) {
		p.groups[path%len(p.groups)].OnTooBig(now, size)
		c.touch()
	}
}

// PMTUBlackHoles is how many black-hole verdicts c's path MTU discovery
// has made over all its groups: a cheap counter a driver can poll to log
// the verdicts (PMTU gives the detail, but allocates).
func (c *Conn) PMTUBlackHoles() uint64 {
	if c.pmtu == nil {
		return 0
	}
	var n uint64
	for g := range c.pmtu.groups {
		n += c.pmtu.groups[g].Stats.BlackHoles
	}
	return n
}

// PMTU returns the state of each path group's search (nil when discovery
// is off or the connection is not established yet).
func (c *Conn) PMTU() []PMTUGroup {
	p := c.pmtu
	if p == nil || len(p.groups) == 0 {
		return nil
	}
	out := make([]PMTUGroup, len(p.groups))
	d := c.pmtuDataSize()
	for g := range p.groups {
		s := &p.groups[g]
		lo, hi := s.Bounds()
		out[g] = PMTUGroup{Group: g, State: s.State(), Size: s.Size(), Lo: lo, Hi: hi, Data: s.Size() >= d, Stats: s.Stats}
	}
	return out
}
