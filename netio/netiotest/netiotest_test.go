//go:build linux

package netiotest_test

import (
	"errors"
	"net"
	"net/netip"
	"testing"

	"github.com/mrgw/mrgw/internal/ecn"
	"github.com/mrgw/mrgw/netio"
	"github.com/mrgw/mrgw/netio/netiotest"
	"github.com/mrgw/mrgw/netio/udp"
)

var _ netio.Socket = (*netiotest.Socket)(nil)

func TestDeliveryInOrderWithCodepoints(t *testing.T) {
	for _, lend := range []bool{false, true} {
		n := netiotest.NewNetwork()
		n.Lend = lend
		a, err := n.Listen(netip.MustParseAddrPort("10.0.0.1:0"), udp.Options{})
		if err != nil {
			t.Fatal(err)
		}
		b, err := n.Listen(netip.MustParseAddrPort("10.0.0.2:0"), udp.Options{NotECT: true})
		if err != nil {
			t.Fatal(err)
		}
		if a.LocalAddr().Port() == 0 || a.LocalAddr().Addr() != netip.MustParseAddr("10.0.0.1") {
			t.Fatalf("bound %v", a.LocalAddr())
		}
		n.SetFilter(func(d *netiotest.Datagram) bool {
			if string(d.Data) == "drop" {
				return false
			}
			if string(d.Data) == "mark" {
				d.ECN = ecn.CE
			}
			return true
		})
		out := []udp.Message{
			{Buf: []byte("one"), N: 3, Addr: b.LocalAddr()},
			{Buf: []byte("drop"), N: 4, Addr: b.LocalAddr()},
			{Buf: []byte("mark"), N: 4, Addr: b.LocalAddr()},
			{Buf: []byte("x"), N: 1, Addr: netip.MustParseAddrPort("10.0.0.9:1")},
		}
		if sent, err := a.WriteBatch(out); sent != len(out) || err != nil {
			t.Fatalf("WriteBatch: %d, %v", sent, err)
		}
		in := make([]udp.Message, 4)
		for i := range in {
			in[i].Buf = make([]byte, 2)
		}
		k, err := b.ReadBatchBorrow(in)
		if err != nil || k != 2 {
			t.Fatalf("ReadBatchBorrow: %d, %v", k, err)
		}
		want := []struct {
			data string
			cp   ecn.Codepoint
		}{{"one", ecn.ECT0}, {"mark", ecn.CE}}
		for i, w := range want {
			got := string(in[i].Buf[:in[i].N])
			if lend && got != w.data || !lend && got != w.data[:2] || in[i].ECN != w.cp || in[i].Addr != a.LocalAddr() {
				t.Errorf("lend %v: datagram %d: %q %v from %v, want %q %v from %v", lend, i, got, in[i].ECN, in[i].Addr, w.data, w.cp, a.LocalAddr())
			}
		}
		if st := b.Stats(); st.DatagramsIn != 2 || st.CEIn != 1 || (!lend && st.Truncated != 2) {
			t.Errorf("lend %v: stats %+v", lend, st)
		}
		if n.Unroutable() != 1 {
			t.Errorf("unroutable %d, want 1", n.Unroutable())
		}
		// b sends Not-ECT by default.
		if _, err := b.WriteBatch([]udp.Message{{Buf: []byte("r"), N: 1, Addr: a.LocalAddr()}}); err != nil {
			t.Fatal(err)
		}
		if k, err := a.ReadBatchBorrow(in[:1]); k != 1 || err != nil || in[0].ECN != ecn.NotECT {
			t.Errorf("reply: %d %v %v", k, err, in[0].ECN)
		}
		if _, err := n.Listen(b.LocalAddr(), udp.Options{}); !errors.Is(err, netiotest.ErrAddrInUse) {
			t.Errorf("second bind: %v", err)
		}
		done := make(chan error, 1)
		go func() { _, err := b.ReadBatchBorrow(in); done <- err }()
		b.Close()
		if err := <-done; !errors.Is(err, net.ErrClosed) {
			t.Errorf("read after close: %v", err)
		}
		if _, err := n.Listen(b.LocalAddr(), udp.Options{}); err != nil {
			t.Errorf("bind after close: %v", err)
		}
		a.Close()
	}
}
