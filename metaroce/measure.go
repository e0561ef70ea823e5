package metaroce

import "time"

// Measurement of a connection's paths (`mrgw probe`): rounds of small
// PMTU_PROBEs flagged as measurement, one on every usable path per round,
// sent ECN-capable; the peer answers each with a PMTU_ACK that echoes the
// flag and says whether the probe arrived CE-marked. Per path: probes
// sent and answered, CE marks, RTT. The answers need no state at the peer
// beyond its bounded answer queue, and travel inside the connection (on
// the WAN: sealed).

// PathMeasure is what a measurement saw on one path.
type PathMeasure struct {
	Path int
	// Entropy is the path's source port when its last probe left.
	Entropy uint16
	// Sent and Acked count probes; CE the answered ones that arrived
	// marked congestion-experienced.
	Sent, Acked, CE uint64
	// MinRTT, MaxRTT and SumRTT (over Acked) of the answers.
	MinRTT, MaxRTT, SumRTT time.Duration
}

type measure struct {
	count, round int
	every, next  time.Duration
	size         int
	queue        []int // paths still to probe this round
	paths        []PathMeasure
}

// Measure starts a measurement of count rounds, every apart, each sending
// one probe of size bytes (at least PMTUProbeLen; the packet, without the
// driver's overhead) on every usable path. It replaces a measurement in
// progress. Measurement returns the results so far.
func (c *Conn) Measure(now time.Duration, count int, every time.Duration, size int) {
	if c.pmtu == nil {
		c.pmtu = &pmtuConn{}
	}
	m := &measure{count: max(count, 1), every: max(every, time.Millisecond), next: now, size: max(size, PMTUProbeLen),
		paths: make([]PathMeasure, len(c.tx))}
	for i := range m.paths {
		m.paths[i].Path = i
		m.paths[i].Entropy = c.paths.Paths[i].Entropy
	}
	c.pmtu.meas = m
	c.touch()
}

// Measurement returns what the current measurement saw per path (nil:
// none was started), and whether all its rounds have been sent.
func (c *Conn) Measurement() ([]PathMeasure, bool) {
	if c.pmtu == nil || c.pmtu.meas == nil {
		return nil, false
	}
	m := c.pmtu.meas
	return append([]PathMeasure(nil), m.paths...), m.round >= m.count && len(m.queue) == 0
}

// pollMeasure sends the measurement probe due, if any.
func (c *Conn) pollMeasure(now time.Duration, buf []byte, out *Transmit) bool {
	m := c.pmtu.meas
	if m == nil {
		return false
	}
	if len(m.queue) == 0 && m.round < m.count && now >= m.next {
		m.round++
		m.next = now + m.every
		for i := range c.paths.Paths {
			if c.paths.Paths[i].State.Usable() {
				m.queue = append(m.queue, i)
			}
		}
	}
	for len(m.queue) > 0 {
		path := m.queue[0]
		m.queue = m.queue[1:]
		if path >= len(c.tx) {
			continue
		}
		b, err := AppendPMTUProbe(buf[:0], c.id, uint16(path), PMTUFlagMeasure, uint64(now)+1, m.size)
		if err != nil {
			continue
		}
		pm := &m.paths[path]
		pm.Sent++
		pm.Entropy = c.paths.Paths[path].Entropy
		*out = Transmit{Peer: c.peer, Conn: c, Path: path, Entropy: pm.Entropy, ECT: true, Len: len(b)}
		return true
	}
	return false
}

func (c *Conn) onMeasureAck(path int, rtt time.Duration, ce bool) {
	m := c.pmtu.meas
	if m == nil || path >= len(m.paths) {
		return
	}
	pm := &m.paths[path]
	if pm.Acked >= pm.Sent {
		return // a duplicate, or an answer to an earlier measurement
	}
	pm.Acked++
	if ce {
		pm.CE++
	}
	if pm.MinRTT == 0 || rtt < pm.MinRTT {
		pm.MinRTT = rtt
	}
	pm.MaxRTT = max(pm.MaxRTT, rtt)
	pm.SumRTT += rtt
}
