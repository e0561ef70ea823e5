package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mrgw/mrgw/loadtest/lab"
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
	l, err := lab.New(ctx, lab.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	l.Start()
	if err := l.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
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
	err = root.ExecuteContext(ctx)
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
	l, err := lab.New(ctx, lab.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	l.Start()
	if err := l.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
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
	err = root.ExecuteContext(recvCtx)
	t.Logf("stdout:\n%s\nstderr:\n%s", out.String(), errOut.String())
	if err != nil {
		t.Fatalf("interrupted recv returned %v, want a clean exit", err)
	}
	if !strings.Contains(out.String(), "received 0 messages") || strings.Contains(errOut.String(), "context canceled") {
		t.Errorf("no summary, or the output says context canceled")
	}
}
