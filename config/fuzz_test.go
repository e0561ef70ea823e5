package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzParse feeds arbitrary YAML to the whole loading pipeline. Whatever the
// input, Parse must not panic, must return either a Config or an error, and
// every problem must say where it is. A Config it accepts must validate again
// and be reloadable onto itself with no change. The seeds (the examples and
// every broken file in testdata) run with every plain `go test`.
func FuzzParse(f *testing.F) {
	var seeds []string
	for _, pattern := range []string{"examples/*/*.yaml", "testdata/*.yaml", "testdata/bad/*.yaml"} {
		m, err := filepath.Glob(pattern)
		if err != nil {
			f.Fatal(err)
		}
		seeds = append(seeds, m...)
	}
	if len(seeds) < 10 {
		f.Fatalf("only %d seed files found", len(seeds))
	}
	for _, s := range seeds {
		data, err := os.ReadFile(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte(""))
	f.Add([]byte("node: ~\nwan: {planes: [~, {}]}\n"))
	f.Add([]byte("regions: [{gateways: [{wan: ['[::1]:1', ':', '1.2.3.4:99999']}]}]\n"))
	f.Add([]byte("gossip: {keyring: ['', '=', 'AAAA'], profile: custom, probe_interval: -1s}\n"))

	// Certificates for every gateway a seed names, relative to dir.
	dir := f.TempDir()
	writeCerts(f, dir, append([]string{"gw1"}, exampleGateways...)...)

	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data, "yaml", dir)
		if (c == nil) == (err == nil) {
			t.Fatalf("Parse returned config %v and error %v", c != nil, err)
		}
		if err != nil {
			problems := Problems(err)
			if len(problems) == 0 {
				t.Fatalf("error without problems: %v", err)
			}
			for _, p := range problems {
				var fe *FieldError
				var pe *ParseError
				switch {
				case errors.As(p, &fe):
					if fe.Key == "" || fe.Msg == "" || strings.Contains(fe.Key, "\n") {
						t.Errorf("problem without a clear key: %q", p.Error())
					}
				case errors.As(p, &pe):
					if pe.Msg == "" {
						t.Errorf("parse error without a message: %#v", pe)
					}
				default:
					t.Errorf("problem of unexpected type %T: %v", p, p)
				}
			}
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("Parse accepted a config that Validate refuses: %v", err)
		}
		if changed, err := Reloadable(c, c); len(changed) != 0 || err != nil {
			t.Fatalf("Reloadable(c, c) = %v, %v", changed, err)
		}
	})
}
