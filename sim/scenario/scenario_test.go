package scenario

import (
	"testing"
	"time"

	"github.com/mrgw/mrgw/metaroce"
)

func TestQuickRun(t *testing.T) {
	for _, mode := range []metaroce.Mode{metaroce.ModeMetaRoCE, metaroce.ModeRoCEv2} {
		for _, loss := range []float64{0, 0.01} {
			r, err := Run(Setup{Mode: mode, RateBps: 10e9, RTT: 10 * time.Microsecond, Loss: loss, Duration: 4 * time.Millisecond, Warmup: time.Millisecond, Seed: 1})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%v loss %g: goodput %.2f Gbit/s (%.3f) retx %d wall %v pkts %d", mode, loss, r.GoodputBps/1e9, r.GoodputBps/r.CapacityBps, r.Retransmits, r.Wall, r.SimPackets)
			t.Logf("%+v", r.Senders[0].Stats)
		}
	}
}
