//go:build linux

package tunemu

import (
	"context"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mrgw/mrgw/netem"
)

// TestUDPListener: a socket opened by UDPListener(SiteA) from an ordinary
// goroutine lives in site A's namespace: it binds A's address (which
// exists only there) and its datagram reaches a socket at site B through
// the emulated link, which counts it.
func TestUDPListener(t *testing.T) {
	e := newEmu(t, Config{Seed: 3, Link: netem.LinkConfig{Rate: 10e6, Delay: 2 * time.Millisecond, QueueBytes: 1 << 20}})
	// B's address is not local to A's namespace: binding it there fails.
	if c, err := e.UDPListener(SiteA)("udp4", &net.UDPAddr{IP: AddrB.AsSlice()}); err == nil {
		c.Close()
		t.Fatal("bound site B's address inside site A's namespace")
	}
	rx, err := e.UDPListener(SiteB)("udp4", &net.UDPAddr{IP: AddrB.AsSlice()})
	if err != nil {
		t.Fatal(err)
	}
	defer rx.Close()
	tx, err := e.UDPListener(SiteA)("udp4", &net.UDPAddr{IP: AddrA.AsSlice()})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Close()
	if _, err := tx.WriteTo([]byte("through the link"), rx.LocalAddr()); err != nil {
		t.Fatal(err)
	}
	rx.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 64)
	n, from, err := rx.ReadFromUDP(buf)
	if err != nil {
		t.Fatal(err)
	}
	if string(buf[:n]) != "through the link" || from.AddrPort().Addr() != AddrA {
		t.Fatalf("got %q from %v", buf[:n], from)
	}
	// Counted in wire bytes, as netem counts the same datagram: its
	// payload and its IPv4 and UDP headers.
	if st := e.Stats().Total(AtoB); st.Delivered != 1 || st.BytesDelivered != uint64(n+HeaderCharge) {
		t.Errorf("emulator A→B: %+v, want the one %d-byte datagram (%d wire bytes)", st, n, n+HeaderCharge)
	}
	// The device counted it (and perhaps a few packets the kernel sends
	// by itself), dropping none.
	ds, err := e.DeviceStats(SiteA)
	if err != nil {
		t.Fatal(err)
	}
	if ds.TxPackets < 1 || ds.TxDropped != 0 {
		t.Errorf("site A's device: %+v", ds)
	}
}

// TestTCPSeesCE: with net.ipv4.tcp_ecn=1 in both namespaces, kernel TCP
// segments are ECT and the emulator marks them CE like any other ECT
// packet: the sender's TCP_INFO counts CE-echoed deliveries.
func TestTCPSeesCE(t *testing.T) {
	e := newEmu(t, Config{Seed: 4, Link: netem.LinkConfig{Rate: 10e6, Delay: 5 * time.Millisecond, ECNThreshold: 3000, QueueBytes: 1 << 20},
		Sysctls: map[string]string{"net.ipv4.tcp_ecn": "1"}})
	ln, err := e.Listen(SiteB, "tcp4", net.JoinHostPort(AddrB.String(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan int64, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			done <- -1
			return
		}
		defer c.Close()
		n, _ := io.Copy(io.Discard, c)
		done <- n
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := e.Dial(ctx, SiteA, &net.Dialer{}, "tcp4", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	const size = 1 << 20
	c.SetWriteDeadline(time.Now().Add(20 * time.Second))
	if _, err := c.Write(make([]byte, size)); err != nil {
		t.Fatal(err)
	}
	// Wait until everything is acknowledged (unacked 0) before reading
	// the counters.
	var info *unix.TCPInfo
	rc, _ := c.(*net.TCPConn).SyscallConn()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		rc.Control(func(fd uintptr) { info, _ = unix.GetsockoptTCPInfo(int(fd), syscall.IPPROTO_TCP, unix.TCP_INFO) })
		if info != nil && info.Unacked == 0 {
			break
		}
	}
	c.Close()
	if n := <-done; n != size {
		t.Fatalf("received %d of %d bytes", n, size)
	}
	st := e.Stats().Total(AtoB)
	if st.CEMarks == 0 {
		t.Fatalf("the emulator marked no TCP segment CE (queue peaked at %d bytes, threshold 3000)", st.MaxQueueBytes)
	}
	if info == nil || info.Delivered_ce == 0 {
		t.Fatalf("the emulator marked %d segments CE but the sender saw no CE echo (tcp_info %+v)", st.CEMarks, info)
	}
	t.Logf("emulator marked %d segments CE; sender counted %d CE-echoed deliveries, %d retransmits", st.CEMarks, info.Delivered_ce, info.Total_retrans)
}
