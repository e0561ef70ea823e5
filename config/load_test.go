package config

import (
	"errors"
	"io/fs"
	"net/netip"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

func TestExamplesLoad(t *testing.T) {
	dir := examples(t)
	for _, gw := range exampleGateways {
		t.Run(gw, func(t *testing.T) {
			path := filepath.Join(dir, "two-region", gw+".yaml")
			if err := Check(path); err != nil {
				t.Fatalf("Check: %v", err)
			}
			c := mustLoad(t, path)
			if c.Node.Name != gw {
				t.Errorf("node.name = %q, want %q", c.Node.Name, gw)
			}
			if c.Path != path {
				t.Errorf("Path = %q, want %q", c.Path, path)
			}
			// Relative certificate paths resolve against the file's directory.
			want := filepath.Join(dir, "two-region", "certs", gw+".pem")
			if c.Control.TLS.CertFile != want {
				t.Errorf("control.tls.cert_file = %q, want %q", c.Control.TLS.CertFile, want)
			}
			if err := c.Validate(); err != nil {
				t.Errorf("Validate after Load: %v", err)
			}
		})
	}
}

// The four example gateways must be able to run on one machine and must
// describe each other consistently: no two share a socket, and what one file
// says about a remote gateway is what that gateway's own file says.
func TestExamplesFitTogether(t *testing.T) {
	dir := examples(t)
	byName := map[string]*Config{}
	for _, gw := range exampleGateways {
		byName[gw] = mustLoad(t, filepath.Join(dir, "two-region", gw+".yaml"))
	}
	owner := map[netip.AddrPort]string{}
	for _, gw := range exampleGateways {
		c := byName[gw]
		addrs := []string{c.LAN.Listen, c.Control.Listen, c.Gossip.Bind, c.Admin.Listen}
		for _, p := range c.WAN.Planes {
			addrs = append(addrs, p.Local)
		}
		for _, a := range addrs {
			ap := netip.MustParseAddrPort(a)
			if !ap.Addr().IsLoopback() {
				t.Errorf("%s: %s is not a loopback address", gw, a)
			}
			if other, dup := owner[ap]; dup {
				t.Errorf("%s: %s is also used by %s", gw, a, other)
			}
			owner[ap] = gw
		}
		var seeds []string
		for _, o := range exampleGateways {
			if o != gw {
				seeds = append(seeds, byName[o].Gossip.Bind)
			}
		}
		if !slices.Equal(c.Gossip.Seeds, seeds) {
			t.Errorf("%s: gossip.seeds = %v, want the other gateways %v", gw, c.Gossip.Seeds, seeds)
		}
		for _, r := range c.Regions {
			for _, rg := range r.Gateways {
				peer := byName[rg.Name]
				if peer == nil {
					t.Fatalf("%s: unknown remote gateway %q", gw, rg.Name)
				}
				if peer.Node.Region != r.Name {
					t.Errorf("%s: lists %s under %s, its file says %s", gw, rg.Name, r.Name, peer.Node.Region)
				}
				if rg.Control != peer.Control.Listen {
					t.Errorf("%s: %s control %s, its file listens on %s", gw, rg.Name, rg.Control, peer.Control.Listen)
				}
				var locals []string
				for _, p := range peer.WAN.Planes {
					locals = append(locals, p.Local)
				}
				if !slices.Equal(rg.WAN, locals) {
					t.Errorf("%s: %s wan %v, its planes are %v", gw, rg.Name, rg.WAN, locals)
				}
			}
		}
	}
}

func TestTOMLAndYAMLAgree(t *testing.T) {
	dir := examples(t)
	y := mustLoad(t, filepath.Join(dir, "two-region", "euw-gw1.yaml"))
	tm := mustLoad(t, filepath.Join(dir, "toml", "euw-gw1.toml"))
	y.Path, tm.Path = "", ""
	if !reflect.DeepEqual(y, tm) {
		t.Fatalf("YAML and TOML differ:\nyaml %+v\ntoml %+v", y, tm)
	}
}

func TestMinimalTakesDefaults(t *testing.T) {
	dir := testdataDir(t)
	c := mustLoad(t, filepath.Join(dir, "minimal.yaml"))
	d := Default()
	if c.WAN.MTU != 1024 || c.WAN.PathsPerPeer != 16 || c.WAN.KeyRotation != time.Hour || !c.WAN.ECN {
		t.Errorf("wan defaults not applied: %+v", c.WAN)
	}
	if !reflect.DeepEqual(c.Scheduler, d.Scheduler) || !reflect.DeepEqual(c.Limits, d.Limits) ||
		c.Log != d.Log || c.Admin != d.Admin || c.LAN.Listen != d.LAN.Listen || c.LAN.CongestionControl != d.LAN.CongestionControl ||
		c.LAN.MaxRateBps != d.LAN.MaxRateBps || c.LAN.AllowUnauthenticatedHosts {
		t.Errorf("defaults not applied:\ngot  %+v\nwant %+v", c, d)
	}
	if got := c.Gossip.Timings(); got.ProbeInterval != 5*time.Second || got.SuspicionMult != 6 {
		t.Errorf("default gossip timings = %+v, want memberlist's WAN profile", got)
	}
}

// Each broken file gives exactly the problems listed, each naming its key.
func TestBadConfigs(t *testing.T) {
	dir := testdataDir(t)
	cases := []struct {
		file string
		want []string // one substring per expected problem, in order
	}{
		{"misspelt-key.yaml", []string{`wan.mtuu: unknown key (did you mean "mtu"?)`}},
		{"bad-address.yaml", []string{`wan.planes[1].local: "10.0.0.300:0" is not an IP address`}},
		{"mtu-zero.yaml", []string{"wan.mtu: 0 is out of range 512..65000"}},
		{"duplicate-plane.yaml", []string{`wan.planes[1].name: "p0" is also the name of wan.planes[0]`}},
		{"bad-keyring.yaml", []string{
			"gossip.keyring[0]: is not valid base64",
			"gossip.keyring[1]: decodes to 5 bytes; a key must be 16, 24 or 32 bytes",
		}},
		{"missing-cert.yaml", []string{"control.tls.cert_file: file ", "no-such-file.pem\" does not exist"}},
		{"unknown-controller.yaml", []string{
			`wan.congestion_control: "cubic" is not one of longrtt-htcp, longrtt-scalable, fixed`,
		}},
		{"own-region.yaml", []string{`regions[0].name: "r1" is this gateway's own region`}},
		{"bad-log-level.yaml", []string{`log.level: "verbose" is not one of debug, info, warn, error`}},
		{"bad-type.yaml", []string{`wan.mtu: "big" is not an integer`}},
		{"fraction.yaml", []string{"wan.mtu: 4096.5 is not an integer", "wan.max_rate_bps: 1.5 is not an integer"}},
		{"overflow.yaml", []string{
			"limits.memory_bytes: 1e+20 is too large for an integer",
			"limits.flow_credit_bytes: 18446744073709551615 is too large for an integer",
		}},
		{"memory-too-large.yaml", []string{"limits.memory_bytes: 9223372036854775807 is more than the maximum 1099511627776 (1 TiB)"}},
		{"remote-wan-short.yaml", []string{"regions[0].gateways[0].wan: has 1 address but wan.planes has 2"}},
		{"wildcard-no-advertise.yaml", []string{
			`wan.planes[0].advertise: is required when wan.planes[0].local ("0.0.0.0:15000") listens on every interface`,
			`wan.planes[1].advertise: "[::]:15001" is the unspecified address`,
			`control.advertise: is required when control.listen ("0.0.0.0:7443") listens on every interface`,
		}},
		{"empty-list-items.yaml", []string{"gossip.seeds: item 1 of the 4 comma-separated items is empty"}},
		{"malformed.yaml", []string{"line 5: did not find expected key"}},
		{"malformed.toml", []string{"line 5, column"}},
	}
	for _, tc := range cases {
		t.Run(tc.file, func(t *testing.T) {
			path := filepath.Join(dir, "bad", tc.file)
			c, err := Load(path)
			if err == nil {
				t.Fatalf("Load accepted %s: %+v", tc.file, c)
			}
			if c != nil {
				t.Errorf("Load returned a Config with an error")
			}
			if !strings.HasPrefix(err.Error(), path+": ") {
				t.Errorf("error does not start with the file name: %v", err)
			}
			got := problemStrings(err)
			// The missing-cert case checks one problem with two substrings.
			if tc.file == "missing-cert.yaml" {
				if len(got) != 1 || !containsAll(got[0], tc.want...) {
					t.Fatalf("problems = %q, want one containing %q", got, tc.want)
				}
				return
			}
			if len(got) != len(tc.want) {
				t.Fatalf("problems = %q, want %d: %q", got, len(tc.want), tc.want)
			}
			for i := range got {
				if !strings.Contains(got[i], tc.want[i]) {
					t.Errorf("problem %d = %q, want it to contain %q", i, got[i], tc.want[i])
				}
			}
			if err := Check(path); err == nil || err.Error() != mustErr(Load(path)).Error() {
				t.Errorf("Check and Load disagree: %v", err)
			}
		})
	}
}

func mustErr(_ *Config, err error) error { return err }

// A syntax error is a ParseError carrying the line.
func TestParseErrorHasLine(t *testing.T) {
	_, err := Parse([]byte("node:\n  name: a\n  region: [\n"), "yaml", "")
	var pe *ParseError
	if !errors.As(err, &pe) || pe.Line == 0 {
		t.Fatalf("err = %v, want a ParseError with a line", err)
	}
}

func TestAllProblemsReported(t *testing.T) {
	yaml := `
node: {name: gw1, region: r1}
wan:
  mtu: 70000
  paths_per_peer: 0
  planes: [{name: p0, local: "127.0.0.1:15000"}, {name: p0, local: "nonsense"}]
control:
  listen: 127.0.0.1:70000
  tls: {ca_file: ca.pem, cert_file: c.pem, key_file: k.pem}
scheduler:
  default_class: bulk
  classes: [{name: gold, weight: 0}]
log: {format: xml}
`
	_, err := Parse([]byte(yaml), "yaml", "", SkipFileChecks())
	got := strings.Join(problemStrings(err), "\n")
	for _, want := range []string{
		`wan.planes[1].name: "p0" is also the name of wan.planes[0]`,
		`wan.planes[1].local: "nonsense" is not host:port (missing port in address)`,
		"wan.paths_per_peer: 0 is out of range 1..1024",
		"wan.mtu: 70000 is out of range 512..65000",
		`control.listen: "127.0.0.1:70000": port 70000 is out of range 1..65535`,
		"scheduler.classes[0].weight: 0 is out of range 1..1000000",
		`scheduler.default_class: "bulk" is not one of scheduler.classes`,
		`log.format: "xml" is not one of text, json`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing problem %q in:\n%s", want, got)
		}
	}
}

