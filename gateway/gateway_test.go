//go:build linux

package gateway_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mrgw/mrgw/loadtest/lab/labtest"

	"go.uber.org/goleak"

	"github.com/mrgw/mrgw/config"
	"github.com/mrgw/mrgw/gateway"
	"github.com/mrgw/mrgw/loadtest/lab"
)

// TestNewRefusesInvalidConfig: gateway.New checks the configuration again
// and names the key of every problem.
func TestNewRefusesInvalidConfig(t *testing.T) {
	cases := map[string]struct {
		edit func(*config.Config)
		key  string
	}{
		"no node name":      {func(c *config.Config) { c.Node.Name = "" }, "node.name"},
		"mtu too small":     {func(c *config.Config) { c.WAN.MTU = 100 }, "wan.mtu"},
		"bad lan address":   {func(c *config.Config) { c.LAN.Listen = "10.0.0.300:1" }, "lan.listen"},
		"unknown cc":        {func(c *config.Config) { c.WAN.CongestionControl = "cubic" }, "wan.congestion_control"},
		"own region remote": {func(c *config.Config) { c.Regions = []config.Region{{Name: c.Node.Region}} }, "regions[0].name"},
		"missing cert":      {func(c *config.Config) { c.Control.TLS.CertFile = "/nonexistent/cert.pem" }, "control.tls.cert_file"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			c := validConfig(t)
			tc.edit(c)
			g, err := gateway.New(c, gateway.Options{})
			if err == nil {
				g.Close()
				t.Fatal("New accepted an invalid configuration")
			}
			if !errors.Is(err, gateway.ErrInvalidConfig) {
				t.Fatalf("error %v is not ErrInvalidConfig", err)
			}
			var fe *config.FieldError
			found := false
			for _, p := range config.Problems(err) {
				if errors.As(p, &fe) && fe.Key == tc.key {
					found = true
				}
			}
			if !found {
				t.Fatalf("error %v does not name %s", err, tc.key)
			}
		})
	}
}

// validConfig is a single gateway's configuration with certificates in a
// temporary directory, every socket on an ephemeral loopback port.
func validConfig(t *testing.T) *config.Config {
	t.Helper()
	l, err := lab.New(context.Background(), lab.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	c := *l.Configs["euw-gw1"]
	l.Close()
	c.Admin.Listen = "127.0.0.11:0"
	return &c
}

// TestStartStopNoLeak starts a whole lab (four gateways), uses the admin
// endpoint, drains one gateway gracefully and kills the rest: no goroutine
// may outlive them.
func TestStartStopNoLeak(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	defer func() {
		// quic-go keeps a closed connection's ids (and so its transport's
		// goroutines) for a few round trips after the close: give them a
		// bounded time to go, then insist.
		deadline := time.Now().Add(10 * time.Second)
		for goleak.Find(ignore) != nil && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
		}
		goleak.VerifyNone(t, ignore)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	l, err := lab.New(ctx, lab.Config{Admin: true, Dir: t.TempDir(), Logger: labtest.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	l.Start()
	if err := l.WaitReady(ctx); err != nil {
		l.Close()
		t.Fatal(err)
	}
	g := l.Gateways["euw-gw1"]
	base := "http://" + g.AdminAddr()
	for path, want := range map[string]string{"/healthz": "ok", "/readyz": "ready", "/status": `"node": "euw-gw1"`, "/metrics": "mrgw_peer_connected"} {
		body := get(t, base+path)
		if !strings.Contains(body, want) {
			t.Errorf("%s: %q does not contain %q", path, body[:min(len(body), 200)], want)
		}
	}
	// Graceful stop of one member, then the others at once.
	sctx, scancel := context.WithTimeout(ctx, 10*time.Second)
	if err := g.Shutdown(sctx); err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	scancel()
	select {
	case <-g.Done():
	case <-ctx.Done():
		t.Fatal("Run did not return after Shutdown")
	}
	l.Close()
}

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s: %s: %s", url, resp.Status, b)
	}
	return string(b)
}

// TestReload: live keys apply, restart-only keys are refused by name.
func TestReload(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	l := labtest.Start(t, ctx, lab.Config{})
	g := l.Gateways["euw-gw1"]
	next := *g.Config()
	next.Limits.MaxFlows = 7
	next.Log.Level = "debug"
	next.Scheduler.Classes = append([]config.Class{}, next.Scheduler.Classes...)
	next.Scheduler.Classes = append(next.Scheduler.Classes, config.Class{Name: "bulk", Weight: 3})
	if err := g.Reload(&next); err != nil {
		t.Fatalf("live reload refused: %v", err)
	}
	if g.Config().Limits.MaxFlows != 7 {
		t.Fatal("limits.max_flows not applied")
	}
	bad := next
	bad.WAN.MTU = 2000
	err := g.Reload(&bad)
	if !errors.Is(err, gateway.ErrReload) || !strings.Contains(err.Error(), "wan.mtu") {
		t.Fatalf("reload of wan.mtu: %v, want ErrReload naming wan.mtu", err)
	}
	if g.Config().WAN.MTU == 2000 {
		t.Fatal("refused reload changed the running configuration")
	}
}
