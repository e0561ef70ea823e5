package metaroce

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/mrgw/mrgw/cc"
	"github.com/mrgw/mrgw/pathmgr"

	"github.com/mrgw/mrgw/units"
)

// transferCase sends random messages (random sizes, several streams, WRITE and
// SEND) from endpoint 0 to endpoint 1 and checks that every message completes
// exactly once, in stream order, on both sides, and that the receiver's
// memory equals what was sent.
type transferCase struct {
	name    string
	mode    Mode
	paths   int
	planes  int
	loss    float64
	dup     float64
	msgs    int
	maxSize int
	streams int
	// blackAt, if set, blacks out plane blackPlane at that time.
	blackAt    time.Duration
	blackPlane int
	limit      time.Duration
	// rate paces the sender (bytes/s; 0 = unpaced).
	rate units.ByteRate
	// wire is Config.WireVersions of both ends (nil: 1 and 2, which agree
	// on version 2 in the MetaRoCE mode; the RoCEv2 mode speaks 1).
	wire []uint8
}

func runTransfer(t *testing.T, tc transferCase, seed uint64) *testNet {
	t.Helper()
	wire := tc.wire
	if wire == nil && tc.mode == ModeMetaRoCE {
		wire = []uint8{Version1, Version2}
	}
	cfg := Config{Mode: tc.mode, Paths: tc.paths, MTU: 1024, CC: cc.NewFixed(64<<10, tc.rate), Seed: seed, WireVersions: wire}
	n := newTestNet(t, cfg, cfg, tc.planes, seed)
	n.loss, n.dup = tc.loss, tc.dup
	rng := rand.New(rand.NewPCG(seed, 99))

	c, err := n.eps[0].Connect(n.now, 1)
	if err != nil {
		t.Fatal(err)
	}
	if !n.run(time.Second, func() bool { return c.Established() }) {
		t.Fatalf("handshake did not complete")
	}
	var server *Conn
	for _, ev := range drain(n.eps[1]) {
		if ev.Kind == EventConnected {
			server = ev.Conn
		}
	}
	if server == nil {
		t.Fatal("server saw no connection")
	}
	drain(n.eps[0])
	want := Version2
	if tc.mode == ModeRoCEv2 || (len(tc.wire) == 1 && tc.wire[0] == Version1) {
		want = Version1
	}
	if c.WireVersion() != want || server.WireVersion() != want {
		t.Fatalf("wire versions %d and %d, want %d", c.WireVersion(), server.WireVersion(), want)
	}

	// Lay out the receiver's memory: one region for WRITEs; a posted buffer per SEND.
	type msg struct {
		stream uint32
		seq    uint64
		op     Op
		data   []byte
		dst    func() []byte
	}
	region := make([]byte, tc.msgs*tc.maxSize)
	if err := n.eps[1].Memory().Register(7, region); err != nil {
		t.Fatal(err)
	}
	var sent []msg
	off := 0
	for i := 0; i < tc.msgs; i++ {
		size := 1 + rng.IntN(tc.maxSize)
		data := make([]byte, size)
		for j := range data {
			data[j] = byte(rng.Uint32())
		}
		stream := uint32(rng.IntN(tc.streams))
		m := msg{stream: stream, data: data}
		if rng.IntN(2) == 0 {
			m.op = OpWrite
			o := off
			m.dst = func() []byte { return region[o : o+size] }
			m.seq, err = c.Write(n.now, stream, 7, uint64(off), data)
			off += size
		} else {
			m.op = OpSend
			buf := make([]byte, size+rng.IntN(16))
			tag := uint64(1000 + i)
			if err := server.PostRecv(tag, buf); err != nil {
				t.Fatal(err)
			}
			m.dst = func() []byte { return buf[:size] }
			m.seq, err = c.Send(n.now, stream, tag, data)
		}
		if err != nil {
			t.Fatal(err)
		}
		sent = append(sent, m)
	}
	n.flush(0)

	sendDone := map[[2]uint64]int{}
	recvDone := map[[2]uint64]int{}
	lastSend := map[uint32]int64{}
	lastRecv := map[uint32]int64{}
	check := func(kind string, ev Event, last map[uint32]int64, done map[[2]uint64]int) {
		if ev.Err != nil {
			t.Errorf("%s stream %d seq %d: %v", kind, ev.Stream, ev.Seq, ev.Err)
		}
		if prev, ok := last[ev.Stream]; ok && int64(ev.Seq) != prev+1 {
			t.Errorf("%s stream %d: completion %d after %d (out of order)", kind, ev.Stream, ev.Seq, prev)
		} else if !ok && ev.Seq != 0 {
			t.Errorf("%s stream %d: first completion is %d", kind, ev.Stream, ev.Seq)
		}
		last[ev.Stream] = int64(ev.Seq)
		done[[2]uint64{uint64(ev.Stream), ev.Seq}]++
	}
	blacked := false
	ok := n.run(tc.limit, func() bool {
		if tc.blackAt > 0 && !blacked && n.now >= tc.blackAt {
			n.black[tc.blackPlane] = true
			blacked = true
		}
		for _, ev := range drain(n.eps[0]) {
			if ev.Kind == EventSendComplete {
				check("send", ev, lastSend, sendDone)
			}
		}
		for _, ev := range drain(n.eps[1]) {
			switch ev.Kind {
			case EventRecvComplete:
				check("recv", ev, lastRecv, recvDone)
			case EventPlacementError:
				t.Errorf("placement error: %v", ev.Err)
			}
		}
		return len(sendDone) == tc.msgs && len(recvDone) == tc.msgs
	})
	if !ok {
		t.Fatalf("only %d/%d sends and %d/%d receives completed by %v (sent %d, lost %d); stats %+v",
			len(sendDone), tc.msgs, len(recvDone), tc.msgs, n.now, n.sent, n.lost, c.Stats)
	}
	for k, v := range sendDone {
		if v != 1 {
			t.Errorf("send %v completed %d times", k, v)
		}
	}
	for k, v := range recvDone {
		if v != 1 {
			t.Errorf("recv %v completed %d times", k, v)
		}
	}
	for i, m := range sent {
		if !bytes.Equal(m.dst(), m.data) {
			t.Fatalf("message %d (op %d, %d bytes) differs at the receiver", i, m.op, len(m.data))
		}
	}
	if tc.blackAt > 0 && !blacked {
		t.Fatalf("transfer finished before the plane went black at %v; make it longer", tc.blackAt)
	}
	return n
}

