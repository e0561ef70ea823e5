//go:build linux

package netio

import (
	"testing"
	"time"

	"github.com/mrgw/mrgw/metaroce"
	"github.com/mrgw/mrgw/netio/netiotest"
)

// TestTooBigReachesPMTU: a datagram the stack refuses for its size
// (EMSGSIZE, here from the in-memory network's send limit) is told to the
// path MTU discovery of its connection, which settles below it; the other
// datagrams of the batch still leave.
func TestTooBigReachesPMTU(t *testing.T) {
	ctx := testCtx(t)
	n := netiotest.NewNetwork()
	n.SetSendLimit(1300)
	b, err := New(Config{Protocol: protoConfig(true), Listen: loop4, Bind: BindOf(n.Listen)})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	a, err := New(Config{Protocol: protoConfig(false), Listen: loop4, Bind: BindOf(n.Listen)})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if err := a.AddPeer(Peer{ID: 5, Addr: b.LocalAddr()}); err != nil {
		t.Fatal(err)
	}
	if err := b.AddPeer(Peer{ID: 6, Addr: a.LocalAddr()}); err != nil {
		t.Fatal(err)
	}
	var c *metaroce.Conn
	if err := a.Call(ctx, func(now time.Duration, ep *metaroce.Endpoint) {
		c, err = ep.ConnectWith(now, 5, metaroce.ConnOptions{PMTU: metaroce.PMTUConfig{Groups: 2}})
	}); err != nil || c == nil {
		t.Fatal(err)
	}
	var g []metaroce.PMTUGroup
	for {
		if err := a.Call(ctx, func(time.Duration, *metaroce.Endpoint) { g = c.PMTU() }); err != nil {
			t.Fatal(err)
		}
		if len(g) == 2 && g[0].State == metaroce.PMTUComplete && g[1].State == metaroce.PMTUComplete {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("not settled: %+v", g)
		case <-time.After(10 * time.Millisecond):
		}
	}
	for _, x := range g {
		if x.Size > 1300 || x.Size < 1300-16 || x.Stats.TooBig == 0 {
			t.Fatalf("group %d: size %d, too big %d; want just under 1300 and EMSGSIZE seen", x.Group, x.Size, x.Stats.TooBig)
		}
	}
	if st := a.Stats(); st.TooBig == 0 || st.TooBig > st.TxErrors {
		t.Fatalf("endpoint: too big %d, tx errors %d", st.TooBig, st.TxErrors)
	}
}
