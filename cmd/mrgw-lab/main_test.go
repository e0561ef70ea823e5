package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/mrgw/mrgw/internal/cli"
)

// run executes the mrgw-lab command tree with args and returns its output.
func run(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	cmd := newRoot()
	var out, errOut bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs(args)
	err := cmd.Execute()
	return out.String(), errOut.String(), err
}

func TestSimUnknownScenario(t *testing.T) {
	if _, _, err := run(t, "sim", "no-such"); err == nil || !strings.Contains(err.Error(), "unknown scenario") {
		t.Fatalf("err = %v", err)
	}
}

func TestLabVersion(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}} {
		out, _, err := run(t, args...)
		if err != nil || strings.TrimSpace(out) != cli.VersionLine("mrgw-lab") {
			t.Errorf("%v: %q %v", args, out, err)
		}
	}
}

// Rate flags take units on every command; a plain number below 1000 (the
// demo's old Mbit/s) is refused as a forgotten unit; defaults print once.
func TestRateFlagsTakeUnits(t *testing.T) {
	for _, args := range [][]string{{"demo", "--rate", "50"}, {"sim", "--rate", "100", "loss-sweep"}, {"loadtest", "loss-sweep", "--capacity", "200"}} {
		if _, _, err := run(t, args...); err == nil || !strings.Contains(err.Error(), "has no unit") {
			t.Errorf("%v: err = %v, want a refusal naming the missing unit", args, err)
		}
	}
	for _, args := range [][]string{{"demo", "--help"}, {"sim", "--help"}, {"loadtest", "loss-sweep", "--help"}, {"loadtest", "datapath", "--help"}} {
		out, _, err := run(t, args...)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(out, "\n") {
			if strings.Count(line, "(default") > 1 || strings.Contains(line, "(default [])") {
				t.Errorf("%v: default printed twice: %s", args, line)
			}
			if (strings.Contains(line, "--rate") || strings.Contains(line, "--capacity")) && !strings.Contains(line, "rate ") {
				t.Errorf("%v: not a rate flag: %s", args, line)
			}
		}
	}
}
