package metaroce

import (
	"math"
	"time"

	"github.com/mrgw/mrgw/cc"
)

// This file is what the connection does with its paths' sent histories
// (sent.go): it feeds them ACKs and probe timeouts, resends what they
// declare lost, completes what they declare acknowledged, and tells the
// congestion controller and the path manager.

// onAck processes an ACK for one of our paths.
func (c *Conn) onAck(now time.Duration, a *Ack) {
	path := int(a.Path)
	if path >= len(c.tx) {
		c.Stats.Malformed++
		return
	}
	h := &c.tx[path]
	if !h.plausible(a) {
		c.Stats.Malformed++ // acknowledges what we never sent
		return
	}
	c.Stats.AcksReceived++
	if c.mode == ModeRoCEv2 {
		c.onAckGBN(now, a)
		return
	}
	ps := &c.paths.Paths[path]
	echo := a.EchoTimestamp
	switch {
	case a.Flags&FlagAckAtCum != 0:
		echo = 0 // its largest is not the newest arrival: no round trip
	case c.wire == Version2:
		echo = h.sentStamp(a.Largest) // no timestamps in version-2 DATA
	}
	var s cc.AckSample
	var lostBytes int
	c.ackedLargest = 0
	c.lossCause = lossGap
	s.AckedBytes, lostBytes = h.onAck(now, a, ps, c)
	if h.owesFloor() {
		c.newsOwed = true
	}
	c.Stats.RetransmitsSpurious += uint64(h.spurious(a))
	if rtt, ok := h.rttSample(now, echo); ok {
		s.RTT = rtt
		ps.OnRTTSample(rtt)
		if c.minRTT == 0 || ps.MinRTT < c.minRTT {
			c.minRTT = ps.MinRTT
		}
		c.noteRTT(now, rtt)
	}
	// ECN: the ack carries cumulative counts of CE-marked and all packets.
	if dRx, dCE, ok := h.ecn(a); ok {
		s.MarkedBytes = int(float64(s.AckedBytes) * float64(dCE) / float64(dRx))
		ps.MarkedPackets += dCE
	}
	if a.RateHintBps > 0 {
		c.ctl.OnRateHint(now, hintRate(a.RateHintBps))
	}
	if lostBytes > 0 {
		c.ctl.OnLoss(now, path, lostBytes)
	}
	if s.AckedBytes > 0 {
		s.SRTT, s.MinRTT, s.InflightBytes = ps.SRTT, ps.MinRTT, ps.InflightBytes
		c.ctl.OnAck(now, path, s)
		c.paths.OnProgress(now, path)
		c.pmtuProgress(now, path, c.ackedLargest)
		c.flushTransitions(now)
	}
	if s.AckedBytes > 0 || lostBytes > 0 {
		c.cwndLimit = false
	}
}

// packetAcked (sentHandler) records that a packet's chunk is in the
// receiver's memory.
func (c *Conn) packetAcked(now time.Duration, r *txRecord) {
	c.ackedLargest = max(c.ackedLargest, int(r.size))
	if r.desc != 0 {
		r.msg.descAcked = true // the receiver holds the descriptor (PROTOCOL.md §12)
		if r.desc&recDescOnly != 0 {
			return
		}
	}
	c.ackChunk(now, r.msg, int(r.idx))
}

// packetLost (sentHandler) queues a lost packet's chunk to be sent again,
// unless the chunk was acknowledged meanwhile (a copy sent on another path)
// or its message failed.
func (c *Conn) packetLost(r *txRecord) {
	c.Stats.PacketsLost++
	if r.desc != 0 {
		// The path no longer has the descriptor in flight: its next DATA
		// of the message carries it again (PROTOCOL.md §12).
		r.msg.clearDescPath(int(r.path))
		if r.desc&recDescOnly != 0 {
			return
		}
	}
	if r.msg.err == nil && r.msg.acked[r.idx/64]&(1<<(r.idx%64)) == 0 {
		c.retx = append(c.retx, chunkRef{msg: r.msg, idx: int(r.idx)})
		c.retxCause = append(c.retxCause, c.lossCause)
		r.desc |= recResent
	}
}

// Causes of a loss (Conn.retxCause).
const (
	lossGap uint8 = iota
	lossTimeout
)

// rttHiMemory is the time over which the connection's largest recent RTT
// sample (Conn.rttHi) falls back to the newer ones.
const rttHiMemory = 2 * time.Second

// noteRTT folds an RTT sample of any path into the connection's largest
// recent one.
func (c *Conn) noteRTT(now, rtt time.Duration) {
	if rtt >= c.rttHi {
		c.rttHi, c.rttHiAt = rtt, now
		return
	}
	if dt := now - c.rttHiAt; dt > 0 {
		c.rttHi = rtt + time.Duration(float64(c.rttHi-rtt)*math.Exp(-dt.Seconds()/rttHiMemory.Seconds()))
		c.rttHiAt = now
	}
}

