package gateway

import (
	"net"
	"net/netip"
	"sync"
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
