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
// opens on it (a large connection: only the new flow, see weighOpened), on
// reload, and at every status snapshot (Options.StatsEvery).

const (
	// weightScale is the round-robin weight of the smallest per-flow
	// share: rounding then keeps every ratio within 1/16 of its value.
	weightScale = 8
	// maxStreamWeight bounds the packets one stream sends per round (a
	// burst of about 1.4 MB at 1400 bytes): per-flow share ratios above
	// maxStreamWeight/weightScale (128) are compressed to it.
	maxStreamWeight = 1024
)

// reweighOnOpenMax is the most flows a connection may carry for an OPEN to
// reweigh all of them. Beyond it a new flow gets its weight from the last
// full reweigh's figures (weighOpened) and the others are reweighed at the
// next status snapshot: reweighing every flow at every OPEN made opening n
// flows cost n² (10,000 flows through one gateway pair: relay.reweigh was
// 25% of the lab's CPU profile).
const reweighOnOpenMax = 256

// weighOpened sets the weight of flow f, just opened on ci: a full
// reweigh while ci is small, else the share it would get with the class
// counts and smallest share of ci's last reweigh (one more active flow of
// its class). The snapshot's reweigh corrects every weight within
// Options.StatsEvery.
func (r *relay) weighOpened(ci *connInfo, f *flow) {
	if ci == nil || ci.dead {
		return
	}
	if len(ci.out) <= reweighOnOpenMax || ci.smallest <= 0 {
		r.reweigh(ci)
		return
	}
	ci.c.SetStreamWeight(f.downStream, openedWeight(r.weight(f.class), ci.counts[f.class], ci.smallest))
	// The next flow of the class opened before the snapshot shares with
	// this one.
	ci.counts[f.class]++
}

// openedWeight is the weight of a flow that just opened in a class of
// weight classWeight with active flows, on a connection whose smallest
// per-flow share was smallest.
func openedWeight(classWeight, active int, smallest float64) int {
	return streamWeight(float64(classWeight)/float64(active+1), smallest)
}

func streamWeight(share, smallest float64) int {
	w := math.Round(weightScale * share / smallest)
	return int(min(max(w, 1), maxStreamWeight))
}

// reweigh sets the stream weight of every flow sent on ci (a WAN
// connection) from its class weight and the active flows of its class.
func (r *relay) reweigh(ci *connInfo) {
	if ci == nil || ci.dead {
		return
	}
	ws, counts, smallest := flowWeights(ci.out, r.weight)
	for stream, w := range ws {
		ci.c.SetStreamWeight(stream, w)
	}
	ci.counts, ci.smallest = counts, smallest
}

// flowWeights computes reweigh's weights of the flows in out (by stream),
// with the active flows per class and the smallest per-flow share (0 with
// no flow).
func flowWeights(out map[uint32]*flow, weight func(class string) int) (map[uint32]int, map[string]int, float64) {
	counts := map[string]int{}
	for _, f := range out {
		if f.state != flowGone && f.active {
			counts[f.class]++
		}
	}
	share := func(f *flow) float64 {
		n := counts[f.class]
		if !f.active {
			n++
		}
		return float64(weight(f.class)) / float64(max(n, 1))
	}
	smallest := math.Inf(1)
	for _, f := range out {
		if f.state != flowGone {
			smallest = min(smallest, share(f))
		}
	}
	ws := make(map[uint32]int, len(out))
	for stream, f := range out {
		if f.state == flowGone {
			continue
		}
		ws[stream] = streamWeight(share(f), smallest)
	}
	if math.IsInf(smallest, 1) {
		smallest = 0
	}
	return ws, counts, smallest
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
