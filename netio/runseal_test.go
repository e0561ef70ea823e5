//go:build linux

package netio

import (
	"sync/atomic"
	"testing"

	"github.com/mrgw/mrgw/netio/seal"
)

// runSealPair is a sealPair that is also a RunSealer, counting how the
// senders take their counters.
type runSealPair struct {
	*sealPair
	seals, reserves, reserved atomic.Uint64
}

func (r *runSealPair) Seal(dst, pt []byte) ([]byte, error) {
	r.seals.Add(1)
	return r.sealPair.Seal(dst, pt)
}

func (r *runSealPair) Reserve(run *seal.Run, n int) int {
	r.reserves.Add(1)
	got := r.s.Reserve(run, n)
	r.reserved.Add(uint64(got))
	return got
}

func newRunSealers(t *testing.T) (a, b *runSealPair) {
	sa, sb := newSealers(t)
	return &runSealPair{sealPair: sa}, &runSealPair{sealPair: sb}
}

// TestSendersSealFromRuns: with a RunSealer, each sender reserves its
// batch's counters at once (one reservation per batch, not one counter
// per datagram on a line both senders write) and the transfer is the same:
// every message lands byte-exact, the peer opens every datagram, and no
// counter is wasted (every reserved counter sealed a datagram that left).
func TestSendersSealFromRuns(t *testing.T) {
	ctx := testCtx(t)
	sa, sb := newRunSealers(t)
	p := newPair(t, sa, sb, nil)
	p.transfer(t, ctx, 200, 20000)
	// Closed first, so that no datagram (an ack, a probe) leaves between
	// reading the endpoint's counters and the sealer's: the comparison
	// below was off by the few that did.
	p.a.Close()
	st := p.a.Stats()
	if n := sa.seals.Load(); n != 0 {
		t.Errorf("%d datagrams took their counter one at a time (Seal), want 0", n)
	}
	res, got := sa.reserves.Load(), sa.reserved.Load()
	t.Logf("a sent %d datagrams in %d writes; %d reservations for %d counters", st.TxDatagrams, st.TxWrites, res, got)
	if res == 0 || res > st.TxWrites {
		t.Errorf("%d reservations for %d batched writes: want one per batch at most", res, st.TxWrites)
	}
	if got != st.TxDatagrams+st.SealErrors {
		t.Errorf("%d counters reserved for %d datagrams sent", got, st.TxDatagrams)
	}
	if got <= 2*res {
		t.Errorf("%d counters in %d reservations: runs of two datagrams or fewer", got, res)
	}
	if bs := p.b.Stats(); bs.Dropped() != 0 {
		t.Errorf("b dropped %d datagrams", bs.Dropped())
	}
}
