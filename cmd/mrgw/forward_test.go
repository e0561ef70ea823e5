//go:build linux

package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mrgw/mrgw/loadtest/lab"
	"github.com/mrgw/mrgw/loadtest/lab/labtest"
)

// patience bounds every wait: a deadline for a failure, never a
// performance threshold.
const forwardPatience = 3 * time.Minute

// TestForwardFlags: bad --local and --expose rules are refused naming the
// rule and the reason, before anything starts.
func TestForwardFlags(t *testing.T) {
	base := []string{"host", "forward", "--gateway", "127.0.0.1:9", "--region", "r", "--name", "n"}
	for _, bad := range []struct {
		args []string
		want string
	}{
		{nil, "nothing to forward"},
		{[]string{"--local", "127.0.0.1:80"}, "want LISTEN-ADDR=REGION/ENDPOINT:PORT"},
		{[]string{"--local", "127.0.0.1:80=us-east/x"}, "want REGION/ENDPOINT:PORT"},
		{[]string{"--local", "127.0.0.1:80=us-east/x:0"}, "port \"0\""},
		{[]string{"--local", "localhost=us-east/x:1"}, "listen address"},
		{[]string{"--expose", "70000=127.0.0.1:80"}, "from 1 to 65535"},
		{[]string{"--expose", "7000=nowhere"}, "target"},
		{[]string{"--expose", "7000=127.0.0.1:1", "--expose", "7000=127.0.0.1:2"}, "exposed twice"},
		{[]string{"--expose", "7000=127.0.0.1:1", "--max-conns", "0"}, "--max-conns 0"},
	} {
		_, _, err := run(t, append(append([]string{}, base...), bad.args...)...)
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%v: err = %v, want %q", bad.args, err, bad.want)
		}
	}
}

// forwardLab is a lab over the emulated WAN with `mrgw host forward`
// running in each region: "srv" in us-east exposes the targets, "cli" in
// eu-west forwards a local port to each.
type forwardLab struct {
	local map[string]string // target name → the local address clients connect to
}