// ptoDeadline returns when path's oldest packet in flight times out: a
// probe timeout after it was sent, and no sooner than the connection's
// largest recent RTT sample (plus the receiver's ack delay) after.
//
// Why the floor: a path's own estimate follows its own samples, and a path
// that carries a few packets per round trip (many paths, or many
// connections over one fabric) has few; when the shared queue deepens, or
// the sender's host holds its acks back for a few milliseconds (a late
// wake-up on a busy machine, which the largest sample records too), such a
// path's timeout fired before its acks came, and what it resent arrived
// twice. Every path of a connection crosses the same fabric, so the
// largest recent sample of any is what one of them may take now; a tail
// loss is found that much later.
func (c *Conn) ptoDeadline(path int) (time.Duration, bool) {
	h := &c.tx[path]
	cfg := c.paths.Config()
	d, ok := h.ptoDeadline(&c.paths.Paths[path], cfg)
	if ok && c.mode == ModeMetaRoCE {
		if extra := c.rttHi + c.ep.cfg.MaxAckDelay - c.paths.Paths[path].PTO(cfg); extra > 0 {
			d += extra
		}
	}
	if w := c.ep.cfg.DepartureWait; ok && w > 0 && h.floor >= h.departed && c.mode == ModeMetaRoCE {
		// The oldest packet in flight is still with the driver: the probe
		// timeout runs from when it leaves, at most w after its poll
		// (Departed brings the deadline back once it has left).
		d = max(d, h.rec(h.floor).sent+w+c.paths.Paths[path].PTO(cfg))
	}
	return d, ok
}

// departureSlack is how much later than its poll a datagram may leave
// and keep its poll time as its send time: Departed rewrites the send
// times of a run of datagrams only when the driver held them longer (a
// stalled sender), so a driver that sends at once costs no write per
// datagram.
const departureSlack = time.Millisecond

// Departed tells the connection that its DATA datagrams on path with
// sequences below upTo (Transmit.Seq) have left, the last of them at at
// (the driver's clock, as now). A driver that sets Config.DepartureWait
// calls it as its datagrams leave, in order on each path; a datagram
// held longer than departureSlack gets at as its send time, so its probe
// timeout and the round trip its acknowledgement measures run from when
// it left, not from when it was polled: a driver's stall is not the
// path's silence.
func (c *Conn) Departed(path int, upTo uint64, at time.Duration) {
	if c.ep.cfg.DepartureWait <= 0 || path < 0 || path >= len(c.tx) || c.mode != ModeMetaRoCE || c.removed {
		return
	}
	h := &c.tx[path]
	upTo = min(upTo, h.next)
	if upTo <= h.departed {
		return
	}
	from := max(h.departed, h.floor)
	h.departed = upTo
	if from < upTo && at-h.rec(from).sent > departureSlack {
		for s := from; s < upTo; s++ {
			if r := h.rec(s); at > r.sent {
				r.sent = at
			}
		}
	}
	c.markTimer()
}

// onPTO handles a path whose data went unacknowledged for a probe timeout:
// what was sent on it a probe timeout ago or earlier is resent, and
// everything in flight on it once the timeout takes the path down (on
// other paths then). The packets sent within the last probe timeout are
// not overdue: on a path that carries a few packets per round trip (many
// paths, or many connections over one fabric) a tail loss would otherwise
// resend every packet sent after the lost one, which arrive a moment
// later as duplicates; if they are lost too, their own timeout comes.
func (c *Conn) onPTO(now time.Duration, path int) {
	c.Stats.Timeouts++
	if c.mode == ModeRoCEv2 {
		h := &c.tx[path]
		h.gbnResend = h.floor // go back to the oldest unacknowledged packet
		c.paths.Paths[path].LastProgress = now
		return
	}
	c.loseOverdue(now, path, now-c.paths.Paths[path].PTO(c.paths.Config()))
	c.pmtuTimeout(now, path)
	if c.paths.OnTimeout(now, path) || !c.paths.Paths[path].State.Usable() {
		c.loseAll(now, path)
	}
}

// loseOverdue declares lost what is in flight on path and was sent at or
// before cutoff, and at least its oldest packet in flight.
func (c *Conn) loseOverdue(now time.Duration, path int, cutoff time.Duration) {
	c.lossCause = lossTimeout
	if lost := c.tx[path].loseSentBy(cutoff, &c.paths.Paths[path], c); lost > 0 {
		if o, ok := c.ctl.(cc.TimeoutLossObserver); ok {
			o.OnTimeoutLoss(now, path, lost)
		}
		c.ctl.OnLoss(now, path, lost)
	}
	c.cwndLimit = false
}

// loseAll declares everything in flight on path lost.
func (c *Conn) loseAll(now time.Duration, path int) {
	c.lossCause = lossTimeout
	if lost := c.tx[path].loseAll(&c.paths.Paths[path], c); lost > 0 {
		if o, ok := c.ctl.(cc.TimeoutLossObserver); ok {
			o.OnTimeoutLoss(now, path, lost)
		}
		c.ctl.OnLoss(now, path, lost)
	}
	c.cwndLimit = false
}
