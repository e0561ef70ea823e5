package gateway

import "testing"

// TestRelayPoolKeepsWhatFlowsMayHold: flows that hold their whole credit
// in chunk buffers and give them back find every one in the pool the
// next time, with no allocation, however far beyond minFree that is; once
// the flows end, the pool shrinks back to minFree.
func TestRelayPoolKeepsWhatFlowsMayHold(t *testing.T) {
	const bufSize, credit, flows = 1316, 4 << 20, 4
	r := &relay{bufSize: bufSize, memLimit: 1 << 30, flows: map[uint64]*flow{}}
	fs := make([]*flow, flows)
	for i := range fs {
		fs[i] = &flow{id: uint64(i + 1), reserved: credit, state: flowOpen}
		r.flows[fs[i].id] = fs[i]
		r.reserved += credit
	}
	per := credit / bufSize
	held := make([][]byte, 0, flows*per)
	take := func() {
		for _, f := range fs {
			for range per {
				b := r.get(f, bufSize)
				if b == nil {
					t.Fatalf("flow %d refused a buffer at %d of %d bytes held", f.id, f.held, f.reserved)
				}
				held = append(held, b)
			}
		}
	}
	give := func() {
		for i, b := range held {
			r.put(fs[i/per], b)
		}
		held = held[:0]
	}
	take()
	give()
	if len(r.free) != flows*per || r.inUse != 0 {
		t.Fatalf("pool keeps %d buffers with %d bytes in use, want all %d back", len(r.free), r.inUse, flows*per)
	}
	if allocs := testing.AllocsPerRun(1, func() { take(); give() }); allocs != 0 {
		t.Fatalf("%v allocations taking the credit again, want 0", allocs)
	}
	for _, f := range fs {
		r.teardown(f)
	}
	if len(r.free) != minFree || r.reserved != 0 {
		t.Fatalf("after the flows ended the pool keeps %d buffers (%d reserved), want %d", len(r.free), r.reserved, minFree)
	}
}
