//go:build linux

package gateway_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/mrgw/mrgw/loadtest/lab/labtest"

	"github.com/mrgw/mrgw/host"
	"github.com/mrgw/mrgw/loadtest/lab"
	"github.com/mrgw/mrgw/metaroce"
	"github.com/mrgw/mrgw/region"
)

// patience bounds every wait: a failure deadline, never a performance
// threshold.
const patience = 60 * time.Second

// hostOpenTimeout is the test hosts' OpenTimeout: how long host.New waits
// for its gateways to register it and an OPEN for its answer. The default,
// 5 s, is a budget a starved machine exhausts (under -race at load 12-16
// the lab's gateways answered INITs 0.8 to 3.3 s late, docs/GATEWAY.md,
// "Registration under load"), and no test here measures it; host.New
// returns as soon as every gateway has registered the host.
const hostOpenTimeout = patience / 4

func newHost(t *testing.T, l *lab.Lab, name, reg string) *host.Host {
	t.Helper()
	h, err := host.New(host.Config{Name: name, Region: reg, Gateways: l.HostGateways(reg), Key: l.HostKey, DeadAfter: time.Second, OpenTimeout: hostOpenTimeout,
		Logger: labtest.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

// transfer is a set of messages sent over several flows and checked at
// the destination byte for byte, each exactly once.
type transfer struct {
	t        *testing.T
	src, dst *host.Host
	key      uint32
	region   []byte
	mu       sync.Mutex
	want     map[[2]uint64][]byte // (flow, seq) → content
	addr     map[[2]uint64]uint64
	got      map[[2]uint64]int
	bad      []string
	next     uint64 // next free address in the destination region
	pending  []*host.Pending
	onFail   func()
}

func newTransfer(t *testing.T, src, dst *host.Host, size int) *transfer {
	tr := &transfer{t: t, src: src, dst: dst, key: 7, region: make([]byte, size),
		want: map[[2]uint64][]byte{}, addr: map[[2]uint64]uint64{}, got: map[[2]uint64]int{}}
	if err := dst.RegisterMemory(tr.key, tr.region); err != nil {
		t.Fatal(err)
	}
	return tr
}

// send writes one random message on f at a fresh address.
func (tr *transfer) send(ctx context.Context, f *host.Flow, rng *rand.Rand) error {
	n := 1 + rng.IntN(48<<10)
	data := make([]byte, n)
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	tr.mu.Lock()
	addr := tr.next
	tr.next += uint64(n)
	tr.mu.Unlock()
	if addr+uint64(n) > uint64(len(tr.region)) {
		return errors.New("destination region full")
	}
	p, err := f.Write(ctx, tr.key, addr, data)
	if err != nil {
		return err
	}
	first, cnt := p.Seqs()
	if cnt != 1 {
		return fmt.Errorf("message cut into %d segments", cnt)
	}
	tr.mu.Lock()
	k := [2]uint64{f.ID(), first}
	tr.want[k] = data
	tr.addr[k] = addr
	tr.pending = append(tr.pending, p)
	tr.mu.Unlock()
	return nil
}

// receive checks deliveries until ctx ends.
func (tr *transfer) receive(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case d, ok := <-tr.dst.Received():
			if !ok {
				return
			}
			buf := make([]byte, d.Len)
			rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			err := tr.dst.ReadMemory(rctx, d.Key, d.Addr, buf)
			cancel()
			tr.mu.Lock()
			k := [2]uint64{d.Flow, d.Seq}
			tr.got[k]++
			// The sender records the message after Write returns, which
			// may be after its delivery: compare at the end (check).
			if err != nil {
				tr.bad = append(tr.bad, fmt.Sprintf("flow %x seq %d: read: %v", d.Flow, d.Seq, err))
			} else if w, ok := tr.want[k]; ok && (!bytes.Equal(w, buf) || tr.addr[k] != d.Addr) {
				tr.bad = append(tr.bad, fmt.Sprintf("flow %x seq %d: %d bytes at %d differ", d.Flow, d.Seq, d.Len, d.Addr))
			}
			tr.mu.Unlock()
		}
	}
}

// wait waits for every message's end-to-end completion and delivery.
func (tr *transfer) wait(ctx context.Context) {
	tr.t.Helper()
	tr.mu.Lock()
	ps := append([]*host.Pending(nil), tr.pending...)
	tr.mu.Unlock()
	for i, p := range ps {
		if err := p.Wait(ctx); err != nil {
			first, _ := p.Seqs()
			tr.mu.Lock()
			var flow uint64
			for k := range tr.want {
				if k[1] == first {
					if tr.got[k] == 0 {
						flow = k[0]
					}
				}
			}
			tr.mu.Unlock()
			tr.t.Logf("source stats %+v", tr.src.Stats())
			tr.t.Logf("destination stats %+v", tr.dst.Stats())
			if tr.onFail != nil {
				tr.onFail()
			}
			tr.t.Fatalf("message %d of %d (seq %d, undelivered on flow %x) did not complete: %v", i, len(ps), first, flow, err)
		}
	}
	for {
		tr.mu.Lock()
		n := len(tr.got)
		tr.mu.Unlock()
		if n >= len(tr.want) {
			break
		}
		select {
		case <-ctx.Done():
			tr.t.Fatalf("%d of %d messages delivered", n, len(tr.want))
		case <-time.After(20 * time.Millisecond):
		}
	}
	time.Sleep(300 * time.Millisecond) // late duplicates, if any, show up
}

// check verifies every message arrived exactly once, byte for byte.
func (tr *transfer) check() {
	tr.t.Helper()
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for _, b := range tr.bad {
		tr.t.Error(b)
	}
	lost, dup := 0, 0
	for k, w := range tr.want {
		switch tr.got[k] {
		case 0:
			lost++
		case 1:
			a := tr.addr[k]
			if !bytes.Equal(tr.region[a:a+uint64(len(w))], w) {
				// The region is the host's own memory: what it placed.
				tr.t.Errorf("flow %x seq %d: memory differs", k[0], k[1])
			}
		default:
			dup++
		}
	}
	for k := range tr.got {
		if _, ok := tr.want[k]; !ok {
			tr.t.Errorf("delivery of unknown message flow %x seq %d", k[0], k[1])
		}
	}
	if lost > 0 || dup > 0 {
		tr.t.Fatalf("%d messages: %d lost, %d delivered twice", len(tr.want), lost, dup)
	}
	tr.t.Logf("%d messages delivered exactly once, byte-exact", len(tr.want))
}

// TestRelayByteExact sends random messages over several flows from eu-west
// to us-east through 2×2 gateways and 4 emulated planes with 1% loss.
func TestRelayByteExact(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	l := labtest.Start(t, ctx, lab.Config{Loss: 0.01, OneWay: 10 * time.Millisecond})
	src := newHost(t, l, "trainer-a", lab.RegionA)
	dst := newHost(t, l, "trainer-b", lab.RegionB)
	tr := newTransfer(t, src, dst, 64<<20)
	rctx, rcancel := context.WithCancel(ctx)
	defer rcancel()
	go tr.receive(rctx)
	rng := rand.New(rand.NewPCG(1, 2))
	var flows []*host.Flow
	for range 4 {
		f, err := lab.OpenFlow(ctx, src, lab.RegionB, "trainer-b", host.FlowOptions{}, t.Logf)
		if err != nil {
			t.Fatal(err)
		}
		flows = append(flows, f)
	}
	for i := range 200 {
		if err := tr.send(ctx, flows[i%len(flows)], rng); err != nil {
			t.Fatal(err)
		}
	}
	tr.wait(ctx)
	tr.check()
	// Both gateways of the source pair carried flows (spread by flow id),
	// unless every flow id happened to hash to one.
	used := map[string]bool{}
	for _, f := range flows {
		used[f.Gateway().String()] = true
	}
	t.Logf("flows used %d gateways of the source pair", len(used))
	// The gateways relayed chunks in the buffers they arrived in (both
	// hops cut messages alike in the lab): the bytes checked above went
	// through that path. Status is refreshed every StatsEvery: wait.
	for {
		var inPlace, copied uint64
		for _, g := range l.Gateways {
			st := g.Status()
			inPlace += st.Flows.ChunksInPlace
			copied += st.Flows.ChunksCopied
		}
		if inPlace > 0 {
			t.Logf("%d chunks relayed in place, %d copied", inPlace, copied)
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("no chunk relayed in the buffer it arrived in (%d copied)", copied)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestGatewayKilledMidTransfer kills one gateway while messages are in
// flight: none may be lost or delivered twice, gossip must show the
// gateway dead, and routing must move to its pair member.
func TestGatewayKilledMidTransfer(t *testing.T) {
	for _, victim := range []string{"use-gw1", "euw-gw1"} {
		t.Run(victim, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), patience)
			defer cancel()
			l := labtest.Start(t, ctx, lab.Config{Loss: 0.01, OneWay: 10 * time.Millisecond})
			src := newHost(t, l, "trainer-a", lab.RegionA)
			dst := newHost(t, l, "trainer-b", lab.RegionB)
			tr := newTransfer(t, src, dst, 128<<20)
			tr.onFail = func() {
				es := l.Emu.Stats()
				t.Logf("emulator: send errors %d, read errors %d, mapping drops %d, overflow %d, truncated %d, mappings %d, A->B %+v, B->A %+v",
					es.SendErrors, es.ReadErrors, es.MappingDrops, es.OverflowDrops, es.Truncated, es.Mappings, es.Total(0), es.Total(1))
				for n, g := range l.Gateways {
					st := g.Status()
					for _, p := range st.Peers {
						t.Logf("%s -> %s: %s paths=%d", n, p.Name, p.State, len(p.Paths))
					}
					if n != victim {
						t.Logf("%s netio %+v", n, g.Endpoint().Stats())
						_ = g.Endpoint().Call(context.Background(), func(_ time.Duration, ep *metaroce.Endpoint) {
							t.Logf("%s metaroce %+v conns=%d", n, ep.Stats, len(ep.Conns()))
							for _, c := range ep.Conns() {
								t.Logf("  conn %x peer %d established=%v closed=%v stats=%+v", c.ID(), c.Peer(), c.Established(), c.Closed(), c.Stats)
							}
						})
					}
				}
			}
			rctx, rcancel := context.WithCancel(ctx)
			defer rcancel()
			go tr.receive(rctx)
			// Six flows, and more (bounded) until the victim carries one:
			// flows are spread over the gateways by hashing their ids, so
			// six may all miss it.
			var flows []*host.Flow
			for len(flows) < 6 || (l.Gateways[victim].Status().Flows.Active == 0 && len(flows) < 24) {
				f, err := lab.OpenFlow(ctx, src, lab.RegionB, "trainer-b", host.FlowOptions{}, t.Logf)
				if err != nil {
					t.Fatal(err)
				}
				flows = append(flows, f)
			}
			// Writers keep messages in flight on every flow while the
			// victim dies.
			var wg sync.WaitGroup
			errs := make(chan error, len(flows))
			stop := time.Now().Add(3 * time.Second)
			for i, f := range flows {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rng := rand.New(rand.NewPCG(uint64(i), 9))
					for n := 0; n < 300 && time.Now().Before(stop); n++ {
						if err := tr.send(ctx, f, rng); err != nil {
							errs <- err
							return
						}
					}
				}()
			}
			time.Sleep(time.Second)
			killedAt := time.Now()
			l.Gateways[victim].Close()
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			tr.wait(ctx)
			t.Logf("all messages complete %v after the kill", time.Since(killedAt).Round(time.Millisecond))
			tr.check()

			// Gossip: every survivor sees the victim dead, and routes to
			// the victim's region only through its pair member.
			victimRegion := lab.RegionA
			if victim[:3] == "use" {
				victimRegion = lab.RegionB
			}
			other := lab.RegionB
			if victimRegion == lab.RegionB {
				other = lab.RegionA
			}
			for n, g := range l.Gateways {
				if n == victim {
					continue
				}
				var st region.State
				for ctx.Err() == nil {
					gw, ok := g.Cluster().View().Gateway(victim)
					if ok && !gw.State.Live() {
						st = gw.State
						break
					}
					time.Sleep(20 * time.Millisecond)
				}
				if st.Live() || st == region.Unknown {
					t.Fatalf("%s: gossip still shows %s as %v", n, victim, st)
				}
				if n[:3] == victim[:3] {
					continue // same region: it routes to the other one
				}
				_ = other
				gws, err := g.Cluster().Route(victimRegion)
				if err != nil {
					t.Fatalf("%s: route to %s: %v", n, victimRegion, err)
				}
				if len(gws) != 1 || gws[0].Name == victim {
					t.Fatalf("%s: route to %s = %v, want only the pair member", n, victimRegion, gws)
				}
			}
			if s := src.Stats(); s.Reopens == 0 {
				t.Errorf("no flow was re-opened: the victim carried nothing?")
			} else {
				t.Logf("source host re-opened %d flows", s.Reopens)
			}
		})
	}
}
