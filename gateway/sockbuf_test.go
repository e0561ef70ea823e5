//go:build linux

package gateway

import (
	"testing"

	"github.com/mrgw/mrgw/config"
)

// TestSocketBuffersAskForBursts: the gateway's sockets ask the kernel for
// buffers that hold a burst from many hosts at once. With the kernel's
// default (208 KiB, ~25 datagrams of 4 KiB) the LAN socket of a gateway
// serving 32 hosts that start a message together dropped 23,000 datagrams
// in one mrgw-lab loadtest incast run, and the hosts read it as dead paths.
func TestSocketBuffersAskForBursts(t *testing.T) {
	o := udpOptions(config.Default())
	if o.ReadBuffer < 4<<20 || o.WriteBuffer < 4<<20 {
		t.Fatalf("socket buffers %d/%d bytes, want at least 4 MiB each", o.ReadBuffer, o.WriteBuffer)
	}
}
