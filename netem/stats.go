package netem

import "time"

// LinkStats counts what happened on one plane in one direction since New.
// In = Delivered + QueueDrops + LossDrops + DownDrops + SizeDrops + overflow drops +
// datagrams still queued + send errors.
type LinkStats struct {
	In             uint64 // datagrams that entered the plane
	BytesIn        uint64 // wire bytes: UDP payload and IPv4 and UDP headers
	Delivered      uint64 // datagrams handed to the kernel for the receiver
	BytesDelivered uint64 // wire bytes, as BytesIn
	QueueDrops     uint64 // drop-tail: the queue was full
	LossDrops      uint64 // random loss after the queue
	DownDrops      uint64 // the plane was failed on arrival or in flight
	SizeDrops      uint64 // larger than the plane's MTU clamp (LinkConfig.MTU)
	SizeDropLast   uint64 // the UDP payload size of the last of those (what was too big)
	CEMarks        uint64 // ECT datagrams forwarded as CE
	MaxQueueBytes  uint64 // the deepest the queue has been, in wire bytes
}

// add accumulates o into s (MaxQueueBytes takes the maximum).
func (s *LinkStats) add(o LinkStats) {
	s.In += o.In
	s.BytesIn += o.BytesIn
	s.Delivered += o.Delivered
	s.BytesDelivered += o.BytesDelivered
	s.QueueDrops += o.QueueDrops
	s.LossDrops += o.LossDrops
	s.DownDrops += o.DownDrops
	s.SizeDrops += o.SizeDrops
	if o.SizeDropLast != 0 {
		s.SizeDropLast = o.SizeDropLast
	}
	s.CEMarks += o.CEMarks
	s.MaxQueueBytes = max(s.MaxQueueBytes, o.MaxQueueBytes)
}

// Lateness measures the dispatcher's precision: how long after their
// scheduled delivery time datagrams were handed to the kernel.
type Lateness struct {
	Count uint64
	Mean  time.Duration
	Max   time.Duration
}

// Stats is a snapshot of the emulator's counters.
type Stats struct {
	// Links is indexed [Dir][plane].
	Links [2][]LinkStats
	// Exposed and Mappings count the stand-ins made by Expose and those
	// created on demand for unexposed sources.
	Exposed, Mappings int
	// Buffered is the datagrams queued in all planes right now.
	Buffered int
	// MappingDrops: datagrams from a new source refused because
	// MaxMappings stand-ins exist.
	MappingDrops uint64
	// OverflowDrops: datagrams refused because MaxBuffered were queued.
	OverflowDrops uint64
	// LoopDrops: datagrams from one of the emulator's own sockets.
	LoopDrops uint64
	// Truncated: datagrams larger than Config.MaxDatagram.
	Truncated uint64
	// SendErrors, ReadErrors: socket errors (a send error loses the
	// datagram).
	SendErrors, ReadErrors uint64
	// Late is the dispatch precision per direction.
	Late [2]Lateness
}

// Total sums one direction's planes.
func (s Stats) Total(d Dir) LinkStats {
	var t LinkStats
	for _, l := range s.Links[d] {
		t.add(l)
	}
	return t
}

// Stats returns a snapshot of all counters. Counters are read one by one
// while traffic flows, so a snapshot is consistent per counter, not across
// counters.
func (em *Emulator) Stats() Stats {
	var s Stats
	for d, dd := range em.dirs {
		s.Links[d] = make([]LinkStats, len(dd.links))
		for i := range dd.links {
			c := &dd.links[i].c
			s.Links[d][i] = LinkStats{
				In:             c.in.Load(),
				BytesIn:        c.bytesIn.Load(),
				Delivered:      c.delivered.Load(),
				BytesDelivered: c.bytesDelivered.Load(),
				QueueDrops:     c.queueDrops.Load(),
				LossDrops:      c.lossDrops.Load(),
				DownDrops:      c.downDrops.Load(),
				SizeDrops:      c.sizeDrops.Load(),
				SizeDropLast:   c.sizeDropLast.Load(),
				CEMarks:        c.ceMarks.Load(),
				MaxQueueBytes:  c.maxQueue.Load(),
			}
		}
		n := dd.lateN.Load()
		s.Late[d] = Lateness{Count: uint64(n), Max: time.Duration(dd.lateMax.Load())}
		if n > 0 {
			s.Late[d].Mean = time.Duration(dd.lateSum.Load() / n)
		}
	}
	em.mu.RLock()
	s.Mappings = em.dynamic
	s.Exposed = len(em.eps) - em.dynamic
	em.mu.RUnlock()
	s.Buffered = int(em.buffered.Load())
	s.MappingDrops = em.mappingDrops.Load()
	s.OverflowDrops = em.overflowDrops.Load()
	s.LoopDrops = em.loopDrops.Load()
	s.Truncated = em.truncated.Load()
	s.SendErrors = em.sendErrors.Load()
	s.ReadErrors = em.readErrors.Load()
	return s
}
