package metaroce

import (
	"fmt"
	"math"
	"runtime"
	"testing"
	"time"

	"github.com/mrgw/mrgw/cc"
)

// benchPipe is the protocol's datapath with no sockets: endpoint A sends
// WRITEs to registered memory at endpoint B over 8 paths of fixed 256 KiB
// windows, as the datapath load test's tunnel does (loadtest/datapath),
// and everything the two state machines do per datagram is what is
// measured: A's Poll (path choice, sent history, DATA header, the copy of
// the chunk), B's Receive (receive window, placement, the copy into
// memory), B's ACKs and A's processing of them.
//
// The network is a delay line of rounds: each round A polls up to a batch
// (netio's send batch), the batch polled delay rounds earlier arrives at
// B, and B's ACKs arrive at A at once. With delay 32 the windows, not the
// batches, bound what is in flight (8 × 256 KiB is about 1,600 datagrams
// of 1,316 bytes), so ACKs open one path at a time and batches go mostly
// to one path, as they do over real sockets.
type benchPipe struct {
	a, b   *Endpoint
	conn   *Conn
	src    []byte
	now    time.Duration
	rounds [][]benchDgram // ring of in-flight batches, one per round
	bufs   [][][]byte     // the buffers of each round's batch
	ack    []byte
	head   int
	dataIn uint64 // DATA datagrams delivered to B
}

type benchDgram struct {
	n       int
	entropy uint16
}

const (
	benchBatch = 64
	benchDelay = 32
	benchRound = 5 * time.Microsecond
)

func newBenchPipe(tb testing.TB, mtu int) *benchPipe {
	tb.Helper()
	return newBenchPipeCC(tb, mtu, cc.NewFixed(256<<10, 0))
}

// splitFixed is the fixed window with a split (cc.Splitter): the sender
// sprays it by weight (pathmgr.Set.PickWeighted), as it does a long-RTT
// controller's.
type splitFixed struct{ cc.Controller }

func (splitFixed) Splits() bool                 { return true }
func (splitFixed) SplitWeight(path int) float64 { return 0.5 + float64(path%3)/2 }

func newBenchPipeCC(tb testing.TB, mtu int, f cc.Factory) *benchPipe {
	tb.Helper()
	cfg := Config{MTU: mtu, Paths: 8, Seed: 1, CC: f, WireVersions: []uint8{Version2}}
	p := &benchPipe{src: make([]byte, 1<<20), ack: make([]byte, 0, 2048)}
	var err error
	if p.a, err = NewEndpoint(cfg, NewMemory()); err != nil {
		tb.Fatal(err)
	}
	cfg.Listen = true
	if p.b, err = NewEndpoint(cfg, NewMemory()); err != nil {
		tb.Fatal(err)
	}
	if err := p.b.Memory().Register(1, make([]byte, len(p.src))); err != nil {
		tb.Fatal(err)
	}
	p.rounds = make([][]benchDgram, benchDelay+1)
	p.bufs = make([][][]byte, benchDelay+1)
	for i := range p.bufs {
		p.rounds[i] = make([]benchDgram, 0, benchBatch)
		p.bufs[i] = make([][]byte, benchBatch)
		for j := range p.bufs[i] {
			p.bufs[i][j] = make([]byte, mtu+DataHeaderLen)
		}
	}
	if p.conn, err = p.a.Connect(0, 1); err != nil {
		tb.Fatal(err)
	}
	for i := 0; !p.conn.Established(); i++ {
		if i == 4*benchDelay {
			tb.Fatal("no connection after 4 round trips")
		}
		p.round()
	}
	for range 16 {
		if _, err := p.conn.Write(p.now, 0, 1, 0, p.src); err != nil {
			tb.Fatal(err)
		}
	}
	return p
}

// round runs one round: A polls a batch, the batch sent benchDelay rounds
// ago arrives at B, B's replies arrive at A, timers run, and every
// completed WRITE is queued again.
func (p *benchPipe) round() {
	cur := p.head
	batch := p.rounds[cur][:0]
	for len(batch) < benchBatch {
		buf := p.bufs[cur][len(batch)]
		tx, ok := p.a.Poll(p.now, buf[:0])
		if !ok {
			break
		}
		batch = append(batch, benchDgram{n: tx.Len, entropy: tx.Entropy})
	}
	p.rounds[cur] = batch
	p.head = (p.head + 1) % len(p.rounds)
	arr := p.head // the oldest batch: sent benchDelay rounds ago
	for i, d := range p.rounds[arr] {
		p.b.Receive(p.now, p.bufs[arr][i][:d.n], RecvMeta{Peer: 0, Entropy: d.entropy})
	}
	p.dataIn += uint64(len(p.rounds[arr]))
	p.rounds[arr] = p.rounds[arr][:0]
	for {
		tx, ok := p.b.Poll(p.now, p.ack[:0])
		if !ok {
			break
		}
		p.a.Receive(p.now, p.ack[:tx.Len], RecvMeta{Peer: 1, Entropy: listenPort})
	}
	for _, ep := range [2]*Endpoint{p.a, p.b} {
		if t := ep.NextTimeout(); t >= 0 && t <= p.now {
			ep.HandleTimeout(p.now)
		}
	}
	for {
		ev, ok := p.a.PollEvent()
		if !ok {
			break
		}
		if ev.Kind == EventSendComplete && ev.Err == nil {
			_, _ = p.conn.Write(p.now, 0, 1, 0, p.src)
		}
	}
	for {
		if _, ok := p.b.PollEvent(); !ok {
			break
		}
	}
	p.now += benchRound
}

