//go:build linux

package gwload

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/mrgw/mrgw/units"

	"github.com/mrgw/mrgw/loadtest/lab"
	"github.com/mrgw/mrgw/loadtest/recovery"
)

// faults applies the scenario's faults at their times.
func (e *env) faults(ctx context.Context, ser *Series, stop <-chan struct{}) {
	for _, f := range e.sc.Faults {
		wait := time.Until(e.start.Add(f.At))
		if wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-stop:
				t.Stop()
				return
			case <-ctx.Done():
				t.Stop()
				return
			}
		}
		label := f.String()
		switch f.Kind {
		case FaultPlaneFail, FaultPlaneRestore:
			p, _ := strconv.Atoi(f.Target)
			var err error
			if f.Kind == FaultPlaneFail {
				err = e.l.Emu.Fail(p)
			} else {
				err = e.l.Emu.Restore(p)
			}
			if err != nil {
				label += " (failed: " + err.Error() + ")"
			}
		case FaultGatewayKill:
			name := e.gatewayTarget(f.Target)
			label = fmt.Sprintf("gateway-kill %s @%v", name, f.At)
			if g := e.l.Gateways[name]; g != nil {
				g.Close()
			}
		}
		ser.mu.Lock()
		ser.Faults = append(ser.Faults, Mark{At: time.Since(e.start).Seconds(), Label: label})
		ser.mu.Unlock()
	}
}

// gatewayTarget resolves busiest-src/busiest-dst to a gateway name.
func (e *env) gatewayTarget(t string) string {
	region := ""
	switch t {
	case TargetBusiestSrc:
		region = lab.RegionA
	case TargetBusiestDst:
		region = lab.RegionB
	default:
		return t
	}
	// The gateway the most source flows go through, by LAN address.
	byAddr := map[string]string{}
	for _, n := range e.l.Names[region] {
		byAddr[e.l.Configs[n].LAN.Listen] = n
	}
	count := map[string]int{}
	for _, fr := range e.flows {
		if n, ok := byAddr[fr.f.Gateway().String()]; ok {
			count[n]++
		}
	}
	best := e.l.Names[region][0]
	for _, n := range e.l.Names[region] {
		if count[n] > count[best] {
			best = n
		}
	}
	if region == lab.RegionB || len(count) == 0 {
		// Destination side: the one relaying the most flows.
		for _, n := range e.l.Names[region] {
			if e.l.Gateways[n].Status().Flows.Active > e.l.Gateways[best].Status().Flows.Active {
				best = n
			}
		}
	}
	return best
}

// faultRecovery measures recovery after a fault at seconds `at` from start
// with loadtest/recovery, over the traffic's duration (or up to the last
// sample, if the run stopped early): until the goodput over a window of
// four round trips is back to thr of the goodput in the second before the
// fault, counting the window's length. It returns milliseconds and round
// trips, or -1, -1 if goodput did not come back within the run.
func faultRecovery(delivered recovery.Series, start time.Time, at float64, dur, rtt time.Duration, thr float64) (float64, float64) {
	end := start.Add(dur)
	if n := len(delivered.At); n > 0 && delivered.At[n-1].Before(end) {
		end = delivered.At[n-1]
	}
	rep := delivered.Measure(start.Add(time.Duration(at*float64(time.Second))), end, rtt, thr)
	if rep.RTTs < 0 {
		return -1, -1
	}
	return rep.RTTs * units.Ms(rtt), rep.RTTs
}
