//go:build linux

package peers

import (
	"net/netip"

	"github.com/mrgw/mrgw/loadtest/tunemu"
	"github.com/mrgw/mrgw/netem"
	"github.com/mrgw/mrgw/netio/udp"
)

// tunNet runs a tunnel pair through tunemu: each gateway's listening and
// path sockets are opened inside its site's namespace (udp.Options.ListenUDP
// set to tunemu's in-namespace opener), so sealed datagrams cross the TUN
// devices and the same per-plane model as kernel TCP and QUIC, and can
// share one bottleneck queue with them. The control session stays on the
// root namespace's loopback: it carries handshakes and key rotations, not
// data, and is not what is measured.
type tunNet struct{ te *tunemu.Emulator }

func (n tunNet) site(s netem.Site) (netip.AddrPort, udp.Options) {
	return netip.AddrPortFrom(n.te.Addr(s), 0),
		udp.Options{ReadBuffer: 8 << 20, WriteBuffer: 8 << 20, ListenUDP: n.te.UDPListener(s)}
}

// expose: the sites reach each other directly (10.213.0.1 ↔ 10.213.0.2).
func (n tunNet) expose(_ netem.Site, real netip.AddrPort) (netip.AddrPort, error) { return real, nil }

func (n tunNet) planeOf(local, realB netip.AddrPort) int {
	return n.te.PlaneOf(netem.AtoB, netem.ProtoUDP, local, realB)
}

func (n tunNet) linkStats() (ab, ba netem.LinkStats, late netem.Lateness) {
	st := n.te.Stats()
	return st.Total(netem.AtoB), st.Total(netem.BtoA), st.Late[netem.AtoB]
}

// check: the sealed datagram fits the TUN MTU by construction (mrgwMTU),
// and the kernel would fragment rather than truncate, so nothing here
// invalidates a run.
func (n tunNet) check() error { return nil }

// tunnelOnTUN says whether system is a tunnel peer (mrgw, rocev2) that
// Options.MRGWEmulator sends through tunemu (bulk runs only).
func (o *Options) tunnelOnTUN(system string) bool {
	return o.MRGWEmulator == EmuTUN && (system == MRGW || system == RoCEv2)
}
