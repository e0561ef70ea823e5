//go:build linux

package tunemu

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/mrgw/mrgw/netem"
)

// Bad per-flow delay settings are configuration errors (no root needed).
func TestPairDelaysValidation(t *testing.T) {
	x0 := ExtraAddrA(0)
	for _, c := range []Config{
		{ExtraAddrsA: -1},
		{ExtraAddrsA: MaxExtraAddrsA + 1},
		{ExtraAddrsA: 1, PairDelays: []netem.PairDelay{{A: ExtraAddrA(1), B: AddrB, Delay: time.Millisecond}}}, // not configured
		{PairDelays: []netem.PairDelay{{A: AddrB, B: AddrA}}},                                                  // reversed
		{PairDelays: []netem.PairDelay{{A: netip.MustParseAddr("10.9.9.9"), B: AddrB}}},
		{ExtraAddrsA: 1, PairDelays: []netem.PairDelay{{A: x0, B: AddrB}, {A: x0, B: AddrB}}},
		{ExtraAddrsA: 1, PairDelays: []netem.PairDelay{{A: x0, B: AddrB, Delay: -time.Millisecond}}},
		{ExtraAddrsA: 1, PairDelays: []netem.PairDelay{{A: x0, B: AddrB, Delay: netem.MaxDelay + 1}}},
	} {
		if err := c.validateDelays(); !errors.Is(err, netem.ErrInvalid) {
			t.Errorf("%+v: %v, want an netem.ErrInvalid error", c, err)
		}
	}
	ok := Config{ExtraAddrsA: 2, PairDelays: []netem.PairDelay{{A: AddrA, B: AddrB, Delay: time.Millisecond}, {A: ExtraAddrA(1), B: AddrB}}}
	if err := ok.validateDelays(); err != nil {
		t.Fatal(err)
	}
	if got := ExtraAddrA(1); got != netip.MustParseAddr("10.213.1.2") {
		t.Fatalf("ExtraAddrA(1) = %v", got)
	}
}

// TestPairDelays: three addresses at site A, one with the planes' delay
// and two with their own, share one plane. Every UDP datagram's
// propagation on the emulator's clock is exactly its pair's delay in both
// directions, and a kernel TCP handshake from each address takes at least
// its configured round trip, the far one longer than the near one.
func TestPairDelays(t *testing.T) {
	const base = 2 * time.Millisecond
	delays := []time.Duration{base, 10 * time.Millisecond, 40 * time.Millisecond}
	var mu sync.Mutex
	var events []netem.TraceEvent
	e := newEmu(t, Config{
		Seed: 2, ExtraAddrsA: 2,
		Link: netem.LinkConfig{Rate: 100e6, Delay: base, QueueBytes: 256 << 10},
		PairDelays: []netem.PairDelay{
			{A: ExtraAddrA(0), B: AddrB, Delay: delays[1]},
			{A: ExtraAddrA(1), B: AddrB, Delay: delays[2]},
		},
		Trace: func(ev netem.TraceEvent) { mu.Lock(); events = append(events, ev); mu.Unlock() },
	})
	addrs := e.AddrsA()
	if len(addrs) != 3 {
		t.Fatalf("site A has %v", addrs)
	}
	// UDP echo from each address in turn: exactly two packets cross per
	// exchange, so the trace's events pair up with the addresses.
	echo, err := e.ListenUDP(SiteB, &net.UDPAddr{IP: AddrB.AsSlice()})
	if err != nil {
		t.Fatal(err)
	}
	defer echo.Close()
	go func() {
		buf := make([]byte, 64)
		for {
			n, from, err := echo.ReadFromUDP(buf)
			if err != nil {
				return
			}
			echo.WriteToUDP(buf[:n], from)
		}
	}()
	for i, a := range addrs {
		c, err := e.ListenUDP(SiteA, &net.UDPAddr{IP: a.AsSlice()})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.WriteToUDP([]byte{byte(i)}, echo.LocalAddr().(*net.UDPAddr)); err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		buf := make([]byte, 64)
		if n, _, err := c.ReadFromUDP(buf); err != nil || n != 1 || buf[0] != byte(i) {
			t.Fatalf("echo from %v: %d bytes, %v", a, n, err)
		}
		c.Close()
	}
	mu.Lock()
	got := append([]netem.TraceEvent(nil), events...)
	mu.Unlock()
	if len(got) != 6 {
		t.Fatalf("%d trace events, want 6", len(got))
	}
	for i, ev := range got {
		want := delays[i/2]
		if ev.Verdict != netem.Forwarded || ev.Deliver-ev.Depart != want || ev.Dir != Dir(i%2) {
			t.Fatalf("event %d (%v, %v): propagation %v, want %v", i, ev.Dir, ev.Verdict, ev.Deliver-ev.Depart, want)
		}
	}

	// Kernel TCP: the handshake (one round trip) from each address, best
	// of three.
	ln, err := e.Listen(SiteB, "tcp4", net.JoinHostPort(AddrB.String(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rtt := make([]time.Duration, len(addrs))
	for i, a := range addrs {
		for range 3 {
			d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: a.AsSlice()}}
			t0 := time.Now()
			c, err := e.Dial(ctx, SiteA, d, "tcp4", ln.Addr().String())
			took := time.Since(t0)
			if err != nil {
				t.Fatalf("dial from %v: %v", a, err)
			}
			c.Close()
			if rtt[i] == 0 || took < rtt[i] {
				rtt[i] = took
			}
		}
		if rtt[i] < 2*delays[i] {
			t.Errorf("handshake from %v took %v, less than its round trip %v", a, rtt[i], 2*delays[i])
		}
	}
	if rtt[2] <= rtt[0] {
		t.Errorf("handshakes: far %v, near %v", rtt[2], rtt[0])
	}
	t.Logf("handshakes %v (configured round trips %v %v %v)", rtt, 2*delays[0], 2*delays[1], 2*delays[2])
}
