package deploy_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/mrgw/mrgw/forward"
	"github.com/mrgw/mrgw/metrics"
)

var metricRE = regexp.MustCompile(`\bmrgw_[a-z0-9_]+`)

// family maps a series name to its family: a histogram's _bucket, _sum and
// _count series belong to the histogram.
func family(name string) string {
	for _, suf := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suf); ok {
			if f, ok := metrics.Lookup(base); ok && f.Type == metrics.Histogram {
				return base
			}
		}
	}
	return name
}

// checkNames asserts that every mrgw_ name in exprs is a family of the
// catalogue, and returns the families used.
func checkNames(t *testing.T, where string, exprs []string) map[string]bool {
	t.Helper()
	used := map[string]bool{}
	for _, e := range exprs {
		for _, n := range metricRE.FindAllString(e, -1) {
			f := family(n)
			if _, ok := metrics.Lookup(f); !ok {
				t.Errorf("%s: %s is not a metric the daemon exports (package metrics)", where, n)
			}
			used[f] = true
		}
	}
	return used
}

type alertRule struct {
	Alert       string            `yaml:"alert"`
	Record      string            `yaml:"record"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

func loadAlerts(t *testing.T) []alertRule {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("prometheus", "alerts.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Groups []struct {
			Name  string      `yaml:"name"`
			Rules []alertRule `yaml:"rules"`
		} `yaml:"groups"`
	}
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	dec.KnownFields(true)
	if err := dec.Decode(&doc); err != nil {
		t.Fatalf("alerts.yml: %v", err)
	}
	var rules []alertRule
	groups := map[string]bool{}
	for _, g := range doc.Groups {
		if g.Name == "" || groups[g.Name] {
			t.Errorf("alerts.yml: group name %q empty or repeated", g.Name)
		}
		groups[g.Name] = true
		if len(g.Rules) == 0 {
			t.Errorf("alerts.yml: group %s has no rules", g.Name)
		}
		rules = append(rules, g.Rules...)
	}
	return rules
}

// TestAlertRules checks the rules' structure, that the documented alerts are
// there, that each has a runbook section in docs/OPERATIONS.md, and that
// every metric they use is exported.
func TestAlertRules(t *testing.T) {
	rules := loadAlerts(t)
	ops, err := os.ReadFile(filepath.Join("..", "docs", "OPERATIONS.md"))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	var exprs []string
	for _, r := range rules {
		if r.Alert == "" {
			t.Errorf("rule without an alert name: %+v", r)
			continue
		}
		if seen[r.Alert] {
			t.Errorf("%s: defined twice", r.Alert)
		}
		seen[r.Alert] = true
		if strings.TrimSpace(r.Expr) == "" {
			t.Errorf("%s: empty expr", r.Alert)
		}
		if r.For != "" {
			if _, err := time.ParseDuration(r.For); err != nil {
				t.Errorf("%s: for %q: %v", r.Alert, r.For, err)
			}
		}
		if s := r.Labels["severity"]; s != "warning" && s != "critical" {
			t.Errorf("%s: severity %q, want warning or critical", r.Alert, s)
		}
		for _, a := range []string{"summary", "description", "runbook_url"} {
			if r.Annotations[a] == "" {
				t.Errorf("%s: no %s annotation", r.Alert, a)
			}
		}
		anchor := strings.ToLower(r.Alert)
		if !strings.HasSuffix(r.Annotations["runbook_url"], "docs/OPERATIONS.md#"+anchor) {
			t.Errorf("%s: runbook_url %q does not point at docs/OPERATIONS.md#%s", r.Alert, r.Annotations["runbook_url"], anchor)
		}
		if !regexp.MustCompile(`(?m)^#+ ` + regexp.QuoteMeta(r.Alert) + `\s*$`).Match(ops) {
			t.Errorf("%s: docs/OPERATIONS.md has no heading %q (the runbook)", r.Alert, r.Alert)
		}
		if strings.Count(r.Expr, "(") != strings.Count(r.Expr, ")") {
			t.Errorf("%s: unbalanced parentheses in %q", r.Alert, r.Expr)
		}
		exprs = append(exprs, r.Expr)
	}
	for _, want := range []string{"MrgwPathDown", "MrgwRegionUnreachable", "MrgwLossHigh", "MrgwRetransmitRatioHigh", "MrgwMemoryNearLimit"} {
		if !seen[want] {
			t.Errorf("alert %s is missing", want)
		}
	}
	used := checkNames(t, "alerts.yml", exprs)
	for _, want := range []string{"mrgw_path_state", "mrgw_region_reachable", "mrgw_peer_packets_lost_total", "mrgw_peer_retransmits_total", "mrgw_memory_buffered_bytes", "mrgw_memory_limit_bytes"} {
		if !used[want] {
			t.Errorf("no alert uses %s", want)
		}
	}
}

