package netem

import (
	"net"
	"net/netip"
	"testing"
	"time"
)

// Pairs of endpoint addresses given their own delay share the planes'
// queue and rate but travel with their own propagation delay, both ways;
// other pairs keep the planes' delay.
func TestPairDelays(t *testing.T) {
	near := udpSock(t) // 127.0.0.1 at site A
	far, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 2)})
	if err != nil {
		t.Fatal(err)
	}
	defer far.Close()
	b := udpSock(t) // 127.0.0.1 at site B
	var log traceLog
	em := start(t, Config{
		Planes: 1, Seed: 3, Trace: log.add,
		Link:       LinkConfig{Rate: 100e6, Delay: 5 * time.Millisecond},
		PairDelays: []PairDelay{{A: netip.MustParseAddr("127.0.0.2"), B: netip.MustParseAddr("127.0.0.1"), Delay: 40 * time.Millisecond}},
	})
	toB := expose(t, em, SiteB, b)
	for i, c := range []*net.UDPConn{far, near, far, near} {
		send(t, c, toB, []byte{byte(i)})
		d := recv(t, b, patience)
		if d.data[0] != byte(i) {
			t.Fatalf("datagram %d: got %d", i, d.data[0])
		}
		send(t, b, d.from, []byte{byte(i)}) // the reply crosses B->A
		if got := recv(t, c, patience); got.data[0] != byte(i) {
			t.Fatalf("reply %d: got %d", i, got.data[0])
		}
	}
	// Back to back on the one plane: the near datagram is not held behind
	// the far one (their wires are separate after the shared queue).
	send(t, far, toB, []byte{8})
	send(t, near, toB, []byte{9})
	recv(t, b, patience)
	recv(t, b, patience)
	ev := log.snapshot()
	if len(ev) != 10 {
		t.Fatalf("%d trace events, want 10", len(ev))
	}
	if ev[9].Deliver >= ev[8].Deliver || ev[9].Depart < ev[8].Depart {
		t.Fatalf("near datagram departs %v delivered %v; far departs %v delivered %v", ev[9].Depart, ev[9].Deliver, ev[8].Depart, ev[8].Deliver)
	}
	ev = ev[:8]
	for i, e := range ev {
		want := 5 * time.Millisecond
		if (i/2)%2 == 0 {
			want = 40 * time.Millisecond // far, either direction
		}
		if e.Verdict != Forwarded || e.Deliver-e.Depart != want {
			t.Fatalf("event %d (%v): %v, propagation %v, want %v", i, e.Dir, e.Verdict, e.Deliver-e.Depart, want)
		}
	}
	// Bad pair delays are configuration errors.
	for _, pd := range [][]PairDelay{
		{{A: netip.MustParseAddr("::1"), B: netip.MustParseAddr("127.0.0.1")}},
		{{A: netip.MustParseAddr("127.0.0.2"), B: netip.MustParseAddr("127.0.0.1"), Delay: -1}},
		{{A: netip.MustParseAddr("127.0.0.2"), B: netip.MustParseAddr("127.0.0.1")}, {A: netip.MustParseAddr("127.0.0.2"), B: netip.MustParseAddr("127.0.0.1")}},
	} {
		if _, err := (Config{PairDelays: pd}).withDefaults(); err == nil {
			t.Fatalf("pair delays %v accepted", pd)
		}
	}
}
