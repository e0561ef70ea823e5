package gateway

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"sync/atomic"
	"testing"
	"time"
)

// TestSourceLimitListener: the cap counts per source IP (IPv4-mapped
// addresses as IPv4), a connection gives its slot back on its first Close
// only, and a source with nothing open leaves no entry behind.
func TestSourceLimitListener(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var refused []netip.Addr
	l := newSourceLimitListener(raw, 1, func(src netip.Addr, open int) {
		if open != 1 {
			t.Errorf("refused with %d open, want 1", open)
		}
		refused = append(refused, src)
	})
	defer l.Close()
	lo := netip.MustParseAddr("127.0.0.1")
	dial := func(src string) net.Conn {
		t.Helper()
		c, err := (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}).Dial("tcp", raw.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	accept := func() net.Conn {
		t.Helper()
		c, err := l.Accept()
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	dial("127.0.0.1")
	first := accept()
	// Over the cap: the next from 127.0.0.1 is closed inside Accept, which
	// goes on to return the one from 127.0.0.2 (dialled after it, so
	// queued behind it).
	dial("127.0.0.1")
	dial("127.0.0.2")
	second := accept()
	if got := sourceAddr(second.RemoteAddr()); got != netip.MustParseAddr("127.0.0.2") {
		t.Fatalf("Accept returned a connection from %v, want 127.0.0.2", got)
	}
	if len(refused) != 1 || refused[0] != lo {
		t.Fatalf("refused %v, want [127.0.0.1]", refused)
	}
	if n := l.openFrom(lo); n != 1 {
		t.Fatalf("127.0.0.1 holds %d, want 1", n)
	}
	first.Close()
	first.Close() // a second Close must not give back a slot twice
	if n := l.openFrom(lo); n != 0 || len(l.open) != 1 {
		t.Fatalf("after Close: 127.0.0.1 holds %d, %d sources tracked; want 0 and 1 (127.0.0.2)", n, len(l.open))
	}
	dial("127.0.0.1")
	accept()
	if n := l.openFrom(lo); n != 1 {
		t.Fatalf("127.0.0.1 holds %d after its slot came back, want 1", n)
	}

	mapped := &net.TCPAddr{IP: net.ParseIP("::ffff:192.0.2.1"), Port: 1}
	if got := sourceAddr(mapped); got != netip.MustParseAddr("192.0.2.1") {
		t.Errorf("sourceAddr(%v) = %v, want 192.0.2.1", mapped, got)
	}
	if got := sourceAddr(&net.UnixAddr{Name: "x", Net: "unix"}); got.IsValid() {
		t.Errorf("sourceAddr of a unix address = %v, want the zero Addr", got)
	}
}

// TestAdminCaps: the per-source cap defaults to a quarter of the total,
// at least 1, so that it binds whatever the total (it was 16 whatever the
// total: nothing with a total of 16 or less); one set explicitly is kept,
// up to the total.
func TestAdminCaps(t *testing.T) {
	for _, c := range []struct{ total, perSource, wantTotal, wantPer int }{
		{0, 0, 64, 16},
		{64, 0, 64, 16},
		{16, 0, 16, 4},
		{8, 0, 8, 2},
		{2, 0, 2, 1},
		{1, 0, 1, 1},
		{8, 5, 8, 5},
		{4, 10, 4, 4},
	} {
		if total, per := adminCaps(c.total, c.perSource); total != c.wantTotal || per != c.wantPer {
			t.Errorf("adminCaps(%d, %d) = %d, %d; want %d, %d", c.total, c.perSource, total, per, c.wantTotal, c.wantPer)
		}
	}
}

// TestEvictingListener: at the cap a new connection takes the slot of the
// open one that has waited longest for a request; one serving a request
// is never taken; when every open one is serving, the new one is closed.
func TestEvictingListener(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var evicted, busy atomic.Int32
	l := newEvictingListener(raw, 2, func(netip.Addr, time.Duration) { evicted.Add(1) }, func(netip.Addr) { busy.Add(1) })
	defer l.Close()
	dial := func() {
		t.Helper()
		c, err := net.Dial("tcp", raw.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
	}
	accepted := make(chan net.Conn)
	acceptNext := func() {
		go func() {
			c, err := l.Accept()
			if err != nil {
				t.Error(err)
			}
			accepted <- c
		}()
	}
	accept := func() net.Conn {
		t.Helper()
		acceptNext()
		dial()
		return <-accepted
	}
	closed := func(c net.Conn) bool {
		_ = c.SetReadDeadline(time.Now().Add(time.Minute))
		_, err := c.Read(make([]byte, 1))
		return err != nil && !errors.Is(err, os.ErrDeadlineExceeded)
	}
	a, b := accept(), accept()
	l.serving(a) // a is in a handler: b is the only candidate
	c := accept()
	if evicted.Load() != 1 || l.openConns() != 2 || !closed(b) {
		t.Fatalf("evicted %d, open %d, b closed %v; want 1, 2, true", evicted.Load(), l.openConns(), closed(b))
	}
	// Both open connections serving: a new one is closed, counted busy,
	// and Accept waits for the next.
	l.serving(c)
	acceptNext()
	dial()
	for busy.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	// a answered its request and waits for the next: the one after takes
	// its slot.
	l.idle(a)
	dial()
	<-accepted
	if evicted.Load() != 2 || busy.Load() != 1 || !closed(a) {
		t.Fatalf("evicted %d, busy %d, a closed %v; want 2, 1, true", evicted.Load(), busy.Load(), closed(a))
	}
}
