//go:build linux

package flood

import (
	"context"
	"net"
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mrgw/mrgw/loadtest/lab"
)

// Regression tests of bugs the flood found (docs/results/flood.md), on
// one lab: they assert counts and bounds, never a time.
func TestFloodRegressions(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the gateway lab")
	}
	l, err := lab.New(context.Background(), lab.Config{Admin: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	l.Start()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := l.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	t.Run("junk-INIT", func(t *testing.T) { testJunkINIT(ctx, t, l) })
	t.Run("control-junk-initials", func(t *testing.T) { testControlJunkInitials(ctx, t, l) })
}

// grown sums what the series of family grew by between two snapshots
// (only the series whose labels contain label, when it is not empty).
func grown(before, after counters, family, label string) uint64 {
	var n uint64
	for k, v := range delta(before, after) {
		if (k == family || strings.HasPrefix(k, family+"{")) && strings.Contains(k, label) {
			n += v
		}
	}
	return n
}

// testJunkINIT: a 12-byte datagram whose second byte is 3 (INIT's type) is
// not an INIT (wrong version, 12 bytes where an INIT has 24). netio took
// it for one by its type byte (metaroce.Peek): it admitted the source as a
// LAN peer while the gateway was not under load and answered with a
// 24-byte RETRY (twice its size) while it was. Now it is neither answered
// nor admitted, and counted as malformed.
func testJunkINIT(ctx context.Context, t *testing.T, l *lab.Lab) {
	g := l.Gateways["euw-gw1"]
	dst := net.UDPAddrFromAddrPort(netip.MustParseAddrPort(l.Configs["euw-gw1"].LAN.Listen))
	before := snapshot(g)
	pendingBefore := g.Status().Admission.Pending
	const n = 40
	var socks []*net.UDPConn
	defer func() {
		for _, c := range socks {
			c.Close()
		}
	}()
	for i := range n {
		c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 1, byte(1+i%16))})
		if err != nil {
			t.Fatal(err)
		}
		socks = append(socks, c)
		junk := []byte{0xEE, 0x03, 0, 0, 1, 2, 3, 4, 5, 6, 7, byte(i)}
		if _, err := c.WriteToUDP(junk, dst); err != nil {
			t.Fatal(err)
		}
	}
	// Every one counted (the stats sync runs every 200 ms in the lab):
	// any answer was sent before its datagram was counted.
	var malformed uint64
	for malformed < n && ctx.Err() == nil {
		time.Sleep(50 * time.Millisecond)
		malformed = grown(before, snapshot(g), "mrgw_lan_datagrams_dropped_total", `reason="malformed"`)
	}
	var replies, bigger int
	buf := make([]byte, 2048)
	for _, c := range socks {
		_ = c.SetReadDeadline(time.Now()) // what has arrived, no wait
		if m, _, err := c.ReadFromUDP(buf); err == nil {
			replies++
			if m > 12 {
				bigger++
			}
		}
	}
	st := g.Status().Admission
	t.Logf("%d junk datagrams of 12 bytes: counted malformed %d; answered %d (%d larger); LAN peers %d, pending %d (before %d)",
		n, malformed, replies, bigger, st.Peers, st.Pending, pendingBefore)
	if malformed != n {
		t.Errorf("mrgw_lan_datagrams_dropped_total{reason=malformed} grew by %d, want %d", malformed, n)
	}
	if replies > 0 || st.Pending > pendingBefore {
		t.Errorf("junk treated as INITs: %d answered, %d admitted and pending", replies, st.Pending-pendingBefore)
	}
}

// testControlJunkInitials: junk QUIC Initials (a valid long header, a
// random DCID, a payload no key opens) at control.listen. Each made
// quic-go start a server connection, about four goroutines, for the 10-s
// handshake timeout: 5,000 took the process from 173 to 19,733
// goroutines. Now each is answered with a Retry and forgotten: goroutines
// stay bounded, and every one is counted (retry, or queue, or the
// kernel's buffer drops).
func testControlJunkInitials(ctx context.Context, t *testing.T, l *lab.Lab) {
	g := l.Gateways["euw-gw1"]
	dst := netip.MustParseAddrPort(l.Configs["euw-gw1"].Control.Listen)
	before := snapshot(g)
	runtime.GC()
	base := runtime.NumGoroutine()
	peak := base
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tk := time.NewTicker(10 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-done:
				return
			case <-tk.C:
				peak = max(peak, runtime.NumGoroutine())
			}
		}
	}()
	uf := &udpFlood{dst: dst, what: payloadQUIC, count: 5000, duration: time.Second, workers: 1, srcIPs: floodIPs()}
	if _, err := uf.run(ctx); err != nil {
		t.Fatal(err)
	}
	sent := uf.sent.Load()
	var counted uint64
	for counted < sent && ctx.Err() == nil {
		time.Sleep(50 * time.Millisecond)
		counted = grown(before, snapshot(g), "mrgw_control_packets_dropped_total", "")
	}
	close(done)
	wg.Wait()
	after := snapshot(g)
	t.Logf("%d junk Initials: goroutines %d → peak %d; counted %d: retry %d, queue %d, buffer %d", sent, base, peak, counted,
		grown(before, after, "mrgw_control_packets_dropped_total", `reason="retry"`),
		grown(before, after, "mrgw_control_packets_dropped_total", `reason="queue"`),
		grown(before, after, "mrgw_control_packets_dropped_total", `reason="buffer"`))
	// Before the fix: +19,560 goroutines for 5,000 junk Initials.
	if peak-base > 500 {
		t.Errorf("goroutines %d → %d for %d junk Initials: state kept for unvalidated sources", base, peak, sent)
	}
	if counted < sent {
		t.Errorf("%d of %d junk Initials counted in mrgw_control_packets_dropped_total", counted, sent)
	}
}
