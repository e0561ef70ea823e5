//go:build linux

package gateway

import (
	"log/slog"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/mrgw/mrgw/config"
	"github.com/mrgw/mrgw/internal/ratelog"
)

// countSendFailures adds to mrgw_datagrams_send_failed_total what netio's
// running total gained since the last call, once.
func TestSendFailuresCounted(t *testing.T) {
	cfg := &config.Config{}
	cfg.Node = config.Node{Name: "gw1", Region: "eu-west"}
	g := &Gateway{metrics: newMetrics(cfg), sendFailLog: ratelog.New(slog.New(slog.DiscardHandler), time.Second)}
	for _, tc := range []struct{ total, want uint64 }{{0, 0}, {5, 5}, {5, 5}, {8, 8}} {
		g.countSendFailures(tc.total)
		var m dto.Metric
		if err := g.metrics.DatagramsSendFailed.Write(&m); err != nil {
			t.Fatal(err)
		}
		if got := uint64(m.GetCounter().GetValue()); got != tc.want {
			t.Errorf("after a running total of %d: counter %d, want %d", tc.total, got, tc.want)
		}
	}
}
