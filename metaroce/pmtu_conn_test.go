package metaroce

import (
	"bytes"
	"testing"
	"time"
)

// pmtuLimits drops datagrams larger than their group's limit (path mod
// len(limits)); overhead is what a driver would add. It counts what it
// dropped per group and type.
type pmtuLimits struct {
	limits   []int
	overhead int
	dropped  map[PacketType]int
}

func (l *pmtuLimits) drop(from int, tx Transmit, b []byte) bool {
	if tx.Len+l.overhead <= l.limits[tx.Path%len(l.limits)] {
		return false
	}
	if l.dropped == nil {
		l.dropped = map[PacketType]int{}
	}
	l.dropped[PacketType(b[1])]++
	return true
}

func pmtuNet(t *testing.T, mtu int, pc PMTUConfig, l *pmtuLimits, wire ...uint8) (*testNet, *Conn) {
	t.Helper()
	cfg := Config{MTU: mtu, Paths: 8, WireVersions: wire}
	cfgB := cfg
	cfgB.AcceptOptions = func(PeerID) ConnOptions { return ConnOptions{PMTU: pc} }
	n := newTestNet(t, cfg, cfgB, 1, 1)
	n.delay[0] = 5 * time.Millisecond
	n.drop = l.drop
	c, err := n.eps[0].ConnectWith(0, 1, ConnOptions{PMTU: pc})
	if err != nil {
		t.Fatal(err)
	}
	return n, c
}

func TestConnPMTUPerGroup(t *testing.T) {
	pc := PMTUConfig{Groups: 2, Overhead: 28, Max: 9000}
	l := &pmtuLimits{limits: []int{1280 - 28, 9000 - 28}, overhead: 28}
	n, c := pmtuNet(t, 8896, pc, l)
	settled := func() bool {
		g := c.PMTU()
		return len(g) == 2 && g[0].State == PMTUComplete && g[1].State == PMTUComplete
	}
	if !n.run(time.Second, settled) {
		t.Fatalf("not settled after 1 s: %+v", c.PMTU())
	}
	g := c.PMTU()
	at := n.now
	t.Logf("settled after %v (RTT 10 ms): %+v", at, g)
	if g[0].Size > 1252 || g[0].Size < 1252-16 || g[1].Size > 8972 || g[1].Size < 8972-16 {
		t.Fatalf("sizes %d, %d; want just under 1252 and 8972", g[0].Size, g[1].Size)
	}
	if at > 200*time.Millisecond {
		t.Fatalf("settled after %v: more than 20 RTTs", at)
	}
	// The accepting side searched its own direction too.
	var b *Conn
	for _, cc := range n.eps[1].Conns() {
		b = cc
	}
	if bg := b.PMTU(); len(bg) != 2 || bg[0].Size < 1236 || bg[1].Size < 8956 {
		t.Fatalf("responder's searches %+v", bg)
	}
	// A full DATA datagram (9000) crosses neither group: no DATA may be
	// sent, so nothing is dropped for size after settling.
	if g[0].Data || g[1].Data {
		t.Fatalf("data allowed on a group that cannot carry 9000 bytes: %+v", g)
	}
}

// TestConnPMTUDataFollows: DATA goes only on the groups that validated a
// full DATA datagram, and none of it is dropped for size.
func TestConnPMTUDataFollows(t *testing.T) {
	pc := PMTUConfig{Groups: 2, Overhead: 28}
	l := &pmtuLimits{limits: []int{1280 - 28, 9000 - 28}, overhead: 28}
	n, c := pmtuNet(t, 4000, pc, l) // DATA datagram 4104
	region := make([]byte, 1<<20)
	if err := n.eps[1].Memory().Register(7, region); err != nil {
		t.Fatal(err)
	}
	if !n.run(time.Second, func() bool { return c.state == stateEstablished }) {
		t.Fatal("not connected")
	}
	src := bytes.Repeat([]byte{0xab}, len(region))
	if !writeAndRun(t, n, c, src, 10*time.Second) {
		t.Fatalf("write did not complete: %+v", c.PMTU())
	}
	if !bytes.Equal(region, src) {
		t.Fatal("region differs")
	}
	g := c.PMTU()
	if g[0].Data || !g[1].Data {
		t.Fatalf("data eligibility %+v", g)
	}
	if l.dropped[TypeData] != 0 {
		t.Fatalf("%d DATA datagrams dropped for size", l.dropped[TypeData])
	}
	for i := range c.paths.Paths {
		if i%2 == 0 && c.paths.Paths[i].SentPackets != 0 {
			t.Fatalf("path %d of group 0 sent %d DATA", i, c.paths.Paths[i].SentPackets)
		}
	}
}

