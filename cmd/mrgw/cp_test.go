//go:build linux

package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mrgw/mrgw/internal/cli"
	"github.com/mrgw/mrgw/loadtest/lab"
	"github.com/mrgw/mrgw/loadtest/lab/labtest"
)

// syncBuffer is a bytes.Buffer safe for a command writing while the test
// reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestHostCp runs mrgw host cp-serve in us-east and mrgw host cp --json
// in eu-west of an in-process lab: a file and a small tree arrive byte
// for byte, the JSON summary counts them with their SHA-256, and the same
// command again sends nothing. A path out of the root, a port nobody
// listens on and a malformed destination are refused with errors that
// say so.
func TestHostCp(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	l := labtest.Start(t, ctx, lab.Config{Direct: true, Dir: t.TempDir()})
	keyFile := filepath.Join(t.TempDir(), "host.key")
	if err := os.WriteFile(keyFile, []byte(l.HostKey.ID+":"+base64.StdEncoding.EncodeToString(l.HostKey.Secret)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	gws := func(region string) string {
		var s []string
		for _, a := range l.HostGateways(region) {
			s = append(s, a.String())
		}
		return strings.Join(s, ",")
	}
	root := t.TempDir()
	sctx, stop := context.WithCancel(ctx)
	var serveOut syncBuffer
	served := make(chan error, 1)
	go func() {
		cmd := newRoot()
		cmd.SetOut(&serveOut)
		cmd.SetErr(&serveOut)
		cmd.SetArgs([]string{"host", "cp-serve", "--gateway", gws(lab.RegionB), "--region", lab.RegionB, "--name", "store",
			"--key-file", keyFile, "--root", root, "--port", "7100", "--window", "1MiB"})
		served <- cmd.ExecuteContext(sctx)
	}()
	defer func() {
		stop()
		if err := <-served; err != nil {
			t.Errorf("cp-serve: %v\n%s", err, serveOut.String())
		}
		if out := serveOut.String(); !strings.Contains(out, "files committed") {
			t.Errorf("cp-serve printed no summary:\n%s", out)
		}
	}()
	for !strings.Contains(serveOut.String(), "receiving copies") {
		select {
		case err := <-served:
			t.Fatalf("cp-serve ended: %v\n%s", err, serveOut.String())
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}

	src := t.TempDir()
	big := make([]byte, 3<<20+5)
	for i := range big {
		big[i] = byte(i * 7)
	}
	must(t, os.WriteFile(filepath.Join(src, "shard.bin"), big, 0o644))
	must(t, os.MkdirAll(filepath.Join(src, "tree", "a"), 0o755))
	must(t, os.WriteFile(filepath.Join(src, "tree", "a", "x"), []byte("x"), 0o600))
	must(t, os.WriteFile(filepath.Join(src, "tree", "y"), nil, 0o644))
	cp := func(args ...string) (string, string, error) {
		base := []string{"host", "cp", "--gateway", gws(lab.RegionA), "--region", lab.RegionA, "--name", "loader",
			"--key-file", keyFile, "--chunk", "256KiB"}
		return cli.Run(newRoot(), append(base, args...)...)
	}
	out, errOut, err := cp("--json", filepath.Join(src, "shard.bin"), filepath.Join(src, "tree"), lab.RegionB+"/store:7100/in")
	if err != nil {
		t.Fatalf("cp: %v\n%s", err, errOut)
	}
	var sum struct {
		Destination string `json:"destination"`
		Files       int    `json:"files"`
		Bytes       int64  `json:"bytes"`
		BytesSent   int64  `json:"bytes_sent"`
		Verified    int    `json:"verified"`
		List        []struct {
			Path, SHA256 string
		} `json:"list"`
	}
	if err := json.Unmarshal([]byte(out), &sum); err != nil {
		t.Fatalf("--json: %v\n%s", err, out)
	}
	if sum.Files != 3 || sum.Verified != 3 || sum.Bytes != int64(len(big)+1) || sum.BytesSent != sum.Bytes || len(sum.List) != 3 {
		t.Fatalf("summary: %s", out)
	}
	for _, p := range []string{"shard.bin", "tree/a/x", "tree/y"} {
		a, _ := os.ReadFile(filepath.Join(src, p))
		b, err := os.ReadFile(filepath.Join(root, "in", p))
		if err != nil || !bytes.Equal(a, b) {
			t.Fatalf("%s: %v", p, err)
		}
	}
	out, errOut, err = cp(filepath.Join(src, "shard.bin"), filepath.Join(src, "tree"), lab.RegionB+"/store:7100/in")
	if err != nil || !strings.Contains(out, "sent 0 B") || !strings.Contains(out, "3 already there") {
		t.Fatalf("cp again: %v\n%s%s", err, out, errOut)
	}
	for _, c := range []struct{ dst, want string }{
		{lab.RegionB + "/store:7100/../up", "leaves its directory"},
		{lab.RegionB + "/store:7101/in", "nothing listens on the port"},
		{lab.RegionB + "/store", "want REGION/ENDPOINT:PORT"},
	} {
		_, _, err := cp(filepath.Join(src, "tree"), c.dst)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("cp to %s: %v, want %q", c.dst, err, c.want)
		}
	}
	if _, _, err := cp(filepath.Join(src, "missing"), lab.RegionB+"/store:7100"); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("cp of a missing source: %v", err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
