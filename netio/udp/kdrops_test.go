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
