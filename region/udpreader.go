package region

import (
	"errors"
	"net"
	"net/netip"
	"slices"
	"syscall"
	"time"

	"github.com/hashicorp/memberlist"
	"golang.org/x/net/ipv4"
)

// udpReader is one socket's reading goroutine and the state only it
// touches: the gossip port's listening socket, or a member's own.
type udpReader struct {
	t        *guardTransport
	conn     *net.UDPConn
	batch    *ipv4.PacketConn // conn, read a batch at a time
	member   bool             // a member's own socket
	scratch  []byte           // decryption output, discarded
	overflow uint32           // last SO_RXQ_OVFL value seen

	// The listening socket only.
	trusted   map[netip.AddrPort]time.Time // authenticated lately, by source
	window    time.Time                    // start of the current rate window
	windowAll int                          // untrusted datagrams let through in it
	windowBy  map[netip.Addr]int           // the same per source address
}

// loop reads the socket a batch at a time and checks every datagram
// before it is queued for memberlist.
func (r *udpReader) loop() {
	t := r.t
	defer t.wg.Done()
	batch := readBatch
	if r.member {
		batch = memberReadBatch
	}
	msgs := make([]ipv4.Message, batch)
	for i := range msgs {
		msgs[i].Buffers = [][]byte{make([]byte, maxDatagram)}
		msgs[i].OOB = make([]byte, overflowOOBSize)
	}
	var errPause time.Duration
	for {
		n, err := r.batch.ReadBatch(msgs, 0)
		now := time.Now()
		if err != nil {
			if t.closed.Load() || errors.Is(err, net.ErrClosed) {
				return
			}
			if errors.Is(err, syscall.ECONNREFUSED) {
				continue // a member's socket, after an ICMP error
			}
			t.warns.Warn("read", "reading gossip datagrams", "err", err)
			// A persistent error must not spin a core.
			errPause = min(max(2*errPause, time.Millisecond), time.Second)
			select {
			case <-t.done:
				return
			case <-time.After(errPause):
			}
			continue
		}
		errPause = 0
		if n > 0 {
			if v, ok := parseOverflow(msgs[n-1].OOB[:msgs[n-1].NN]); ok {
				if d := v - r.overflow; d > 0 {
					total := t.dropped[dSocketOverflow].Add(uint64(d))
					t.warns.Warn(DropSocketOverflow, "gossip datagrams dropped by the kernel: the receive buffer was full",
						"reason", DropSocketOverflow, "member_socket", r.member, "total", total)
				}
				r.overflow = v
			}
		}
		for i := range n {
			r.handle(&msgs[i], now)
		}
	}
}

// handle checks one datagram and queues it for memberlist or drops it.
func (r *udpReader) handle(m *ipv4.Message, now time.Time) {
	t := r.t
	from, ok := m.Addr.(*net.UDPAddr)
	if !ok {
		return
	}
	src := from.AddrPort()
	src = netip.AddrPortFrom(src.Addr().Unmap(), src.Port())
	t.pktRecv.Add(uint64(m.N))
	b := m.Buffers[0][:m.N]
	d := -1
	if m.Flags&msgTrunc != 0 || m.N >= maxDatagram {
		d = dTooLong
	} else {
		d = r.check(b, src, now)
	}
	if d >= 0 {
		t.drop(d, src, now)
		return
	}
	p := &memberlist.Packet{Buf: slices.Clone(b), From: &net.UDPAddr{IP: slices.Clone(from.IP), Port: from.Port, Zone: from.Zone}, Timestamp: now}
	select {
	case t.packetCh <- p:
		t.accepted.Add(1)
		if r.member {
			t.acceptedMember.Add(1)
		}
	default:
		t.drop(dQueueFull, src, now)
	}
}

// check returns the drop reason of datagram b from src, or -1 to accept it.
func (r *udpReader) check(b []byte, src netip.AddrPort, now time.Time) int {
	keys := r.t.keys.Load()
	if keys == nil {
		// Clear gossip cannot be authenticated: check the shape and
		// limit strangers.
		switch {
		case len(b) < 1:
			return dTooShort
		case b[0] > mlMaxMsgType || b[0] == mlEncryptMsg:
			return dFormat
		case !r.isTrusted(src, now) && !r.spend(src.Addr(), now):
			return dRate
		}
		return -1
	}
	switch {
	case len(b) < mlMinEncrypted:
		return dTooShort
	case b[0] > 1: // memberlist's encryption versions are 0 and 1
		return dFormat
	case !r.isTrusted(src, now) && !r.spend(src.Addr(), now):
		return dRate
	}
	nonce, sealed := b[1:1+mlNonceSize], b[1+mlNonceSize:]
	for _, k := range *keys {
		var err error
		if r.scratch, err = k.Open(r.scratch[:0], nonce, sealed, nil); err == nil {
			r.trust(src, now)
			return -1
		}
	}
	return dDecrypt
}

func (r *udpReader) isTrusted(src netip.AddrPort, now time.Time) bool {
	if r.member || r.t.noLimit.Load() {
		return true
	}
	if _, ok := (*r.t.members.Load())[src]; ok {
		return true
	}
	at, ok := r.trusted[src]
	return ok && now.Sub(at) < trustTTL
}

// trust records that src just sent an authenticated datagram.
func (r *udpReader) trust(src netip.AddrPort, now time.Time) {
	if r.member {
		return
	}
	if at, ok := r.trusted[src]; ok {
		if now.Sub(at) > time.Second {
			r.trusted[src] = now
		}
		return
	}
	if len(r.trusted) >= maxTrusted {
		for a, at := range r.trusted {
			if now.Sub(at) >= trustTTL {
				delete(r.trusted, a)
			}
		}
		if len(r.trusted) >= maxTrusted {
			return
		}
	}
	r.trusted[src] = now
}

// spend takes one datagram from the budgets of untrusted sources; false
// when the datagram is over budget.
func (r *udpReader) spend(ip netip.Addr, now time.Time) bool {
	if now.Sub(r.window) >= time.Second || now.Before(r.window) {
		r.window, r.windowAll = now, 0
		clear(r.windowBy)
	}
	if r.windowAll >= untrustedTotal {
		return false
	}
	n := r.windowBy[ip]
	if n >= untrustedPerIP {
		return false
	}
	r.windowBy[ip] = n + 1
	r.windowAll++
	return true
}

func (t *guardTransport) drop(d int, src netip.AddrPort, now time.Time) {
	total := t.dropped[d].Add(1)
	// The flood path: one atomic load when no line is due.
	g := &t.dropLog[d]
	next := g.next.Load()
	if now.UnixNano() < next || !g.next.CompareAndSwap(next, now.Add(refusalLogEvery).UnixNano()) {
		g.suppressed.Add(1)
		return
	}
	args := []any{"reason", dropIndex[d], "from", src.String(), "total", total}
	if n := g.suppressed.Swap(0); n > 0 {
		args = append(args, "suppressed", n)
	}
	t.log.Warn("dropping gossip datagrams", args...)
}
