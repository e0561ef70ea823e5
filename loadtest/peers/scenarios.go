//go:build linux

package peers

import (
	"context"
	"fmt"
	"time"

	"github.com/mrgw/mrgw/internal/report"
)

// runPoint measures every peer at one link setting and returns their rows
// (mrgw ratios filled in). TUN peers that cannot run are skipped and noted
// in sk.
func runPoint(ctx context.Context, scenario string, o *Options, l Link, ps []Peer, i *int, n int, sk *skipped) ([]report.Row, error) {
	var group []report.Row
	for _, p := range ps {
		*i++
		o.progress(*i, n, fmt.Sprintf("%s %s planes=%d rtt=%v loss=%g", scenario, p, l.Planes, l.RTT, l.Loss))
		if (needsTUN(p.System) || o.tunnelOnTUN(p.System)) && sk.err != nil {
			continue // already known to be unavailable
		}
		oo := *o
		if p.System == MRGW && p.Streams < 0 {
			oo.MRGWCC = o.MRGWExtraCC
		}
		rctx := o.record(ctx, scenario, l.group(), p.String())
		r, err := Bulk(rctx, Peer{p.System, max(p.Streams, 0)}, l, o.Warmup, o.Duration, oo)
		if sk.add(err) {
			continue
		}
		if err != nil {
			return group, fmt.Errorf("peers: %s %s: %w", scenario, p, err)
		}
		rw := row(scenario, Peer{p.System, max(p.Streams, 0)}, l, r)
		if p.System == MRGW {
			rw.Paths = o.Paths
		}
		if r.PlanesUsed > 0 && l.Planes > 1 {
			rw.Note = fmt.Sprintf("A->B flows on %d of %d planes", r.PlanesUsed, l.Planes)
		}
		if p.System == MRGW && p.Streams < 0 {
			rw.Variant = "extra-cc"
			rw.Note = report.JoinNote(rw.Note, "not the production controller; no mrgw_ratio")
		}
		group = append(group, rw)
	}
	setRatios(group)
	return group, nil
}

// group names a link setting in plots: "1 plane, rtt 50ms, loss 1%".
func (l Link) group() string {
	planes := "1 plane"
	if l.Planes != 1 {
		planes = fmt.Sprintf("%d planes", l.Planes)
	}
	return fmt.Sprintf("%s, rtt %v, loss %s", planes, l.RTT, report.FormatPercent(l.Loss))
}

// peersWithExtra adds the extra mrgw variant (Streams -1 marks it) after mrgw.
func (o *Options) peersWithExtra(ps []Peer) []Peer {
	if o.MRGWExtraCC == "" || o.MRGWExtraCC == o.MRGWCC {
		return ps
	}
	var out []Peer
	for _, p := range ps {
		out = append(out, p)
		if p.System == MRGW {
			out = append(out, Peer{MRGW, -1})
		}
	}
	return out
}

// finish returns rows with the skip error (nil if nothing was skipped).
func finish(rows []report.Row, err error, sk *skipped) ([]report.Row, error) {
	if err != nil {
		return rows, err
	}
	if sk.err != nil {
		return rows, fmt.Errorf("peers: TUN rows (tcp, quic) skipped: %w", sk.err)
	}
	return rows, nil
}

// LossSweep measures every selected system on one plane of CapacityBps at
// each RTT and random-loss rate (loss after the queue, so the ceiling at
// loss p is (1-p) of capacity less headers). Duration: (Warmup + Duration
// + ~0.5 s set-up) per system per point: with the defaults, 8 systems × 15
// points × ~8.5 s ≈ 17 minutes; at one RTT about 6 minutes.
func LossSweep(ctx context.Context, o Options) ([]report.Row, error) {
	o = o.withDefaults()
	ps := o.peersWithExtra(o.peers())
	n := len(o.RTTs) * len(o.Losses) * len(ps)
	i := 0
	var rows []report.Row
	var sk skipped
	lossFree := map[string]float64{}
	for _, rtt := range o.RTTs {
		for _, loss := range o.Losses {
			l := o.link(1, o.CapacityBps, rtt, loss)
			group, err := runPoint(ctx, "peers-loss-sweep", &o, l, ps, &i, n, &sk)
			for k := range group {
				key := fmt.Sprintf("%s/%s/%d/%v", group[k].System, group[k].CC, group[k].Streams, rtt)
				if loss == 0 {
					lossFree[key] = group[k].GoodputBps
				}
				if f := lossFree[key]; f > 0 {
					group[k].RelLossFree = group[k].GoodputBps / f
				}
			}
			rows = append(rows, group...)
			if err != nil {
				return finish(rows, err, &sk)
			}
		}
	}
	return finish(rows, nil, &sk)
}

// PlaneCounts is the planes scenario's grid.
var PlaneCounts = []int{1, 2, 4, 8}

// Planes measures the systems over 1, 2, 4 and 8 planes behind ECMP that
// share CapacityBps evenly (so every row has the same capacity), at the
// first of Options.RTTs (default 50 ms here) and no loss. Each TCP stream
// and each QUIC or kcp connection is one 5-tuple, hashed onto one plane;
// mrgw sprays its paths (distinct source ports) over all of them. Only
// the 8-stream TCP variants run. Efficiency is the fraction of capacity
// relative to the same system's on one plane. Duration: (Warmup + Duration
// + ~0.5 s) per system per plane count: about 4.5 minutes with defaults.
func Planes(ctx context.Context, o Options) ([]report.Row, error) {
	if len(o.RTTs) == 0 {
		o.RTTs = []time.Duration{50 * time.Millisecond}
	}
	if len(o.TCPStreams) == 0 {
		o.TCPStreams = []int{8}
	}
	o = o.withDefaults()
	ps := o.peersWithExtra(o.peers())
	n := len(PlaneCounts) * len(ps)
	i := 0
	var rows []report.Row
	var sk skipped
	one := map[string]float64{}
	for _, planes := range PlaneCounts {
		l := o.link(planes, o.CapacityBps, o.RTTs[0], 0)
		group, err := runPoint(ctx, "peers-planes", &o, l, ps, &i, n, &sk)
		for k := range group {
			key := fmt.Sprintf("%s/%s/%d", group[k].System, group[k].CC, group[k].Streams)
			if planes == 1 {
				one[key] = group[k].Fraction
			}
			if f := one[key]; f > 0 {
				group[k].Efficiency = group[k].Fraction / f
			}
		}
		rows = append(rows, group...)
		if err != nil {
			return finish(rows, err, &sk)
		}
	}
	return finish(rows, nil, &sk)
}
