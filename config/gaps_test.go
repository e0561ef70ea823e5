package config

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// Regression tests for validation gaps: numbers, empty list items, addresses. Each failed on
// the code before the fix.

// parseMinimal parses testdata/minimal.yaml with extra appended (its
// sections must not be in minimal.yaml already) and returns the problems.
func parseMinimal(t *testing.T, extra string) (*Config, []string) {
	t.Helper()
	base, err := os.ReadFile(filepath.Join("testdata", "minimal.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(extra, "lan:") {
		// The extra YAML brings its own lan table: drop minimal's (the
		// last), whose host key the extra must then restate or opt out of.
		base = base[:bytes.Index(base, []byte("\nlan:\n"))+1]
	}
	c, err := Parse(append(base, "\n"+extra+"\n"...), "yaml", "", SkipFileChecks())
	return c, problemStrings(err)
}

func wantProblems(t *testing.T, got []string, want ...string) {
	t.Helper()
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("problems:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

// A number with a fraction for an integer key was truncated (mtu 4096.5
// loaded as 4096, max_rate_bps 1.5 as 1).
func TestIntegerKeysRefuseFractions(t *testing.T) {
	_, got := parseMinimal(t, "lan: {max_rate_bps: 1.5, allow_unauthenticated_hosts: true}\nlimits: {max_flows: 100.25}")
	wantProblems(t, got,
		"lan.max_rate_bps: 1.5 is not an integer",
		"limits.max_flows: 100.25 is not an integer")

	base, _ := os.ReadFile(filepath.Join("testdata", "minimal.yaml"))
	withMTU := bytes.Replace(base, []byte("wan:\n"), []byte("wan:\n  mtu: 4096.5\n  max_rate_bps: 1.5\n"), 1)
	_, err := Parse(withMTU, "yaml", "", SkipFileChecks())
	wantProblems(t, problemStrings(err),
		"wan.mtu: 4096.5 is not an integer",
		"wan.max_rate_bps: 1.5 is not an integer")

	// TOML has floats too.
	_, err = Parse([]byte("[wan]\nmtu = 4096.5\n"), "toml", "", SkipFileChecks())
	if !slices.Contains(problemStrings(err), "wan.mtu: 4096.5 is not an integer") {
		t.Errorf("TOML: %v", err)
	}

	// A boolean was 1.
	_, got = parseMinimal(t, "lan: {max_rate_bps: true, allow_unauthenticated_hosts: true}")
	wantProblems(t, got, "lan.max_rate_bps: true is not an integer")

	// A float without a fraction is a fine integer: YAML reads 1e9 as one.
	c, got := parseMinimal(t, "limits: {memory_bytes: 1e9, flow_credit_bytes: 4194304.0}")
	wantProblems(t, got)
	if c.Limits.MemoryBytes != 1e9 || c.Limits.FlowCreditBytes != 4194304 {
		t.Errorf("limits = %+v", c.Limits)
	}
}

// A number too large for int64 wrapped around and was reported as
// "-9223372036854775808 is less than the minimum" (or "-1" for a uint64).
func TestIntegerOverflowIsReportedAsSuch(t *testing.T) {
	_, got := parseMinimal(t, "limits: {memory_bytes: 99999999999999999999, flow_credit_bytes: 18446744073709551615, max_flows: -99999999999999999999}")
	wantProblems(t, got,
		"limits.memory_bytes: 1e+20 is too large for an integer (the largest is 9223372036854775807)",
		"limits.max_flows: -1e+20 is too small for an integer (the smallest is -9223372036854775808)",
		"limits.flow_credit_bytes: 18446744073709551615 is too large for an integer (the largest is 9223372036854775807)")
	for _, p := range got {
		if strings.Contains(p, "-9223372036854775808 is") || strings.Contains(p, "-1 is") {
			t.Errorf("wrapped value reported: %s", p)
		}
	}

	t.Setenv("MRGW_LIMITS_MEMORY_BYTES", "99999999999999999999")
	_, got = parseMinimal(t, "")
	wantProblems(t, got, `limits.memory_bytes: "99999999999999999999" is too large for an integer (the largest is 9223372036854775807)`)
}

// Integers from the environment were read in base 0: MRGW_WAN_MTU=01400 was
// 768 (octal).
func TestEnvIntegersAreDecimal(t *testing.T) {
	t.Setenv("MRGW_WAN_MTU", "01400")
	c, got := parseMinimal(t, "")
	wantProblems(t, got)
	if c.WAN.MTU != 1400 {
		t.Errorf("MRGW_WAN_MTU=01400 gave wan.mtu %d, want 1400", c.WAN.MTU)
	}
	t.Setenv("MRGW_WAN_MTU", "0x600")
	_, got = parseMinimal(t, "")
	wantProblems(t, got, `wan.mtu: "0x600" is not an integer (write it in decimal digits)`)
	t.Setenv("MRGW_WAN_MTU", "1400.5")
	_, got = parseMinimal(t, "")
	wantProblems(t, got, `wan.mtu: "1400.5" is not an integer (write it in decimal digits)`)
}

// limits.memory_bytes had no upper bound.
func TestMemoryBytesBounded(t *testing.T) {
	_, got := parseMinimal(t, "limits: {memory_bytes: 1099511627777}")
	wantProblems(t, got, "limits.memory_bytes: 1099511627777 is more than the maximum 1099511627776 (1 TiB)")
	_, got = parseMinimal(t, "limits: {memory_bytes: 1099511627776, flow_credit_bytes: 1099511627776}")
	wantProblems(t, got)
}

// A misspelt MRGW_ variable was ignored, where a misspelt key in the file is
// an error.
func TestUnknownEnvVariables(t *testing.T) {
	t.Setenv("MRGW_WAN_MTUU", "9000")
	t.Setenv("MRGW_MTU", "9000")
	t.Setenv("MRGW_WAN_PLANES", "127.0.0.1:1")
	t.Setenv("MRGW_NOTHING_LIKE_A_KEY", "x")
	t.Setenv("MRGW_TEST_LOG", "1") // the gateway tests' own switch: not configuration
	_, got := parseMinimal(t, "")
	wantProblems(t, got,
		"MRGW_MTU: unknown environment variable: it sets no key (did you mean MRGW_WAN_MTU?)",
		"MRGW_NOTHING_LIKE_A_KEY: unknown environment variable: it sets no key",
		"MRGW_WAN_MTUU: unknown environment variable: it sets no key (did you mean MRGW_WAN_MTU?)",
		"MRGW_WAN_PLANES: wan.planes is a list of tables and can only be set in the file")
}

// Every MRGW_ variable the repository reads outside package config is
// either a key's or under a toolEnv prefix; otherwise a developer who sets
// it for a test would find every configuration refused.
func TestEveryMRGWVariableIsKnown(t *testing.T) {
	for _, p := range toolEnv {
		for _, k := range Keys() {
			if strings.HasPrefix(k.Env, p) {
				t.Errorf("key %s has variable %s under the tool prefix %s", k.Name, k.Env, p)
			}
		}
	}
	known := map[string]bool{}
	for _, k := range Keys() {
		known[k.Env] = true
	}
	re := regexp.MustCompile(`"(MRGW_[A-Z0-9_]*[A-Z0-9])"`)
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata" || path == filepath.Join("..", "config")) {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range re.FindAllSubmatch(src, -1) {
			name := string(m[1])
			if !known[name] && !slices.ContainsFunc(toolEnv, func(p string) bool { return strings.HasPrefix(name, p) }) {
				t.Errorf("%s reads %s, which is neither a configuration variable nor under a prefix of config.toolEnv: "+
					"add its prefix there, or every configuration is refused while it is set", path, name)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// MRGW_GOSSIP_SEEDS=",,," (and the same string in a file) became an empty
// list, silently replacing the file's seeds.
func TestEmptyListItemsRefused(t *testing.T) {
	t.Setenv("MRGW_GOSSIP_SEEDS", ",,,")
	_, got := parseMinimal(t, "")
	wantProblems(t, got, "gossip.seeds: item 1 of the 4 comma-separated items is empty")

	t.Setenv("MRGW_GOSSIP_SEEDS", "127.0.0.5:7946,,127.0.0.6:7946")
	_, got = parseMinimal(t, "")
	wantProblems(t, got, "gossip.seeds: item 2 of the 3 comma-separated items is empty")

	// One trailing comma is allowed.
	t.Setenv("MRGW_GOSSIP_SEEDS", "127.0.0.5:7946,")
	c, got := parseMinimal(t, "")
	wantProblems(t, got)
	if !slices.Equal(c.Gossip.Seeds, []string{"127.0.0.5:7946"}) {
		t.Errorf("gossip.seeds = %q", c.Gossip.Seeds)
	}
	os.Unsetenv("MRGW_GOSSIP_SEEDS")

	_, got = parseMinimal(t, "gossip: {seeds: ' , '}")
	wantProblems(t, got, "gossip.seeds: item 1 of the 2 comma-separated items is empty")

	// The keyring is a secret: its value is never quoted.
	secret := "bHYDV+/5GBweqpewk0dctiqWKF+/evzgcq7YC811nps="
	t.Setenv("MRGW_GOSSIP_KEYRING", secret+",,")
	_, got = parseMinimal(t, "")
	wantProblems(t, got, "gossip.keyring: item 2 of the 3 comma-separated items is empty")
}

// A remote gateway's wan list could be shorter than wan.planes: path i
// leaves from plane i mod n and goes to address i mod m, so paths crossed
// planes.
func TestRemoteWANPerPlane(t *testing.T) {
	c := minimal(t)
	c.WAN.Planes = append(c.WAN.Planes, Plane{Name: "p1", Local: "127.0.0.1:15001"})
	var got []string
	for _, fe := range c.check(false) {
		got = append(got, fe.Error())
	}
	wantProblems(t, got, "regions[0].gateways[0].wan: has 1 address but wan.planes has 2: "+
		"list one per plane, in the order of wan.planes, or paths cross from one plane to another")
	c.Regions[0].Gateways[0].WAN = append(c.Regions[0].Gateways[0].WAN, "127.0.0.2:15001")
	if err := c.Validate(); err != nil && strings.Contains(err.Error(), ".wan") {
		t.Errorf("one address per plane refused: %v", err)
	}
}

// With the example's limits (256 MiB, 4 MiB credit) only 64 flows are ever
// admitted; a max_flows above that is warned about, naming the keys and the
// reachable figure.
func TestMaxFlowsBeyondMemoryWarns(t *testing.T) {
	c := minimal(t)
	c.Limits = Limits{MemoryBytes: 256 << 20, MaxFlows: 1024, FlowCreditBytes: 4 << 20}
	if n := c.Limits.FullCreditFlows(); n != 64 {
		t.Errorf("FullCreditFlows = %d, want 64", n)
	}
	w := c.Warnings()
	if len(w) != 1 || w[0].Key != "limits.max_flows" ||
		w[0].Msg != "1024 flows cannot all be admitted: each reserves limits.flow_credit_bytes (4194304) of "+
			"limits.memory_bytes (268435456), which holds 64 at full credit, and further flows are refused with no capacity; "+
			"lower limits.max_flows to 64, lower limits.flow_credit_bytes to 262144 or raise limits.memory_bytes to 4294967296" {
		t.Errorf("warnings = %v", w)
	}
	c.Limits.MaxFlows = 64
	if w := c.Warnings(); len(w) != 0 {
		t.Errorf("max_flows that fits: warnings %v", w)
	}
	// A credit that would fall below wan.mtu is not suggested.
	c.Limits = Limits{MemoryBytes: 1 << 20, MaxFlows: 1000, FlowCreditBytes: 1 << 20}
	c.WAN.MTU = 4096 // above the 1048 bytes that would be suggested
	if w := c.Warnings(); len(w) != 1 || strings.Contains(w[0].Msg, "lower limits.flow_credit_bytes") {
		t.Errorf("warnings = %v", w)
	}
}

// The shipped examples validate without warnings.
func TestExamplesHaveNoWarnings(t *testing.T) {
	dir := examples(t)
	files, _ := filepath.Glob(filepath.Join(dir, "*", "*.yaml"))
	toml, _ := filepath.Glob(filepath.Join(dir, "*", "*.toml"))
	for _, f := range append(files, toml...) {
		if w := mustLoad(t, f).Warnings(); len(w) != 0 {
			t.Errorf("%s: warnings %v", f, w)
		}
	}
}
