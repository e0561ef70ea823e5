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
	// Numbers that integer keys used to truncate or wrap,
	// lists with empty items, a remote with fewer addresses than planes.
	f.Add([]byte("wan: {mtu: 4096.5, max_rate_bps: 1.5, paths_per_peer: .inf}\nlan: {max_rate_bps: true}\n"))
	f.Add([]byte("wan: {region_rate_bps: 2e8, max_rate_bps: -1}\n"))
	f.Add([]byte("limits: {memory_bytes: 99999999999999999999, max_flows: -1e300, flow_credit_bytes: 18446744073709551615}\n"))
	f.Add([]byte("limits: {memory_bytes: 1e12, max_flows: 1000000, flow_credit_bytes: 9223372036854775807}\n"))
	f.Add([]byte("gossip: {seeds: ',,,', keyring: ' , '}\ncontrol: {peer_names: 'a,,b,'}\n"))
	f.Add([]byte("wan: {planes: [{name: a, local: '127.0.0.1:1'}, {name: b, local: '127.0.0.1:2'}]}\nregions: [{name: r, gateways: [{name: g, control: 'h:1', wan: ['h:2']}]}]\n"))
	// Wildcard listeners with and without their advertise
	// addresses, which gossip announces.
	f.Add([]byte("control: {listen: '0.0.0.0:1', advertise: '192.0.2.1:1'}\nwan: {planes: [{name: a, local: '[::]:2'}, {name: b, local: '0.0.0.0:3', advertise: '[::]:3'}]}\n"))
	f.Add([]byte("control: {listen: '[::]:1', advertise: 'h:1'}\n"))

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

// FuzzEnv sets one MRGW_ variable to an arbitrary value over a valid file:
// whatever the variable and value, Parse must not panic, every problem must
// name a key (or the variable), and a configuration it accepts must validate.
// The seeds run with every plain `go test`.
func FuzzEnv(f *testing.F) {
	for _, s := range [][2]string{
		{"WAN_MTU", "1400"},
		{"WAN_MTU", "4096.5"},
		{"WAN_MTU", "01400"},
		{"WAN_MTU", "0x600"},
		{"WAN_MAX_RATE_BPS", "1.5"},
		{"LIMITS_MEMORY_BYTES", "99999999999999999999"},
		{"LIMITS_MEMORY_BYTES", "-9223372036854775809"},
		{"LIMITS_MAX_FLOWS", "1e3"},
		{"GOSSIP_SEEDS", ",,,"},
		{"GOSSIP_SEEDS", "10.0.0.1:7946,"},
		{"GOSSIP_KEYRING", " , ,"},
		{"CONTROL_PEER_NAMES", "gw2"},
		{"WAN_KEY_ROTATION", "5"},
		{"WAN_ECN", "maybe"},
		{"WAN_MTUU", "9000"},
		{"WAN_PLANES", "127.0.0.1:1"},
		{"REGIONS", "x"},
		{"", "x"},
		{"TEST_LOG", "1"},
	} {
		f.Add(s[0], s[1])
	}
	base, err := os.ReadFile(filepath.Join("testdata", "minimal.yaml"))
	if err != nil {
		f.Fatal(err)
	}
	dir := f.TempDir()
	writeCerts(f, dir, "gw1")
	f.Fuzz(func(t *testing.T, name, value string) {
		if strings.ContainsAny(name, "=\x00") || strings.Contains(value, "\x00") {
			t.Skip("not a possible environment variable")
		}
		t.Setenv("MRGW_"+name, value)
		c, err := Parse(base, "yaml", dir)
		if (c == nil) == (err == nil) {
			t.Fatalf("Parse returned config %v and error %v", c != nil, err)
		}
		if err != nil {
			for _, p := range Problems(err) {
				var fe *FieldError
				if !errors.As(p, &fe) || fe.Key == "" || fe.Msg == "" || strings.Contains(fe.Key, "\n") {
					t.Errorf("problem without a clear key: %q", p.Error())
				}
			}
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("Parse accepted a config that Validate refuses: %v", err)
		}
	})
}
