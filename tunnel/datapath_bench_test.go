//go:build linux

package tunnel

import (
	"context"
	"fmt"
	"net/netip"
	"runtime"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/mrgw/mrgw/cc"
	"github.com/mrgw/mrgw/metaroce"
	"github.com/mrgw/mrgw/netio/seal"
	"github.com/mrgw/mrgw/netio/udp"
	"github.com/mrgw/mrgw/pathmgr"
	"github.com/mrgw/mrgw/units"
)

// BenchmarkDatapath is the tunnel's cost per DATA datagram next to its
// floor's, in one run: go test -run '^$' -bench Datapath ./tunnel/
//
// The tunnel: two Tunnels on loopback (real UDP sockets, GSO and GRO),
// wire version 2, 8 paths of 256 KiB fixed windows, 1 MiB WRITEs kept
// queued from memory at A into registered memory at B, as mrgw-lab
// loadtest datapath runs it. One op is one DATA datagram that reached B's
// protocol; cpu-ns/datagram is the whole process's CPU (user and system:
// both tunnels, their sockets, the kernel's loopback) per op, user-ns the
// user part.
//
// The floor: the same number of datagrams sealed (counters reserved per
// batch of 64, as netio's senders take them) and opened (from where the
// datagram lies into a buffer of its own, as netio's readers do) with
// netio/seal on one goroutine, inner packets of the tunnel's size: the
// AEAD work no encrypted tunnel avoids. cpu/aead and user/aead are the
// tunnel's figures over the floor's; what user/aead has above 1 is the
// tunnel's own work per datagram (protocol, hand-offs, copies, the user
// side of the system calls), since the floor has no sockets. Figures
// depend on the machine's load; the ratios, taken in one run, much less.
//
// planes=4 binds A's path i to the local address of plane i mod 4 (as a
// gateway's wan.planes do). Limited by its windows, a connection fills
// each path's window as an ACK opens it, in runs of one path; paced (as
// a WAN connection is, here at 2 Gbit/s with windows that never bind),
// it sprays the paths round robin, so consecutive datagrams alternate
// between paths, source ports and planes.
func BenchmarkDatapath(b *testing.B) {
	for _, c := range []struct {
		mtu, planes int
		pace        units.ByteRate
	}{{1400, 0, 0}, {1400, 4, 0}, {1400, 4, units.BitRate(2e9).Bytes()}, {9000, 0, 0}} {
		name := fmt.Sprintf("mtu=%d", c.mtu)
		if c.planes > 0 {
			name += fmt.Sprintf("/planes=%d", c.planes)
		}
		if c.pace > 0 {
			name += "/paced"
		}
		b.Run(name, func(b *testing.B) { benchDatapath(b, c.mtu, c.planes, c.pace) })
	}
}

