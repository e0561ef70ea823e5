//go:build linux

package gateway_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/mrgw/mrgw/loadtest/lab/labtest"

	"github.com/mrgw/mrgw/gateway"
	"github.com/mrgw/mrgw/host"
	"github.com/mrgw/mrgw/loadtest/lab"
)

// TestOpenReachesHostRegisteredAtOneGateway: a destination host known to
// only one gateway of its pair (its other connection is down, here never
// made) is still reachable by every flow. A source gateway picks the
// destination gateway by its placement rule; the one that does not know the endpoint
// answers "unknown endpoint" and the source gateway must try the region's
// other gateway instead of failing the flow (before: about half of the
// flows were refused, on every retry, until the host's FailAfter).
func TestOpenReachesHostRegisteredAtOneGateway(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	l := labtest.Start(t, ctx, lab.Config{OneWay: 5 * time.Millisecond})
	src := newHost(t, l, "src", lab.RegionA)
	only := l.HostGateways(lab.RegionB)[1:] // use-gw2 alone
	dst, err := host.New(host.Config{Name: "dst", Region: lab.RegionB, Gateways: only, Key: l.HostKey, DeadAfter: time.Second, OpenTimeout: hostOpenTimeout, Logger: labtest.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dst.Close() })
	tr := newTransfer(t, src, dst, 1<<20)
	rctx, rcancel := context.WithCancel(ctx)
	defer rcancel()
	go tr.receive(rctx)
	rng := rand.New(rand.NewPCG(3, 4))
	const flows = 12 // all twelve on one destination gateway by chance: 1 in 4096
	srcGWs := l.Names[lab.RegionA]
	detours := func() (n uint64) {
		for _, g := range srcGWs {
			n += l.Gateways[g].Detoured()
		}
		return n
	}
	before := detours()
	for i := range flows {
		// Opened again only when the OPEN timed out (a starved machine):
		// "unknown endpoint", the regression this test guards, is never
		// retried.
		f, err := lab.OpenFlowIf(ctx, src, lab.RegionB, "dst", host.FlowOptions{},
			func(err error) bool { return errors.Is(err, host.ErrOpenTimeout) }, t.Logf)
		if err != nil {
			t.Fatalf("flow %d of %d: %v", i+1, flows, err)
		}
		if err := tr.send(ctx, f, rng); err != nil {
			t.Fatal(err)
		}
	}
	tr.wait(ctx)
	tr.check()
	if st := l.Gateways["use-gw1"].Status(); st.Flows.Active != 0 {
		t.Fatalf("use-gw1, which does not know the host, carries %d flows", st.Flows.Active)
	}
	// use-gw1 never carries a flow, so a source gateway routes every
	// flow to it first (the least loaded), but perhaps its first one
	// (equal loads: the rendezvous rank decides), and each flow use-gw1
	// refused went to use-gw2 on a retry: a detour each.
	if d, want := detours()-before, uint64(flows-len(srcGWs)); d < want {
		t.Fatalf("%d detours counted, want at least %d (the flows use-gw1 refused)", d, want)
	}
}

// TestIdleWANConnectionFindsDeadPeer: a destination gateway's data path
// dies while the WAN connections to it have nothing in flight (here every
// message is complete; in the chaos scenario every message had been
// acknowledged by it and waited for DONE). metaroce finds a dead peer only
// through packets that go unacknowledged, so without the gateways' WAN
// PINGs those connections never noticed, and the flows through them
// stalled until gossip declared the gateway dead or its control session's
// keepalives ran out (2.7 and 3 s in the chaos scenario, against
// wan.dead_after's 500 ms). Here the victim's endpoint (its LAN and WAN
// sockets) is closed while its control sessions and gossip run on, so
// only the data path can find the death: every source gateway must drop
// its connection to the victim with its control session to it up and
// gossip holding it live, and the flow must then deliver through the
// victim's pair member, every message once.
//
// The drop must be the silence watch's ("peer silent": its PING went
// unanswered for wan.dead_after), not metaroce's ("every path to the peer
// is down", which waits for every path to time out and then DeadAfter
// more; in the chaos scenario 0.4 to 1.7 s went to the paths alone):
// before wanPeer.watchSilence the test saw only the latter.
func TestIdleWANConnectionFindsDeadPeer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	l := labtest.Start(t, ctx, lab.Config{OneWay: 5 * time.Millisecond})
	src := newHost(t, l, "src", lab.RegionA)
	dst := newHost(t, l, "dst", lab.RegionB)
	tr := newTransfer(t, src, dst, 8<<20)
	rctx, rcancel := context.WithCancel(ctx)
	defer rcancel()
	go tr.receive(rctx)
	f, err := lab.OpenFlow(ctx, src, lab.RegionB, "dst", host.FlowOptions{}, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(5, 6))
	for range 20 {
		if err := tr.send(ctx, f, rng); err != nil {
			t.Fatal(err)
		}
	}
	tr.wait(ctx) // every message DONE: nothing in flight anywhere
	victim := ""
	// The victim is where the source gateway relays the flow now, read on
	// its owner goroutine (FlowRoutes; a Status snapshot can be a second
	// old). On a busy machine a gateway can be stalled past its dead-after
	// and its flows reset (a verdict of silence the next message repairs);
	// the flow then re-opens with the next message, so send one and look
	// again.
	for try := 0; victim == ""; try++ {
		for _, n := range l.Names[lab.RegionA] {
			if to, ok := l.Gateways[n].FlowRoutes()[f.ID()]; ok {
				victim = to
			}
		}
		if victim != "" {
			break
		}
		if try == 5 {
			t.Fatal("no gateway of the destination region carries the flow")
		}
		t.Logf("no gateway of the destination region carries the flow (reset while the machine was busy?): sending one more message")
		if err := tr.send(ctx, f, rng); err != nil {
			t.Fatal(err)
		}
		tr.wait(ctx)
	}
	l.Gateways[victim].Endpoint().Close()
	t.Logf("closed the data path of %s, which carried the idle flow", victim)

	for _, n := range l.Names[lab.RegionA] {
		g := l.Gateways[n]
		last := ""
		for {
			var ps gateway.PeerStatus
			for _, p := range g.Status().Peers {
				if p.Name == victim {
					ps = p
				}
			}
			if seen := ps.State + " " + ps.LastError; seen != last {
				t.Logf("%s: peer %s: %s", n, victim, seen)
				last = seen
			}
			if ps.State == "down" {
				t.Fatalf("%s: control session to %s ended (%s): the test needs it up", n, victim, ps.LastError)
			}
			if strings.Contains(ps.LastError, "every path to the peer is down") {
				t.Fatalf("%s: WAN connection to %s dropped by its paths' timeouts (%s), not by its silence", n, victim, ps.LastError)
			}
			if strings.Contains(ps.LastError, "peer silent") {
				if gw, ok := g.Cluster().View().Gateway(victim); !ok || !gw.State.Live() {
					t.Fatalf("%s: gossip holds %s %v: the data path was not what found it", n, victim, gw.State)
				}
				break
			}
			select {
			case <-ctx.Done():
				t.Fatalf("%s: WAN connection to %s, whose data path is dead, still %s (%s): an idle connection never finds its peer dead", n, victim, ps.State, ps.LastError)
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	// The flow was RESET when its connection dropped, and re-opened
	// through the victim's pair member.
	for range 20 {
		if err := tr.send(ctx, f, rng); err != nil {
			t.Fatal(err)
		}
	}
	tr.wait(ctx)
	tr.check()
	if s := src.Stats(); s.Reopens == 0 {
		t.Error("the flow was never re-opened")
	}
}
