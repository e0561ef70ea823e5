package sim

// HostID names a host. IDs start at 1, so a zero Dst (an endpoint that forgot to set it) is
// unroutable rather than silently reaching the first host.
type HostID uint32

// Datagram is one UDP datagram in flight. Data is owned by the simulator while in flight;
// buffers come from a bounded free list owned by the Sim.
type Datagram struct {
	Src, Dst         HostID
	SrcPort, DstPort uint16
	ECT, CE          bool   // ECN: sent ECN-capable; marked congestion-experienced on the way
	Data             []byte // len = bytes on the wire (the protocol packet)

	buf   []byte  // the pooled buffer; Data is restored to it before each Poll
	route []*Link // the fabric links it crosses (set when it enters the fabric)
	hop   int     // index in route of the link holding it
}

// reset prepares d to be filled by Endpoint.Poll for host src.
func (d *Datagram) reset(src HostID) {
	*d = Datagram{Src: src, Data: d.buf, buf: d.buf}
}

// owned makes sure Data lives in the pooled buffer: an endpoint may point Data at its own
// memory, which it could change while the datagram is in flight. It reports false if Data does
// not fit.
func (d *Datagram) owned() bool {
	if len(d.Data) > len(d.buf) {
		return false
	}
	if len(d.Data) > 0 && &d.Data[0] != &d.buf[0] {
		d.Data = d.buf[:copy(d.buf, d.Data)]
	}
	return true
}

// pool is the Sim's free list of datagrams. It allocates on demand up to max buffers alive and
// then refuses, so memory stays bounded however a scenario misbehaves.
type pool struct {
	free      []*Datagram
	size, max int
	alive     int
	allocated uint64
}

// get returns a datagram with a buffer of the configured size, or nil if max are alive.
func (p *pool) get() *Datagram {
	if n := len(p.free); n > 0 {
		d := p.free[n-1]
		p.free[n-1] = nil
		p.free = p.free[:n-1]
		p.alive++
		return d
	}
	if p.alive >= p.max {
		return nil
	}
	p.alive++
	p.allocated++
	return &Datagram{buf: make([]byte, p.size)}
}

func (p *pool) put(d *Datagram) {
	d.Data = nil
	p.alive--
	p.free = append(p.free, d)
}

// free returns d to the Sim's free list; d must not be used afterwards.
func (s *Sim) free(d *Datagram) { s.pool.put(d) }