func TestSkipFileChecks(t *testing.T) {
	dir := testdataDir(t)
	path := filepath.Join(dir, "bad", "missing-cert.yaml")
	if err := Check(path); err == nil {
		t.Fatal("missing certificate accepted")
	}
	if err := Check(path, SkipFileChecks()); err != nil {
		t.Fatalf("with SkipFileChecks: %v", err)
	}
}

func TestLoadFileErrors(t *testing.T) {
	dir := t.TempDir()
	_, err := Load(filepath.Join(dir, "absent.yaml"))
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("absent file: %v, want fs.ErrNotExist", err)
	}
	_, err = Load(filepath.Join(dir, "gw.json"))
	if err == nil || !strings.Contains(err.Error(), "use .yaml, .yml or .toml") {
		t.Errorf("unknown extension: %v", err)
	}
}

func TestEnvOverridesKeyAbsentFromFile(t *testing.T) {
	dir := testdataDir(t)
	t.Setenv("MRGW_WAN_PATHS_PER_PEER", "64")                          // not in the file
	t.Setenv("MRGW_LOG_LEVEL", "debug")                                // not in the file
	t.Setenv("MRGW_GOSSIP_SEEDS", "127.0.0.5:7946, gw9.example:7946,") // a list
	t.Setenv("MRGW_NODE_NAME", "gw1-env")                              // in the file: env wins
	t.Setenv("MRGW_CONTROL_TLS_KEY_FILE", "certs/gw1.pem")             // relative: against the file's dir
	c := mustLoad(t, filepath.Join(dir, "minimal.yaml"))
	if c.WAN.PathsPerPeer != 64 {
		t.Errorf("wan.paths_per_peer = %d, want 64 from MRGW_WAN_PATHS_PER_PEER", c.WAN.PathsPerPeer)
	}
	if c.Log.Level != "debug" {
		t.Errorf("log.level = %q, want debug", c.Log.Level)
	}
	if want := []string{"127.0.0.5:7946", "gw9.example:7946"}; !slices.Equal(c.Gossip.Seeds, want) {
		t.Errorf("gossip.seeds = %q, want %q", c.Gossip.Seeds, want)
	}
	if c.Node.Name != "gw1-env" {
		t.Errorf("node.name = %q, want gw1-env", c.Node.Name)
	}
	if want := filepath.Join(dir, "certs", "gw1.pem"); c.Control.TLS.KeyFile != want {
		t.Errorf("control.tls.key_file = %q, want %q", c.Control.TLS.KeyFile, want)
	}
}

