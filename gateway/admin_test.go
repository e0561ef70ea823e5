//go:build linux

package gateway_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mrgw/mrgw/config"
	"github.com/mrgw/mrgw/gateway"
)

const demoKey = "bHYDV+/5GBweqpewk0dctiqWKF+/evzgcq7YC811nps="

// startAdmin runs one gateway (no peers reachable) with opts and returns
// its admin base URL.
func startAdmin(t *testing.T, opts gateway.Options) string {
	t.Helper()
	cfg := validConfig(t)
	cfg.Gossip.Keyring = []string{demoKey}
	ln, err := net.Listen("tcp", "127.0.0.11:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Admin.Listen = ln.Addr().String()
	ln.Close()
	opts.Logger = slog.New(slog.DiscardHandler)
	g, err := gateway.New(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = g.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); g.Close(); <-done })
	base := "http://" + g.AdminAddr()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if resp, err := http.Get(base + "/healthz"); err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("admin endpoint not answering")
		}
	}
	return base
}

// TestAdminIndexConfigAndPprof: / lists every admin endpoint (and each
// answers), /config is the running configuration by key with the gossip
// keyring redacted, and /debug/pprof/ is served only when asked for.
func TestAdminIndexConfigAndPprof(t *testing.T) {
	base := startAdmin(t, gateway.Options{Pprof: true})
	index := get(t, base+"/")
	paths := regexp.MustCompile(`(?m)^(/\S*)`).FindAllString(index, -1)
	for _, want := range []string{"/metrics", "/healthz", "/readyz", "/status", "/config", "/debug/pprof/"} {
		if !strings.Contains(index, "\n"+want+" ") {
			t.Errorf("index does not list %s:\n%s", want, index)
		}
	}
	for _, p := range paths {
		if p == "/readyz" {
			continue // 503 until a peer is up
		}
		get(t, base+p)
	}
	body := get(t, base+"/config")
	if strings.Contains(body, demoKey) {
		t.Fatalf("/config shows the gossip key:\n%s", body)
	}
	var cfg map[string]any
	if err := json.Unmarshal([]byte(body), &cfg); err != nil {
		t.Fatal(err)
	}
	node, _ := cfg["node"].(map[string]any)
	gossip, _ := cfg["gossip"].(map[string]any)
	if node["name"] != "euw-gw1" || !reflect.DeepEqual(gossip["keyring"], []any{gateway.Redacted}) {
		t.Errorf("/config: node %v, gossip.keyring %v", node, gossip["keyring"])
	}
	if wan, _ := cfg["wan"].(map[string]any); wan["key_rotation"] == nil || strings.Trim(wan["key_rotation"].(string), "0123456789hms.") != "" {
		t.Errorf("wan.key_rotation %v, want a duration", wan["key_rotation"])
	}

	off := startAdmin(t, gateway.Options{})
	resp, err := http.Get(off + "/debug/pprof/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("/debug/pprof/ without Pprof: %s, want 404", resp.Status)
	}
	if strings.Contains(get(t, off+"/"), "pprof") {
		t.Error("index lists pprof when it is off")
	}
}

// TestEffectiveConfigRedactsEverySecret: every configuration key that
// looks like a secret is redacted or known not to be one, so that a new
// secret key cannot reach /config unnoticed.
func TestEffectiveConfigRedactsEverySecret(t *testing.T) {
	notSecret := map[string]bool{
		"wan.key_rotation":       true, // a duration
		"control.tls.key_file":   true, // a path; the key stays in the file
		"control.tls.cert_file":  true,
		"control.tls.ca_file":    true,
		"scheduler.classes.name": true,
	}
	secretish := regexp.MustCompile(`(^|[._])(key|keys|keyring|secret|password|passphrase|token|credentials?)([._]|$)`)
	var walk func(reflect.Type, string)
	walk = func(ty reflect.Type, path string) {
		for ty.Kind() == reflect.Slice || ty.Kind() == reflect.Pointer {
			ty = ty.Elem()
		}
		if ty.Kind() != reflect.Struct {
			if secretish.MatchString(path) && !notSecret[path] {
				t.Errorf("%s looks like a secret: redact it in /config (gateway/admin.go secretKeys) or list it here", path)
			}
			return
		}
		for i := range ty.NumField() {
			f := ty.Field(i)
			tag, _, _ := strings.Cut(f.Tag.Get("mapstructure"), ",")
			if tag == "" || tag == "-" {
				continue
			}
			p := tag
			if path != "" {
				p = path + "." + tag
			}
			if p == "gossip.keyring" || p == "lan.host_keys" {
				continue // redacted: checked below
			}
			walk(f.Type, p)
		}
	}
	walk(reflect.TypeFor[config.Config](), "")

	cfg := validConfig(t)
	cfg.Gossip.Keyring = []string{demoKey}
	const hostSecret = "c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0"
	cfg.LAN.HostKeys = []string{"trainers:" + hostSecret}
	out, err := json.Marshal(gateway.EffectiveConfig(cfg))
	if err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{demoKey, hostSecret} {
		if strings.Contains(string(out), secret) {
			t.Errorf("EffectiveConfig shows a secret: %s", out)
		}
	}
}
