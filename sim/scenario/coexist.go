package scenario

import (
	"fmt"
	"time"

	"github.com/mrgw/mrgw/cc"
	"github.com/mrgw/mrgw/internal/report"

	"github.com/mrgw/mrgw/units"
)

// The coexistence scenario is the simulator's copy of `mrgw loadtest
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
// gets against another) and each long-RTT controller against a classic
// flow, with ECN marking at 0.1 BDP and (variant "drop-tail") without.
// Rows carry the shares of the pair; flow 0 is the system under test,
// flow 1 the classic flow.
func Coexistence(o Options) ([]report.Row, error) {
	return coexistence(o, append([]string{CoexistClassic}, LongRTTControllers...), []bool{true, false})
}

func coexistence(o Options, flows []string, ecn []bool) ([]report.Row, error) {
	rate := o.rateOr(CoexistRateBps)
	rtt := CoexistRTT
	bdp := units.BitRate(rate).Bytes().BytesIn(rtt)
	var rows []report.Row
	var runs []namedRun
	n, i := len(flows)*len(ecn), 0
	for _, marking := range ecn {
		threshold, variant := int(bdp/10), "ECN at 0.1 BDP"
		if !marking {
			threshold, variant = 0, "drop-tail"
		}
		for _, name := range flows {
			i++
			o.progress(i, n, fmt.Sprintf("coexistence %s %s+%s", variant, name, CoexistClassic))
			p := cc.Params{LineRate: units.BitRate(rate), BaseRTT: rtt}
			classic := cc.NewRenoECN(p)
			f := classic
			if name != CoexistClassic {
				var err error
				if f, err = cc.Lookup(name, p); err != nil {
					return nil, err
				}
			}
			s := Setup{Planes: 1, RateBps: rate, RTT: rtt, Flows: 2, FlowCC: []cc.Factory{f, classic}, FlowPaths: []int{CoexistPaths, 1},
				Paths: CoexistPaths, MTU: CoexistMTU, NoHints: true, QueueBytes: int(bdp), ECNThreshold: threshold,
				Duration: o.scale(CoexistDuration), Warmup: o.scale(CoexistWarmup), Seed: o.Seed + 19, Sample: rtt}
			r, err := Run(s)
			if err != nil {
				return nil, err
			}
			rw := ccRow("coexistence", variant, s, r)
			rw.CC = name + "+" + CoexistClassic
			rw.Paths = 0
			rw.Note = "flow 0 under test, flow 1 classic ECN (reno, beta 0.7 per marked round trip)"
			rows = append(rows, rw)
			runs = append(runs, namedRun{variant + " " + rw.CC, s, r})
		}
	}
	return rows, o.plot("coexistence", runs)
}
