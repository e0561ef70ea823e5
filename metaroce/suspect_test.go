package metaroce

import (
	"testing"

	"github.com/mrgw/mrgw/cc"
	"github.com/mrgw/mrgw/pathmgr"
)

// TestSuspectPathRejoinsTheSplit: under a controller that splits its rate
// (cc.Splitter), a path that times out once is sent its share again and
// comes back up on the ack of its data. The weighted sprayer used to send
// a suspect path only what the up paths had no room for, which under a
// split is nothing (here 0 of 330 packets in the four round trips after
// the timeout), while the controller counted its share (docs/CC.md §2,
// "Suspect paths").
func TestSuspectPathRejoinsTheSplit(t *testing.T) {
	fixed := cc.NewFixed(16<<20, 2e9) // windows far above what pacing puts in flight
	split := func(paths, size int) cc.Controller { return splitFixed{fixed(paths, size)} }
	p := newBenchPipeCC(t, 1316, split)
	for range 4 * benchDelay {
		p.round()
	}
	const path = 3
	p.conn.onPTO(p.now, path) // what a tail loss's probe timeout does
	if s := p.conn.paths.Paths[path].State; s != pathmgr.Suspect {
		t.Fatalf("path %d is %v after a timeout, want suspect", path, s)
	}
	sentAll := func() (n uint64) {
		for i := range p.conn.paths.Paths {
			n += p.conn.paths.Paths[i].SentPackets
		}
		return n
	}
	sent, all := p.conn.paths.Paths[path].SentPackets, sentAll()
	for range 4 * benchDelay {
		p.round()
	}
	ps := &p.conn.paths.Paths[path]
	got, total := ps.SentPackets-sent, sentAll()-all
	var wsum float64
	for i := range p.conn.paths.Paths {
		wsum += splitFixed{}.SplitWeight(i)
	}
	share := splitFixed{}.SplitWeight(path) / wsum
	t.Logf("path %d: %v, %d of the %d packets sent in the four round trips after its timeout (its share %.0f)", path, ps.State, got, total, share*float64(total))
	if ps.State != pathmgr.Up {
		t.Errorf("path %d is %v four round trips after its timeout, want up again", path, ps.State)
	}
	if float64(got) < share*float64(total)/2 {
		t.Errorf("path %d was sent %d of %d packets in the four round trips after its timeout, want about its share, %.0f", path, got, total, share*float64(total))
	}
}
