package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mrgw/mrgw/host"
	"github.com/mrgw/mrgw/loadtest/lab"
	"github.com/mrgw/mrgw/loadtest/lab/labtest"
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

// TestHostSendInterrupted: `mrgw host send` interrupted (Ctrl-C, SIGTERM;
// here its command context ends) mid-transfer prints what completed and
// that it was interrupted, and exits 0. Before, it ended with "context
// canceled" and exit status 1.
func TestHostSendInterrupted(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	l := labtest.Start(t, ctx, lab.Config{})
	dst, err := host.New(host.Config{Name: "dst", Region: lab.RegionB, Gateways: l.HostGateways(lab.RegionB), Key: l.HostKey, OpenTimeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	if err := dst.RegisterMemory(1, make([]byte, 1<<20)); err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(t.TempDir(), "host.key")
	if err := os.WriteFile(keyFile, []byte(l.HostKey.ID+":"+base64.StdEncoding.EncodeToString(l.HostKey.Secret)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var gws []string
	for _, a := range l.HostGateways(lab.RegionA) {
		gws = append(gws, a.String())
	}
	sendCtx, interrupt := context.WithCancel(ctx)
	defer interrupt()
	go func() {
		// Interrupt once a message has landed: the transfer is under way.
		select {
		case <-dst.Received():
			interrupt()
		case <-ctx.Done():
		}
	}()
	root := newRoot()
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs([]string{"host", "send", "--gateway", strings.Join(gws, ","), "--region", lab.RegionA, "--name", "src",
		"--to", lab.RegionB + "/dst", "--size", "4KiB", "--count", "1000000", "--key-file", keyFile, "--open-timeout", "20s"})
	err = root.ExecuteContext(sendCtx)
	t.Logf("stdout:\n%s\nstderr:\n%s", out.String(), errOut.String())
	if err != nil {
		t.Fatalf("interrupted send returned %v, want a clean exit", err)
	}
	if !strings.Contains(out.String(), "interrupted after") || strings.Contains(errOut.String(), "context canceled") {
		t.Errorf("output does not say the send was interrupted, or says context canceled")
	}
}
