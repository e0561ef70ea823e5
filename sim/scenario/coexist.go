package scenario

import (
	"fmt"
	"time"

	"github.com/mrgw/mrgw/cc"
	"github.com/mrgw/mrgw/internal/report"

	"github.com/mrgw/mrgw/units"
)

// The coexistence scenario is the simulator's copy of `mrgw-lab loadtest
// coexistence` (loadtest/peers/coexist.go): one 200 Mbit/s bottleneck at
// 50 ms with a 1-BDP drop-tail queue that marks CE above a tenth of the
// BDP (5 ms, step marking on the instantaneous queue), shared by the
// connection under test and a classic-ECN flow (cc.NewRenoECN: Reno that
// multiplies its window by 0.7 once per round trip with a mark, as kernel
// cubic with ECN does). The receiver loop is off (the classic flow is no
// mrgw connection, and a receiver that divided its capacity between them
// would hide the question); the mrgw connection knows the line rate, as a
// gateway with wan.max_rate_bps does.

// Coexistence link and run, as the load test's defaults.
const (
	CoexistRateBps  = 200e6
	CoexistRTT      = 50 * time.Millisecond
	CoexistPaths    = 16
	CoexistMTU      = 1400
	CoexistDuration = 40 * time.Second
	CoexistWarmup   = 10 * time.Second
)

// CoexistClassic names the classic-ECN reference flow in rows.
const CoexistClassic = "reno-ecn"

// Coexistence runs the classic-ECN pair (the baseline: what a classic flow
// gets against another), each long-RTT controller against a classic flow
// and each long-RTT controller alone, with ECN marking at 0.1 BDP and
// (variant "drop-tail") without, each with the receiver loop off and on
// (variant ", hints": the mrgw connection's receiver hints it the link's
// capacity, as the real-socket load test's receiver does; the classic
// flow takes no share). Rows carry the shares of the pair; flow 0 is the
// system under test, flow 1 the classic flow.
func Coexistence(o Options) ([]report.Row, error) {
	return coexistence(o, append([]string{CoexistClassic}, LongRTTControllers...), []bool{true, false}, []bool{false, true})
}

// CoexistAlone is the Note of a row where the controller runs alone.
const CoexistAlone = "alone"

// CoexistStalls is how the mrgw sender's driver stalls in the
// coexistence-stalls scenario: the loaded load-test host's stalls, as
// TestCCHostStalls models them (docs/CC.md §7).
var CoexistStalls = HostStalls{Every: 30 * time.Millisecond, Max: 12 * time.Millisecond}

// CoexistenceStalls is the coexistence scenario with the mrgw sender's
// driver stalling (CoexistStalls) and catching up half a round trip
// (metaroce.Config.PacingCatchUp 0.5, as the real-socket load tests run
// it), while the classic flow and the receiver run unstalled, as kernel
// TCP beside a user-space mrgw does. It is the simulator's copy of what
// the real-socket coexistence load test meets on a busy host, and shows
// both targets at once: the classic flow's share against mrgw and mrgw's
// fraction of the link alone. No test asserts the classic flow's target on it: it is not met there
// (docs/CC.md §7, "Coexistence on a host that stalls").
func CoexistenceStalls(o Options) ([]report.Row, error) {
	return coexistenceWith(o, LongRTTControllers, []bool{true, false}, []bool{false, true}, CoexistStalls)
}

// CoexistenceFallback is the coexistence scenario at the marking
// bottleneck with the long-RTT controllers' classic fallback on
// (cc.Params.ClassicFallback), receiver loop off and on: the classic flow's
// share against a sender that answers marks as CUBIC does, and what the
// fallback's headroom costs the sender alone.
func CoexistenceFallback(o Options) ([]report.Row, error) {
	return coexistenceRun(o, LongRTTControllers, []bool{true}, []bool{false, true}, HostStalls{}, true)
}

func coexistence(o Options, flows []string, ecn, hints []bool) ([]report.Row, error) {
	return coexistenceWith(o, flows, ecn, hints, HostStalls{})
}

func coexistenceWith(o Options, flows []string, ecn, hints []bool, stalls HostStalls) ([]report.Row, error) {
	return coexistenceRun(o, flows, ecn, hints, stalls, false)
}

func coexistenceRun(o Options, flows []string, ecn, hints []bool, stalls HostStalls, fallback bool) ([]report.Row, error) {
	rate := o.rateOr(CoexistRateBps)
	rtt := CoexistRTT
	bdp := units.BitRate(rate).Bytes().BytesIn(rtt)
	var rows []report.Row
	var runs []namedRun
	alone := 0
	for _, name := range flows {
		if name != CoexistClassic {
			alone++
		}
	}
	n, i := (len(flows)+alone)*len(ecn)*len(hints), 0
	for _, marking := range ecn {
		for _, hinted := range hints {
			threshold, variant := int(bdp/10), "ECN at 0.1 BDP"
			if !marking {
				threshold, variant = 0, "drop-tail"
			}
			if hinted {
				variant += ", hints"
			}
			if stalls.Every > 0 {
				variant += ", sender stalls"
			}
			if fallback {
				variant += ", classic fallback"
			}
			type run struct {
				name string
				pair bool
			}
			var todo []run
			for _, name := range flows {
				todo = append(todo, run{name, true})
			}
			for _, name := range flows {
				if name != CoexistClassic {
					todo = append(todo, run{name, false})
				}
			}
			for _, ru := range todo {
				i++
				what := ru.name + "+" + CoexistClassic
				if !ru.pair {
					what = ru.name + " " + CoexistAlone
				}
				o.progress(i, n, fmt.Sprintf("coexistence %s %s", variant, what))
				p := cc.Params{LineRate: units.BitRate(rate), BaseRTT: rtt}
				classic := cc.NewRenoECN(p)
				f := classic
				if ru.name != CoexistClassic {
					var err error
					pp := p
					pp.ClassicFallback = fallback
					if f, err = cc.Lookup(ru.name, pp); err != nil {
						return nil, err
					}
				}
				s := Setup{Planes: 1, RateBps: rate, RTT: rtt, Flows: 2, FlowCC: []cc.Factory{f, classic}, FlowPaths: []int{CoexistPaths, 1},
					Paths: CoexistPaths, MTU: CoexistMTU, NoHints: !hinted, QueueBytes: int(bdp), ECNThreshold: threshold,
					FlowNoHint: []bool{ru.name == CoexistClassic, true}, ReceiverCapacityBps: rate,
					Duration: o.scale(CoexistDuration), Warmup: o.scale(CoexistWarmup), Seed: o.Seed + 19, Sample: rtt}
				if stalls.Every > 0 {
					s.HostStalls, s.StallFlows, s.PacingCatchUp = stalls, []bool{ru.name != CoexistClassic, false}, 0.5
				}
				if !ru.pair {
					s.Flows = 1
				}
				r, err := Run(s)
				if err != nil {
					return nil, err
				}
				rw := ccRow("coexistence", variant, s, r)
				rw.CC = what
				rw.Paths = 0
				rw.Note = "flow 0 under test, flow 1 classic ECN (reno, beta 0.7 per marked round trip)"
				if !ru.pair {
					rw.CC, rw.Note = ru.name, CoexistAlone
				}
				rows = append(rows, rw)
				runs = append(runs, namedRun{variant + " " + rw.CC, s, r})
			}
		}
	}
	name := "coexistence"
	switch {
	case stalls.Every > 0:
		name = "coexistence-stalls"
	case fallback:
		name = "coexistence-fallback"
	}
	return rows, o.plot(name, runs)
}