// BenchmarkDatapath is the protocol's cost per DATA datagram, both ends
// together, at the datapath load test's payload sizes for link MTUs 1400
// and 9000 (wire version 2): go test -run - -bench Datapath ./metaroce.
func BenchmarkDatapath(b *testing.B) {
	for _, mtu := range []int{1316, 8916} {
		b.Run(fmt.Sprintf("payload-%d", mtu), func(b *testing.B) {
			p := newBenchPipe(b, mtu)
			for range 4 * benchDelay { // fill the windows
				p.round()
			}
			st0 := p.conn.Stats
			b.SetBytes(int64(mtu))
			b.ReportAllocs()
			b.ResetTimer()
			start := p.dataIn
			cpu0, cpuOK := processCPU()
			for p.dataIn-start < uint64(b.N) {
				p.round()
			}
			cpu1, _ := processCPU()
			b.StopTimer()
			if cpuOK {
				b.ReportMetric(float64(cpu1-cpu0)/float64(p.dataIn-start), "cpu-ns/datagram")
			}
			st := p.conn.Stats
			if to, rt := st.Timeouts-st0.Timeouts, st.Retransmits-st0.Retransmits; to != 0 || rt != 0 {
				b.Fatalf("%d timeouts and %d retransmissions: not the steady state this measures", to, rt)
			}
			b.ReportMetric(float64(st.AcksReceived-st0.AcksReceived)/float64(p.dataIn-start), "acks/datagram")
		})
	}
}

// TestDatapathAllocations: the protocol's datapath (BenchmarkDatapath's
// pipe) allocates nothing per datagram once the windows are full; what
// is left is per message, each 1 MiB WRITE's records at both ends (about
// 4 allocations per message: 0.005 per datagram at payload 1316, 0.03 at
// 8916).
//
// The same with a controller that splits its rate (cc.Splitter): the
// weighted sprayer allocates nothing either.
func TestDatapathAllocations(t *testing.T) {
	fixed := cc.NewFixed(256<<10, 0)
	split := func(paths, size int) cc.Controller { return splitFixed{fixed(paths, size)} }
	for _, k := range []struct {
		name string
		mtu  int
		f    cc.Factory
	}{{"fixed", 1316, fixed}, {"fixed", 8916, fixed}, {"split", 1316, split}} {
		mtu := k.mtu
		p := newBenchPipeCC(t, mtu, k.f)
		for range 4 * benchDelay {
			p.round()
		}
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		start, msgs0 := p.dataIn, p.conn.Stats.MessagesSent
		for range 2000 {
			p.round()
		}
		runtime.ReadMemStats(&m1)
		n, msgs := p.dataIn-start, p.conn.Stats.MessagesSent-msgs0
		allocs := m1.Mallocs - m0.Mallocs
		if n < 10000 || msgs < 10 {
			t.Fatalf("payload %d: only %d datagrams and %d messages in 2000 rounds", mtu, n, msgs)
		}
		t.Logf("%s payload %d: %d allocations, %d datagrams, %d messages", k.name, mtu, allocs, n, msgs)
		if per := float64(allocs) / float64(msgs); per > 6 {
			t.Errorf("%s payload %d: %.1f allocations per message (%.3f per datagram), want at most 6 (per message only)", k.name, mtu, per, float64(allocs)/float64(n))
		}
	}
}

// TestSenderSpraysBySplit: a controller that splits its rate (cc.Splitter)
// has its paths sent in proportion to its weights; without a split, round
// robin sends each path the same (the planes with the fewest paths then
// idled, docs/CC.md §2).
func TestSenderSpraysBySplit(t *testing.T) {
	// Paced, with windows far larger than what pacing puts in flight: a
	// window that binds takes the path's turn away, whatever its weight.
	fixed := cc.NewFixed(16<<20, 2e9)
	split := func(paths, size int) cc.Controller { return splitFixed{fixed(paths, size)} }
	for _, k := range []struct {
		name string
		f    cc.Factory
		want func(path int) float64
	}{
		{"round robin", fixed, func(int) float64 { return 1 }},
		{"split", split, splitFixed{}.SplitWeight},
	} {
		p := newBenchPipeCC(t, 1316, k.f)
		for range 2000 {
			p.round()
		}
		var sent, wsum float64
		for i := range p.conn.paths.Paths {
			sent += float64(p.conn.paths.Paths[i].SentPackets)
			wsum += k.want(i)
		}
		if sent < 4000 { // ~5000 at this pacing rate
			t.Fatalf("%s: only %.0f packets sent", k.name, sent)
		}
		for i := range p.conn.paths.Paths {
			got := float64(p.conn.paths.Paths[i].SentPackets) / sent
			want := k.want(i) / wsum
			if math.Abs(got-want) > 0.01 {
				t.Errorf("%s: path %d carried %.3f of the packets, want %.3f", k.name, i, got, want)
			}
		}
	}
}
