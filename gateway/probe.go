//go:build linux

package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/mrgw/mrgw/units"

	"github.com/mrgw/mrgw/metaroce"
)

// Active measurement of the WAN towards a region (`mrgw probe`, admin
// GET /probe): over the sealed WAN connection to each of the region's
// gateways, a few rounds of small probes on every path (metaroce
// Conn.Measure), answered by the peer's MetaRoCE stack without state;
// then per plane: RTT, loss, ECN marking, the usable MTU path MTU
// discovery validated, and how many distinct ECMP paths the planes'
// source ports reached.
//
// Which ECMP path a source port takes is the fabric's secret. Through the
// loopback emulator it is known (Options.ECMPLane: netem's hash), and the
// count is exact ("emulator"). In production the probe counts distinct
// RTT signatures among the paths ("rtt-signature": paths whose minimum
// RTTs differ by more than the larger of 100 µs and 2% took different
// routes): a lower bound, since routes of equal delay look alike.

// ProbeOptions configure a probe; zero values take the defaults.
type ProbeOptions struct {
	Region string        // peers of this region; "" means every peer
	Rounds int           // probes per path [20]
	Every  time.Duration // between rounds [50 ms]
	Size   int           // probe packet bytes [64]
	// Wait bounds the wait for late answers after the last round [2 s].
	Wait time.Duration
}

// Probe limits (the admin endpoint refuses more).
const (
	MaxProbeRounds = 200
	MaxProbeTime   = 20 * time.Second
)

// ProbeResult is what a probe measured.
type ProbeResult struct {
	Node   string      `json:"node"`
	Region string      `json:"region,omitempty"`
	Took   float64     `json:"took_seconds"`
	Peers  []PeerProbe `json:"peers"`
}

// PeerProbe is one peer gateway's planes.
type PeerProbe struct {
	Name   string       `json:"name"`
	Region string       `json:"region"`
	State  string       `json:"state"`
	Planes []PlaneProbe `json:"planes,omitempty"`
}

// PlaneProbe is one plane towards one peer.
type PlaneProbe struct {
	Plane string `json:"plane"`
	// Paths is how many paths (distinct source ports) were probed.
	Paths    int     `json:"paths"`
	Sent     uint64  `json:"probes_sent"`
	Answered uint64  `json:"probes_answered"`
	Loss     float64 `json:"loss"`
	// ECN is the fraction of answered probes that arrived CE-marked.
	ECN    float64 `json:"ecn_marked"`
	RTTMin float64 `json:"rtt_min_ms"`
	RTTAvg float64 `json:"rtt_avg_ms"`
	RTTMax float64 `json:"rtt_max_ms"`
	// PMTU is the path MTU discovery's validated size (IP packet bytes),
	// PMTUState its state, Data whether data uses the plane.
	PMTU      int    `json:"pmtu_bytes"`
	PMTUState string `json:"pmtu_state"`
	Data      bool   `json:"carries_data"`
	// ECMPPaths is how many distinct ECMP paths the source ports reached,
	// found by ECMPMethod ("emulator" or "rtt-signature").
	ECMPPaths  int    `json:"ecmp_paths"`
	ECMPMethod string `json:"ecmp_method"`
}

var errProbeBusy = errors.New("a probe is already running")

var probeMu sync.Mutex // one probe at a time per process

