//go:build linux

package gateway

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/mrgw/mrgw/config"
	"github.com/mrgw/mrgw/internal/ratelog"
)

// TestDemandMessagesDroppedAndCounted: a received demand report is kept
// only if it is well formed, of this gateway's region and another
// gateway's name, and newer than the one held; the rest are dropped and
// counted by reason and logged at warn once per reason; the table is
// bounded.
func TestDemandMessagesDroppedAndCounted(t *testing.T) {
	cfg := config.Default()
	cfg.Node.Name, cfg.Node.Region = "euw-gw1", "eu-west"
	var logs bytes.Buffer
	g := &Gateway{log: slog.New(slog.NewTextHandler(&logs, nil)), demand: newRegionDemand(), metrics: newMetrics(cfg)}
	g.demandLog = ratelog.New(g.log, time.Hour)
	g.cfgv.Store(cfg)
	d := g.demand
	send := func(r demandReport) {
		t.Helper()
		b, err := appendDemand(nil, r)
		if err != nil {
			t.Fatal(err)
		}
		g.onDemandMessage(b)
	}
	seq := uint64(time.Now().UnixNano())
	send(demandReport{Region: "eu-west", From: "euw-gw2", Seq: seq, demandSample: demandSample{Rate: 1e6, Limited: true}})
	if d.received.Load() != 1 || len(d.kick) != 1 {
		t.Fatalf("a good report: %d received, %d kicks", d.received.Load(), len(d.kick))
	}
	// Overtaken on the way: the older one is not kept.
	send(demandReport{Region: "eu-west", From: "euw-gw2", Seq: seq - 1, demandSample: demandSample{Rate: 5}})
	if h := d.heard["euw-gw2"]; h.Rate != 1e6 || !h.Limited {
		t.Fatalf("an older report replaced a newer one: %+v", h)
	}
	g.onDemandMessage([]byte{demandVersion, 0, 1, 2})
	g.onDemandMessage(nil)
	send(demandReport{Region: "us-east", From: "use-gw1", Seq: seq})
	send(demandReport{Region: "eu-west", From: "euw-gw1", Seq: seq})
	if d.malformed.Load() != 2 || d.foreign.Load() != 2 || d.received.Load() != 1 {
		t.Fatalf("malformed %d (want 2), foreign %d (want 2), received %d (want 1)", d.malformed.Load(), d.foreign.Load(), d.received.Load())
	}
	for i := range 2 * maxDemandReports {
		send(demandReport{Region: "eu-west", From: fmt.Sprintf("gw%d", i), Seq: seq})
	}
	if len(d.heard) != maxDemandReports {
		t.Fatalf("%d reports held, bound %d", len(d.heard), maxDemandReports)
	}
	for reason, want := range map[string]float64{"malformed": 2, "foreign": 2, "full": maxDemandReports + 1} { // euw-gw2 holds one of the 64
		if got := value(t, g.metrics.DemandReportsDropped.WithLabelValues(reason)); got != want {
			t.Errorf("mrgw_region_demand_reports_dropped_total{reason=%q} = %v, want %v", reason, got, want)
		}
		if n := strings.Count(logs.String(), "reason="+reason); n != 1 {
			t.Errorf("%d warnings for reason %s, want 1 (rate-limited):\n%s", n, reason, logs.String())
		}
	}
}
