package gateway

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/pprof"
	"reflect"
	"strings"
	"time"

	"github.com/mrgw/mrgw/config"
)

// adminEndpoint is one path the admin server answers, for its index page.
type adminEndpoint struct{ path, what string }

func (g *Gateway) adminEndpoints() []adminEndpoint {
	eps := []adminEndpoint{
		{"/metrics", "Prometheus metrics (docs/OPERATIONS.md, Metrics)"},
		{"/healthz", "200 while the process runs"},
		{"/readyz", "200 once the gateway carries traffic (gossip joined, a WAN connection up, not draining); 503 with the reason otherwise"},
		{"/status", "peers, paths, members, flows and memory as JSON (what mrgw status prints)"},
		{"/config", "the configuration the gateway runs with, after reloads, as JSON; secrets redacted"},
	}
	if g.opts.Pprof {
		eps = append(eps, adminEndpoint{"/debug/pprof/", "Go runtime profiles (enabled by mrgw run --pprof)"})
	}
	return eps
}

// adminExtras adds the index page, /config and, when Options.Pprof is set,
// /debug/pprof/ to the admin server's mux.
func (g *Gateway) adminExtras(mux *http.ServeMux) {
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		cfg := g.Config()
		fmt.Fprintf(w, "mrgw gateway %s (region %s)\n\n", cfg.Node.Name, cfg.Node.Region)
		for _, e := range g.adminEndpoints() {
			fmt.Fprintf(w, "%-14s %s\n", e.path, e.what)
		}
	})
	mux.HandleFunc("GET /config", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(EffectiveConfig(g.Config()))
	})
	if g.opts.Pprof {
		mux.HandleFunc("GET /debug/pprof/", pprof.Index)
		mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	}
}

// secretKeys are the configuration keys whose values never leave the
// process: /config shows how many there are, not what they are.
var secretKeys = map[string]bool{
	"gossip.keyring": true,
	"lan.host_keys":  true,
}

// Redacted replaces a secret value in EffectiveConfig.
const Redacted = "<redacted>"

// EffectiveConfig is cfg as configuration keys (the names of the file and
// docs/CONFIG.md) to values, durations as Go durations, with every secret
// key's values replaced by [Redacted].
func EffectiveConfig(cfg *config.Config) map[string]any {
	out, _ := keysOf(reflect.ValueOf(*cfg), "").(map[string]any)
	return out
}

func keysOf(v reflect.Value, path string) any {
	if secretKeys[path] {
		if v.Kind() == reflect.Slice {
			r := make([]string, v.Len())
			for i := range r {
				r[i] = Redacted
			}
			return r
		}
		return Redacted
	}
	if v.Type() == reflect.TypeFor[time.Duration]() {
		return time.Duration(v.Int()).String()
	}
	switch v.Kind() {
	case reflect.Struct:
		m := map[string]any{}
		for i := range v.NumField() {
			f := v.Type().Field(i)
			tag, _, _ := strings.Cut(f.Tag.Get("mapstructure"), ",")
			if !f.IsExported() || tag == "" || tag == "-" {
				continue
			}
			key := tag
			if path != "" {
				key = path + "." + tag
			}
			m[tag] = keysOf(v.Field(i), key)
		}
		return m
	case reflect.Slice:
		if v.IsNil() {
			return []any{}
		}
		r := make([]any, v.Len())
		for i := range r {
			r[i] = keysOf(v.Index(i), path)
		}
		return r
	case reflect.Map:
		m := map[string]any{}
		for _, k := range v.MapKeys() {
			m[fmt.Sprint(k.Interface())] = keysOf(v.MapIndex(k), path+"."+fmt.Sprint(k.Interface()))
		}
		return m
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return nil
		}
		return keysOf(v.Elem(), path)
	}
	return v.Interface()
}
