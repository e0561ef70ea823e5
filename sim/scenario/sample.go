package scenario

import (
	"time"

	"github.com/mrgw/mrgw/sim"

	"github.com/mrgw/mrgw/units"
)

// sampler records res's time series every s.Sample of virtual time.
func sampler(sm *sim.Sim, net *sim.Network, s *Setup, res *Result, recv *Node) {
	res.Goodput = make([][]float64, s.Flows)
	res.Rate = make([][]float64, s.Flows)
	prev := make(map[uint64]uint64)
	sm.Every(s.Sample, s.Sample, func(now time.Duration) bool {
		placed := make(map[uint64]uint64)
		for _, c := range recv.EP.Conns() {
			placed[c.ID()] = c.Stats.PayloadBytesPlaced
		}
		res.Times = append(res.Times, now)
		for f, c := range res.Senders {
			g, r := 0.0, 0.0
			if c != nil {
				g = float64(units.Throughput(float64(placed[c.ID()]-prev[c.ID()]), s.Sample.Seconds()))
				r = float64(c.Controller().PacingRate().Bits())
			}
			res.Goodput[f] = append(res.Goodput[f], g)
			res.Rate[f] = append(res.Rate[f], r)
		}
		q := 0
		if res.PlaneQueue == nil {
			res.PlaneQueue = make([][]float64, net.Planes())
		}
		for i := 0; i < net.Planes(); i++ {
			pq := net.Plane(i).AtoB().QueueBytes()
			q = max(q, pq)
			res.PlaneQueue[i] = append(res.PlaneQueue[i], float64(pq))
		}
		res.Queue = append(res.Queue, float64(q))
		prev = placed
		return true
	})
}
