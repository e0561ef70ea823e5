//go:build linux

package netio

import (
	"net/netip"
	"runtime"
	"testing"
)

// TestPathSocketMemory bounds what a path socket allocates. Path sockets
// are opened on demand and again on every entropy re-roll; at ~0.8 MiB
// each (listening-socket batches and four 64 KiB GRO buffers), the
// load-test lab's 66 hosts churned gigabytes of zeroed memory and starved
// their own timers (incast 64→1 in mrgw loadtest).
func TestPathSocketMemory(t *testing.T) {
	p := newPair(t, nil, nil, nil)
	e := p.a
	const n = 16
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	var socks []*sock
	for i := range n {
		s, err := e.openSock(netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), 0), false, false, 2, uint16(i+1), -1)
		if err != nil {
			t.Fatal(err)
		}
		socks = append(socks, s)
	}
	runtime.ReadMemStats(&after)
	for _, s := range socks {
		e.retire(s)
	}
	per := float64(after.TotalAlloc-before.TotalAlloc) / n
	// Receive batches of pathSockBatch datagrams, one GRO buffer and
	// bookkeeping (~160 KiB at this MTU): well under what it used to cost
	// (~450 KiB at this MTU, ~0.8 MiB at 4096).
	const limit = 256 << 10
	t.Logf("%.0f bytes allocated per path socket (limit %d)", per, limit)
	if per > limit {
		t.Fatalf("a path socket allocates %.0f bytes, want at most %d", per, limit)
	}
}
