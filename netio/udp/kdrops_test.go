//go:build linux

package udp

import (
	"net/netip"
	"strings"
	"testing"
)

func TestKernelDropsParse(t *testing.T) {
	const table = `   sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops
  123: 0100007F:12B7 00000000:0000 07 00000000:00000000 00:00000000 00000000  1000        0 4242 2 0000000000000000 17
  124: 0100007F:12B8 00000000:0000 07 00000000:00000000 00:00000000 00000000  1000        0 4243 2 0000000000000000 0
`
	if n, err := kernelDrops(strings.NewReader(table), 4242); err != nil || n != 17 {
		t.Errorf("inode 4242: %d %v, want 17", n, err)
	}
	if _, err := kernelDrops(strings.NewReader(table), 99); err == nil {
		t.Error("unknown inode found")
	}
}

// TestKernelDropsOfALiveSocket finds a real socket in /proc/self/net/udp.
func TestKernelDropsOfALiveSocket(t *testing.T) {
	c, err := Listen(netip.MustParseAddrPort("127.0.0.1:0"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if n, err := c.KernelDrops(); err != nil || n != 0 {
		t.Fatalf("KernelDrops of a new socket: %d %v", n, err)
	}
}

// TestKernelDropsCountsOverflow overflows a socket's receive buffer and
// checks that the socket's own count (SO_MEMINFO) is the /proc table's.
func TestKernelDropsCountsOverflow(t *testing.T) {
	rx, err := Listen(netip.MustParseAddrPort("127.0.0.1:0"), Options{ReadBuffer: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer rx.Close()
	tx, err := Listen(netip.MustParseAddrPort("127.0.0.1:0"), Options{DisableGSO: true})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Close()
	rc, err := rx.udp.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	msgs := make([]Message, 64)
	for i := range msgs {
		msgs[i] = Message{Buf: make([]byte, 1200), N: 1200, Addr: rx.LocalAddr()}
	}
	// Nothing reads rx: once its buffer is full every datagram is
	// dropped. Send until a drop is counted (delivery on loopback may
	// finish after the send returns).
	var own uint64
	for round := 0; own == 0; round++ {
		if round == 10000 {
			t.Fatal("no drop counted after 10000 batches to an unread socket")
		}
		if _, err := tx.WriteBatch(msgs); err != nil {
			t.Fatal(err)
		}
		if own, err = meminfoDrops(rc); err != nil {
			t.Fatal(err)
		}
	}
	// The count only grows, and nothing is sent any more: read the socket,
	// then the table, then the socket again.
	a, err := meminfoDrops(rc)
	if err != nil {
		t.Fatal(err)
	}
	p, err := procDrops(rc, false)
	if err != nil {
		t.Fatal(err)
	}
	b, err := rx.KernelDrops()
	if err != nil {
		t.Fatal(err)
	}
	if a > p || p > b {
		t.Fatalf("SO_MEMINFO %d then %d, /proc %d between: want them equal", a, b, p)
	}
}

// BenchmarkKernelDrops compares the socket's own count (SO_MEMINFO) with a
// read of the /proc table, in one run.
func BenchmarkKernelDrops(b *testing.B) {
	c, err := Listen(netip.MustParseAddrPort("127.0.0.1:0"), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	rc, err := c.udp.SyscallConn()
	if err != nil {
		b.Fatal(err)
	}
	b.Run("meminfo", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := meminfoDrops(rc); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("proc", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := procDrops(rc, false); err != nil {
				b.Fatal(err)
			}
		}
	})
}
