//go:build linux

package flood

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// connFlood opens TCP connections to dst and holds them idle: at most held
// open at once and total in all, within duration. A connection the server
// closes is replaced while the budget lasts, so the flood keeps held
// connections open for the whole duration (a slowloris without the
// headers). One goroutine does it all: closes are found with one poll(2)
// over every connection's descriptor.
type connFlood struct {
	dst      netip.AddrPort
	held     int
	total    int
	duration time.Duration
	// junk, if set, is written on every connection once it is open.
	junk []byte
	// srcIPs spread the connections' source addresses (ephemeral ports
	// per IP are limited).
	srcIPs []netip.Addr

	opened, dialFailures, serverClosed int
	maxHeld                            int
	lastErr                            error
}

type heldConn struct {
	c  net.Conn
	fd int
}

func (f *connFlood) run(ctx context.Context) time.Duration {
	start := time.Now()
	deadline := start.Add(f.duration)
	var conns []heldConn
	defer func() {
		for _, h := range conns {
			h.c.Close()
		}
	}()
	// Spread the opening over the first fifth of the duration, then keep
	// the count up.
	ramp := f.duration / 5
	rate := float64(f.held) / max(ramp.Seconds(), 0.1)
	pfds := make([]unix.PollFd, 0, f.held)
	ip := 0
	for ctx.Err() == nil && time.Now().Before(deadline) {
		// Reap the connections the server closed (readable: EOF or RST).
		pfds = pfds[:0]
		for _, h := range conns {
			pfds = append(pfds, unix.PollFd{Fd: int32(h.fd), Events: unix.POLLIN | unix.POLLRDHUP})
		}
		if len(pfds) > 0 {
			if _, err := unix.Poll(pfds, 0); err == nil {
				keep := conns[:0]
				for i, h := range conns {
					if pfds[i].Revents&(unix.POLLIN|unix.POLLRDHUP|unix.POLLHUP|unix.POLLERR) != 0 {
						f.serverClosed++
						h.c.Close()
						continue
					}
					keep = append(keep, h)
				}
				conns = keep
			}
		}
		want := min(f.held, int(rate*time.Since(start).Seconds())+1)
		dialed := 0
		for len(conns) < want && f.opened+f.dialFailures < f.total && ctx.Err() == nil && dialed < 64 {
			dialed++
			d := net.Dialer{Timeout: 500 * time.Millisecond}
			if len(f.srcIPs) > 0 {
				d.LocalAddr = &net.TCPAddr{IP: f.srcIPs[ip%len(f.srcIPs)].AsSlice()}
				ip++
			}
			c, err := d.DialContext(ctx, "tcp", f.dst.String())
			if err != nil {
				f.dialFailures++
				f.lastErr = err
				if errors.Is(err, syscall.EADDRNOTAVAIL) || errors.Is(err, syscall.EMFILE) {
					break
				}
				continue
			}
			f.opened++
			if len(f.junk) > 0 {
				_ = c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
				_, _ = c.Write(f.junk)
			}
			fd := -1
			if sc, ok := c.(syscall.Conn); ok {
				if rc, err := sc.SyscallConn(); err == nil {
					_ = rc.Control(func(x uintptr) { fd = int(x) })
				}
			}
			if fd < 0 {
				c.Close()
				continue
			}
			conns = append(conns, heldConn{c, fd})
		}
		f.maxHeld = max(f.maxHeld, len(conns))
		if f.opened+f.dialFailures >= f.total && len(conns) == 0 {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
	return time.Since(start)
}
