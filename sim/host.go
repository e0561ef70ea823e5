package sim

import (
	"fmt"
	"time"
)

// Endpoint is what runs on a host: a sans-I/O protocol stack.
type Endpoint interface {
	// Receive delivers one datagram at virtual time now. d.Data is only valid during the call.
	Receive(now time.Duration, d *Datagram)
	// Poll asks for the next datagram to send at time now. The endpoint fills d (d.Data has
	// capacity for the configured max datagram size; the endpoint sets d.Data = d.Data[:n], Dst,
	// SrcPort, DstPort, ECT). It returns false when it has nothing to send now.
	Poll(now time.Duration, d *Datagram) bool
	// NextTimeout returns the virtual time of the endpoint's next timer, or a negative value for none.
	NextTimeout() time.Duration
	// HandleTimeout is called at (or after) the time NextTimeout returned.
	HandleTimeout(now time.Duration)
}

// HostConfig describes a host's access links. The zero value attaches the host straight to
// the fabric (ideal links that cost no events).
type HostConfig struct {
	Uplink   LinkConfig // host → fabric
	Downlink LinkConfig // fabric → host
}

// HostStats are a host's counters.
type HostStats struct {
	Sent            uint64 // datagrams returned by Poll
	Received        uint64 // datagrams handed to Receive
	Timeouts        uint64 // HandleTimeout calls
	ClampedTimeouts uint64 // timers still due after HandleTimeout, pushed to now+1ns
	DroppedNoBuffer uint64 // datagrams polled while the Sim's MaxDatagrams were alive
	Dropped         uint64 // datagrams refused at the host: oversize or unroutable
}

// Host is an endpoint attached to a site, and the driver that runs it: it feeds the endpoint
// received datagrams and timer expiries, drains what it has to send and keeps one wake-up
// scheduled at its next timer.
//
// Poll hands the endpoint a datagram whose Data has len == cap == Config.MaxDatagramSize; the
// endpoint writes into it and reslices (d.Data = d.Data[:n]) or appends to d.Data[:0].
type Host struct {
	id   HostID
	site Site
	net  *Network
	sim  *Sim
	ep   Endpoint
	up   *Link
	down *Link

	// active is set while the endpoint is being called. A datagram that arrives meanwhile
	// (possible only through ideal links) waits in inbox, so Receive never runs inside Poll.
	active bool
	inbox  ring[*Datagram]

	wakeAt      time.Duration // time of the scheduled wake-up, or -1 for none
	wakeGen     uint64        // only the wake-up event carrying this gen is live
	pollPending bool          // a poll event is scheduled

	scratch Datagram // polled into when the free list is exhausted, then dropped
	stats   HostStats
}

// AddHost attaches a host running ep at site and schedules its first drain of Poll at Now.
// Host IDs are given in order from 1.
func (n *Network) AddHost(site Site, ep Endpoint, cfg HostConfig) *Host {
	if int(site) >= n.sites {
		panic(fmt.Sprintf("sim: unknown site %v", site))
	}
	h := &Host{id: n.NextHostID(), site: site, net: n, sim: n.sim, ep: ep, wakeAt: -1}
	h.up = newLink(n.sim, fmt.Sprintf("host%d:up", h.id), cfg.Uplink, n.overhead,
		func(d *Datagram) { n.toFabric(site, d) })
	h.down = newLink(n.sim, fmt.Sprintf("host%d:down", h.id), cfg.Downlink, n.overhead, h.deliver)
	n.hosts = append(n.hosts, h)
	h.Kick()
	return h
}

// ID returns the host's ID.
func (h *Host) ID() HostID { return h.id }

// Site returns the site the host is attached to.
func (h *Host) Site() Site { return h.site }

// Endpoint returns the endpoint the host runs.
func (h *Host) Endpoint() Endpoint { return h.ep }

// Uplink returns the host's access link towards the fabric.
func (h *Host) Uplink() *Link { return h.up }

// Downlink returns the host's access link from the fabric.
func (h *Host) Downlink() *Link { return h.down }

// Stats returns a snapshot of the host's counters.
func (h *Host) Stats() HostStats { return h.stats }

