package layering

import (
	"bytes"
	"os/exec"
	"sort"
	"strings"
	"testing"
)

const module = "github.com/mrgw/mrgw/"

// rank is each package's floor in the stack. A package may import (without
// its tests) only packages on a strictly lower floor, so every import points
// down. A new package must be given a floor here: the test fails for a
// package it does not know, so that placing it is a decision, not an
// accident. Prefix entries (ending in "/") give a default to a whole tree.
var rank = map[string]int{
	// -1: the unit types (bits and bytes per second), under everything:
	// the leaves' boundaries carry them.
	"units": -1,

	// 0: leaves. They import nothing of the project but the unit types.
	"internal/":           0,
	"internal/netns":      0, // the load tests' namespace helpers (stdlib and x/sys only)
	"flowctl":             0,
	"pathmgr":             0,
	"cc":                  0,
	"sim":                 0,
	"netio/replay":        0,
	"tunnel/control/wire": 0,
	"tunnel/pki":          0,
	"loadtest/recovery":   0,
	"deploy":              0,

	// 1: the protocol core and the lowest adapters.
	"cc/longrtt":     1,
	"config":         1,
	"metaroce":       1,
	"region":         1,
	"netem":          1,
	"netio/udp":      1,
	"netio/seal":     1,
	"tunnel/control": 1,

	// 2: the endpoint driver, the metric catalogue, the conformance suite
	// (black-box: wire bytes only), the TUN emulator.
	"netio":             2,
	"metrics":           2,
	"conformance":       2,
	"loadtest/tunemu":   2,
	"tunnel/tunneltest": 2,

	// 3: what is built on the driver.
	"tunnel":                3,
	"host":                  3,
	"sim/scenario":          3,
	"conformance/responder": 3,
	"netio/netiotest":       3,

	// 4: the daemon, and the streams hosts run over their flows.
	"gateway": 4,
	"stream":  4,

	// 5: what runs over streams: file copy.
	"filecopy": 5,

	// 5-6: the lab: the in-process two-region lab and the shared bulk
	// transfer loop, then the load tests.
	"loadtest/lab":  5,
	"forward":       5,
	"loadtest/bulk": 5,
	"loadtest/":     6,
	// The relay's scenario scripts run on the lab (tests only).
	"gateway/relayscript": 6,

	// 7: binaries, and the command-line helpers they share.
	"internal/cli": 7,
	"cmd/":         8,
}

// forbidden are the named rules the package docs state, checked on the
// transitive (non-test) dependencies: they hold even through a package
// in between.
var forbidden = []struct {
	pkg  string   // package, or tree with a trailing "/"
	deps []string // packages or trees it must never depend on
	why  string
}{
	{"metaroce", []string{"tunnel", "tunnel/", "gateway", "region", "config", "netio", "netio/", "host", "metrics"},
		"the protocol core is a pure state machine: no sockets, no daemon, no configuration"},
	{"cc", []string{"metaroce"}, "controllers know nothing of the transport that drives them"},
	{"cc/", []string{"metaroce"}, "controllers know nothing of the transport that drives them"},
	{"sim", []string{""}, "the simulator is generic: it imports nothing of the project"},
	{"region", []string{"gateway", "config"}, "gossip knows nothing of the daemon or its configuration"},
	{"config", []string{"gateway"}, "configuration is validated without the daemon"},
	{"conformance", []string{"metaroce", "pathmgr"}, "the suite judges any implementation by its wire bytes only"},
	{"host", []string{"tunnel", "tunnel/", "region", "config", "gateway"}, "a host speaks MetaRoCE to its gateways: no tunnel, gossip or daemon configuration"},
	{"metrics", []string{"gateway", "netio", "netio/", "tunnel", "tunnel/"}, "the catalogue reads counters; the daemon feeds it"},
	{"netem", []string{"netio", "netio/", "metaroce", "tunnel", "tunnel/", "gateway"}, "the emulator models links; it knows no protocol"},
	{"cc/longrtt", []string{"metaroce"}, "controllers know nothing of the transport that drives them"},
}

// external are third-party imports that the sans-I/O packages never pull
// in (sockets, metrics, configuration, gossip).
var external = []struct {
	pkgs []string
	deps []string
}{
	{[]string{"metaroce", "cc", "cc/longrtt", "pathmgr", "sim", "flowctl"},
		[]string{"net", "github.com/quic-go/", "github.com/prometheus/", "github.com/spf13/", "github.com/hashicorp/", "golang.org/x/net/"}},
}

