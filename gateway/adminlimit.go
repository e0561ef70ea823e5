package gateway

import (
	"net"
	"net/netip"
	"sync"
	"time"
)

// sourceLimitListener caps the connections one source IP holds open on the
// admin listener. The total cap (Options.AdminMaxConns, LimitListener
// around this one) alone let one client (a runaway scraper, a script
// looping on curl without closing) hold every slot while Prometheus waited
// in the accept queue; with a per-source cap below the total, a single
// source can take at most its share. A connection over the cap is closed
// as soon as it is accepted (the client sees the connection closed, which
// it retries like any failed scrape) and reported to refused.
//
// The map holds only sources with connections open, and LimitListener
// around this listener bounds those to the total cap, so it is bounded too.
type sourceLimitListener struct {
	net.Listener
	max     int
	refused func(src netip.Addr, open int)

	mu   sync.Mutex
	open map[netip.Addr]int
}

func newSourceLimitListener(l net.Listener, max int, refused func(src netip.Addr, open int)) *sourceLimitListener {
	return &sourceLimitListener{Listener: l, max: max, refused: refused, open: map[netip.Addr]int{}}
}

// Accept returns the next connection whose source is under its cap,
// closing the ones that are not.
func (l *sourceLimitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		src := sourceAddr(c.RemoteAddr())
		l.mu.Lock()
		n := l.open[src]
		if n >= l.max {
			l.mu.Unlock()
			c.Close()
			l.refused(src, n)
			continue
		}
		l.open[src] = n + 1
		l.mu.Unlock()
		return &sourceConn{Conn: c, l: l, src: src}, nil
	}
}

func (l *sourceLimitListener) release(src netip.Addr) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open[src] <= 1 {
		delete(l.open, src)
		return
	}
	l.open[src]--
}

// openFrom is how many connections src holds (tests).
func (l *sourceLimitListener) openFrom(src netip.Addr) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open[src]
}

// sourceAddr is the IP of a TCP peer, IPv4-mapped addresses unmapped so
// that one client counts once whichever socket family it arrived on; the
// zero Addr for anything else (all such share one count).
func sourceAddr(a net.Addr) netip.Addr {
	if ta, ok := a.(*net.TCPAddr); ok {
		if ip, ok := netip.AddrFromSlice(ta.IP); ok {
			return ip.Unmap()
		}
	}
	return netip.Addr{}
}

// sourceConn gives its source's slot back when it is closed (once, however
// often Close is called: net/http may close a connection twice).
type sourceConn struct {
	net.Conn
	l    *sourceLimitListener
	src  netip.Addr
	once sync.Once
}

func (c *sourceConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.release(c.src) })
	return err
}

// evictingListener caps the admin connections open at once without ever
// making a new client wait. A plain limit (netutil.LimitListener) stops
// accepting at the cap: 64 idle connections from four addresses, or a
// slowloris that sends its headers a byte at a time, held every slot and
// Prometheus and the /readyz probes queued in the kernel for 30-40 s. Here
// a connection over the cap takes the slot of the open connection that
// has been waiting longest for a request (idle keep-alive, or still
// sending its headers), which is closed and reported to evicted; only when
// every open connection is in a handler is the new one closed (busy).
// Handlers are bounded by the server's write timeout, so busy is brief.
type evictingListener struct {
	net.Listener
	max     int
	evicted func(victim netip.Addr, waited time.Duration)
	busy    func(src netip.Addr)

	mu   sync.Mutex
	open map[*evictConn]struct{}
}

func newEvictingListener(l net.Listener, max int, evicted func(netip.Addr, time.Duration), busy func(netip.Addr)) *evictingListener {
	return &evictingListener{Listener: l, max: max, evicted: evicted, busy: busy, open: map[*evictConn]struct{}{}}
}

// Accept returns the next connection; at the cap it first closes the
// longest-waiting connection that is not serving a request.
func (l *evictingListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		now := time.Now()
		ec := &evictConn{Conn: c, l: l, waitingSince: now}
		l.mu.Lock()
		var victim *evictConn
		if len(l.open) >= l.max {
			for o := range l.open {
				if !o.busy && (victim == nil || o.waitingSince.Before(victim.waitingSince)) {
					victim = o
				}
			}
			if victim == nil {
				l.mu.Unlock()
				c.Close()
				l.busy(sourceAddr(c.RemoteAddr()))
				continue
			}
			delete(l.open, victim)
		}
		l.open[ec] = struct{}{}
		l.mu.Unlock()
		if victim != nil {
			victim.Close()
			l.evicted(sourceAddr(victim.RemoteAddr()), now.Sub(victim.waitingSince))
		}
		return ec, nil
	}
}

// serving marks c as serving a request (its handler was called): it is
// not evicted until idle says its response was written.
func (l *evictingListener) serving(c net.Conn) {
	if ec, ok := c.(*evictConn); ok {
		l.mu.Lock()
		ec.busy = true
		l.mu.Unlock()
	}
}

// idle marks c as waiting for its next request (http.StateIdle: the
// response is written).
func (l *evictingListener) idle(c net.Conn) {
	if ec, ok := c.(*evictConn); ok {
		l.mu.Lock()
		ec.busy = false
		ec.waitingSince = time.Now()
		l.mu.Unlock()
	}
}

// openConns is how many connections hold a slot.
func (l *evictingListener) openConns() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.open)
}

// evictConn is one admin connection holding a slot; its fields are under
// the listener's mutex.
type evictConn struct {
	net.Conn
	l            *evictingListener
	busy         bool      // a request is in its handler or its answer is being written
	waitingSince time.Time // accepted, or its last request answered
	once         sync.Once
}

func (c *evictConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.l.mu.Lock()
		delete(c.l.open, c)
		c.l.mu.Unlock()
	})
	return err
}

// connKey carries the admin connection in a request's context.
type connKey struct{}
