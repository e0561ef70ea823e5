//go:build linux

package udp

import (
	"net/netip"
	"testing"

	"golang.org/x/sys/unix"
)

// Options.DontFragment sets IP_PMTUDISC_PROBE (DF on every datagram, never
// fragmented); without it the kernel's default stays; a datagram the stack
// cannot send is IsTooBig.
func TestDontFragment(t *testing.T) {
	c := open(t, loop4, Options{DontFragment: true})
	if v, err := dontFragment(c.udp, false); err != nil || v != unix.IP_PMTUDISC_PROBE {
		t.Fatalf("IP_MTU_DISCOVER %d, %v; want IP_PMTUDISC_PROBE", v, err)
	}
	d := open(t, loop4, Options{})
	if v, err := dontFragment(d.udp, false); err != nil || v == unix.IP_PMTUDISC_PROBE {
		t.Fatalf("IP_MTU_DISCOVER %d, %v without DontFragment", v, err)
	}
	big := make([]byte, 65508) // more than IPv4 carries
	_, err := c.WriteBatch([]Message{{Buf: big, N: len(big), Addr: netip.MustParseAddrPort("127.0.0.1:9")}})
	if !IsTooBig(err) {
		t.Fatalf("oversized send: %v, want EMSGSIZE", err)
	}
}
