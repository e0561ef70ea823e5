package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mrgw/mrgw/host"
	"github.com/mrgw/mrgw/loadtest/lab"
	"github.com/mrgw/mrgw/loadtest/lab/labtest"
)

// TestHostWrongKeyOneLine: a host whose secret is wrong is refused by
// every gateway of its region; `mrgw host recv` says so in one line that
// names the cause once and what to do, and exits with it. Before, the
// refusal was logged for each gateway and returned again (three times),
// and each said that a credential was required besides what was wrong
// with it.
func TestHostWrongKeyOneLine(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	l := labtest.Start(t, ctx, lab.Config{})
	keyFile := filepath.Join(t.TempDir(), "host.key")
	wrong := bytes.Repeat([]byte{7}, len(l.HostKey.Secret))
	if err := os.WriteFile(keyFile, []byte(l.HostKey.ID+":"+base64.StdEncoding.EncodeToString(wrong)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var gws []string
	for _, a := range l.HostGateways(lab.RegionB) {
		gws = append(gws, a.String())
	}
	root := newRoot()
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs([]string{"host", "recv", "--gateway", strings.Join(gws, ","), "--region", lab.RegionB, "--name", "dst",
		"--key-file", keyFile, "--open-timeout", "20s"})
	err := root.ExecuteContext(ctx)
	t.Logf("stdout:\n%s\nstderr:\n%s\nerr: %v", out.String(), errOut.String(), err)
	if err == nil {
		t.Fatal("a host with a wrong secret was registered")
	}
	all := errOut.String() + err.Error()
	if n := strings.Count(all, "does not verify"); n != 1 {
		t.Errorf("the refusal is said %d times, want once", n)
	}
	if strings.Contains(err.Error(), "requires a host credential") {
		t.Errorf("the error says a credential is required, but one was given: %v", err)
	}
	if !strings.Contains(err.Error(), "--key-file") {
		t.Errorf("the error does not say what to do: %v", err)
	}
}

// lineWatch is an io.Writer that signals when what it was given contains
// want.
type lineWatch struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	want string
	seen chan struct{}
	once sync.Once
}

func (w *lineWatch) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if strings.Contains(w.buf.String(), w.want) {
		w.once.Do(func() { close(w.seen) })
	}
	return len(p), nil
}

func (w *lineWatch) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// TestHostRecvInterrupted: `mrgw host recv` interrupted (Ctrl-C, SIGTERM;
// here its command context ends) once registered prints its summary and
// exits 0, saying nothing of a canceled context.
func TestHostRecvInterrupted(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	l := labtest.Start(t, ctx, lab.Config{})
	keyFile := filepath.Join(t.TempDir(), "host.key")
	if err := os.WriteFile(keyFile, []byte(l.HostKey.ID+":"+base64.StdEncoding.EncodeToString(l.HostKey.Secret)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var gws []string
	for _, a := range l.HostGateways(lab.RegionB) {
		gws = append(gws, a.String())
	}
	recvCtx, interrupt := context.WithCancel(ctx)
	defer interrupt()
	out := &lineWatch{want: "listening on", seen: make(chan struct{})}
	var errOut bytes.Buffer
	go func() {
		select {
		case <-out.seen:
			interrupt()
		case <-ctx.Done():
		}
	}()
	root := newRoot()
	root.SetOut(out)
	root.SetErr(&errOut)
	root.SetArgs([]string{"host", "recv", "--gateway", strings.Join(gws, ","), "--region", lab.RegionB, "--name", "dst",
		"--key-file", keyFile, "--open-timeout", "20s"})
	err := root.ExecuteContext(recvCtx)
	t.Logf("stdout:\n%s\nstderr:\n%s", out.String(), errOut.String())
	if err != nil {
		t.Fatalf("interrupted recv returned %v, want a clean exit", err)
	}
	if !strings.Contains(out.String(), "received 0 messages") || strings.Contains(errOut.String(), "context canceled") {
		t.Errorf("no summary, or the output says context canceled")
	}
}

// TestHostSendReceiverExits: the receiver exits in the middle of `mrgw
// host send`. The send ends with an error that says the receiver is gone
// (registered at no gateway of its region, or its memory refused a
// message), not with "flow has no route" after FailAfter (30 s) of
// re-opening.
func TestHostSendReceiverExits(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	l := labtest.Start(t, ctx, lab.Config{})
	dst, err := host.New(host.Config{Name: "dst", Region: lab.RegionB, Gateways: l.HostGateways(lab.RegionB), Key: l.HostKey, OpenTimeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := dst.RegisterMemory(1, make([]byte, 1<<20)); err != nil {
		t.Fatal(err)
	}
	go func() {
		// The receiver exits once a message has landed.
		select {
		case <-dst.Received():
			dst.Close()
		case <-ctx.Done():
		}
	}()
	keyFile := filepath.Join(t.TempDir(), "host.key")
	if err := os.WriteFile(keyFile, []byte(l.HostKey.ID+":"+base64.StdEncoding.EncodeToString(l.HostKey.Secret)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var gws []string
	for _, a := range l.HostGateways(lab.RegionA) {
		gws = append(gws, a.String())
	}
	root := newRoot()
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs([]string{"host", "send", "--gateway", strings.Join(gws, ","), "--region", lab.RegionA, "--name", "src",
		"--to", lab.RegionB + "/dst", "--size", "4KiB", "--count", "1000000", "--key-file", keyFile, "--open-timeout", "20s"})
	err = root.ExecuteContext(ctx)
	t.Logf("stdout:\n%s\nstderr:\n%s\nerr: %v", out.String(), errOut.String(), err)
	if err == nil {
		t.Fatal("the send succeeded although its receiver exited")
	}
	if !errors.Is(err, host.ErrEndpointGone) && !errors.Is(err, host.ErrMessageRefused) {
		t.Fatalf("send ended with %v, want the receiver gone or its memory refusing", err)
	}
	if !strings.Contains(err.Error(), lab.RegionB+"/dst") {
		t.Errorf("the error does not name the receiver: %v", err)
	}
	// One line: the error the command exits with, not a log line too.
	if n := strings.Count(errOut.String(), "dst"); n != 0 {
		t.Errorf("the receiver's loss is also logged %d times:\n%s", n, errOut.String())
	}
}