// writeAndRun WRITEs src to key 7 at offset 0 on c and runs n until the
// write completes (true) or the simulated clock reaches until.
func writeAndRun(t *testing.T, n *testNet, c *Conn, src []byte, until time.Duration) bool {
	t.Helper()
	if _, err := c.Write(n.now, 0, 7, 0, src); err != nil {
		t.Fatal(err)
	}
	return n.run(until, func() bool {
		for _, ev := range drain(n.eps[0]) {
			if ev.Kind == EventSendComplete {
				return true
			}
		}
		return false
	})
}

// TestConnPMTUVersion2DataSize: a version-2 connection requires of a
// plane only its own full DATA datagram (28-byte header), not version 1's
// (76): over a 1,500-byte IP path (1,472-byte datagrams) with the 1,416
// bytes of payload that version 2 fits there, the data flows. Before, the
// search validated 1,472 and every path waited for 1,520: nothing was
// sent. A version-1 connection at the same MTU is still held back.
func TestConnPMTUVersion2DataSize(t *testing.T) {
	const overhead, datagram = 28, 1472
	mtu := datagram - overhead - DataHeaderLenV2
	pc := PMTUConfig{Groups: 2, Overhead: overhead}
	for _, v := range []uint8{Version2, Version1} {
		l := &pmtuLimits{limits: []int{datagram}, overhead: overhead}
		n, c := pmtuNet(t, mtu, pc, l, v)
		region := make([]byte, 256<<10)
		if err := n.eps[1].Memory().Register(7, region); err != nil {
			t.Fatal(err)
		}
		if !n.run(time.Second, func() bool { return c.state == stateEstablished }) {
			t.Fatalf("v%d: not connected", v)
		}
		if c.WireVersion() != int(v) {
			t.Fatalf("agreed version %d, want %d", c.WireVersion(), v)
		}
		src := bytes.Repeat([]byte{0x5a}, len(region))
		completed := writeAndRun(t, n, c, src, n.now+5*time.Second)
		g := c.PMTU()
		if v == Version1 {
			if completed || c.Stats.DataSent != 0 || g[0].Data {
				t.Fatalf("v1 at a payload its datagram cannot carry: completed %v, %d DATA sent, groups %+v", completed, c.Stats.DataSent, g)
			}
			continue
		}
		if !completed {
			t.Fatalf("v2 write did not complete: %d DATA sent, groups %+v", c.Stats.DataSent, g)
		}
		if !bytes.Equal(region, src) {
			t.Fatal("region differs")
		}
		if !g[0].Data || !g[1].Data || g[0].Size != datagram {
			t.Fatalf("v2 groups %+v: want both carrying data at %d", g, datagram)
		}
		if l.dropped[TypeData] != 0 {
			t.Fatalf("%d DATA datagrams dropped for size", l.dropped[TypeData])
		}
	}
}

// TestConnMeasure: a measurement probes every usable path once per round;
// answers give the RTT; probes lost on a path show as unanswered there.
func TestConnMeasure(t *testing.T) {
	cfg := Config{MTU: 1000, Paths: 4}
	n := newTestNet(t, cfg, cfg, 1, 1)
	n.delay[0] = 5 * time.Millisecond
	n.drop = func(from int, tx Transmit, b []byte) bool {
		return from == 0 && tx.Path == 3 && PacketType(b[1]) == TypePMTUProbe
	}
	c, err := n.eps[0].Connect(0, 1)
	if err != nil {
		t.Fatal(err)
	}
	if !n.run(time.Second, func() bool { return c.state == stateEstablished }) {
		t.Fatal("not connected")
	}
	c.Measure(n.now, 5, 20*time.Millisecond, 100)
	var got []PathMeasure
	done := false
	n.run(n.now+time.Second, func() bool {
		got, done = c.Measurement()
		return done && got[0].Acked == 5
	})
	if !done {
		t.Fatalf("measurement not done: %+v", got)
	}
	for _, p := range got {
		wantAcked := uint64(5)
		if p.Path == 3 {
			wantAcked = 0
		}
		if p.Sent != 5 || p.Acked != wantAcked {
			t.Fatalf("path %d: %d sent, %d answered; want 5 and %d", p.Path, p.Sent, p.Acked, wantAcked)
		}
		if p.Acked > 0 && (p.MinRTT < 10*time.Millisecond || p.MinRTT > 11*time.Millisecond) {
			t.Fatalf("path %d: min RTT %v, want 10 ms", p.Path, p.MinRTT)
		}
	}
	if c.PMTU() != nil {
		t.Fatal("a connection without discovery reports PMTU groups")
	}
}