// TestPromtool runs promtool on the rules, their unit tests and the scrape
// configuration when it is installed (apt-get install prometheus provides
// it; .ci/deploy-checks.sh installs it when missing and runs the same).
func TestPromtool(t *testing.T) {
	promtool := os.Getenv("PROMTOOL") // set by .ci/deploy-checks.sh, which installs it
	if promtool == "" {
		var err error
		if promtool, err = exec.LookPath("promtool"); err != nil {
			t.Skip("promtool not installed (bash .ci/deploy-checks.sh installs it)")
		}
	}
	for _, args := range [][]string{
		{"check", "rules", "alerts.yml"},
		{"check", "config", "--syntax-only", "prometheus.yml"},
		{"test", "rules", "alerts_test.yml"},
	} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = "prometheus"
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// TestEveryAlertHasARuleTest: prometheus/alerts_test.yml (promtool test
// rules) has, for every alert of alerts.yml, a case where it fires and one
// where it does not.
func TestEveryAlertHasARuleTest(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("prometheus", "alerts_test.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		RuleFiles []string `yaml:"rule_files"`
		Tests     []struct {
			AlertRuleTest []struct {
				Alertname string           `yaml:"alertname"`
				ExpAlerts []map[string]any `yaml:"exp_alerts"`
			} `yaml:"alert_rule_test"`
		} `yaml:"tests"`
	}
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(doc.RuleFiles, "alerts.yml") {
		t.Errorf("alerts_test.yml tests %v, not alerts.yml", doc.RuleFiles)
	}
	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, tc := range doc.Tests {
		for _, at := range tc.AlertRuleTest {
			if len(at.ExpAlerts) > 0 {
				fires[at.Alertname] = true
			} else {
				quiet[at.Alertname] = true
			}
		}
	}
	for _, r := range loadAlerts(t) {
		if !fires[r.Alert] {
			t.Errorf("%s: no rule test where it fires", r.Alert)
		}
		if !quiet[r.Alert] && r.For != "" {
			t.Errorf("%s: no rule test where it does not fire yet (for: %s)", r.Alert, r.For)
		}
	}
}

// TestPrometheusConfig checks that the scrape configuration loads the alert
// rules and scrapes the admin endpoint's /metrics.
func TestPrometheusConfig(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("prometheus", "prometheus.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Global        map[string]string `yaml:"global"`
		RuleFiles     []string          `yaml:"rule_files"`
		ScrapeConfigs []struct {
			JobName       string `yaml:"job_name"`
			MetricsPath   string `yaml:"metrics_path"`
			HonorLabels   bool   `yaml:"honor_labels"`
			FileSDConfigs []struct {
				Files []string `yaml:"files"`
			} `yaml:"file_sd_configs"`
		} `yaml:"scrape_configs"`
	}
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	for _, f := range cfg.RuleFiles {
		if _, err := os.Stat(filepath.Join("prometheus", f)); err != nil {
			t.Errorf("rule file %s: %v", f, err)
		}
	}
	if !slices.Contains(cfg.RuleFiles, "alerts.yml") {
		t.Errorf("rule_files %v do not load alerts.yml", cfg.RuleFiles)
	}
	var job bool
	for _, sc := range cfg.ScrapeConfigs {
		if sc.JobName != "mrgw" {
			continue
		}
		job = true
		if sc.MetricsPath != "/metrics" || !sc.HonorLabels {
			t.Errorf("job mrgw: metrics_path %q honor_labels %v", sc.MetricsPath, sc.HonorLabels)
		}
		for _, sd := range sc.FileSDConfigs {
			for _, f := range sd.Files {
				tb, err := os.ReadFile(filepath.Join("prometheus", f))
				if err != nil {
					t.Errorf("file_sd %s: %v", f, err)
					continue
				}
				var groups []struct {
					Targets []string          `yaml:"targets"`
					Labels  map[string]string `yaml:"labels"`
				}
				if err := yaml.Unmarshal(tb, &groups); err != nil || len(groups) == 0 {
					t.Errorf("file_sd %s: %v (%d groups)", f, err, len(groups))
				}
				for _, g := range groups {
					for l := range g.Labels {
						if l == "gateway" || l == "region" {
							t.Errorf("file_sd %s: label %q would clash with the gateway's own label", f, l)
						}
					}
				}
			}
		}
	}
	if !job {
		t.Error("no scrape job named mrgw (the alerts use up{job=\"mrgw\"})")
	}
}

type panel struct {
	Type    string  `json:"type"`
	Title   string  `json:"title"`
	Panels  []panel `json:"panels"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
}

// TestDashboard checks the dashboard's structure (per region, gateway,
// peer, plane and path variables; panels for goodput, RTT, window, loss,
// ECN and states) and that every metric it uses is exported.
func TestDashboard(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("grafana", "mrgw-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		UID        string  `json:"uid"`
		Title      string  `json:"title"`
		Panels     []panel `json:"panels"`
		Templating struct {
			List []struct {
				Name  string `json:"name"`
				Query any    `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("dashboard JSON: %v", err)
	}
	if d.UID == "" || d.Title == "" {
		t.Error("dashboard has no uid or title")
	}
	var exprs, vars []string
	for _, v := range d.Templating.List {
		vars = append(vars, v.Name)
		if q, err := json.Marshal(v.Query); err == nil {
			exprs = append(exprs, string(q))
		}
	}
	for _, want := range []string{"region", "gateway", "peer_region", "peer", "plane", "path"} {
		if !slices.Contains(vars, want) {
			t.Errorf("no dashboard variable %q (have %v)", want, vars)
		}
	}
	var titles []string
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			walk(p.Panels)
			if p.Type == "row" {
				continue
			}
			titles = append(titles, strings.ToLower(p.Title))
			if len(p.Targets) == 0 {
				t.Errorf("panel %q has no query", p.Title)
			}
			for _, tg := range p.Targets {
				if strings.TrimSpace(tg.Expr) == "" {
					t.Errorf("panel %q has an empty query", p.Title)
				}
				if strings.Count(tg.Expr, "(") != strings.Count(tg.Expr, ")") {
					t.Errorf("panel %q: unbalanced parentheses in %q", p.Title, tg.Expr)
				}
				exprs = append(exprs, tg.Expr)
			}
		}
	}
	walk(d.Panels)
	for _, topic := range []string{"goodput", "rtt", "window", "loss", "ecn", "state"} {
		if !slices.ContainsFunc(titles, func(s string) bool { return strings.Contains(s, topic) }) {
			t.Errorf("no panel about %s (titles %v)", topic, titles)
		}
	}
	used := checkNames(t, "mrgw-dashboard.json", exprs)
	for _, want := range []string{"mrgw_path_goodput_bytes_total", "mrgw_peer_goodput_bytes_total", "mrgw_path_rtt_seconds",
		"mrgw_path_cwnd_bytes", "mrgw_path_packets_lost_total", "mrgw_path_ecn_marked_packets_total", "mrgw_path_state"} {
		if !used[want] {
			t.Errorf("the dashboard does not show %s", want)
		}
	}
	var unused []string
	for _, n := range metrics.Names() {
		if !used[n] {
			unused = append(unused, n)
		}
	}
	sort.Strings(unused)
	t.Logf("families not on the dashboard: %v", unused)
}

