package metaroce

import (
	"testing"
	"time"

	"github.com/mrgw/mrgw/cc"
	"github.com/mrgw/mrgw/pathmgr"
	"github.com/mrgw/mrgw/units"
)

// The send-side wedge seen once in a chaos run (it stalled two flows for
// 30 s): every path of a WAN connection timed out within 60 ms on a
// loaded host, the paths came back up on the next acks, and then the connection sent no DATA for 90 s, with data
// queued and nothing in flight. These tests drive the state machine
// through the same moments with simulated time: a WAN-like connection
// (one plane, 8 paths, 20 ms RTT, MTU 4096, so a full DATA datagram
// (4200 bytes with the seal) is larger than the PMTU search's base of
// 1200) carries a steady flow of 1 MiB WRITEs; then the sender's host
// stalls or the plane's queue fills; then the network is clean again, and
// the connection must complete a message again within a bounded time.

// wedgeBound is how long after the network is clean again the connection
// must have had wedgeProgress new DATA packets acknowledged: the PMTU
// search's retry interval (a group that settled below a full DATA
// datagram probes it again every PMTUConfig.RetryInterval, 1 s), then a
// few round trips (20 ms) for the probe and the data. The old code waited
// for the PMTU raise interval (10 min) in the congestion cases.
const wedgeBound = time.Second + 200*time.Millisecond

// wedgeProgress is how many DATA packets must be acknowledged within
// wedgeBound: the connection sends again (a controller cut to its minimum
// after the losses may still take seconds to complete a 1 MiB message).
const wedgeProgress = 32

// wedgeFlow is a connection from eps[0] to eps[1] with a sender that keeps
// four 1 MiB WRITEs queued.
type wedgeFlow struct {
	n         *testNet
	c         *Conn
	src       []byte
	completed int
	lastDone  time.Duration
	trans     []pathmgr.Transition
}

func newWedgeFlow(t *testing.T, ctl cc.Factory) *wedgeFlow {
	t.Helper()
	return newWedgeFlowPaths(t, ctl, pathmgr.DefaultConfig())
}

// newWedgeFlowPaths is newWedgeFlow with the paths' timings pc (the
// gateway's WAN: pathmgr.DefaultConfig); its InitialRTT is set here.
func newWedgeFlowPaths(t *testing.T, ctl cc.Factory, pc pathmgr.Config) *wedgeFlow {
	t.Helper()
	pc.InitialRTT = 20 * time.Millisecond
	cfg := Config{MTU: 4096, Paths: 8, CC: ctl, Path: pc, Seed: 5, WireVersions: []uint8{Version1, Version2}}
	pm := PMTUConfig{Groups: 1, Overhead: 28} // the gateway's wanPMTU with one plane
	cfgB := cfg
	cfgB.AcceptOptions = func(PeerID) ConnOptions { return ConnOptions{PMTU: pm} }
	n := newTestNet(t, cfg, cfgB, 1, 3)
	n.delay[0] = 10 * time.Millisecond
	if err := n.eps[1].Memory().Register(7, make([]byte, 1<<20)); err != nil {
		t.Fatal(err)
	}
	c, err := n.eps[0].ConnectWith(0, 1, ConnOptions{PMTU: pm})
	if err != nil {
		t.Fatal(err)
	}
	f := &wedgeFlow{n: n, c: c, src: make([]byte, 1<<20)}
	if !n.run(time.Second, c.Established) {
		t.Fatal("no handshake")
	}
	// Data flowing, the search settled with full DATA datagrams allowed.
	if !f.run(n.now+2*time.Second, func() bool {
		g := c.PMTU()
		return f.completed >= 4 && len(g) == 1 && g[0].Data
	}) {
		t.Fatalf("no steady state: %d completed, PMTU %+v", f.completed, c.PMTU())
	}
	return f
}

// step keeps the queue full and counts completions; it is run's condition.
func (f *wedgeFlow) step() {
	for _, ev := range drain(f.n.eps[0]) {
		switch ev.Kind {
		case EventSendComplete:
			if ev.Err == nil {
				f.completed++
				f.lastDone = ev.At
			}
		case EventPath:
			f.trans = append(f.trans, ev.Transition)
		}
	}
	drain(f.n.eps[1])
	for f.c.Established() && f.c.Queued() < 4 {
		if _, err := f.c.Write(f.n.now, 1, 7, 0, f.src); err != nil {
			f.n.t.Fatal(err)
		}
	}
}

// run runs the network until cond or until the simulated time until.
func (f *wedgeFlow) run(until time.Duration, cond func() bool) bool {
	return f.n.run(until, func() bool {
		f.step()
		return cond != nil && cond()
	})
}

// acked is the DATA packets of the sender acknowledged so far.
func (f *wedgeFlow) acked() (n uint64) {
	for i := range f.c.paths.Paths {
		n += f.c.paths.Paths[i].AckedPackets
	}
	return n
}

func (f *wedgeFlow) timeouts() (n int) {
	for _, tr := range f.trans {
		if tr.Reason == "timeout" || tr.Reason == "timeouts" {
			n++
		}
	}
	return n
}