func benchDatapath(b *testing.B, linkMTU, planes int, pace units.ByteRate) {
	// The link MTU less IP/UDP (28), the envelope and the DATA header.
	mtu := linkMTU - 28 - seal.Overhead - metaroce.DataHeaderLenV2
	inner := mtu + metaroce.DataHeaderLenV2
	const (
		paths       = 8
		window      = 256 << 10
		message     = 1 << 20
		outstanding = 8
	)
	ctx, cancel := context.WithTimeout(context.Background(), patience+time.Duration(b.N)*time.Microsecond*10)
	defer cancel()
	sa, sb, routA, routB := sessions(b, ctx)
	proto := func(listen bool) metaroce.Config {
		// Loopback's round trip is scheduling: a probe timeout shorter
		// than a busy machine's wait for a core declares whole flights
		// lost that were only late.
		pc := pathmgr.DefaultConfig()
		pc.MinPTO, pc.MaxAckDelay = 50*time.Millisecond, 2*time.Millisecond
		w := window
		if pace > 0 {
			w = 4 << 20
		}
		return metaroce.Config{MTU: mtu, Paths: paths, Listen: listen, Seed: 1, CC: cc.NewFixed(w, pace), Path: pc,
			WireVersions: []uint8{metaroce.Version2}}
	}
	// Socket buffers that hold the windows in flight: the default ones
	// drop, and the drops' recovery is not the datapath's steady cost.
	bufs := udp.Options{ReadBuffer: 4 << 20, WriteBuffer: 4 << 20}
	src := make([]byte, message)
	dst := make([]byte, message)
	var sender *metaroce.Conn
	var stopping atomic.Bool
	// onA keeps outstanding WRITEs queued, on A's owner goroutine.
	onA := func(now time.Duration, ev metaroce.Event) {
		switch ev.Kind {
		case metaroce.EventConnected:
			sender = ev.Conn
			for range outstanding {
				_, _ = sender.Write(now, 0, 1, 0, src)
			}
		case metaroce.EventSendComplete:
			if !stopping.Load() {
				_, _ = sender.Write(now, 0, 1, 0, src)
			}
		}
	}
	var planeAddrs []netip.Addr
	for i := range planes {
		planeAddrs = append(planeAddrs, netip.AddrFrom4([4]byte{127, 0, 0, byte(1 + i)}))
	}
	ta, err := New(sa, Config{Protocol: proto(false), Listen: loop4, PlaneAddrs: planeAddrs, Router: routA, OnEvent: onA, UDP: bufs})
	if err != nil {
		b.Fatal(err)
	}
	defer ta.Close()
	tb, err := New(sb, Config{Protocol: proto(true), Listen: loop4, Router: routB, UDP: bufs})
	if err != nil {
		b.Fatal(err)
	}
	defer tb.Close()
	if err := ta.SetPeerAddr(tb.LocalAddr()); err != nil {
		b.Fatal(err)
	}
	if err := tb.SetPeerAddr(ta.LocalAddr()); err != nil {
		b.Fatal(err)
	}
	if planes > 0 {
		// What A's control session would announce: B takes datagrams from
		// A's plane addresses as A's.
		p := tb.peer()
		p.Sources = planeAddrs
		if err := tb.ep.AddPeer(p); err != nil {
			b.Fatal(err)
		}
	}
	var regErr error
	if err := tb.Endpoint().Call(ctx, func(_ time.Duration, ep *metaroce.Endpoint) { regErr = ep.Memory().Register(1, dst) }); err != nil {
		b.Fatal(err)
	}
	if regErr != nil {
		b.Fatal(regErr)
	}
	if _, err := ta.Connect(ctx); err != nil {
		b.Fatal(err)
	}
	received := func() uint64 { return tb.Stats().RxDatagrams }
	// Warm up: windows open, buffers made, the first WRITEs done.
	waitDatagrams(b, ctx, received, received()+20000)

	var retx0, timeouts0 uint64
	_ = ta.Endpoint().Call(ctx, func(time.Duration, *metaroce.Endpoint) {
		retx0, timeouts0 = sender.Stats.Retransmits, sender.Stats.Timeouts
	})
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	w0 := ta.Stats().TxWrites
	dg0 := ta.Stats().TxDatagrams
	u0, s0 := cpuTimes()
	b.ResetTimer()
	waitDatagrams(b, ctx, received, received()+uint64(b.N))
	b.StopTimer()
	u1, s1 := cpuTimes()
	runtime.ReadMemStats(&ms1)
	st := ta.Stats()
	var retx, timeouts uint64
	_ = ta.Endpoint().Call(ctx, func(time.Duration, *metaroce.Endpoint) {
		retx, timeouts = sender.Stats.Retransmits, sender.Stats.Timeouts
	})
	stopping.Store(true)
	if planes > 0 {
		// Every plane carried its share (none of A's paths was refused).
		ps := ta.Endpoint().PlaneStats(PeerID)
		lo, hi := uint64(0), uint64(0)
		for i, p := range ps {
			if i == 0 || p.TxDatagrams < lo {
				lo = p.TxDatagrams
			}
			hi = max(hi, p.TxDatagrams)
		}
		if len(ps) != planes || hi > 2*lo {
			b.Fatalf("datagrams per plane: %+v, want %d planes with about a share each", ps, planes)
		}
	}
	n := float64(b.N)
	user, sys := float64(u1-u0)/n, float64(s1-s0)/n
	if w := st.TxWrites - w0; w > 0 {
		b.ReportMetric(float64(st.TxDatagrams-dg0)/float64(w), "datagrams/write")
	}
	b.ReportMetric(float64(ms1.Mallocs-ms0.Mallocs)/n, "allocs/datagram")
	b.ReportMetric(float64(retx-retx0+timeouts-timeouts0)/n, "retx+timeouts/datagram")
	ta.Close()
	tb.Close()

	fu, fs := aeadFloor(b, inner, b.N)
	b.ReportMetric(user+sys, "cpu-ns/datagram")
	b.ReportMetric(user, "user-ns/datagram")
	b.ReportMetric(fu+fs, "aead-ns/datagram")
	b.ReportMetric((user+sys)/(fu+fs), "cpu/aead")
	b.ReportMetric(user/(fu+fs), "user/aead")
}

// waitDatagrams waits until received reports at least n.
func waitDatagrams(b *testing.B, ctx context.Context, received func() uint64, n uint64) {
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for received() < n {
		select {
		case <-ctx.Done():
			b.Fatalf("%d of %d datagrams received: %v", received(), n, ctx.Err())
		case <-tick.C:
		}
	}
}

// aeadFloor seals and opens n inner packets of size bytes and returns the
// process's user and system CPU per packet, in nanoseconds.
func aeadFloor(b *testing.B, size, n int) (user, sys float64) {
	key := seal.Key{Suite: seal.AES128GCM, Secret: make([]byte, 16), Epoch: 1}
	s, err := seal.NewSealer(key, 0)
	if err != nil {
		b.Fatal(err)
	}
	o, err := seal.NewOpener(key)
	if err != nil {
		b.Fatal(err)
	}
	const batch = 64
	pt := make([]byte, size)
	sealed := make([][]byte, batch)
	own := make([]byte, size+seal.Overhead)
	for i := range sealed {
		sealed[i] = make([]byte, size+seal.Overhead)
	}
	var run seal.Run
	u0, s0 := cpuTimes()
	for left := n; left > 0; left -= batch {
		k := min(left, batch)
		s.Reserve(&run, k)
		for i := range k {
			if sealed[i], err = run.Seal(sealed[i][:0], pt); err != nil {
				b.Fatal(err)
			}
		}
		for i := range k {
			if _, err := o.Open(own[:0], sealed[i]); err != nil {
				b.Fatal(err)
			}
		}
	}
	u1, s1 := cpuTimes()
	return float64(u1-u0) / float64(n), float64(s1-s0) / float64(n)
}

// cpuTimes returns the process's user and system CPU time so far.
func cpuTimes() (user, sys time.Duration) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, 0
	}
	return time.Duration(ru.Utime.Nano()), time.Duration(ru.Stime.Nano())
}
