package sim

import (
	"encoding/binary"
	"time"
)

// Test endpoints. Every data datagram carries its sequence number in Data[0:8] and its send
// time in Data[8:16], so receivers can check exact timings.

// pacer sends count datagrams of size bytes to dst, one every interval from start.
type pacer struct {
	dst              HostID
	srcPort, dstPort uint16
	size             int
	ect              bool
	start, interval  time.Duration
	count            int

	sent     int
	timeouts []time.Duration // when HandleTimeout was called
}

func (p *pacer) next() time.Duration { return p.start + time.Duration(p.sent)*p.interval }

func (p *pacer) Receive(time.Duration, *Datagram) {}

func (p *pacer) Poll(now time.Duration, d *Datagram) bool {
	if p.sent >= p.count || now < p.next() {
		return false
	}
	fill(d, p.dst, p.srcPort, p.dstPort, p.size, p.ect, uint64(p.sent), now)
	p.sent++
	return true
}

func (p *pacer) NextTimeout() time.Duration {
	if p.sent >= p.count {
		return -1
	}
	return p.next()
}

func (p *pacer) HandleTimeout(now time.Duration) { p.timeouts = append(p.timeouts, now) }

// burst sends count datagrams at its first poll; ect(i) says whether datagram i is ECT.
type burst struct {
	dst   HostID
	size  int
	count int
	ect   func(i int) bool
	sent  int
}

func (b *burst) Receive(time.Duration, *Datagram) {}
func (b *burst) NextTimeout() time.Duration       { return -1 }
func (b *burst) HandleTimeout(time.Duration)      {}

func (b *burst) Poll(now time.Duration, d *Datagram) bool {
	if b.sent >= b.count {
		return false
	}
	fill(d, b.dst, 1000, 2000, b.size, b.ect != nil && b.ect(b.sent), uint64(b.sent), now)
	b.sent++
	return true
}

func fill(d *Datagram, dst HostID, sport, dport uint16, size int, ect bool, seq uint64, now time.Duration) {
	d.Dst, d.SrcPort, d.DstPort, d.ECT = dst, sport, dport, ect
	d.Data = d.Data[:size]
	binary.BigEndian.PutUint64(d.Data[0:], seq)
	binary.BigEndian.PutUint64(d.Data[8:], uint64(now))
}

// rec is one datagram as a sink saw it.
type rec struct {
	at, sent time.Duration
	seq      uint64
	src      HostID
	srcPort  uint16
	ce       bool
	n        int
}

// sink records everything it receives and sends nothing.
type sink struct{ got []rec }

func (s *sink) Receive(now time.Duration, d *Datagram) {
	s.got = append(s.got, rec{
		at:      now,
		sent:    time.Duration(binary.BigEndian.Uint64(d.Data[8:])),
		seq:     binary.BigEndian.Uint64(d.Data[0:]),
		src:     d.Src,
		srcPort: d.SrcPort,
		ce:      d.CE,
		n:       len(d.Data),
	})
}
func (s *sink) Poll(time.Duration, *Datagram) bool { return false }
func (s *sink) NextTimeout() time.Duration         { return -1 }
func (s *sink) HandleTimeout(time.Duration)        {}

func (s *sink) seqs() []uint64 {
	out := make([]uint64, len(s.got))
	for i, r := range s.got {
		out[i] = r.seq
	}
	return out
}

// pair builds a network with one sender at A and one sink at B.
func pair(seed uint64, nc NetworkConfig, sender Endpoint) (*Sim, *Network, *sink) {
	s := New(Config{Seed: seed})
	n := NewNetwork(s, nc)
	snk := &sink{}
	n.AddHost(SiteA, sender, HostConfig{}) // host 1
	n.AddHost(SiteB, snk, HostConfig{})    // host 2
	return s, n, snk
}

const (
	us = time.Microsecond
	ms = time.Millisecond
)