func TestTransferByteExact(t *testing.T) {
	cases := []transferCase{
		{name: "clean-1path", paths: 1, planes: 1},
		{name: "reorder-8paths", paths: 8, planes: 8},
		{name: "loss0.1", paths: 8, planes: 4, loss: 0.001},
		{name: "loss1", paths: 8, planes: 4, loss: 0.01},
		{name: "loss10", paths: 8, planes: 4, loss: 0.10},
		{name: "loss30", paths: 8, planes: 4, loss: 0.30},
		{name: "duplication", paths: 8, planes: 4, dup: 0.05, loss: 0.01},
		{name: "plane-black", paths: 16, planes: 8, blackAt: 200 * time.Microsecond, blackPlane: 3, rate: 1e9},
		{name: "plane-black-loss1", paths: 16, planes: 8, blackAt: 200 * time.Microsecond, blackPlane: 5, rate: 1e9, loss: 0.01},
		{name: "64paths-loss1", paths: 64, planes: 8, loss: 0.01},
		{name: "rocev2-loss1", mode: ModeRoCEv2, paths: 1, planes: 1, loss: 0.01},
		// The cases above speak wire version 2; these pin version 1.
		{name: "v1-reorder-8paths", paths: 8, planes: 8, wire: []uint8{Version1}},
		{name: "v1-loss10", paths: 8, planes: 4, loss: 0.10, wire: []uint8{Version1}},
		{name: "v1-duplication", paths: 8, planes: 4, dup: 0.05, loss: 0.01, wire: []uint8{Version1}},
		{name: "v1-plane-black-loss1", paths: 16, planes: 8, blackAt: 200 * time.Microsecond, blackPlane: 5, rate: 1e9, loss: 0.01, wire: []uint8{Version1}},
	}
	for _, tc := range cases {
		tc := tc
		if tc.msgs == 0 {
			tc.msgs, tc.maxSize, tc.streams = 60, 20000, 4
		}
		if tc.limit == 0 {
			tc.limit = 20 * time.Second
		}
		t.Run(tc.name, func(t *testing.T) {
			for seed := uint64(1); seed <= 3; seed++ {
				t.Run(fmt.Sprint("seed", seed), func(t *testing.T) { runTransfer(t, tc, seed) })
			}
		})
	}
}

