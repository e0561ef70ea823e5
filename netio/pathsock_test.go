//go:build linux

package netio

import (
	"net/netip"
	"runtime"
	"testing"
	"time"
)

// TestPathSocketMemory bounds the memory a path socket holds. Path sockets
// are opened on demand and again on every entropy re-roll; at ~0.8 MiB
// each (listening-socket batches and four 64 KiB GRO buffers), the
// load-test lab's 66 hosts churned gigabytes of zeroed memory and starved
// their own timers (incast 64→1 in mrgw-lab loadtest).
func TestPathSocketMemory(t *testing.T) {
	p := newPair(t, nil, nil, nil)
	e := p.a
	const n = 16
	// What the sockets hold: the heap with them open minus the heap once
	// they are retired, both after a collection (so allocation noise,
	// such as sync.Pool misses under the race detector, does not count).
	heap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	var socks []*sock
	for i := range n {
		s, err := e.openSock(netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), 0), false, false, 2, uint16(i+1), -1)
		if err != nil {
			t.Fatal(err)
		}
		socks = append(socks, s)
	}
	open := heap()
	for _, s := range socks {
		e.retire(s)
	}
	socks = nil
	// The readers exit and drop their batches: wait until the heap stops
	// shrinking.
	closed := heap()
	for range 50 {
		time.Sleep(20 * time.Millisecond)
		c := heap()
		if c+4<<10 >= closed {
			break
		}
		closed = c
	}
	per := (float64(open) - float64(closed)) / n
	// Receive batches of pathSockBatch datagrams, the GRO buffers and
	// bookkeeping: ~370 KiB at this MTU (~0.4 MiB at 4096), against ~560
	// KiB (~0.8 MiB) with the listening socket's batches.
	const limit = 448 << 10
	t.Logf("%.0f bytes held per path socket (limit %d)", per, limit)
	if per > limit {
		t.Fatalf("a path socket holds %.0f bytes, want at most %d", per, limit)
	}
}

// TestSharedPathSockets: the paths of a peer that shares path sockets
// (Config.SharePaths) send from the pool, at most SharedPathSockets
// sockets whatever the peer's paths, and the transfer over them is
// byte-exact (the replies reach the pool's sockets and are matched to the
// peer by source address). Without sharing each path has a socket.
func TestSharedPathSockets(t *testing.T) {
	for _, c := range []struct {
		name   string
		shared int
		max    uint64
	}{{"own", 0, 4}, {"shared", 2, 2}} {
		t.Run(c.name, func(t *testing.T) {
			ctx := testCtx(t)
			p := newPair(t, nil, nil, func(cfg *Config) {
				cfg.SharePaths = func(id PeerID) bool { return id == 2 }
				cfg.SharedPathSockets = c.shared
			})
			p.transfer(t, ctx, 20, 3000)
			n := p.a.Stats().PathSockets
			t.Logf("%d path sockets for 4 paths", n)
			if n == 0 || n > c.max {
				t.Fatalf("%d path sockets, want 1..%d", n, c.max)
			}
		})
	}
}
