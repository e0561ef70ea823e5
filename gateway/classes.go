//go:build linux

package gateway

import "math"

// Class fairness (docs/GATEWAY.md, "Fair scheduling").
//
// scheduler.classes weighs classes, not flows: a class of weight 3 gets
// three times the WAN capacity of a class of weight 1 on a connection where
// both have data to send, however many flows each has. The connection's
// scheduler (metaroce) is a weighted round robin over streams, so each
// flow's stream gets its class's weight divided among the class's active
// flows on that connection (flows with bytes held here, that relayed
// bytes since the last reweigh, or that just opened), scaled so that the smallest per-flow share is
// weightScale packets per round. Idle flows are weighed as one more active
// flow of their class, so that one that starts sending is not favoured
// before the next reweigh. The relay reweighs a connection when a flow
// opens on it, on reload, and at every status snapshot (Options.StatsEvery).

const (
	// weightScale is the round-robin weight of the smallest per-flow
	// share: rounding then keeps every ratio within 1/16 of its value.
	weightScale = 8
	// maxStreamWeight bounds the packets one stream sends per round (a
	// burst of about 1.4 MB at 1400 bytes): per-flow share ratios above
	// maxStreamWeight/weightScale (128) are compressed to it.
	maxStreamWeight = 1024
)

// reweigh sets the stream weight of every flow sent on ci (a WAN
// connection) from its class weight and the active flows of its class.
func (r *relay) reweigh(ci *connInfo) {
	if ci == nil || ci.dead {
		return
	}
	counts := map[string]int{}
	for _, f := range ci.out {
		if f.state != flowGone && f.active {
			counts[f.class]++
		}
	}
	share := func(f *flow) float64 {
		n := counts[f.class]
		if !f.active {
			n++
		}
		return float64(r.weight(f.class)) / float64(max(n, 1))
	}
	smallest := math.Inf(1)
	for _, f := range ci.out {
		if f.state != flowGone {
			smallest = min(smallest, share(f))
		}
	}
	for stream, f := range ci.out {
		if f.state == flowGone {
			continue
		}
		w := math.Round(weightScale * share(f) / smallest)
		ci.c.SetStreamWeight(stream, int(min(max(w, 1), maxStreamWeight)))
	}
}

// markActivity records which flows sent on ci hold bytes or relayed bytes
// since the last call, then reweighs ci.
func (r *relay) markActivity(ci *connInfo) {
	for _, f := range ci.out {
		// Bytes held here are waiting to be sent or acknowledged: the
		// flow has work even if its source is waiting for credit.
		f.active = f.held > 0 || f.bytes != f.lastBytes
		f.lastBytes = f.bytes
	}
	r.reweigh(ci)
}
