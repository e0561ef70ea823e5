package metaroce

import "time"

// This file is the RoCEv2 baseline: one path, packets accepted only in order,
// and go-back-N on any gap. It shares framing, placement and completions with
// MetaRoCE so that the two differ only in how they recover loss.

// onDataGBN accepts only the next expected sequence; anything beyond it is
// dropped and answered with one NAK per gap.
func (c *Conn) onDataGBN(now time.Duration, r *rxPath, h *DataHeader, idx int, payload []byte, m RecvMeta) {
	switch {
	case h.Seq < r.win.cum:
		c.Stats.Duplicates++
		r.immediate = true
		c.owe(now, r)
	case h.Seq > r.win.cum:
		c.Stats.OutOfOrderDropped++
		if !r.nakSent {
			r.nak, r.nakSent = true, true
			c.acksOwed = true
		}
	default:
		r.win.inOrder(h.Seq, h.Timestamp)
		r.nakSent = false
		r.count++
		if m.CE {
			r.ce++
		}
		c.owe(now, r)
		c.placer.place(now, h, idx, payload, r.peerPort)
	}
}

// onAckGBN processes a cumulative ACK or NAK.
func (c *Conn) onAckGBN(now time.Duration, a *Ack) {
	h := &c.tx[0]
	ps := &c.paths.Paths[0]
	acked := h.ackBelow(now, a.Cum, ps, c)
	if h.gbnResend < h.floor {
		h.gbnResend = h.floor
	}
	if a.Flags&FlagAckNak != 0 && a.Cum < h.next {
		h.gbnResend = a.Cum // go back N
		c.Stats.PacketsLost++
		c.ctl.OnLoss(now, 0, int(h.rec(a.Cum).size))
	}
	if rtt, ok := h.rttSample(now, a.EchoTimestamp); ok {
		ps.OnRTTSample(rtt)
	}
	if a.RateHintBps > 0 {
		c.ctl.OnRateHint(now, hintRate(a.RateHintBps))
	}
	if acked > 0 {
		ps.LastProgress = now
		c.ctl.OnAck(now, 0, ackSample(acked, ps))
		c.cwndLimit = false
	}
}

// gbnResend resends, with its original sequence number, the next packet after a go-back.
func (c *Conn) gbnResend(now time.Duration, buf []byte, rate float64, out *Transmit) bool {
	h := &c.tx[0]
	seq := h.gbnResend
	r := h.rec(seq)
	ref := chunkRef{msg: r.msg, idx: int(r.idx)}
	payload := ref.msg.chunk(ref.idx, c.mtu)
	p, err := c.encodeData(buf, 0, seq, h.floor, ref, payload, true, false, false, now)
	if err != nil {
		return false
	}
	h.gbnResend++
	r.sent = now
	c.Stats.DataSent++
	c.Stats.Retransmits++
	c.Stats.PayloadBytesSent += uint64(len(payload))
	c.pace(now, int(r.size), rate)
	*out = Transmit{Peer: c.peer, Conn: c, Path: 0, Entropy: c.paths.Paths[0].Entropy, ECT: true, Len: len(p)}
	return true
}
