//go:build linux

package gateway_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/mrgw/mrgw/gateway"
	"github.com/mrgw/mrgw/loadtest/lab"
)

// adminGet sends one keep-alive GET /healthz on c and reads the answer.
func adminGet(c net.Conn, br *bufio.Reader) error {
	if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: admin\r\n\r\n"); err != nil {
		return err
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return err
}

// TestAdminConnectionsBounded (issue 13 item 6): the admin server caps its
// open connections and closes idle keep-alive ones. Before, 3,000 idle
// keep-alive connections stayed open (3,054 goroutines).
func TestAdminConnectionsBounded(t *testing.T) {
	l, err := lab.New(context.Background(), lab.Config{Dir: t.TempDir(), Admin: true})
	if err != nil {
		t.Fatal(err)
	}
	cfg := *l.Configs["euw-gw1"]
	l.Close()
	g, err := gateway.New(&cfg, gateway.Options{Logger: testLogger(t), AdminMaxConns: 2, AdminIdleTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	go g.Run(ctx)
	defer g.Close()
	addr := g.AdminAddr()
	dial := func() (net.Conn, *bufio.Reader) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c, bufio.NewReader(c)
	}
	// Two keep-alive connections, served and now idle: the cap is reached.
	a, abr := dial()
	b, bbr := dial()
	for _, x := range []struct {
		c  net.Conn
		br *bufio.Reader
	}{{a, abr}, {b, bbr}} {
		if err := adminGet(x.c, x.br); err != nil {
			t.Fatal(err)
		}
	}
	// A third is not served while they are open...
	c, cbr := dial()
	answered := make(chan error, 1)
	go func() { answered <- adminGet(c, cbr) }()
	select {
	case err := <-answered:
		t.Fatalf("a third connection was served past a cap of 2 (err %v)", err)
	case <-time.After(300 * time.Millisecond):
	}
	// ...and is as soon as one of them goes.
	a.Close()
	select {
	case err := <-answered:
		if err != nil {
			t.Fatal(err)
		}
	case <-ctx.Done():
		t.Fatal("the third connection was never served after one closed")
	}
	// An idle keep-alive connection is closed by the server.
	_ = b.SetReadDeadline(time.Now().Add(patience / 2))
	_, err = bbr.ReadByte()
	if errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatal("an idle keep-alive connection is still open")
	}
	if err != io.EOF && !errors.Is(err, net.ErrClosed) {
		t.Logf("idle connection ended with %v", err)
	}
}
