//go:build linux

package main

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/mrgw/mrgw/config"
	"github.com/mrgw/mrgw/gateway"
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

// TestRunSetsMemoryLimit: `mrgw run` sets the Go runtime's soft memory
// limit from the configuration (limits.memory_bytes, the fixed overhead
// and the per-host part), and on reload; GOMEMLIMIT in the environment
// wins. Before, the limit was unset and the heap of a gateway with 256 MiB
// of limits.memory_bytes reached 806 MB in a registration storm.
func TestRunSetsMemoryLimit(t *testing.T) {
	prev := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(prev) })
	log := slog.New(slog.DiscardHandler)
	cfg := config.Default()
	cfg.Limits.MemoryBytes = 256 << 20
	cfg.LAN.MaxHosts = 100
	want := int64(256<<20) + gateway.MemoryOverhead + 100*gateway.MemoryPerHost
	if got := gateway.MemoryLimit(cfg); got != want {
		t.Fatalf("MemoryLimit = %d, want %d", got, want)
	}
	if n := applyMemoryLimit(log, cfg, func(string) string { return "" }); n != want || debug.SetMemoryLimit(-1) != want {
		t.Fatalf("memory limit %d (returned %d), want %d", debug.SetMemoryLimit(-1), n, want)
	}
	debug.SetMemoryLimit(prev)
	env := func(k string) string {
		if k == "GOMEMLIMIT" {
			return "1GiB"
		}
		return ""
	}
	if n := applyMemoryLimit(log, cfg, env); n != prev || debug.SetMemoryLimit(-1) != prev {
		t.Fatalf("with GOMEMLIMIT set: limit %d, want it untouched (%d)", debug.SetMemoryLimit(-1), prev)
	}
}
