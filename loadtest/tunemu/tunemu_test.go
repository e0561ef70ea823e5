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
	"sync"
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

// TestDirLink: where the loss goes for each choice of the link model.
func TestDirLink(t *testing.T) {
	l := netem.LinkConfig{Rate: 1e6, Loss: 0.1}
	for _, c := range []struct {
		cfg              Config
		d                Dir
		modelLoss, early float64
	}{
		{Config{}, AtoB, 0.1, 0},
		{Config{}, BtoA, 0.1, 0},
		{Config{LossForwardOnly: true}, AtoB, 0.1, 0},
		{Config{LossForwardOnly: true}, BtoA, 0, 0},
		{Config{LossBeforeQueue: true}, AtoB, 0, 0.1},
		{Config{LossBeforeQueue: true, LossForwardOnly: true}, BtoA, 0, 0},
	} {
		got, pre := c.cfg.dirLink(c.d, l)
		if got.Loss != c.modelLoss || pre != c.early || got.Rate != l.Rate {
			t.Errorf("%+v %v: model loss %v, before the queue %v", c.cfg, c.d, got.Loss, pre)
		}
	}
}

// TestLossPlacement: with the loss drawn after the queue (netem's model,
// the default) every datagram, lost or not, takes its link time, so a
// burst of n keeps the link busy for n transmissions; drawn before the
// queue (LossBeforeQueue) the lost ones take none and the same burst
// clears in about n·(1−loss). LossForwardOnly keeps B→A lossless. Times
// are the model's (the trace's Depart), not the test's: the link is slow
// enough (8 ms per datagram) that the burst is queued long before it
// leaves.
func TestLossPlacement(t *testing.T) {
	const n, loss = 400, 0.5
	busy := func(cfg Config) (span time.Duration, st Stats) {
		var mu sync.Mutex
		var seen [2]int
		var first, last time.Duration = -1, 0
		done := make(chan struct{})
		cfg.Seed, cfg.Link = 3, netem.LinkConfig{Rate: 1e6, Delay: time.Millisecond, Loss: loss, QueueBytes: 1 << 20}
		cfg.Trace = func(ev netem.TraceEvent) {
			mu.Lock()
			defer mu.Unlock()
			if seen[ev.Dir]++; seen[AtoB]+seen[BtoA] == 2*n {
				close(done)
			}
			if ev.Dir != AtoB {
				return
			}
			if first < 0 {
				first = ev.Arrival
			}
			if ev.Depart > last {
				last = ev.Depart
			}
		}
		e := newEmu(t, cfg)
		rx, err := e.ListenUDP(SiteB, &net.UDPAddr{IP: AddrB.AsSlice()})
		if err != nil {
			t.Fatal(err)
		}
		defer rx.Close()
		tx, err := e.ListenUDP(SiteA, &net.UDPAddr{IP: AddrA.AsSlice()})
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Close()
		buf := make([]byte, 1000)
		for range n {
			if _, err := tx.WriteTo(buf, rx.LocalAddr()); err != nil {
				t.Fatal(err)
			}
		}
		// And n the other way, to count B→A's losses.
		for range n {
			if _, err := rx.WriteTo(buf, tx.LocalAddr()); err != nil {
				t.Fatal(err)
			}
		}
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			mu.Lock()
			defer mu.Unlock()
			t.Fatalf("the model saw %v of %d datagrams each way", seen, n)
		}
		mu.Lock()
		defer mu.Unlock()
		return last - first, e.Stats()
	}
	tx := 8 * time.Millisecond // 1000 bytes at 1 Mbit/s
	after, stA := busy(Config{})
	before, stB := busy(Config{LossBeforeQueue: true, LossForwardOnly: true})
	t.Logf("link busy for the burst: loss after the queue %v, before %v (%d datagrams of %v)", after, before, n, tx)
	if after < time.Duration(n-1)*tx {
		t.Errorf("loss after the queue: the burst took %v of link time, want all %d transmissions (%v)", after, n, time.Duration(n)*tx)
	}
	if before > after*3/4 {
		t.Errorf("loss before the queue: the burst took %v of link time, not ~%v", before, time.Duration(float64(n)*(1-loss))*tx)
	}
	for _, c := range []struct {
		name string
		st   Stats
		back bool
	}{{"after", stA, true}, {"before", stB, false}} {
		ab, ba := c.st.Total(AtoB), c.st.Total(BtoA)
		if ab.In < n || ab.LossDrops < n/4 || ab.LossDrops > 3*n/4 {
			t.Errorf("%s: A→B in %d lost %d, want about half of %d", c.name, ab.In, ab.LossDrops, n)
		}
		if got := ba.LossDrops > 0; got != c.back {
			t.Errorf("%s: B→A lost %d", c.name, ba.LossDrops)
		}
	}
}

// TestHealthCounts: the self-check sees every forwarded packet (one
// lateness sample each), the TUN devices' drop counters are readable, and
// a window (Sub) holds only what crossed inside it.
func TestHealthCounts(t *testing.T) {
	e := newEmu(t, Config{Seed: 4, Link: netem.LinkConfig{Rate: 50e6, Delay: time.Millisecond}})
	rx, err := e.ListenUDP(SiteB, &net.UDPAddr{IP: AddrB.AsSlice()})
	if err != nil {
		t.Fatal(err)
	}
	defer rx.Close()
	tx, err := e.ListenUDP(SiteA, &net.UDPAddr{IP: AddrA.AsSlice()})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Close()
	h0 := e.Health()
	if h0.TUNDrops < 0 {
		t.Fatal("TUN drop counters unreadable")
	}
	const n = 50
	buf := make([]byte, 1000)
	for range n {
		if _, err := tx.WriteTo(buf, rx.LocalAddr()); err != nil {
			t.Fatal(err)
		}
	}
	rx.SetReadDeadline(time.Now().Add(10 * time.Second))
	for i := range n {
		if _, _, err := rx.ReadFrom(buf); err != nil {
			t.Fatalf("datagram %d: %v", i, err)
		}
	}
	// The dispatcher counts a batch once its last write returns, which
	// may be after the receiver has read it.
	w := e.Health().Sub(h0)
	for deadline := time.Now().Add(10 * time.Second); w.Packets[AtoB] < n && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
		w = e.Health().Sub(h0)
	}
	if w.Packets[AtoB] != n || w.Late[AtoB].Count() != n {
		t.Errorf("window: %d packets A→B, %d lateness samples, want %d", w.Packets[AtoB], w.Late[AtoB].Count(), n)
	}
	if w.At <= 0 || w.WriterBusy[AtoB] <= 0 || w.ReaderBusy[AtoB] <= 0 || w.TUNDrops != 0 || w.Overflow != 0 {
		t.Errorf("window %+v", w)
	}
	if st := e.Stats(); st.Late[AtoB].Count != n {
		t.Errorf("Stats' lateness count %d, want %d", st.Late[AtoB].Count, n)
	}
	v := w.Check()
	t.Logf("self-check: ok %v, late p50 %v p99 %v max %v, why %q", v.OK, v.LateP50, v.LateP99, v.LateMax, v.Why)
}
