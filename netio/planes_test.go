//go:build linux

package netio

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/mrgw/mrgw/metaroce"
)

// TestPlaneCounters: a sends to b over two planes (its path i bound to
// plane i mod 2's address, sent to b's listening address of that plane);
// both count datagrams per peer and plane, and b counts garbage from an
// unknown source on the plane it arrived on.
func TestPlaneCounters(t *testing.T) {
	ctx := testCtx(t)
	rb := newRecorder()
	mem := metaroce.NewMemory()
	if err := mem.Register(9, make([]byte, 1<<20)); err != nil {
		t.Fatal(err)
	}
	b, err := New(Config{Protocol: protoConfig(true), Listen: netip.MustParseAddrPort("127.0.0.71:0"),
		ExtraListen: []netip.AddrPort{netip.MustParseAddrPort("127.0.0.72:0"), netip.MustParseAddrPort("127.0.0.73:0")},
		OnEvent:     rb.On, Memory: mem})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ra := newRecorder()
	a, err := New(Config{Protocol: protoConfig(false), Listen: netip.MustParseAddrPort("127.0.0.74:0"),
		ExtraListen: []netip.AddrPort{netip.MustParseAddrPort("127.0.0.75:0"), netip.MustParseAddrPort("127.0.0.76:0")},
		OnEvent:     ra.On})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	ba, aa := b.LocalAddrs(), a.LocalAddrs()
	if err := a.AddPeer(Peer{ID: 2, Addr: ba[1], Dests: ba[1:], Locals: []netip.Addr{aa[1].Addr(), aa[2].Addr()}}); err != nil {
		t.Fatal(err)
	}
	if err := b.AddPeer(Peer{ID: 1, Addr: aa[1], Dests: aa[1:], Locals: []netip.Addr{ba[1].Addr(), ba[2].Addr()}}); err != nil {
		t.Fatal(err)
	}
	c, err := a.Connect(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	echoWrite(t, ctx, a, ra, c, 9, make([]byte, 256<<10))
	// Garbage from an address that is no peer, to b's plane 1.
	g, err := net.DialUDP("udp", net.UDPAddrFromAddrPort(netip.MustParseAddrPort("127.0.0.79:0")), net.UDPAddrFromAddrPort(ba[2]))
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if _, err := g.Write([]byte("noise")); err != nil {
			t.Fatal(err)
		}
	}
	g.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		d := b.PlaneDrops()
		if len(d) != 2 || d[0].Plane != 0 || d[1].Plane != 1 {
			t.Fatalf("PlaneDrops = %+v, want planes 0 and 1", d)
		}
		if d[0].KernelErr != nil || d[1].KernelErr != nil {
			t.Fatalf("the plane sockets' kernel drops not read: %v, %v", d[0].KernelErr, d[1].KernelErr)
		}
		if d[1].UnknownSource == 5 && d[0].UnknownSource == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("PlaneDrops = %+v, want 5 unknown-source drops on plane 1 only", d)
		}
		time.Sleep(10 * time.Millisecond)
	}
	as, bs := a.PlaneStats(2), b.PlaneStats(1)
	if len(as) != 2 || len(bs) != 2 {
		t.Fatalf("plane stats: a %+v, b %+v; want both planes on both", as, bs)
	}
	var aTx, bRx uint64
	for i := range 2 {
		if as[i].Plane != i || as[i].TxDatagrams == 0 || as[i].RxDatagrams == 0 || bs[i].RxDatagrams == 0 || bs[i].TxDatagrams == 0 {
			t.Fatalf("plane %d: a %+v, b %+v; want traffic both ways", i, as[i], bs[i])
		}
		aTx += as[i].TxDatagrams
		bRx += bs[i].RxDatagrams
	}
	// Loopback loses nothing; the plane counts add up to the totals.
	if aTx != a.Stats().TxDatagrams || bRx > aTx {
		t.Fatalf("a sent %d over planes (%d in all), b received %d", aTx, a.Stats().TxDatagrams, bRx)
	}
	if got := a.PlaneStats(99); got != nil {
		t.Fatalf("stats of an unknown peer: %+v", got)
	}
}

// TestPlaneTally: datagrams that alternate between planes, change peer,
// and name no plane or one past MaxPlanes are counted per peer and plane
// exactly as one at a time would count them, sent and received apart,
// and a tally starts over after each flush.
func TestPlaneTally(t *testing.T) {
	e := &Endpoint{cfg: Config{MaxPeers: 8}}
	e.owner.planes = map[PeerID]*peerPlanes{}
	type key struct {
		peer  PeerID
		plane int
	}
	want := map[key]PlaneStats{}
	tx, rx := &planeTally{}, &planeTally{rx: true}
	count := func(tl *planeTally, peer PeerID, plane, n int) {
		tl.add(e, peer, plane, n)
		if plane < 0 || plane >= MaxPlanes {
			return
		}
		w := want[key{peer, plane}]
		w.Plane = plane
		if tl.rx {
			w.RxDatagrams++
			w.RxBytes += uint64(n)
		} else {
			w.TxDatagrams++
			w.TxBytes += uint64(n)
		}
		want[key{peer, plane}] = w
	}
	for round := range 3 {
		for i := range 40 {
			count(tx, 1, i%4, 100+i)
			count(rx, 1, (i+1)%3, 7)
		}
		count(tx, 2, 0, 5)
		count(tx, 2, MaxPlanes-1, 6)
		count(tx, 1, -1, 9)
		count(tx, 1, MaxPlanes, 9)
		count(rx, 2, 5, 11)
		count(tx, 1, 2, 13)
		tx.flush(e)
		rx.flush(e)
		if tx.touched != 0 || rx.touched != 0 {
			t.Fatalf("round %d: a flushed tally still holds counts", round)
		}
		for _, peer := range []PeerID{1, 2} {
			got := e.PlaneStats(peer)
			n := 0
			for k := range want {
				if k.peer == peer {
					n++
				}
			}
			if len(got) != n {
				t.Fatalf("round %d, peer %d: %d planes counted, want %d: %+v", round, peer, len(got), n, got)
			}
			for _, g := range got {
				if w := want[key{peer, g.Plane}]; g != w {
					t.Errorf("round %d, peer %d, plane %d: %+v, want %+v", round, peer, g.Plane, g, w)
				}
			}
		}
	}
}

// BenchmarkPlaneTally is the owner's per-plane counting per datagram, for
// datagrams that alternate between 4 planes (a paced connection sprayed
// round robin over a gateway's planes) and for runs of 64 on one plane
// (a window-limited one, each path filling its window in turn).
func BenchmarkPlaneTally(b *testing.B) {
	for _, c := range []struct {
		name string
		run  int
	}{{"alternating", 1}, {"runs-of-64", 64}} {
		b.Run(c.name, func(b *testing.B) {
			e := &Endpoint{cfg: Config{MaxPeers: 8}}
			e.owner.planes = map[PeerID]*peerPlanes{}
			tl := &planeTally{}
			i := 0
			for b.Loop() {
				tl.add(e, 1, (i/c.run)%4, 1344)
				if i++; i%txBatch == 0 {
					tl.flush(e)
				}
			}
			tl.flush(e)
		})
	}
}
