//go:build linux

package deploy_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/mrgw/mrgw/loadtest/lab"
	"github.com/mrgw/mrgw/loadtest/lab/labtest"
)

// namesUsed returns every mrgw_ family the dashboard and the alert rules
// read (a histogram's _bucket, _sum and _count series mapped to the
// histogram), each with where it is used.
func namesUsed(t *testing.T) map[string]string {
	t.Helper()
	used := map[string]string{}
	dash := filepath.Join("grafana", "mrgw-dashboard.json")
	b, err := os.ReadFile(dash)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range metricRE.FindAllString(string(b), -1) {
		used[family(n)] = dash
	}
	for _, r := range loadAlerts(t) {
		for _, n := range metricRE.FindAllString(r.Expr, -1) {
			used[family(n)] = "alert " + r.Alert
		}
	}
	if len(used) < 20 {
		t.Fatalf("only %d metric names found in the dashboard and the rules: %v", len(used), used)
	}
	return used
}

// served returns the families a /metrics exposition (text format) has at
// least one series of.
func served(t *testing.T, url string) map[string]bool {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s %v", url, resp.Status, err)
	}
	out := map[string]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, _, _ := strings.Cut(line, "{")
		name, _, _ = strings.Cut(name, " ")
		out[family(name)] = true
	}
	return out
}

// measuredOnly are the gauges of a measurement that have no series until
// there is one (a path's RTT: unknown is absent, not 0, see
// docs/OPERATIONS.md): an idle gateway need not serve them. The gateway's
// end-to-end metrics test checks them under traffic.
var measuredOnly = map[string]bool{"mrgw_path_rtt_seconds": true, "mrgw_path_min_rtt_seconds": true}

// TestHealthyGatewayServesEveryMetricTheDashboardAndAlertsUse starts the
// two-region lab (two gateways per region, real sockets over the loopback
// emulator), waits until it is ready, sends no traffic, and scrapes each
// gateway's /metrics: every family the dashboard or an alert reads must be
// served, even those that count events that have not happened yet (a
// family without series shows "No data" and increase() misses its first
// event).
func TestHealthyGatewayServesEveryMetricTheDashboardAndAlertsUse(t *testing.T) {
	if testing.Short() {
		t.Skip("starts four gateways")
	}
	used := namesUsed(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	l := labtest.Start(t, ctx, lab.Config{Planes: 2, Paths: 4, OneWay: time.Millisecond, Admin: true, Logger: slog.New(slog.DiscardHandler)})
	var names []string
	for name := range l.Gateways {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		url := "http://" + l.Gateways[name].AdminAddr() + "/metrics"
		var missing []string
		// The stats loop refreshes the per-connection series every 200 ms
		// in the lab: give it a few rounds after ready.
		for deadline := time.Now().Add(3 * time.Second); ; {
			got := served(t, url)
			missing = missing[:0]
			for n := range used {
				if !got[n] && !measuredOnly[n] {
					missing = append(missing, n)
				}
			}
			if len(missing) == 0 || time.Now().After(deadline) {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		sort.Strings(missing)
		for _, n := range missing {
			t.Errorf("%s: %s (used by %s) is not served", name, n, used[n])
		}
	}
}
