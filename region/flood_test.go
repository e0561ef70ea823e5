package region

import (
	"bytes"
	"context"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/ipv4"
)

// flooder sends junk datagrams at a gossip port over loopback from a few
// source ports. Every loop is bounded: at most max datagrams, and never
// past until.
type flooder struct {
	sent atomic.Uint64
	done chan struct{}
}

// junkPool is junk the way an attacker without the key would write it:
// half of it random bytes of random length, half shaped like memberlist's
// encrypted packets (version byte 1, then nonce, ciphertext and tag) so
// that it cannot be told from real gossip without trying the keys. Made
// once: generating it per datagram would cost the senders more CPU than
// the sending (many times more under the race detector).
func junkPool(n int) [][]byte {
	r := rand.New(rand.NewPCG(1, 42))
	pool := make([][]byte, n)
	for i := range pool {
		b := make([]byte, 1+r.IntN(1200))
		for j := range b {
			b[j] = byte(r.Uint32())
		}
		if i%2 == 0 && len(b) > 40 {
			b[0] = 1
		}
		pool[i] = b
	}
	return pool
}

// flood sends, from one goroutine, at most limit junk datagrams to target
// over loopback before until, in batches of 32 rotating among sources
// sockets (source ports), at most rate datagrams a second (0: as fast as
// it can). One goroutine: on a small machine several would starve the
// receiver of CPU, which is no test of how it copes with junk.
func flood(t *testing.T, target string, sources int, limit uint64, rate float64, until time.Time) *flooder {
	t.Helper()
	raddr, err := net.ResolveUDPAddr("udp4", target)
	if err != nil {
		t.Fatal(err)
	}
	if !raddr.IP.IsLoopback() {
		t.Fatalf("flood target %s is not loopback", target)
	}
	f := &flooder{done: make(chan struct{})}
	pool := junkPool(4096)
	var pcs []*ipv4.PacketConn
	for range sources {
		conn, err := net.DialUDP("udp4", nil, raddr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		pcs = append(pcs, ipv4.NewPacketConn(conn))
	}
	go func() {
		defer close(f.done)
		const batch = 32
		msgs := make([]ipv4.Message, batch)
		begin := time.Now()
		next := 0
		for sent := uint64(0); sent < limit; {
			now := time.Now()
			if !now.Before(until) {
				return
			}
			if rate > 0 {
				if ahead := time.Duration(float64(sent)/rate*float64(time.Second)) - now.Sub(begin); ahead > 0 {
					time.Sleep(ahead)
				}
			}
			k := min(batch, int(limit-sent))
			for i := range k {
				msgs[i].Buffers = [][]byte{pool[next%len(pool)]}
				next++
			}
			n, err := pcs[next/batch%len(pcs)].WriteBatch(msgs[:k], 0)
			sent += uint64(max(n, 0))
			f.sent.Store(sent)
			if err != nil {
				// ECONNREFUSED after an ICMP error: keep going.
				time.Sleep(time.Millisecond)
			}
		}
	}()
	return f
}

// watchDeaths records every change of name to a state that is not live,
// on every cluster in cs.
func watchDeaths(t *testing.T, name string, cs ...*Cluster) func() []Change {
	var mu sync.Mutex
	var bad []Change
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, c := range cs {
		ch, stop := c.WatchChanges(256)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer stop()
			for {
				select {
				case <-ctx.Done():
					return
				case ch, ok := <-ch:
					if !ok {
						return
					}
					if ch.Name == name && !ch.To.Live() {
						mu.Lock()
						bad = append(bad, ch)
						mu.Unlock()
					}
				}
			}
		}()
	}
	t.Cleanup(func() { cancel(); wg.Wait() })
	return func() []Change {
		mu.Lock()
		defer mu.Unlock()
		return append([]Change(nil), bad...)
	}
}

// A flood of junk at one gateway's gossip port must not make it look dead
// to the others (issue 13 item 4).
func TestGossipFloodDoesNotFakeDeath(t *testing.T) {
	key := bytes.Repeat([]byte{7}, 32)
	var cs []*Cluster
	for _, n := range []string{"a1", "b1", "c1"} {
		c := start(t, testConfig(n, n[:1], key))
		if len(cs) > 0 {
			join(t, c, cs[0])
		}
		cs = append(cs, c)
	}
	for _, c := range cs {
		for _, o := range cs {
			waitState(t, c, o.Name(), Alive)
		}
	}
	victim := cs[0]
	deaths := watchDeaths(t, victim.Name(), cs[1:]...)

	const total, rate = 150_000, 25_000
	begin := time.Now()
	f := flood(t, victim.Addr(), 4, total, rate, begin.Add(20*time.Second))
	<-f.done
	took := time.Since(begin)
	t.Logf("sent %d junk datagrams in %s (%.0f/s)", f.sent.Load(), took.Round(time.Millisecond), float64(f.sent.Load())/took.Seconds())
	// A death is declared at most the suspicion timeout after the last
	// failed probe; watch well past it.
	time.Sleep(3 * time.Second)
	for _, c := range cs {
		st := c.Stats()
		t.Logf("%s: accepted %d dropped %v refused %v", c.Name(), st.DatagramsAccepted, st.DatagramsDropped, st.Refused)
	}
	if d := deaths(); len(d) > 0 {
		t.Fatalf("the flooded gateway was declared not live %d times: %+v", len(d), d)
	}
}