// Kick asks the host to drain Poll again at the current virtual time, after the running event:
// a driver calls it when the endpoint's application has queued new work.
func (h *Host) Kick() {
	if h.pollPending {
		return
	}
	h.pollPending = true
	h.sim.schedule(event{at: h.sim.now, kind: evHostPoll, host: h})
}

// deliver is the downlink's next hop: it hands d to the endpoint.
func (h *Host) deliver(d *Datagram) {
	if h.active {
		h.inbox.push(d)
		return
	}
	h.active = true
	h.receive(d)
	h.settle(false)
}

func (h *Host) receive(d *Datagram) {
	h.stats.Received++
	h.ep.Receive(h.sim.now, d)
	h.sim.free(d)
	h.drain()
}

// pollNow runs a scheduled poll event.
func (h *Host) pollNow() {
	h.pollPending = false
	h.active = true
	h.drain()
	h.settle(false)
}

// wake runs a wake-up event: the endpoint's timer may be due.
func (h *Host) wake(gen uint64) {
	if gen != h.wakeGen {
		return // superseded by an earlier wake-up
	}
	h.wakeAt = -1
	h.active = true
	fired := false
	if t := h.ep.NextTimeout(); t >= 0 && t <= h.sim.now {
		fired = true
		h.stats.Timeouts++
		h.ep.HandleTimeout(h.sim.now)
		h.drain()
	}
	h.settle(fired)
}

// settle finishes a round of calls into the endpoint: it processes datagrams that arrived
// meanwhile, then re-arms the wake-up.
func (h *Host) settle(afterTimeout bool) {
	for h.inbox.len() > 0 {
		h.receive(h.inbox.pop())
	}
	h.active = false
	h.rearm(afterTimeout)
}

// rearm schedules a wake-up at the endpoint's next timer unless one is already scheduled no
// later. Wake-ups are never cancelled: a later one that finds its timer moved just re-arms, and
// one superseded by an earlier wake-up is ignored through wakeGen.
func (h *Host) rearm(afterTimeout bool) {
	t := h.ep.NextTimeout()
	if t < 0 {
		return
	}
	now := h.sim.now
	if t <= now {
		if afterTimeout {
			// HandleTimeout left its timer due: run it again 1ns later rather than at now,
			// so that an endpoint that never clears it cannot freeze virtual time.
			t = now + 1
			h.stats.ClampedTimeouts++
			h.sim.stats.ClampedTimeouts++
		} else {
			t = now
		}
	}
	if h.wakeAt >= 0 && h.wakeAt <= t {
		return
	}
	h.wakeAt = t
	h.wakeGen++
	h.sim.schedule(event{at: t, kind: evHostWake, host: h, gen: h.wakeGen})
}

// drain sends everything the endpoint has to send now.
func (h *Host) drain() {
	s := h.sim
	for n := 0; ; n++ {
		if n == s.cfg.MaxPollBurst {
			// Yield so virtual time can advance; poll again 1ns later.
			s.stats.PollBurstLimited++
			h.pollPending = true
			s.schedule(event{at: s.now + 1, kind: evHostPoll, host: h})
			return
		}
		d := s.pool.get()
		pooled := d != nil
		if !pooled {
			if h.scratch.buf == nil {
				h.scratch.buf = make([]byte, s.cfg.MaxDatagramSize)
			}
			d = &h.scratch
		}
		d.reset(h.id)
		if !h.ep.Poll(s.now, d) {
			if pooled {
				s.free(d)
			}
			return
		}
		h.stats.Sent++
		s.stats.DatagramsSent++
		if !pooled {
			h.stats.DroppedNoBuffer++
			s.stats.DroppedNoBuffer++
			continue
		}
		h.send(d)
	}
}

// send checks a polled datagram and puts it on the uplink.
func (h *Host) send(d *Datagram) {
	s := h.sim
	d.Src = h.id // an endpoint cannot spoof its address
	if !d.owned() {
		h.stats.Dropped++
		s.stats.DroppedOversize++
		s.free(d)
		return
	}
	if dst := h.net.Host(d.Dst); dst == nil || dst.site == h.site {
		h.stats.Dropped++
		s.stats.Unroutable++
		s.free(d)
		return
	}
	h.up.enqueue(d)
}
