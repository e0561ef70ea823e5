//go:build linux

package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/mrgw/mrgw/config"
)

// The daemon logs the configuration's warnings at start, as warnings,
// naming the key, in the configured log format.
func TestRunLogsConfigWarnings(t *testing.T) {
	cfg, err := config.Load("../../config/examples/two-region/euw-gw1.yaml", config.SkipFileChecks())
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	logWarnings(daemonLogger(cfg, &b), cfg)
	if b.Len() != 0 {
		t.Fatalf("the example has no warnings, logged:\n%s", b.String())
	}

	cfg.Limits.MaxFlows = 1024 // 256 MiB of 4 MiB credits holds 64
	if len(cfg.Warnings()) != 1 {
		t.Fatalf("warnings = %v", cfg.Warnings())
	}
	logWarnings(daemonLogger(cfg, &b), cfg)
	line := b.String()
	for _, want := range []string{"level=WARN", `msg="configuration warning"`, "gateway=euw-gw1", "key=limits.max_flows", "1024 flows cannot all be admitted"} {
		if !strings.Contains(line, want) {
			t.Errorf("log lacks %q:\n%s", want, line)
		}
	}

	b.Reset()
	cfg.Log.Format = config.LogJSON
	logWarnings(daemonLogger(cfg, &b), cfg)
	var m map[string]any
	if err := json.Unmarshal(b.Bytes(), &m); err != nil || m["level"] != "WARN" || m["key"] != "limits.max_flows" {
		t.Errorf("log.format json: %v %v\n%s", m, err, b.String())
	}

	b.Reset()
	cfg.Log.Level = "error"
	logWarnings(daemonLogger(cfg, &b), cfg)
	if b.Len() != 0 {
		t.Errorf("log.level error still logs warnings:\n%s", b.String())
	}
}
