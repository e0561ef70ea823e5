//go:build linux

package netio

import (
	"net"
	"sync"
	"testing"
	"time"

	"github.com/mrgw/mrgw/metaroce"
	"github.com/mrgw/mrgw/netio/udp"
)

// TestReceiveBurstKeepsEveryBatch: when more batches wait for the owner
// than one receive serves (maxRxBurst), none may be lost. A batch goes back
// to its socket's free list only once the owner has served it; one taken
// from the queue and dropped is gone for good, and a listening socket whose
// few batches are all lost never reads again (its kernel buffer fills and
// every peer behind it looks dead). That is how a gateway under the burst
// of a failover lost its WAN plane.
func TestReceiveBurstKeepsEveryBatch(t *testing.T) {
	ctx := testCtx(t)
	// Five listening sockets, one datagram per batch: RxBatches*2 = 4
	// batches each, so 20 batches can wait at once, more than maxRxBurst.
	const sockets, perSocket = 5, 2 * DefaultRxBatches
	if sockets*perSocket <= maxRxBurst {
		t.Fatalf("test needs more than %d batches waiting", maxRxBurst)
	}
	cfg := Config{Protocol: protoConfig(true), Listen: loop4, UDP: udp.Options{BatchSize: 1}}
	for range sockets - 1 {
		cfg.ExtraListen = append(cfg.ExtraListen, loop4)
	}
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	src, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	// A known, unsealed peer: its datagrams reach the protocol (which
	// refuses them as malformed) and are counted as received.
	if err := e.AddPeer(Peer{ID: 1, Addr: src.LocalAddr().(*net.UDPAddr).AddrPort()}); err != nil {
		t.Fatal(err)
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("%s (rx queue %d, received %d)", what, len(e.rx), e.Stats().RxDatagrams)
			}
			time.Sleep(time.Millisecond)
		}
	}
	var want uint64
	for range 3 {
		// Hold the owner so that every reader queues all its batches.
		release := make(chan struct{})
		var once sync.Once
		open := func() { once.Do(func() { close(release) }) }
		t.Cleanup(open) // before Close, if the test stops early
		held := make(chan struct{})
		if err := e.Do(ctx, func(time.Duration, *metaroce.Endpoint) { close(held); <-release }); err != nil {
			t.Fatal(err)
		}
		select {
		case <-held:
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		}
		for _, a := range e.LocalAddrs() {
			for range perSocket {
				if _, err := src.WriteToUDPAddrPort([]byte("not a metaroce packet"), a); err != nil {
					t.Fatal(err)
				}
			}
		}
		want += sockets * perSocket
		waitFor("readers did not queue every batch", func() bool { return len(e.rx) == sockets*perSocket })
		open()
		waitFor("datagrams lost", func() bool { return e.Stats().RxDatagrams == want })
		// Idle, a reader holds one batch (blocked in ReadBatch); every
		// other batch of its socket must be back on the free list.
		for _, s := range e.listens {
			waitFor("a listening socket lost receive batches", func() bool { return len(s.free) >= cap(s.free)-1 })
		}
	}
}