func freeTCP(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// startForwardLab starts the lab and the two forwarders; targets maps a
// name to the TCP address exposed for it.
func startForwardLab(t *testing.T, ctx context.Context, targets map[string]string) *forwardLab {
	t.Helper()
	l := labtest.Start(t, ctx, lab.Config{Dir: t.TempDir(), Planes: 4, OneWay: 5 * time.Millisecond, RateBps: 200e6})
	keyFile := filepath.Join(t.TempDir(), "host.key")
	if err := os.WriteFile(keyFile, []byte(l.HostKey.ID+":"+base64.StdEncoding.EncodeToString(l.HostKey.Secret)), 0o600); err != nil {
		t.Fatal(err)
	}
	gws := func(region string) string {
		var s []string
		for _, a := range l.HostGateways(region) {
			s = append(s, a.String())
		}
		return strings.Join(s, ",")
	}
	fl := &forwardLab{local: map[string]string{}}
	srv := []string{"host", "forward", "--gateway", gws(lab.RegionB), "--region", lab.RegionB, "--name", "srv",
		"--key-file", keyFile, "--drain", "1s"}
	cli := []string{"host", "forward", "--gateway", gws(lab.RegionA), "--region", lab.RegionA, "--name", "cli",
		"--key-file", keyFile, "--drain", "1s"}
	port := 7000
	for name, target := range targets {
		port++
		srv = append(srv, "--expose", fmt.Sprintf("%d=%s", port, target))
		fl.local[name] = freeTCP(t)
		cli = append(cli, "--local", fmt.Sprintf("%s=%s/srv:%d", fl.local[name], lab.RegionB, port))
	}
	runForward(t, ctx, srv, len(targets))
	runForward(t, ctx, cli, len(targets))
	return fl
}

// lockedBuffer is a bytes.Buffer safe for a writer and a reader.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// runForward runs `mrgw host forward` in this process until the test
// ends, and waits until it has started all rules rules.
func runForward(t *testing.T, ctx context.Context, args []string, rules int) {
	t.Helper()
	rctx, cancel := context.WithCancel(context.Background())
	var out, errb lockedBuffer
	done := make(chan error, 1)
	root := newRoot()
	root.SetArgs(args)
	root.SetOut(&out)
	root.SetErr(&errb)
	go func() { done <- root.ExecuteContext(rctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("%v: %v\n%s", args[:2], err, errb.String())
		}
	})
	for strings.Count(out.String(), "forwarding ")+strings.Count(out.String(), "exposing ") < rules {
		select {
		case err := <-done:
			t.Fatalf("host forward ended: %v\n%s\n%s", err, out.String(), errb.String())
		case <-ctx.Done():
			t.Fatalf("host forward did not start: %v\n%s", ctx.Err(), errb.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// need returns the path of a client nobody here wrote, or skips the test
// saying how to install it (.ci/run installs them from Debian).
func need(t *testing.T, bin, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(bin)
	if err != nil {
		t.Skipf("%s is not installed and this test does not install it: apt-get install %s (.ci/run does)", bin, pkg)
	}
	return p
}

func randomFile(t *testing.T, path string, n int, seed uint64) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 3))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// treeSums maps every regular file under root to its SHA-256.
func treeSums(t *testing.T, root string) map[string][32]byte {
	t.Helper()
	sums := map[string][32]byte{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		sums[rel] = sha256.Sum256(b)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return sums
}

func command(ctx context.Context, t *testing.T, name string, args ...string) ([]byte, error) {
	t.Helper()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.WaitDelay = 5 * time.Second
	return cmd.CombinedOutput()
}

// TestRealClientsThroughForward runs clients and servers nobody here
// wrote through `mrgw host forward` over the emulated WAN (4 planes, 10
// ms RTT): iperf3 with 8 streams each way, rsync pulling a tree from a
// daemon, curl downloading a file from an HTTP server; files are
// compared byte for byte (SHA-256).
func TestRealClientsThroughForward(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), forwardPatience)
	defer cancel()
	iperf := need(t, "iperf3", "iperf3")
	rsync := need(t, "rsync", "rsync")
	curl := need(t, "curl", "curl")

	// The servers, on loopback.
	iperfAddr := freeTCP(t)
	_, iperfPort, _ := net.SplitHostPort(iperfAddr)
	srv := exec.Command(iperf, "-s", "-B", "127.0.0.1", "-p", iperfPort)
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Process.Kill(); srv.Wait() })

	dir := t.TempDir()
	srcTree := filepath.Join(dir, "tree")
	randomFile(t, filepath.Join(srcTree, "shard-0.bin"), 24<<20, 1)
	for i := range 200 {
		randomFile(t, filepath.Join(srcTree, "small", fmt.Sprintf("f%03d", i)), 1+i*97, uint64(10+i))
	}
	rsyncAddr := freeTCP(t)
	_, rsyncPort, _ := net.SplitHostPort(rsyncAddr)
	conf := filepath.Join(dir, "rsyncd.conf")
	if err := os.WriteFile(conf, []byte(fmt.Sprintf("use chroot = no\nuid = root\ngid = root\n[data]\npath = %s\nread only = yes\n", srcTree)), 0o644); err != nil {
		t.Fatal(err)
	}
	rd := exec.Command(rsync, "--daemon", "--no-detach", "--address", "127.0.0.1", "--port", rsyncPort, "--config", conf)
	if err := rd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rd.Process.Kill(); rd.Wait() })

	webRoot := filepath.Join(dir, "web")
	randomFile(t, filepath.Join(webRoot, "big.bin"), 48<<20, 2)
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: http.FileServer(http.Dir(webRoot)), ReadHeaderTimeout: 10 * time.Second}
	go hs.Serve(hl)
	t.Cleanup(func() { hs.Close() })

	// Wait for the daemons to listen.
	for _, a := range []string{iperfAddr, rsyncAddr} {
		for {
			c, err := net.Dial("tcp", a)
			if err == nil {
				c.Close()
				break
			}
			select {
			case <-ctx.Done():
				t.Fatalf("%s never listened", a)
			case <-time.After(20 * time.Millisecond):
			}
		}
	}

	fl := startForwardLab(t, ctx, map[string]string{"iperf3": iperfAddr, "rsync": rsyncAddr, "http": hl.Addr().String()})

	t.Run("iperf3", func(t *testing.T) {
		host, port, _ := net.SplitHostPort(fl.local["iperf3"])
		for _, reverse := range []bool{false, true} {
			args := []string{"-c", host, "-p", port, "-P", "8", "-t", "3", "-J"}
			if reverse {
				args = append(args, "-R")
			}
			out, err := command(ctx, t, iperf, args...)
			if err != nil {
				t.Fatalf("iperf3 %v: %v\n%s", args, err, out)
			}
			var r struct {
				End struct {
					SumSent     struct{ Bytes float64 } `json:"sum_sent"`
					SumReceived struct {
						Bytes         float64
						BitsPerSecond float64 `json:"bits_per_second"`
					} `json:"sum_received"`
				} `json:"end"`
				Error string `json:"error"`
			}
			if err := json.Unmarshal(out, &r); err != nil {
				t.Fatalf("iperf3 output: %v\n%s", err, out)
			}
			if r.Error != "" || r.End.SumReceived.Bytes <= 0 || r.End.SumReceived.Bytes > r.End.SumSent.Bytes {
				t.Fatalf("iperf3 reverse=%v: error %q, sent %.0f bytes, received %.0f", reverse, r.Error, r.End.SumSent.Bytes, r.End.SumReceived.Bytes)
			}
			t.Logf("iperf3 -P 8 reverse=%v: %.1f Mbit/s received", reverse, r.End.SumReceived.BitsPerSecond/1e6)
		}
	})

	t.Run("rsync", func(t *testing.T) {
		host, port, _ := net.SplitHostPort(fl.local["rsync"])
		dst := filepath.Join(t.TempDir(), "copy")
		out, err := command(ctx, t, rsync, "-a", "--port", port, "rsync://"+host+"/data/", dst+"/")
		if err != nil {
			t.Fatalf("rsync: %v\n%s", err, out)
		}
		want, got := treeSums(t, srcTree), treeSums(t, dst)
		if len(got) != len(want) {
			t.Fatalf("rsync copied %d files of %d", len(got), len(want))
		}
		for p, s := range want {
			if got[p] != s {
				t.Fatalf("rsync: %s differs", p)
			}
		}
	})

	t.Run("curl", func(t *testing.T) {
		out := filepath.Join(t.TempDir(), "big.bin")
		if b, err := command(ctx, t, curl, "-sS", "--fail", "-o", out, "http://"+fl.local["http"]+"/big.bin"); err != nil {
			t.Fatalf("curl: %v\n%s", err, b)
		}
		want, got := treeSums(t, webRoot)["big.bin"], treeSums(t, filepath.Dir(out))["big.bin"]
		if got != want {
			t.Fatal("curl: the downloaded file differs")
		}
	})
}