// production packages never depend on the lab: emulators, load tests,
// simulations and test doubles stay out of the daemon.
var production = []string{"gateway", "host", "tunnel", "netio", "region", "config", "metrics", "metaroce", "cc", "pathmgr", "flowctl"}
var labOnly = []string{"netem", "internal/netns", "loadtest/", "sim", "sim/", "conformance", "conformance/", "tunnel/tunneltest", "netio/netiotest"}

type pkgInfo struct {
	path    string
	imports []string // direct, project-relative and external
	deps    []string // transitive
}

func listPackages(t *testing.T) map[string]pkgInfo {
	t.Helper()
	cmd := exec.Command("go", "list", "-f", "{{.ImportPath}}\t{{join .Imports \" \"}}\t{{join .Deps \" \"}}", module+"...")
	cmd.Dir = "../.."
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	pkgs := map[string]pkgInfo{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Split(line, "\t")
		if len(f) != 3 {
			t.Fatalf("go list: unexpected line %q", line)
		}
		p := pkgInfo{path: strings.TrimPrefix(f[0], module), imports: strings.Fields(f[1]), deps: strings.Fields(f[2])}
		pkgs[p.path] = p
	}
	if len(pkgs) < 20 {
		t.Fatalf("go list found only %d packages", len(pkgs))
	}
	return pkgs
}

// matches reports whether pkg is pattern, or inside it when pattern ends
// in "/". The empty pattern matches every project package.
func matches(pkg, pattern string) bool {
	if pattern == "" {
		return true
	}
	if strings.HasSuffix(pattern, "/") {
		return strings.HasPrefix(pkg, pattern)
	}
	return pkg == pattern
}

// rankOf returns the package's floor: an exact entry, else the longest
// prefix entry.
func rankOf(pkg string) (int, bool) {
	if r, ok := rank[pkg]; ok {
		return r, true
	}
	best, r, ok := -1, 0, false
	for k, v := range rank {
		if strings.HasSuffix(k, "/") && strings.HasPrefix(pkg, k) && len(k) > best {
			best, r, ok = len(k), v, true
		}
	}
	return r, ok
}

func projectOnly(list []string) []string {
	var out []string
	for _, d := range list {
		if strings.HasPrefix(d, module) {
			out = append(out, strings.TrimPrefix(d, module))
		}
	}
	return out
}

// TestImportsPointDown: every package has a floor, and imports only
// packages on lower floors.
func TestImportsPointDown(t *testing.T) {
	pkgs := listPackages(t)
	names := make([]string, 0, len(pkgs))
	for n := range pkgs {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		r, ok := rankOf(n)
		if !ok {
			t.Errorf("%s has no floor in internal/layering's rank table: place it", n)
			continue
		}
		for _, imp := range projectOnly(pkgs[n].imports) {
			ri, ok := rankOf(imp)
			if ok && ri >= r {
				t.Errorf("%s (floor %d) imports %s (floor %d): imports must point down the stack", n, r, imp, ri)
			}
		}
	}
}

// TestForbiddenImports: the named rules of the package docs.
func TestForbiddenImports(t *testing.T) {
	pkgs := listPackages(t)
	for _, rule := range forbidden {
		for n, p := range pkgs {
			if !matches(n, rule.pkg) {
				continue
			}
			for _, d := range projectOnly(p.deps) {
				for _, f := range rule.deps {
					if matches(d, f) {
						t.Errorf("%s depends on %s: forbidden (%s)", n, d, rule.why)
					}
				}
			}
		}
	}
	for _, rule := range external {
		for _, n := range rule.pkgs {
			p, ok := pkgs[n]
			if !ok {
				t.Errorf("rule names %s, which does not exist", n)
				continue
			}
			for _, d := range p.deps {
				for _, f := range rule.deps {
					if d == f || (strings.HasSuffix(f, "/") && strings.HasPrefix(d, f)) {
						t.Errorf("%s depends on %s: the sans-I/O core takes no sockets, metrics, configuration or gossip libraries", n, d)
					}
				}
			}
		}
	}
	for _, n := range production {
		p, ok := pkgs[n]
		if !ok {
			t.Errorf("production list names %s, which does not exist", n)
			continue
		}
		for _, d := range projectOnly(p.deps) {
			for _, f := range labOnly {
				if matches(d, f) {
					t.Errorf("%s depends on %s: the daemon never carries the lab (emulators, load tests, simulations, test doubles)", n, d)
				}
			}
		}
	}
}
