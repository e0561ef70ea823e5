//go:build linux

package tunemu

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mrgw/mrgw/internal/ecn"
	"github.com/mrgw/mrgw/netem"
)

// newEmu starts an emulator or skips the test with the reason it cannot run.
func newEmu(t *testing.T, cfg Config) *Emulator {
	t.Helper()
	e, err := New(context.Background(), cfg)
	if errors.Is(err, ErrUnavailable) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
		for _, s := range []Site{SiteA, SiteB} {
			if _, err := os.Stat(filepath.Join(netnsDir, e.Namespace(s))); err == nil {
				t.Errorf("namespace %s left behind", e.Namespace(s))
			}
		}
	})
	return e
}

// TestTCPThroughEmulator: a kernel TCP transfer from A to B arrives
// byte-exact through a 20 ms one-way, 1%-loss link; the emulator's own
// clock shows no packet delivered sooner than the delay, its counters show
// the losses, and the kernel's own RTT estimate is at least the round trip.
func TestTCPThroughEmulator(t *testing.T) {
	const oneWay = 20 * time.Millisecond
	e := newEmu(t, Config{Seed: 1, Link: netem.LinkConfig{Rate: 50e6, Delay: oneWay, Loss: 0.01, QueueBytes: 256 << 10}})
	ln, err := e.Listen(SiteB, "tcp4", net.JoinHostPort(AddrB.String(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	src := make([]byte, 2<<20)
	crand.Read(src)
	got := make(chan []byte, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- nil
			return
		}
		defer c.Close()
		b, _ := io.ReadAll(c)
		got <- b
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	c, err := e.Dial(ctx, SiteA, &net.Dialer{}, "tcp4", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write(src); err != nil {
		t.Fatal(err)
	}
	var info *unix.TCPInfo
	rc, _ := c.(*net.TCPConn).SyscallConn()
	rc.Control(func(fd uintptr) { info, _ = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO) })
	c.Close()
	var b []byte
	select {
	case b = <-got:
	case <-ctx.Done():
		t.Fatal("transfer did not finish")
	}
	if !bytes.Equal(b, src) {
		t.Fatalf("received %d bytes, not the %d sent", len(b), len(src))
	}
	st := e.Stats()
	for d := range st.MinTransit {
		if st.MinTransit[d] < oneWay {
			t.Errorf("%v: a packet crossed in %v, less than the %v delay", Dir(d), st.MinTransit[d], oneWay)
		}
	}
	ab := st.Total(AtoB)
	if ab.LossDrops == 0 {
		t.Errorf("no random loss applied to %d packets at 1%%", ab.In)
	}
	if ab.Delivered == 0 || st.Total(BtoA).Delivered == 0 {
		t.Error("nothing delivered in one direction")
	}
	if info != nil && info.Min_rtt > 0 && time.Duration(info.Min_rtt)*time.Microsecond < 2*oneWay {
		t.Errorf("kernel min RTT %v µs below the emulated %v", info.Min_rtt, 2*oneWay)
	}
	t.Logf("A->B %d in, %d lost, %d delivered; min transit %v / %v; tcp min_rtt %d µs",
		ab.In, ab.LossDrops, ab.Delivered, st.MinTransit[0], st.MinTransit[1], info.Min_rtt)
}

// TestECNMarkAndFail: ECT(0) UDP datagrams queued above the threshold
// arrive CE with a valid header checksum (the receiver's kernel drops
// datagrams with bad ones); a failed plane delivers nothing.
func TestECNMarkAndFail(t *testing.T) {
	e := newEmu(t, Config{Seed: 2, Link: netem.LinkConfig{Rate: 10e6, Delay: time.Millisecond, ECNThreshold: 3000, QueueBytes: 1 << 20}})
	rx, err := e.ListenUDP(SiteB, &net.UDPAddr{IP: AddrB.AsSlice()})
	if err != nil {
		t.Fatal(err)
	}
	defer rx.Close()
	if err := ecn.EnableReceive(rx); err != nil {
		t.Fatal(err)
	}
	tx, err := e.ListenUDP(SiteA, &net.UDPAddr{IP: AddrA.AsSlice()})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Close()
	rc, _ := tx.SyscallConn()
	rc.Control(func(fd uintptr) {
		_ = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_IP, syscall.IP_TOS, int(ecn.ECT0))
	})
	const n = 40
	buf := make([]byte, 1000)
	for i := range n {
		binary.BigEndian.PutUint32(buf, uint32(i))
		if _, err := tx.WriteTo(buf, rx.LocalAddr()); err != nil {
			t.Fatal(err)
		}
	}
	rx.SetReadDeadline(time.Now().Add(5 * time.Second))
	oob := make([]byte, 128)
	ce, got := 0, 0
	for got < n {
		_, oobn, _, _, err := rx.ReadMsgUDP(buf, oob)
		if err != nil {
			break
		}
		got++
		ctl, _ := ecn.ParseControl(oob[:oobn])
		if ecn.FromTOS(ctl.TrafficClass) == ecn.CE {
			ce++
		}
	}
	st := e.Stats().Total(AtoB)
	if got != n {
		t.Fatalf("received %d of %d datagrams (emulator: %+v)", got, n, st)
	}
	if ce == 0 || uint64(ce) != st.CEMarks {
		t.Errorf("%d datagrams arrived CE, emulator marked %d", ce, st.CEMarks)
	}
	// Fail the only plane: nothing more gets through.
	if err := e.Fail(0); err != nil {
		t.Fatal(err)
	}
	tx.WriteTo(buf, rx.LocalAddr())
	rx.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if _, _, _, _, err := rx.ReadMsgUDP(buf, oob); err == nil {
		t.Error("a datagram crossed a failed plane")
	}
	if e.Stats().Total(AtoB).DownDrops == 0 {
		t.Error("no down drop counted")
	}
	t.Logf("%d of %d datagrams marked CE", ce, n)
}

func TestSetCEChecksum(t *testing.T) {
	h := []byte{0x45, 0x02, 0, 60, 0x1c, 0x46, 0x40, 0, 0x40, 0x06, 0, 0, 10, 213, 0, 1, 10, 213, 0, 2}
	setCE(h)
	if ecn.FromTOS(h[1]) != ecn.CE {
		t.Fatal("not CE")
	}
	var sum uint32
	for i := 0; i < 20; i += 2 {
		sum += uint32(h[i])<<8 | uint32(h[i+1])
	}
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	if sum != 0xffff {
		t.Errorf("checksum does not verify: %#x", sum)
	}
	p, s, d, ok := flowOf(append(h, 0x30, 0x39, 0x00, 0x50))
	if !ok || p != 6 || s != netip.MustParseAddrPort("10.213.0.1:12345") || d != netip.MustParseAddrPort("10.213.0.2:80") {
		t.Errorf("flowOf: %v %v %v %v", p, s, d, ok)
	}
}