// bigFrom drops the datagrams eps[from] sends that are larger than room
// bytes with the driver's overhead: a drop-tail queue (netem's, the chaos
// run's 62.5 kB) with room for a 1200-byte datagram and not for a
// 4200-byte one, so full DATA and a PMTU confirmation probe of the
// validated size are lost while its Base control probe, ACKs and PINGs
// cross.
func bigFrom(from, room int) func(int, Transmit, []byte) bool {
	return func(f int, tx Transmit, _ []byte) bool { return f == from && tx.Len+28 > room }
}

// TestWedgeAfterAllPathsTimeOut: every path of the connection times out at
// once, with the plane's queue full for a while afterwards (or not), and
// the sender's host stalled (or not); once the network is clean, the
// connection completes a message again within wedgeBound.
func TestWedgeAfterAllPathsTimeOut(t *testing.T) {
	fixed := cc.NewFixed(256<<10, 0)
	paced := cc.NewFixed(256<<10, units.ByteRate(50e6))
	aimd := cc.NewAIMD(cc.AIMDConfig{Name: "htcp-like", RefRTT: 50 * time.Millisecond, RTTFair: true,
		DelayTarget: 25 * time.Millisecond, QueueShare: 10 * time.Millisecond, SearchStart: 1.0 / 256,
		Params: cc.Params{LineRate: 200e6, BaseRTT: 20 * time.Millisecond},
		Growth: func(g cc.GrowthState) float64 { return 0.005 * cc.Scale(g) / g.RefRTT.Seconds() }})
	cases := []struct {
		name string
		ctl  cc.Factory
		// stall: the sender's host runs nothing for this long (its
		// timers and the datagrams to it wait); full: then the plane's
		// queue has room for small datagrams only, for this long.
		stall, full time.Duration
	}{
		{"stall", fixed, 300 * time.Millisecond, 0},
		{"stall-paced", paced, 300 * time.Millisecond, 0},
		{"stall-aimd", aimd, 300 * time.Millisecond, 0},
		{"full-queue", fixed, 0, 300 * time.Millisecond},
		{"full-queue-paced", paced, 0, 300 * time.Millisecond},
		{"full-queue-aimd", aimd, 0, 300 * time.Millisecond},
		{"stall-then-full-queue", fixed, 300 * time.Millisecond, 300 * time.Millisecond},
		{"stall-then-full-queue-aimd", aimd, 300 * time.Millisecond, 300 * time.Millisecond},
		{"long-full-queue", fixed, 0, 3 * time.Second},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newWedgeFlow(t, tc.ctl)
			n, c := f.n, f.c
			before := f.timeouts()
			if tc.stall > 0 {
				n.stall(0, n.now+tc.stall)
			}
			if tc.full > 0 {
				n.drop = bigFrom(0, 1200)
			}
			f.run(n.now+tc.stall+tc.full, nil)
			n.drop = nil
			clean := n.now
			if f.timeouts() == before {
				t.Fatalf("no path timed out: the test did not reach the wedge's start")
			}
			acked := f.acked()
			ok := f.run(clean+wedgeBound, func() bool { return f.acked() >= acked+wedgeProgress })
			g := c.PMTU()
			t.Logf("%s: %d path timeouts; after %v clean: %d DATA acknowledged, PMTU %+v, %d in flight, %d queued, stats %+v",
				tc.name, f.timeouts()-before, n.now-clean, f.acked()-acked, g, c.InflightBytes(), c.Queued(), c.Stats)
			if !ok {
				t.Fatalf("%d DATA acknowledged within %v of the network being clean, want %d (%d in flight, %d queued; PMTU size %d, data %v, black holes %d)",
					f.acked()-acked, wedgeBound, wedgeProgress, c.InflightBytes(), c.Queued(), g[0].Size, g[0].Data, g[0].Stats.BlackHoles)
			}
		})
	}
}

// TestPollRefusalKeepsChunk: a poll that cannot build its DATA (here the
// driver's buffer is too short; the path's sequence space full is the
// other refusal) leaves the chunk queued. The old pollData took the chunk
// off its queue before the refusal: it was then neither queued nor in
// flight, no timeout could resend it, and its message never completed.
func TestPollRefusalKeepsChunk(t *testing.T) {
	for _, wire := range []uint8{Version1, Version2} {
		n, c, s := establish(t, Config{MTU: 1024, Paths: 2, WireVersions: []uint8{wire}})
		region := make([]byte, 4096)
		if err := s.ep.Memory().Register(3, region); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write(n.now, 1, 3, 0, make([]byte, 3000)); err != nil {
			t.Fatal(err)
		}
		if tx, ok := n.eps[0].Poll(n.now, make([]byte, 0, 16)); ok {
			t.Fatalf("wire %d: a DATA built into a 16-byte buffer: %+v", wire, tx)
		}
		// The next message wakes the connection (a refused poll arms no
		// timer: the driver polls again when something happens).
		if _, err := c.Write(n.now, 1, 3, 0, make([]byte, 100)); err != nil {
			t.Fatal(err)
		}
		completed := 0
		done := func() bool {
			for _, ev := range drain(n.eps[0]) {
				if ev.Kind == EventSendComplete && ev.Err == nil {
					completed++
				}
			}
			return completed == 2
		}
		if !n.run(n.now+time.Second, done) {
			t.Fatalf("wire %d: %d of 2 messages completed after a refused poll (%d in flight, %d queued)", wire, completed, c.InflightBytes(), c.Queued())
		}
	}
}