// Probe measures the WAN towards opts.Region (see the comment above).
func (g *Gateway) Probe(ctx context.Context, opts ProbeOptions) (ProbeResult, error) {
	if opts.Rounds <= 0 {
		opts.Rounds = 20
	}
	if opts.Every <= 0 {
		opts.Every = 50 * time.Millisecond
	}
	if opts.Size <= 0 {
		opts.Size = 64
	}
	if opts.Wait <= 0 {
		opts.Wait = 2 * time.Second
	}
	if opts.Rounds > MaxProbeRounds || time.Duration(opts.Rounds)*opts.Every > MaxProbeTime || opts.Size > 1200 {
		return ProbeResult{}, fmt.Errorf("probe: at most %d rounds, %v in all, 1200-byte probes", MaxProbeRounds, MaxProbeTime)
	}
	if !probeMu.TryLock() {
		return ProbeResult{}, errProbeBusy
	}
	defer probeMu.Unlock()
	start := time.Now()
	res := ProbeResult{Node: g.Config().Node.Name, Region: opts.Region}
	var peers []*wanPeer
	for _, p := range g.peerList() {
		if opts.Region == "" || p.region == opts.Region {
			peers = append(peers, p)
		}
	}
	if len(peers) == 0 {
		return res, fmt.Errorf("probe: no peer gateway in region %q", opts.Region)
	}
	conns := map[*wanPeer]*metaroce.Conn{}
	if err := g.ep.Call(ctx, func(now time.Duration, _ *metaroce.Endpoint) {
		for _, p := range peers {
			if ci := p.conn; ci != nil && ci.up && !ci.dead {
				ci.c.Measure(now, opts.Rounds, opts.Every, opts.Size)
				conns[p] = ci.c
			}
		}
	}); err != nil {
		return res, err
	}
	// Wait for the rounds, then for the answers (bounded).
	deadline := time.Now().Add(time.Duration(opts.Rounds)*opts.Every + opts.Wait)
	for len(conns) > 0 {
		done := true
		if err := g.ep.Call(ctx, func(time.Duration, *metaroce.Endpoint) {
			for _, c := range conns {
				ms, sent := c.Measurement()
				if !sent {
					done = false
					continue
				}
				for _, m := range ms {
					if m.Acked < m.Sent {
						done = false
					}
				}
			}
		}); err != nil {
			return res, err
		}
		if done || time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	err := g.ep.Call(ctx, func(_ time.Duration, _ *metaroce.Endpoint) {
		for _, p := range peers {
			pp := PeerProbe{Name: p.name, Region: p.region, State: "down"}
			p.mu.Lock()
			if p.state != "" {
				pp.State = p.state
			}
			p.mu.Unlock()
			if c := conns[p]; c != nil {
				pp.Planes = g.probePlanes(p, c)
			}
			res.Peers = append(res.Peers, pp)
		}
	})
	res.Took = time.Since(start).Seconds()
	return res, err
}

// probePlanes aggregates c's measurement per plane. Owner goroutine.
func (g *Gateway) probePlanes(p *wanPeer, c *metaroce.Conn) []PlaneProbe {
	ms, _ := c.Measurement()
	n := max(len(g.planes), 1)
	pmtu := g.pmtuStatus(p, c)
	out := make([]PlaneProbe, n)
	lanes := make([]map[int]bool, n)
	minRTTs := make([][]time.Duration, n)
	var sum = make([]time.Duration, n)
	for k := range out {
		out[k].Plane = g.planeName(k)
		out[k].ECMPMethod = "rtt-signature"
		if g.opts.ECMPLane != nil {
			out[k].ECMPMethod = "emulator"
		}
		lanes[k] = map[int]bool{}
		if k < len(pmtu) {
			out[k].PMTU, out[k].PMTUState, out[k].Data = pmtu[k].PMTU, pmtu[k].State, pmtu[k].Data
		}
	}
	for _, m := range ms {
		if m.Sent == 0 {
			continue
		}
		k := m.Path % n
		pp := &out[k]
		pp.Paths++
		pp.Sent += m.Sent
		pp.Answered += m.Acked
		pp.ECN += float64(m.CE)
		sum[k] += m.SumRTT
		if m.Acked > 0 {
			if pp.RTTMin == 0 || units.Ms(m.MinRTT) < pp.RTTMin {
				pp.RTTMin = units.Ms(m.MinRTT)
			}
			pp.RTTMax = max(pp.RTTMax, units.Ms(m.MaxRTT))
			minRTTs[k] = append(minRTTs[k], m.MinRTT)
		}
		if g.opts.ECMPLane != nil && m.Acked > 0 {
			src, ok := g.ep.PathAddr(p.id, m.Entropy)
			if _, dests := p.addrs(); ok && len(dests) > 0 {
				lanes[k][g.opts.ECMPLane(src, dests[m.Path%len(dests)])] = true
			}
		}
	}
	for k := range out {
		pp := &out[k]
		if pp.Sent > 0 {
			pp.Loss = 1 - float64(pp.Answered)/float64(pp.Sent)
		}
		if pp.Answered > 0 {
			pp.ECN /= float64(pp.Answered)
			pp.RTTAvg = units.Ms(sum[k] / time.Duration(pp.Answered))
		}
		if g.opts.ECMPLane != nil {
			pp.ECMPPaths = len(lanes[k])
		} else {
			pp.ECMPPaths = rttSignatures(minRTTs[k])
		}
	}
	return out
}

// rttSignatures counts the distinct minimum RTTs: sorted, a new signature
// starts where one exceeds the previous by more than max(100 µs, 2%).
func rttSignatures(rtts []time.Duration) int {
	if len(rtts) == 0 {
		return 0
	}
	slices.Sort(rtts)
	n := 1
	last := rtts[0]
	for _, r := range rtts[1:] {
		if r-last > max(100*time.Microsecond, last/50) {
			n++
			last = r
		}
	}
	return n
}

// probeHandler serves GET /probe?region=R&rounds=N&every=D&size=B.
func (g *Gateway) probeHandler(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	opts := ProbeOptions{Region: q.Get("region")}
	var err error
	if s := q.Get("rounds"); s != "" {
		if opts.Rounds, err = strconv.Atoi(s); err != nil {
			http.Error(w, "rounds: "+err.Error(), http.StatusBadRequest)
			return
		}
	}
	if s := q.Get("every"); s != "" {
		if opts.Every, err = time.ParseDuration(s); err != nil {
			http.Error(w, "every: "+err.Error(), http.StatusBadRequest)
			return
		}
	}
	if s := q.Get("size"); s != "" {
		if opts.Size, err = strconv.Atoi(s); err != nil {
			http.Error(w, "size: "+err.Error(), http.StatusBadRequest)
			return
		}
	}
	ctx, cancel := context.WithTimeout(r.Context(), MaxProbeTime+5*time.Second)
	defer cancel()
	res, err := g.Probe(ctx, opts)
	switch {
	case errors.Is(err, errProbeBusy):
		http.Error(w, err.Error(), http.StatusTooManyRequests)
		return
	case err != nil:
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	writeJSON(w, res)
}

// ECMPLaneOf is the type of Options.ECMPLane.
type ECMPLaneOf = func(src, dst netip.AddrPort) int
