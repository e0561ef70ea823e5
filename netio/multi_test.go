//go:build linux

package netio

import (
	"context"
	"encoding/binary"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/mrgw/mrgw/metaroce"
)

// echoWrite writes data from a to b over c and waits for its completion
// at a (every byte acknowledged, so every reply came back).
func echoWrite(t *testing.T, ctx context.Context, a *Endpoint, ra *recorder, c *metaroce.Conn, key uint32, data []byte) {
	t.Helper()
	seq, err := a.Write(ctx, c, 1, key, 0, data)
	if err != nil {
		t.Fatal(err)
	}
	ra.Wait(t, ctx, "send completion", func(evs []metaroce.Event) bool {
		for _, ev := range evs {
			if ev.Kind == metaroce.EventSendComplete && ev.Conn == c && ev.Seq == seq {
				if ev.Err != nil {
					t.Fatalf("send failed: %v", ev.Err)
				}
				return true
			}
		}
		return false
	})
}

// TestExtraListenRepliesFromArrivalSocket: a peer that knows only the
// extra listening address gets its replies from that address, so a
// connection over it works.
func TestExtraListenRepliesFromArrivalSocket(t *testing.T) {
	ctx := testCtx(t)
	rb := newRecorder()
	mem := metaroce.NewMemory()
	if err := mem.Register(9, make([]byte, 1<<20)); err != nil {
		t.Fatal(err)
	}
	b, err := New(Config{Protocol: protoConfig(true), Listen: netip.MustParseAddrPort("127.0.0.51:0"),
		ExtraListen: []netip.AddrPort{netip.MustParseAddrPort("127.0.0.52:0")}, OnEvent: rb.On, Memory: mem})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	addrs := b.LocalAddrs()
	if len(addrs) != 2 || addrs[1].Addr() != netip.MustParseAddr("127.0.0.52") {
		t.Fatalf("LocalAddrs = %v", addrs)
	}
	ra := newRecorder()
	a, err := New(Config{Protocol: protoConfig(false), Listen: netip.MustParseAddrPort("127.0.0.53:0"), OnEvent: ra.On})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	// a knows b only by its extra address (no other source IP).
	if err := a.AddPeer(Peer{ID: 2, Addr: addrs[1]}); err != nil {
		t.Fatal(err)
	}
	if err := b.AddPeer(Peer{ID: 1, Addr: a.LocalAddr()}); err != nil {
		t.Fatal(err)
	}
	c, err := a.Connect(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	echoWrite(t, ctx, a, ra, c, 9, make([]byte, 64<<10))
	if s := a.Stats(); s.UnknownSource != 0 {
		t.Fatalf("a dropped %d datagrams from unknown sources: replies left from the wrong socket", s.UnknownSource)
	}
}

// TestAdmittedPeersShareAnIP: two processes on one IP connect to an
// endpoint that admits peers; each becomes its own peer (told apart by
// connection id), and traffic in both directions reaches the right one,
// even after their first path sockets are gone.
func TestAdmittedPeersShareAnIP(t *testing.T) {
	ctx := testCtx(t)
	rb := newRecorder()
	next := PeerID(100)
	mem := metaroce.NewMemory()
	if err := mem.Register(9, make([]byte, 1<<20)); err != nil {
		t.Fatal(err)
	}
	b, err := New(Config{Protocol: protoConfig(true), Listen: netip.MustParseAddrPort("127.0.0.54:0"), OnEvent: rb.On, Memory: mem,
		AcceptPeer: func(netip.AddrPort) (PeerID, bool) { next++; return next, true }})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	type client struct {
		e   *Endpoint
		r   *recorder
		c   *metaroce.Conn
		mem *metaroce.Memory
	}
	var cl [2]client
	for i := range cl {
		cl[i].r = newRecorder()
		cl[i].mem = metaroce.NewMemory()
		if err := cl[i].mem.Register(3, make([]byte, 1<<20)); err != nil {
			t.Fatal(err)
		}
		pc := protoConfig(false)
		pc.Seed = uint64(1000 + i) // distinct connection ids, as distinct processes have
		e, err := New(Config{Protocol: pc, Listen: loop4, OnEvent: cl[i].r.On, Memory: cl[i].mem})
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		cl[i].e = e
		if err := e.AddPeer(Peer{ID: 1, Addr: b.LocalAddr()}); err != nil {
			t.Fatal(err)
		}
		if cl[i].c, err = e.Connect(ctx, 1); err != nil {
			t.Fatal(err)
		}
		echoWrite(t, ctx, e, cl[i].r, cl[i].c, 9, make([]byte, 32<<10))
	}
	// b sees two connections from two distinct peers.
	peers := map[PeerID]*metaroce.Conn{}
	if err := b.Call(ctx, func(_ time.Duration, ep *metaroce.Endpoint) {
		for _, c := range ep.Conns() {
			peers[c.Peer()] = c
		}
	}); err != nil {
		t.Fatal(err)
	}
	if len(peers) != 2 {
		for p, c := range peers {
			t.Logf("peer %d conn %x", p, c.ID())
		}
		t.Fatalf("b has %d peers for two clients on one IP (next %d)", len(peers), next)
	}
	// And b can write back to each (DATA goes to each client's address).
	for _, c := range peers {
		echoWrite(t, ctx, b, rb, c, 3, make([]byte, 32<<10))
	}
}

// TestIPFallbackDoesNotMoveAPeer: two processes on one IP are admitted
// peers; a datagram from a third port of that IP that no connection
// claims (the last reply of a process whose peer is gone, or junk)
// reaches a path socket and is given to the IP's first peer by IP alone.
// It must not move that peer's address: it did (the address update for
// admitted peers), and the peer's traffic went to a closed socket until
// it reconnected (TestReproSharedIPHostClose in loadtest/flood).
func TestIPFallbackDoesNotMoveAPeer(t *testing.T) {
	ctx := testCtx(t)
	rb := newRecorder()
	next := PeerID(100)
	mem := metaroce.NewMemory()
	if err := mem.Register(9, make([]byte, 1<<20)); err != nil {
		t.Fatal(err)
	}
	b, err := New(Config{Protocol: protoConfig(true), Listen: netip.MustParseAddrPort("127.0.0.56:0"), OnEvent: rb.On, Memory: mem,
		AcceptPeer: func(netip.AddrPort) (PeerID, bool) { next++; return next, true }})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var conns []*metaroce.Conn
	for i := range 2 {
		r := newRecorder()
		cm := metaroce.NewMemory()
		if err := cm.Register(3, make([]byte, 1<<20)); err != nil {
			t.Fatal(err)
		}
		pc := protoConfig(false)
		pc.Seed = uint64(2000 + i)
		e, err := New(Config{Protocol: pc, Listen: loop4, OnEvent: r.On, Memory: cm})
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		if err := e.AddPeer(Peer{ID: 1, Addr: b.LocalAddr()}); err != nil {
			t.Fatal(err)
		}
		c, err := e.Connect(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		echoWrite(t, ctx, e, r, c, 9, make([]byte, 16<<10))
		conns = append(conns, c)
	}
	var peerConns []*metaroce.Conn
	if err := b.Call(ctx, func(_ time.Duration, ep *metaroce.Endpoint) { peerConns = ep.Conns() }); err != nil {
		t.Fatal(err)
	}
	for _, c := range peerConns {
		echoWrite(t, ctx, b, rb, c, 3, make([]byte, 16<<10)) // b's path sockets, and the replies that set each address
	}
	table := b.peers.Load()
	first := table.byIP[netip.MustParseAddr("127.0.0.1")]
	if first == nil || len(table.shared[first.Addr.Addr()]) != 2 {
		t.Fatalf("want two peers sharing 127.0.0.1, table %+v", table)
	}
	addr := first.Addr
	var pathAddr netip.AddrPort
	var unknownBefore uint64
	if err := b.Call(ctx, func(_ time.Duration, ep *metaroce.Endpoint) {
		// Dropped by netio (no peer holds that address) or by the state
		// machine (no connection): either way counted, never the peer's.
		unknownBefore = ep.Stats.UnknownConn + b.ctr.unknown.Load()
		for _, s := range b.owner.paths {
			pathAddr = s.c.LocalAddr()
		}
	}); err != nil {
		t.Fatal(err)
	}
	if !pathAddr.IsValid() {
		t.Fatal("b has no path socket")
	}
	// From a third port of 127.0.0.1, a datagram of no connection.
	stray, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer stray.Close()
	pkt := make([]byte, metaroce.CommonHeaderLen)
	pkt[0], pkt[1] = metaroce.Version, byte(metaroce.TypeAck)
	binary.BigEndian.PutUint64(pkt[4:], 0xdead0001)
	if _, err := stray.WriteToUDP(pkt, net.UDPAddrFromAddrPort(pathAddr)); err != nil {
		t.Fatal(err)
	}
	for {
		var unknown uint64
		if err := b.Call(ctx, func(_ time.Duration, ep *metaroce.Endpoint) { unknown = ep.Stats.UnknownConn + b.ctr.unknown.Load() }); err != nil {
			t.Fatal(err)
		}
		if unknown > unknownBefore {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if got := b.peers.Load().byID[first.ID].Addr; got != addr {
		t.Fatalf("a stray datagram from %s moved peer %d from %s to %s", stray.LocalAddr(), first.ID, addr, got)
	}
	_ = conns
}
