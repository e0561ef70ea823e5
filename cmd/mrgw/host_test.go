package main

import (
	"io"
	"strings"
	"testing"
)

// host --cc offers and accepts only the controllers lan.congestion_control
// accepts; sizes take units.
func TestHostFlags(t *testing.T) {
	base := []string{"host", "send", "--gateway", "127.0.0.1:9", "--region", "r", "--name", "n", "--to", "a/b"}
	for _, bad := range []struct {
		args []string
		want string
	}{
		{[]string{"--cc", "longrtt-htcp"}, "the LAN accepts dc-aimd or fixed"},
		{[]string{"--size", "1,5MB"}, "without separators"},
		{[]string{"--size", "1 parsec"}, "want a number of bytes"},
	} {
		_, _, err := run(t, append(append([]string{}, base...), bad.args...)...)
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%v: err = %v, want %q", bad.args, err, bad.want)
		}
	}
	for _, name := range lanControllers {
		hf := hostFlags{ccName: name, listen: "127.0.0.1:0", gateways: []string{"127.0.0.1:9"}}
		if _, err := hf.config(io.Discard); err != nil {
			t.Errorf("--cc %s: %v", name, err)
		}
	}
	out, _, err := run(t, "host", "send", "--help")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "--cc") && (strings.Contains(line, "longrtt") || strings.Contains(line, "reno") || !strings.Contains(line, "dc-aimd or fixed")) {
			t.Errorf("--cc offers what the LAN refuses: %s", line)
		}
		if strings.Contains(line, "--size size") && !strings.Contains(line, "(default 1MiB)") {
			t.Errorf("--size default: %s", line)
		}
	}
}