// TestOneGiBMessage moves a single message of 1 GiB + 1 byte (so the last
// packet is short) with 0.1% loss over 8 paths and checks it byte for byte.
func TestOneGiBMessage(t *testing.T) {
	if testing.Short() {
		t.Skip("moves 1 GiB; run without -short")
	}
	const size = 1<<30 + 1
	cfg := Config{Paths: 8, CC: cc.NewFixed(4<<20, 0), Seed: 3}
	n := newTestNet(t, cfg, cfg, 4, 3)
	n.loss = 0.001
	src := make([]byte, size)
	rng := rand.New(rand.NewPCG(5, 6))
	for i := 0; i+8 <= len(src); i += 8 {
		v := rng.Uint64()
		for j := 0; j < 8; j++ {
			src[i+j] = byte(v >> (8 * j))
		}
	}
	src[size-1] = 0x5a
	dst := make([]byte, size)
	if err := n.eps[1].Memory().Register(9, dst); err != nil {
		t.Fatal(err)
	}
	c, _ := n.eps[0].Connect(0, 1)
	if !n.run(time.Second, c.Established) {
		t.Fatal("no handshake")
	}
	if _, err := c.Write(n.now, 0, 9, 0, src); err != nil {
		t.Fatal(err)
	}
	var sendErr, recvErr error
	sent, recvd := false, false
	if !n.run(time.Hour, func() bool {
		for _, ev := range drain(n.eps[0]) {
			if ev.Kind == EventSendComplete {
				sent, sendErr = true, ev.Err
			}
		}
		for _, ev := range drain(n.eps[1]) {
			if ev.Kind == EventRecvComplete {
				recvd, recvErr = true, ev.Err
				if ev.Len != size {
					t.Errorf("completion length %d", ev.Len)
				}
			}
		}
		return sent && recvd
	}) {
		t.Fatalf("1 GiB message did not complete: sent %v received %v", sent, recvd)
	}
	if sendErr != nil || recvErr != nil {
		t.Fatalf("errors: %v %v", sendErr, recvErr)
	}
	if !bytes.Equal(src, dst) {
		t.Fatal("1 GiB message differs at the receiver")
	}
	if c.Stats.Retransmits == 0 {
		t.Fatal("expected some retransmissions at 0.1% loss")
	}
}

// TestUpPathNeverProbeDue holds pathmgr to what pollProbe assumes when it
// skips up paths without asking: ProbeDue is false for an up path, at any
// time and whatever it has in flight, and changes nothing.
func TestUpPathNeverProbeDue(t *testing.T) {
	s := pathmgr.NewSet(4, pathmgr.DefaultConfig(), rand.New(rand.NewPCG(1, 2)))
	for _, inflight := range []int{0, 1500} {
		for _, now := range []time.Duration{0, time.Millisecond, time.Hour} {
			for i := range s.Paths {
				p := &s.Paths[i]
				if p.State != pathmgr.Up {
					t.Fatalf("path %d starts %v", i, p.State)
				}
				p.InflightBytes = inflight
				before := *p
				if s.ProbeDue(now, i) {
					t.Fatalf("up path %d with %d bytes in flight due a probe at %v", i, inflight, now)
				}
				if *p != before {
					t.Fatalf("ProbeDue changed up path %d", i)
				}
			}
		}
	}
}
