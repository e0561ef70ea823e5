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
