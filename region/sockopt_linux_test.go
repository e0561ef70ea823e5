//go:build linux

package region

import (
	"net"
	"testing"

	"github.com/mrgw/mrgw/internal/sockbuf"
)

// A gossip socket's receive buffer is asked as internal/sockbuf asks it:
// past net.core.rmem_max where the process may, so it gets what a socket
// sized by sockbuf gets, here for twice the gateway's own request.
func TestGossipReadBufferAsSockbufGrants(t *testing.T) {
	listen := func() *net.UDPConn {
		c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	const ask = 2 * udpRecvBuf
	gossip, ref := listen(), listen()
	(&guardTransport{}).newReader(gossip, ask, true)
	if err := sockbuf.SetRead(ref, ask); err != nil {
		t.Fatal(err)
	}
	got, _ := sockbuf.Granted(gossip)
	want, _ := sockbuf.Granted(ref)
	if got != want {
		t.Fatalf("gossip socket granted %d bytes, a socket sized by sockbuf %d (asked %d)", got, want, ask)
	}
}
