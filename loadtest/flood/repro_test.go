//go:build linux

package flood

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/mrgw/mrgw/loadtest/lab"
)

// Reproductions of the bugs the flood found (docs/results/flood.md). They
// report what they see and fail while the bug is there, so they run only
// when asked: MRGW_FLOOD_REPRO=1 go test ./loadtest/flood -run TestRepro -v

func reproLab(t *testing.T) *lab.Lab {
	t.Helper()
	if os.Getenv("MRGW_FLOOD_REPRO") == "" {
		t.Skip("a reproduction of a known bug: set MRGW_FLOOD_REPRO=1")
	}
	l, err := lab.New(context.Background(), lab.Config{Admin: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	l.Start()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := l.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	return l
}

// TestReproJunkINIT: a 12-byte datagram whose second byte is 3 (INIT's type)
// is not an INIT (wrong version, 12 bytes where an INIT has 24), yet netio
// admits its source as a LAN peer while the gateway is not under load and
// answers it with a 24-byte RETRY (twice its size) while it is: admit()
// looks at metaroce.Peek's type only.
func TestReproJunkINIT(t *testing.T) {
	l := reproLab(t)
	g := l.Gateways["euw-gw1"]
	dst := net.UDPAddrFromAddrPort(netip.MustParseAddrPort(l.Configs["euw-gw1"].LAN.Listen))
	junk := []byte{0xEE, 0x03, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8}
	var replies, bigger int
	for i := range 40 {
		c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 1, byte(1+i%16))})
		if err != nil {
			t.Fatal(err)
		}
		junk[11] = byte(i)
		if _, err := c.WriteToUDP(junk, dst); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 2048)
		_ = c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		if n, _, err := c.ReadFromUDP(buf); err == nil {
			replies++
			if n > len(junk) {
				bigger++
			}
		}
		c.Close()
	}
	time.Sleep(500 * time.Millisecond)
	st := g.Status().Admission
	t.Logf("40 junk datagrams of 12 bytes: %d answered (%d with a larger datagram); LAN peers admitted %d, pending %d", replies, bigger, st.Peers, st.Pending)
	if replies > 0 || st.Pending > 0 {
		t.Errorf("junk treated as INITs: %d answered, %d admitted and pending", replies, st.Pending)
	}
}

// TestReproSharedIPHostClose: two hosts on 127.0.0.1; one carries a
// transfer through a gateway, the other registers with that gateway and
// closes, three times. In about one case in three the transfer stops for
// about 3 s (the gateway drops its datagrams as unknown_source until the
// host reconnects); on 127.0.0.2 the second host changes nothing.
func TestReproSharedIPHostClose(t *testing.T) {
	l := reproLab(t)
	for _, ip := range []string{"127.0.0.2", "127.0.0.1"} {
		tr, err := startTransfer(context.Background(), l, 32<<10, nil)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Second)
		t0 := time.Now()
		// Three times: the stall comes in about one case in three.
		for k := range 3 {
			if _, err := register(l, tr.flow.Gateway(), netip.MustParseAddr(ip), fmt.Sprintf("other-%d", k), nil); err != nil {
				t.Fatal(err)
			}
			time.Sleep(4 * time.Second)
		}
		_, gap := tr.deliveredIn(t0, time.Now())
		res := tr.finish(10 * time.Second)
		tr.close()
		t.Logf("second host on %s: longest gap in deliveries %v (byte-exact %v)", ip, gap.Round(time.Millisecond), res.ByteExact)
		if gap > time.Second {
			t.Errorf("second host on %s registering and closing stalled the transfer for %v", ip, gap.Round(time.Millisecond))
		}
	}
}

// TestReproControlJunkInitials: every junk QUIC Initial (a valid long
// header, a random DCID, a payload no key opens) makes quic-go start a
// server connection, goroutines included, that lives until the handshake
// timeout (10 s): the control listener has no bound on handshakes and no
// counter for what it drops.
func TestReproControlJunkInitials(t *testing.T) {
	l := reproLab(t)
	dst := netip.MustParseAddrPort(l.Configs["euw-gw1"].Control.Listen)
	before := runtime.NumGoroutine()
	uf := &udpFlood{dst: dst, what: payloadQUIC, count: 5000, duration: time.Second, workers: 1, srcIPs: floodIPs()}
	if _, err := uf.run(context.Background()); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	after := runtime.NumGoroutine()
	t.Logf("%d junk Initials: goroutines %d → %d", uf.sent.Load(), before, after)
	if after-before > 1000 {
		t.Errorf("%d goroutines for %d junk packets", after-before, uf.sent.Load())
	}
}
