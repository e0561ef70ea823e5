package sim

import (
	"slices"
	"testing"
	"time"
)

// outcome is everything observable about a run.
type outcome struct {
	trace []rec
	links []LinkStats
	sim   Stats
}

// busyScenario runs three senders over four lossy, ECN-marking, drop-tail planes with an
// outage and a rate change: every random and every ordering decision of the core is exercised.
func busyScenario(seed uint64) outcome {
	s := New(Config{Seed: seed})
	cfg := LinkConfig{Rate: 1e9, Delay: 200 * us, QueueLimit: 20_000, ECNThreshold: 5_000, Loss: 0.02}
	n := NewNetwork(s, NetworkConfig{Planes: 4, AtoB: cfg, BtoA: cfg, Overhead: 42})
	snk := &sink{}
	for i := 0; i < 3; i++ {
		// Together 3 × 1000 B every 6µs = 4 Gbit/s: the planes fill up.
		n.AddHost(SiteA, &pacer{dst: 4, srcPort: uint16(1000 + i), dstPort: 4791, size: 1000, ect: i != 1,
			interval: 6 * us, count: 5000, start: time.Duration(i) * us}, HostConfig{Uplink: LinkConfig{Rate: 10e9}})
	}
	n.AddHost(SiteB, snk, HostConfig{Downlink: LinkConfig{Rate: 10e9, QueueLimit: 50_000}})
	n.Plane(n.PlaneOf(1, 4, 1000, 4791)).ScheduleOutage(5*ms, 12*ms)
	n.Plane(n.PlaneOf(2, 4, 1001, 4791)).AtoB().ScheduleRate(8*ms, 2e9)
	s.Run(100 * ms)
	o := outcome{trace: snk.got, sim: s.Stats()}
	for i := 0; i < n.Planes(); i++ {
		o.links = append(o.links, n.Plane(i).AtoB().Stats())
	}
	for _, h := range n.Hosts() {
		o.links = append(o.links, h.Uplink().Stats(), h.Downlink().Stats())
	}
	return o
}

func TestSameSeedSameRun(t *testing.T) {
	a, b := busyScenario(11), busyScenario(11)
	if !slices.Equal(a.trace, b.trace) || !slices.Equal(a.links, b.links) || a.sim != b.sim {
		t.Fatal("two runs with the same seed differ")
	}
	// The scenario must really exercise losses, marks, queue drops and the outage.
	var lost, marked, full, down uint64
	for _, l := range a.links {
		lost += l.DroppedLoss
		marked += l.MarkedCE
		full += l.DroppedQueue
		down += l.DroppedDown
	}
	if lost == 0 || marked == 0 || full == 0 || down == 0 || len(a.trace) == 0 {
		t.Errorf("scenario too tame: lost %d, marked %d, queue drops %d, down drops %d, delivered %d",
			lost, marked, full, down, len(a.trace))
	}
}

func TestDifferentSeedDifferentLosses(t *testing.T) {
	a, c := busyScenario(11), busyScenario(12)
	if slices.Equal(a.trace, c.trace) {
		t.Fatal("different seeds gave the same run")
	}
	// Same traffic, different dice: the totals are close, the datagrams lost are not the same.
	lost := func(o outcome) uint64 {
		var n uint64
		for _, l := range o.links {
			n += l.DroppedLoss
		}
		return n
	}
	la, lc := lost(a), lost(c)
	if la == 0 || lc == 0 || la > 2*lc || lc > 2*la {
		t.Errorf("losses %d and %d", la, lc)
	}
}