// TestMetricNamesCheckIsNotVacuous makes sure the check above catches a
// name the daemon does not export, and understands histogram series.
func TestMetricNamesCheckIsNotVacuous(t *testing.T) {
	if _, ok := metrics.Lookup(family("mrgw_message_completion_seconds_bucket")); !ok {
		t.Error("histogram _bucket series not mapped to its family")
	}
	if _, ok := metrics.Lookup(family("mrgw_path_rtt_seconds_count")); ok {
		t.Error("a gauge's name with _count mapped to the gauge")
	}
	var bad []string
	for _, n := range metricRE.FindAllString(`rate(mrgw_path_packets_lost_total[5m]) / mrgw_no_such_metric`, -1) {
		if _, ok := metrics.Lookup(family(n)); !ok {
			bad = append(bad, n)
		}
	}
	if !slices.Equal(bad, []string{"mrgw_no_such_metric"}) {
		t.Errorf("unknown names found: %v", bad)
	}
}

// TestOperationsDocListsEveryMetric keeps the metric table of
// docs/OPERATIONS.md in step with the catalogue.
func TestOperationsDocListsEveryMetric(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "docs", "OPERATIONS.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	for _, f := range metrics.Catalogue() {
		if !strings.Contains(doc, "| `"+f.Name+"` | "+string(f.Type)+" |") {
			t.Errorf("docs/OPERATIONS.md has no table row for %s (%s)", f.Name, f.Type)
		}
	}
	forwarder := map[string]bool{}
	for _, n := range forward.MetricNames() {
		forwarder[n] = true
	}
	for _, n := range metricRE.FindAllString(doc, -1) {
		if _, ok := metrics.Lookup(family(n)); !ok && !forwarder[family(n)] {
			t.Errorf("docs/OPERATIONS.md names %s, which neither the daemon nor mrgw host forward exports", n)
		}
	}
}
