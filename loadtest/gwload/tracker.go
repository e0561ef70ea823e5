//go:build linux

package gwload

import (
	"sync"
	"sync/atomic"

	"github.com/mrgw/mrgw/host"
)

// tracker counts deliveries and completions.
type tracker struct {
	total atomic.Uint64 // bytes delivered to applications

	mu        sync.Mutex
	seen      map[[2]uint64]uint8 // (flow, seq) -> deliveries
	perFlow   map[uint64]uint64   // flow -> bytes delivered
	dups      int64
	completed []msgRange // messages the sources saw complete
	failed    int
	errs      []string
}

type msgRange struct {
	flow, first uint64
	n           int
}

func newTracker() *tracker {
	return &tracker{seen: map[[2]uint64]uint8{}, perFlow: map[uint64]uint64{}}
}

func (t *tracker) deliver(d host.Delivery) {
	t.total.Add(d.Len)
	t.mu.Lock()
	k := [2]uint64{d.Flow, d.Seq}
	if c := t.seen[k]; c > 0 {
		t.dups++
	}
	if t.seen[k] < 255 {
		t.seen[k]++
	}
	t.perFlow[d.Flow] += d.Len
	t.mu.Unlock()
}

func (t *tracker) done(flow uint64, p *host.Pending, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err != nil {
		t.failed++
		t.addErr(err.Error())
		return
	}
	first, n := p.Seqs()
	t.completed = append(t.completed, msgRange{flow, first, n})
}

// fail counts a message that could not be written.
func (t *tracker) fail(e string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.failed++
	t.addErr(e)
}

func (t *tracker) addErr(e string) {
	if len(t.errs) < 10 {
		t.errs = append(t.errs, e)
	}
}

// lost counts completed messages with a segment never delivered.
func (t *tracker) lost() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	var n int64
	for _, m := range t.completed {
		for s := range m.n {
			if t.seen[[2]uint64{m.flow, m.first + uint64(s)}] == 0 {
				n++
				break
			}
		}
	}
	return n
}
