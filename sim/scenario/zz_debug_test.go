package scenario

import (
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/mrgw/mrgw/cc"
	"github.com/mrgw/mrgw/metaroce"
)

func TestZZRegionsDebug(t *testing.T) {
	if os.Getenv("MRGW_DBG") == "" {
		t.Skip()
	}
	rate := 10e9
	if v := os.Getenv("MRGW_DBG_RATE"); v != "" {
		rate, _ = strconv.ParseFloat(v, 64)
	}
	s := DefaultRegions(Options{Seed: 1, RateBps: rate})
	s.NoEgress = os.Getenv("MRGW_DBG_NOEGRESS") != ""
	s.check()
	run := &regionsRun{s: s, nreg: len(s.SegmentDelays) + 1, pktSize: s.MTU + metaroce.DataHeaderLen}
	run.buildNetwork()
	if err := run.addGateways(); err != nil {
		t.Fatal(err)
	}
	if err := run.connectPairs(); err != nil {
		t.Fatal(err)
	}
	run.sample()
	run.scheduleWindows(true)
	every := 250 * time.Millisecond
	run.sm.Every(every, every, func(now time.Duration) bool {
		line := fmt.Sprintf("%6.2fs", now.Seconds())
		for i, p := range s.Pairs {
			c := run.conns[i][0]
			a := c.Controller().(*cc.AIMD)
			st := " "
			if a.Steering() {
				st = "S"
			}
			line += fmt.Sprintf(" | %s%s %5.0f/%5.0f h%5.0f%s", regionName(p.From), regionName(p.To), float64(c.Controller().PacingRate())*8/1e6, a.Rate()*8/1e6, a.Hint()*8/1e6, st)
		}
		q := ""
		for k := range run.fwd {
			m := 0
			for _, l := range run.fwd[k] {
				m = max(m, l.QueueBytes())
			}
			q += fmt.Sprintf(" %6d", m/1000)
		}
		t.Log(line + " |q(KB)" + q)
		return now < s.Duration
	})
	run.sm.Run(s.Duration)
	run.summarize()
	for _, rw := range regionRows(s, run.res) {
		t.Logf("%-18s %-12s fraction %.3f jain %.3f peakq %d drops %d", rw.Variant, rw.Note, rw.Fraction, rw.Jain, rw.MaxQueueBytes, rw.QueueDrops)
	}
}

func TestZZCoexistDebug(t *testing.T) {
	if os.Getenv("MRGW_DBG") == "" {
		t.Skip()
	}
	rows, err := coexistence(Options{Seed: 1}, []string{"longrtt-htcp"}, []bool{true}, []bool{true})
	if err != nil {
		t.Fatal(err)
	}
	logRows(t, rows)
}