func TestEnvBadValueNamesKey(t *testing.T) {
	dir := testdataDir(t)
	t.Setenv("MRGW_WAN_MTU", "lots")
	t.Setenv("MRGW_WAN_KEY_ROTATION", "hourly")
	_, err := Load(filepath.Join(dir, "minimal.yaml"))
	got := problemStrings(err)
	want := []string{
		`wan.mtu: "lots" is not an integer`,
		`wan.key_rotation: "hourly" is not a duration such as "30s" or "1h"`,
	}
	if len(got) != len(want) {
		t.Fatalf("problems = %q, want %q", got, want)
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("problem %q, want prefix %q", got[i], want[i])
		}
	}
}

func TestFlagsOverride(t *testing.T) {
	dir := examples(t)
	fs := pflag.NewFlagSet("mrgw", pflag.ContinueOnError)
	fs.String("config", "", "not a key: ignored by WithFlags")
	BindFlags(fs)
	BindFlags(fs) // a second call must not panic on existing flags
	t.Setenv("MRGW_LOG_LEVEL", "error")
	if fs.Lookup("regions.rtt_hint") != nil || fs.Lookup("wan.planes") != nil {
		t.Error("lists of tables and their keys cannot be flags")
	}
	if err := fs.Parse([]string{
		"--config=x", "--log.level=debug", "--wan.mtu=9000", "--wan.ecn=false",
		"--gossip.seeds=127.0.0.5:7946,127.0.0.6:7946",
	}); err != nil {
		t.Fatal(err)
	}
	c := mustLoad(t, filepath.Join(dir, "two-region", "euw-gw1.yaml"), WithFlags(fs))
	if c.Log.Level != "debug" {
		t.Errorf("log.level = %q, want debug (a flag beats the environment)", c.Log.Level)
	}
	if c.WAN.MTU != 9000 || c.WAN.ECN {
		t.Errorf("wan.mtu = %d, wan.ecn = %v; want 9000, false", c.WAN.MTU, c.WAN.ECN)
	}
	if want := []string{"127.0.0.5:7946", "127.0.0.6:7946"}; !slices.Equal(c.Gossip.Seeds, want) {
		t.Errorf("gossip.seeds = %q, want %q", c.Gossip.Seeds, want)
	}
	// A flag the user did not set leaves the file's value alone, even though
	// the flag's own default differs (1h).
	if c.WAN.KeyRotation != 10*time.Minute {
		t.Errorf("wan.key_rotation = %s, want the file's 10m", c.WAN.KeyRotation)
	}
}

