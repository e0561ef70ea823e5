//go:build linux

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestAppsFlagsRefused: `loadtest apps` refuses what cannot run before
// anything starts (no source file written, no plot directory made), naming
// the flag's value.
func TestAppsFlagsRefused(t *testing.T) {
	dir := t.TempDir()
	plots := filepath.Join(dir, "plots")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--systems", "tcp-reno"}, `unknown system "tcp-reno"`},
		{[]string{"--workloads", "scp"}, `unknown workload "scp"`},
		{[]string{"--warmup", "1500ms"}, "whole seconds"},
		{[]string{"--rate", "50"}, "has no unit"},
		{[]string{"--plot-dir", plots, "--plot-format", "gif"}, "gif"},
	} {
		args := append([]string{"loadtest", "apps", "--quiet", "--dir", dir}, c.args...)
		if _, _, err := run(t, args...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: err = %v, want %q", c.args, err, c.want)
		}
	}
	if es, err := os.ReadDir(dir); err != nil || len(es) != 0 {
		t.Errorf("a refused run left %v in its directory (%v)", es, err)
	}
}