func TestBindFlagsCoversEveryOverridableKey(t *testing.T) {
	fs := pflag.NewFlagSet("mrgw", pflag.ContinueOnError)
	BindFlags(fs)
	for _, k := range Keys() {
		f := fs.Lookup(k.Name)
		if (k.Env != "") != (f != nil) {
			t.Errorf("key %s: env %q but flag %v", k.Name, k.Env, f != nil)
		}
	}
}

func TestTypeErrors(t *testing.T) {
	yaml := `
wan:
  key_rotation: 5
  planes: [oops]
gossip:
  probe_interval: 0
regions: 7
log: {level: [debug]}
`
	_, err := Parse([]byte(yaml), "yaml", "", SkipFileChecks())
	got := strings.Join(problemStrings(err), "\n")
	for _, want := range []string{
		`wan.key_rotation: 5 is not a duration such as "30s" or "1h" (a number without a unit)`,
		`wan.planes[0]: is not a table`,
		`regions[0]: is not a table`,
		`log.level: a list is not a string`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in:\n%s", want, got)
		}
	}
	// probe_interval: 0 is "unset", not an error: nothing about it.
	if strings.Contains(got, "probe_interval") {
		t.Errorf("a bare 0 duration was refused:\n%s", got)
	}
}

func TestUnknownKeySuggestions(t *testing.T) {
	yaml := "nodes: {name: a}\ngossip: {probe_intervall: 1s}\nwan:\n  planes: [{name: p0, locale: '127.0.0.1:1'}]\n"
	_, err := Parse([]byte(yaml), "yaml", "", SkipFileChecks())
	got := strings.Join(problemStrings(err), "\n")
	for _, want := range []string{
		`nodes: unknown key (did you mean "node"?)`,
		`gossip.probe_intervall: unknown key (did you mean "probe_interval"?)`,
		`wan.planes[0].locale: unknown key (did you mean "local"?)`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in:\n%s", want, got)
		}
	}
}
