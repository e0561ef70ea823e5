package deploy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mrgw/mrgw/config"
	"github.com/mrgw/mrgw/tunnel/pki"
)

// terraformBin finds terraform: $TERRAFORM, then PATH, then where
// .ci/deploy-checks.sh installs it.
func terraformBin(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("TERRAFORM"); p != "" {
		return p
	}
	if p, err := exec.LookPath("terraform"); err == nil {
		return p
	}
	if home, err := os.UserCacheDir(); err == nil {
		for _, v := range []string{"1.5.7"} {
			p := filepath.Join(home, "mrgw", "terraform-"+v, "terraform")
			if _, err := os.Stat(p); err == nil {
				return p
			}
		}
	}
	t.Skip("terraform is not installed (.ci/deploy-checks.sh installs it); skipping the Terraform tests")
	return ""
}

// tfWorkspace copies deploy/terraform and deploy/systemd into a temporary
// directory, so that .terraform and state never land in the work tree.
func tfWorkspace(t *testing.T) string {
	t.Helper()
	dst := t.TempDir()
	for _, dir := range []string{"terraform", "systemd"} {
		err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && (d.Name() == ".terraform") {
				return filepath.SkipDir
			}
			target := filepath.Join(dst, path)
			if d.IsDir() {
				return os.MkdirAll(target, 0o755)
			}
			if strings.HasSuffix(path, ".tfstate") || strings.HasSuffix(path, ".tfstate.backup") || d.Name() == ".terraform.lock.hcl" {
				return nil
			}
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			return os.WriteFile(target, b, 0o644)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// tf runs terraform in dir and returns its stdout; it fails the test on a
// non-zero exit unless wantErr, in which case it returns stderr.
func tf(t *testing.T, bin, dir string, wantErr bool, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"TF_IN_AUTOMATION=1",
		"TF_INPUT=0",
		"TF_CLI_CONFIG_FILE="+filepath.Join(dir, ".no-terraformrc"),
		"CHECKPOINT_DISABLE=1",
	)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if wantErr {
		if err == nil {
			t.Fatalf("terraform %s succeeded, want an error\n%s", strings.Join(args, " "), stdout.String())
		}
		return stderr.String()
	}
	if err != nil {
		t.Fatalf("terraform %s: %v\n%s\n%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

// endpoint is one gateway of the gateways output.
type endpoint struct {
	Region   string            `json:"region"`
	Index    int               `json:"index"`
	Capacity *int              `json:"capacity"`
	Control  string            `json:"control"`
	Gossip   string            `json:"gossip"`
	Planes   map[string]string `json:"planes"`
	Reach    struct {
		Control string   `json:"control"`
		Wan     []string `json:"wan"`
		Gossip  string   `json:"gossip"`
	} `json:"reach"`
	Seeds   []string `json:"seeds"`
	Metrics string   `json:"metrics"`
}

// writeGateway writes a rendered configuration as dir/NAME/mrgw.yaml next to
// a certificate for REGION/NAME (certRegion) issued by ca, as a gateway's
// /etc/mrgw holds them, and returns the configuration's path.
func writeGateway(t *testing.T, dir string, ca *pki.CA, certRegion, name, text string) string {
	t.Helper()
	dir = filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Join(dir, "certs"), 0o755); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	id, err := ca.IssueIn(certRegion, name, now.Add(-time.Minute), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := pki.WriteCertPEM(filepath.Join(dir, "certs", "ca.pem"), ca.Cert); err != nil {
		t.Fatal(err)
	}
	if err := id.WriteFiles(filepath.Join(dir, "certs", name+".pem"), filepath.Join(dir, "certs", name+"-key.pem")); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "mrgw.yaml")
	if err := os.WriteFile(path, []byte(text), 0o640); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestTerraformExampleRendersValidConfigs applies the two-region example
// render-only (deploy = false: no host is contacted, local state in a
// temporary directory): two gateways in eu-west and three in us-east. Every
// rendered configuration is written next to freshly issued certificates
// (mrgw://REGION/NAME identities, as `mrgw cert REGION/NAME` makes them)
// and checked with config.Check, the code behind `mrgw config check`, and
// with the mrgw binary itself. The configurations are seed-only: no peer
// lists, gossip seeds of the region's other gateways and a few of the other
// region, regions: entries only for the RTT hint; use-gw1, on 0.0.0.0
// behind NAT, announces its control_advertise as control.advertise (not an
// override in every other region's configuration).
// Then the check must still refuse what is wrong, naming the key.
func TestTerraformExampleRendersValidConfigs(t *testing.T) {
	bin := terraformBin(t)
	ws := tfWorkspace(t)
	ex := filepath.Join(ws, "terraform", "examples", "two-region")
	tf(t, bin, ex, false, "init", "-backend=false", "-input=false", "-no-color")
	tf(t, bin, ex, false, "validate", "-no-color")
	tf(t, bin, ex, false, "apply", "-auto-approve", "-input=false", "-no-color", "-var-file=terraform.tfvars.example")

	var configs map[string]string
	if err := json.Unmarshal([]byte(tf(t, bin, ex, false, "output", "-json", "configs")), &configs); err != nil {
		t.Fatal(err)
	}
	var endpoints map[string]endpoint
	if err := json.Unmarshal([]byte(tf(t, bin, ex, false, "output", "-json", "gateways")), &endpoints); err != nil {
		t.Fatal(err)
	}
	// metrics_targets is a Prometheus file_sd document as it is: a list of
	// target groups, each gateway's admin address in its region's group.
	var groups []struct {
		Targets []string          `json:"targets"`
		Labels  map[string]string `json:"labels"`
	}
	dec := json.NewDecoder(strings.NewReader(tf(t, bin, ex, false, "output", "-json", "metrics_targets")))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&groups); err != nil {
		t.Fatalf("metrics_targets is not a file_sd target group list: %v", err)
	}
	perRegion := map[string]int{}
	for _, g := range groups {
		// gateway and region would clash with the gateway's own labels
		// (honor_labels): the group says site.
		if len(g.Labels) != 1 || g.Labels["site"] == "" {
			t.Errorf("metrics_targets group labels %v, want only site", g.Labels)
		}
		for _, tg := range g.Targets {
			perRegion[g.Labels["site"]]++
			found := false
			for _, e := range endpoints {
				found = found || (e.Region == g.Labels["site"] && e.Metrics == "http://"+tg+"/metrics")
			}
			if !found {
				t.Errorf("metrics_targets: %s in group %v is no admin address of that region", tg, g.Labels)
			}
		}
	}
	if want := map[string]int{"eu-west": 2, "us-east": 3}; !maps.Equal(perRegion, want) {
		t.Errorf("metrics_targets per region %v, want %v: %+v", perRegion, want, groups)
	}

	want := []string{"euw-gw1", "euw-gw2", "use-gw1", "use-gw2", "use-gw3"}
	names := slices.Sorted(maps.Keys(configs))
	if !slices.Equal(names, want) {
		t.Fatalf("rendered configurations for %v, want %v", names, want)
	}

	// One CA for all, one certificate per gateway, as in production.
	ca, err := pki.NewCA("mrgw-test-ca", time.Now().Add(-time.Minute), 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	mrgw := mrgwBinary(t)
	render := t.TempDir()
	loaded := map[string]*config.Config{}
	for _, name := range want {
		path := writeGateway(t, render, ca, endpoints[name].Region, name, configs[name])
		if err := config.Check(path); err != nil {
			t.Errorf("%s: config check:\n%v\n--- rendered ---\n%s", name, err, configs[name])
			continue
		}
		if mrgw != "" {
			out, err := exec.Command(mrgw, "config", "check", path).CombinedOutput()
			if err != nil {
				t.Errorf("%s: mrgw config check: %v\n%s", name, err, out)
			}
		}
		c, err := config.Load(path)
		if err != nil {
			t.Fatalf("%s: load: %v", name, err)
		}
		loaded[name] = c
	}
	if t.Failed() {
		return
	}

	gossipOf := map[string]string{} // gossip address → gateway
	for name, e := range endpoints {
		gossipOf[e.Reach.Gossip] = name
	}
	for name, c := range loaded {
		e := endpoints[name]
		if c.Node.Name != name || c.Node.Region != e.Region {
			t.Errorf("%s: node %s/%s, want %s/%s", name, c.Node.Name, c.Node.Region, name, e.Region)
		}
		wantCap := 100 // the default, left out of the file
		if name == "use-gw3" {
			wantCap = 200
		}
		if c.Node.Capacity != wantCap {
			t.Errorf("%s: node.capacity %d, want %d", name, c.Node.Capacity, wantCap)
		}
		// Nobody is listed: trust is by certificate, peers come from gossip.
		if len(c.Control.PeerNames) != 0 || len(c.Control.Deny) != 0 {
			t.Errorf("%s: control.peer_names %v, deny %v: want none", name, c.Control.PeerNames, c.Control.Deny)
		}
		// Seeds: every other gateway of its region, then remote_seeds = 2
		// of the other region, never itself, never all of them.
		var own, remote []string
		for _, s := range c.Gossip.Seeds {
			g, ok := gossipOf[s]
			switch {
			case !ok:
				t.Errorf("%s: gossip seed %s is no gateway's gossip address", name, s)
			case g == name:
				t.Errorf("%s: seeds itself", name)
			case endpoints[g].Region == e.Region:
				own = append(own, g)
			default:
				remote = append(remote, g)
			}
		}
		var wantOwn []string
		for _, g := range want {
			if g != name && endpoints[g].Region == e.Region {
				wantOwn = append(wantOwn, g)
			}
		}
		slices.Sort(own)
		if !slices.Equal(own, wantOwn) || len(remote) != 2 || len(slices.Compact(slices.Sorted(slices.Values(remote)))) != 2 {
			t.Errorf("%s: seeds its region's %v (want %v) and %v of the other region (want 2)", name, own, wantOwn, remote)
		}
		if !slices.Equal(c.Gossip.Seeds, e.Seeds) {
			t.Errorf("%s: gossip.seeds %v, the gateways output says %v", name, c.Gossip.Seeds, e.Seeds)
		}
		// regions: the other region only, for its RTT hint; no override
		// of use-gw1's control address, which it announces itself.
		if len(c.Regions) != 1 {
			t.Fatalf("%s: %d regions entries, want 1 (the RTT hint)", name, len(c.Regions))
		}
		r := c.Regions[0]
		if r.Name == c.Node.Region || r.RTTHint != 80*time.Millisecond {
			t.Errorf("%s: regions[0] %s rtt_hint %v, want the other region at 80ms from rtt_hints", name, r.Name, r.RTTHint)
		}
		if len(r.Gateways) != 0 {
			t.Errorf("%s: regions[0].gateways %+v, want none (every gateway announces its addresses)", name, r.Gateways)
		}
		// control.advertise: use-gw1's public address, what the gateways
		// output says the others reach it at; nobody else needs one.
		wantAdv := ""
		if name == "use-gw1" {
			wantAdv = "203.0.113.201:7443"
			if c.Control.Listen != "0.0.0.0:7443" || e.Reach.Control != wantAdv {
				t.Errorf("%s: control.listen %s, reached at %s: want 0.0.0.0:7443 reached at %s", name, c.Control.Listen, e.Reach.Control, wantAdv)
			}
		}
		if c.Control.Advertise != wantAdv || c.Control.Announced() != e.Reach.Control {
			t.Errorf("%s: control.advertise %q (announcing %s), want %q (the gateways output reaches it at %s)",
				name, c.Control.Advertise, c.Control.Announced(), wantAdv, e.Reach.Control)
		}
		if c.WAN.MTU != 1024 || c.WAN.PathsPerPeer != 16 || len(c.WAN.Planes) != 2 {
			t.Errorf("%s: wan %+v", name, c.WAN)
		}
		if len(c.Gossip.Keyring) != 2 || c.Gossip.Profile != "wan" {
			t.Errorf("%s: gossip keyring of %d keys, profile %q", name, len(c.Gossip.Keyring), c.Gossip.Profile)
		}
		if want := filepath.Join(render, name, "certs", name+"-key.pem"); c.Control.TLS.KeyFile != want {
			t.Errorf("%s: key file %s, want %s (relative to the file)", name, c.Control.TLS.KeyFile, want)
		}
		if e.Metrics != "http://"+c.Admin.Listen+"/metrics" {
			t.Errorf("%s: metrics endpoint %q, admin.listen %q", name, e.Metrics, c.Admin.Listen)
		}
	}
	for i, name := range []string{"use-gw1", "use-gw2", "use-gw3"} {
		if endpoints[name].Index != i {
			t.Errorf("%s: install position %d, want %d (the order of the gateways list)", name, endpoints[name].Index, i)
		}
	}

	// What is wrong is still refused, by key. The check must not pass a
	// rendered file whatever is changed in it.
	mutations := []struct{ name, from, to, key string }{
		{"capacity out of range", "capacity: 200", "capacity: 70000", "node.capacity"},
		{"bad deny entry", "deny: []", `deny: ["eu west/*"]`, "control.deny[0]"},
		{"seed without a port", `seeds: ["`, `seeds: ["203.0.113.99", "`, "gossip.seeds[0]"},
		{"own region listed", `- name: "eu-west"`, `- name: "us-east"`, "regions[0].name"},
		{"misspelt key", "paths_per_peer:", "paths_per_pear:", "wan.paths_per_pear"},
	}
	for _, m := range mutations {
		text := configs["use-gw3"]
		if !strings.Contains(text, m.from) {
			t.Errorf("%s: the rendered use-gw3 has no %q", m.name, m.from)
			continue
		}
		path := writeGateway(t, filepath.Join(t.TempDir(), "bad"), ca, "us-east", "use-gw3", strings.Replace(text, m.from, m.to, 1))
		err := config.Check(path)
		if err == nil || !strings.Contains(err.Error(), m.key+":") {
			t.Errorf("%s: config check says %v, want a problem with %s", m.name, err, m.key)
		}
	}
	// use-gw1 without its control.advertise: a wildcard control.listen
	// that gossip would announce as 0.0.0.0 is refused, by key.
	if text := configs["use-gw1"]; !strings.Contains(text, "\n  advertise: \"203.0.113.201:7443\"") {
		t.Errorf("the rendered use-gw1 has no control.advertise:\n%s", text)
	} else {
		text = regexp.MustCompile(`\n  advertise: "203\.0\.113\.201:7443"[^\n]*`).ReplaceAllString(text, "")
		path := writeGateway(t, filepath.Join(t.TempDir(), "bad"), ca, "us-east", "use-gw1", text)
		if err := config.Check(path); err == nil || !strings.Contains(err.Error(), `control.advertise: is required when control.listen ("0.0.0.0:7443") listens on every interface`) {
			t.Errorf("use-gw1 without control.advertise: config check says %v", err)
		}
	}
	// A certificate of another region: `mrgw config check` compares its
	// mrgw://REGION/NAME identity with node.region.
	if mrgw != "" {
		path := writeGateway(t, filepath.Join(t.TempDir(), "bad"), ca, "eu-west", "use-gw3", configs["use-gw3"])
		out, err := exec.Command(mrgw, "config", "check", path).CombinedOutput()
		if err == nil || !strings.Contains(string(out), "control.tls.cert_file") || !strings.Contains(string(out), "mrgw://eu-west/use-gw3") {
			t.Errorf("mrgw config check of use-gw3 with an eu-west certificate: %v\n%s", err, out)
		}
	}

	// Without RTT hints the configurations are seed-only: no regions: at
	// all (eu-west's used to keep an override of use-gw1's control address).
	tf(t, bin, ex, false, "apply", "-auto-approve", "-input=false", "-no-color", "-var-file=terraform.tfvars.example", "-var=rtt_hints={}")
	if err := json.Unmarshal([]byte(tf(t, bin, ex, false, "output", "-json", "configs")), &configs); err != nil {
		t.Fatal(err)
	}
	for _, name := range want {
		path := writeGateway(t, t.TempDir(), ca, endpoints[name].Region, name, configs[name])
		c, err := config.Load(path)
		if err != nil {
			t.Errorf("%s without rtt_hints: %v", name, err)
			continue
		}
		if strings.Contains(configs[name], "\nregions:") || len(c.Regions) != 0 {
			t.Errorf("%s without rtt_hints: regions %+v, want none (seeds only)\n%s", name, c.Regions, configs[name])
		}
	}
}

// mrgwBinary builds cmd/mrgw when it exists (the daemon is written
// separately); "" means check with config.Check only.
func mrgwBinary(t *testing.T) string {
	t.Helper()
	if _, err := os.Stat(filepath.Join("..", "cmd", "mrgw")); err != nil {
		t.Log("cmd/mrgw does not exist yet: checking with config.Check only")
		return ""
	}
	out := filepath.Join(t.TempDir(), "mrgw")
	cmd := exec.Command("go", "build", "-o", out, "./cmd/mrgw")
	cmd.Dir = ".."
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/mrgw: %v\n%s", err, b)
	}
	return out
}

// regionRoot is a root module calling gateway-region for eu-west with
// {{n}} gateways: the first with its fields as placeholders, the others
// generated (euw-gwI at 192.0.2.I); us-east is a remote region of one
// gateway, given by its gossip address only.
const regionRoot = `
module "region" {
  source = "../terraform/modules/gateway-region"
  region = {{region}}
  gateways = [
    { name = "euw-gw1", ssh_host = "192.0.2.1", lan_listen = {{gw1_lan}}, control_listen = {{gw1_ctl}},
      control_advertise = {{gw1_adv}}, gossip_bind = "192.0.2.1:7946", capacity = {{cap}}, planes = {{planes1}} },
{{others}}  ]
  remote_regions = [{ name = {{remote}}, gateways = [
    { name = {{rname}}, gossip = {{rgossip}} },
  ] }]
  control_deny   = {{deny}}
  gossip_keyring = [{{key}}]
  host_keys      = ["demo:bXJndy1kZW1vLWhvc3Qta2V5LW5ldmVyLXJldXNlLWl0IQ=="]
  wan            = { mtu = {{mtu}} }
}
output "configs" {
  value     = module.region.configs
  sensitive = true
}
output "gateways" { value = module.region.gateways }
`

// TestTerraformValidationRefusesBadInput plans the gateway-region module
// with one bad input at a time and expects the validation message that
// names the mistake. The good inputs (1, 2 and 16 gateways) are applied
// render-only and their configurations checked: seed-only (no regions:, no
// peer list), seeding from the region's other gateways and the remote one.
func TestTerraformValidationRefusesBadInput(t *testing.T) {
	bin := terraformBin(t)
	ws := tfWorkspace(t)
	good := map[string]string{
		"n":       "2",
		"region":  `"eu-west"`,
		"gw1_lan": `"10.0.0.1:4791"`,
		"gw1_ctl": `"192.0.2.1:7443"`,
		"gw1_adv": `null`,
		"cap":     `null`,
		"planes1": `[{ name = "plane-a", local = "192.0.2.1:7500" }]`,
		"gw2":     `"euw-gw2"`,
		"remote":  `"us-east"`,
		"rname":   `"use-gw1"`,
		"rgossip": `"use-gw1.example.net:7946"`,
		"deny":    `[]`,
		"key":     `"bHYDV+/5GBweqpewk0dctiqWKF+/evzgcq7YC811nps="`,
		"mtu":     `1400`,
	}
	cases := []struct {
		name string
		set  map[string]string
		want string
	}{
		{"two gateways", nil, ""},
		{"one gateway", map[string]string{"n": "1"}, ""},
		{"sixteen gateways", map[string]string{"n": "16"}, ""},
		{"seventeen gateways", map[string]string{"n": "17"}, "A region has 1 to 16 gateways."},
		{"bad region name", map[string]string{"region": `"eu west"`}, "The region must be a name"},
		{"name for a listen address", map[string]string{"gw1_lan": `"gw1.example.net:4791"`}, "DNS names are not allowed"},
		{"name for a plane's advertise address", map[string]string{"planes1": `[{ name = "plane-a", local = "0.0.0.0:7500", advertise = "gw1.example.net:7500" }]`}, "DNS names are not allowed"},
		{"octet out of range", map[string]string{"gw1_ctl": `"192.0.2.300:7443"`}, "must be ip:port with an IP literal"},
		{"port out of range", map[string]string{"gw1_ctl": `"192.0.2.1:70000"`}, "must be ip:port with an IP literal"},
		{"wildcard without advertise", map[string]string{"gw1_ctl": `"0.0.0.0:7443"`}, "listens on a wildcard address"},
		{"wildcard with control_advertise", map[string]string{"gw1_ctl": `"0.0.0.0:7443"`, "gw1_adv": `"198.51.100.1:443"`}, ""},
		{"name for control_advertise", map[string]string{"gw1_ctl": `"0.0.0.0:7443"`, "gw1_adv": `"gw1.example.net:7443"`}, "DNS names are not allowed"},
		{"duplicate gateway", map[string]string{"gw2": `"euw-gw1"`}, "Gateway names must be distinct"},
		{"gateway name used by another region", map[string]string{"rname": `"euw-gw2"`}, "unique across all regions"},
		{"capacity out of range", map[string]string{"cap": `70000`}, "capacity (node.capacity) must be an integer 1..65535"},
		{"capacity not an integer", map[string]string{"cap": `1.5`}, "capacity (node.capacity) must be an integer 1..65535"},
		{"planes differ", map[string]string{"planes1": `[{ name = "plane-z", local = "192.0.2.1:7500" }]`}, "same plane names"},
		{"own region as remote", map[string]string{"remote": `"eu-west"`}, "remote_regions lists this region"},
		{"mistyped remote IP", map[string]string{"rgossip": `"10.0.0.300:7946"`}, "Remote gateway addresses"},
		{"bad deny entry", map[string]string{"deny": `["eu west/*"]`}, "control_deny entries are NAME"},
		{"short key", map[string]string{"key": `"c2hvcnQ="`}, "base64 encoding of 16, 24 or 32 bytes"},
		{"mtu too small", map[string]string{"mtu": `100`}, "wan.mtu must be an integer 512..65000"},
	}
	// One directory, initialised once: every case rewrites main.tf.
	dir := filepath.Join(ws, "root")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	render := func(vals map[string]string) string {
		n, err := strconv.Atoi(vals["n"])
		if err != nil {
			t.Fatal(err)
		}
		var others strings.Builder
		for i := 2; i <= n; i++ {
			name := fmt.Sprintf(`"euw-gw%d"`, i)
			if i == 2 {
				name = vals["gw2"]
			}
			fmt.Fprintf(&others, `    { name = %s, ssh_host = "192.0.2.%d", lan_listen = "10.0.0.%d:4791", control_listen = "192.0.2.%d:7443",
      gossip_bind = "192.0.2.%d:7946", planes = [{ name = "plane-a", local = "192.0.2.%d:7500" }] },
`, name, i, i, i, i, i)
		}
		text := strings.ReplaceAll(regionRoot, "{{others}}", others.String())
		for k, v := range vals {
			text = strings.ReplaceAll(text, "{{"+k+"}}", v)
		}
		return text
	}
	ca, err := pki.NewCA("mrgw-test-ca", time.Now().Add(-time.Minute), 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			vals := maps.Clone(good)
			maps.Copy(vals, tc.set)
			if err := os.WriteFile(filepath.Join(dir, "main.tf"), []byte(render(vals)), 0o644); err != nil {
				t.Fatal(err)
			}
			if i == 0 {
				tf(t, bin, dir, false, "init", "-backend=false", "-input=false", "-no-color")
			}
			if tc.want != "" {
				stderr := tf(t, bin, dir, true, "plan", "-input=false", "-no-color")
				// Terraform wraps long messages; compare with whitespace folded.
				if !strings.Contains(strings.Join(strings.Fields(stderr), " "), tc.want) {
					t.Errorf("plan error does not say %q:\n%s", tc.want, stderr)
				}
				return
			}
			tf(t, bin, dir, false, "apply", "-auto-approve", "-input=false", "-no-color")
			var configs map[string]string
			if err := json.Unmarshal([]byte(tf(t, bin, dir, false, "output", "-json", "configs")), &configs); err != nil {
				t.Fatal(err)
			}
			var endpoints map[string]endpoint
			if err := json.Unmarshal([]byte(tf(t, bin, dir, false, "output", "-json", "gateways")), &endpoints); err != nil {
				t.Fatal(err)
			}
			n, _ := strconv.Atoi(vals["n"])
			if len(configs) != n || len(endpoints) != n {
				t.Fatalf("%d configurations and %d gateways rendered, want %d", len(configs), len(endpoints), n)
			}
			render := t.TempDir()
			for name, text := range configs {
				c, err := config.Load(writeGateway(t, render, ca, "eu-west", name, text))
				if err != nil {
					t.Errorf("%s: config check:\n%v\n--- rendered ---\n%s", name, err, text)
					continue
				}
				// Seed-only: gossip finds us-east; nothing lists it.
				if strings.Contains(text, "\nregions:") || len(c.Regions) != 0 || len(c.Control.PeerNames) != 0 {
					t.Errorf("%s: regions %+v, peer_names %v: want none\n%s", name, c.Regions, c.Control.PeerNames, text)
				}
				// control_advertise becomes control.advertise, announced in
				// gossip; the others reach the gateway there.
				wantAdv := ""
				if name == "euw-gw1" && vals["gw1_adv"] != "null" {
					wantAdv = strings.Trim(vals["gw1_adv"], `"`)
				}
				if e := endpoints[name]; c.Control.Advertise != wantAdv || c.Control.Announced() != e.Reach.Control {
					t.Errorf("%s: control.listen %s, advertise %q (want %q); the gateways output reaches it at %s",
						name, c.Control.Listen, c.Control.Advertise, wantAdv, e.Reach.Control)
				}
				var want []string
				for j := 0; j < n; j++ {
					if e := endpoints[fmt.Sprintf("euw-gw%d", j+1)]; e.Index != j || e.Reach.Gossip != fmt.Sprintf("192.0.2.%d:7946", j+1) {
						t.Errorf("euw-gw%d: position %d, gossip %s", j+1, e.Index, e.Reach.Gossip)
					}
					if g := fmt.Sprintf("192.0.2.%d:7946", j+1); g != c.Gossip.Bind {
						want = append(want, g)
					}
				}
				want = append(want, "use-gw1.example.net:7946")
				if !slices.Equal(c.Gossip.Seeds, want) {
					t.Errorf("%s: gossip.seeds %v, want %v", name, c.Gossip.Seeds, want)
				}
			}
		})
	}
}

// TestRegionModuleInstallChain checks the rolling installation's chain of
// module calls (a hand-unrolled loop, one call per position): install_N
// exists for N = 0..15, has an instance only while var.gateways has an Nth
// gateway, installs that gateway, and waits for install_N-1; the installed
// output covers all of them in order.
func TestRegionModuleInstallChain(t *testing.T) {
	dir := filepath.Join("terraform", "modules", "gateway-region")
	b, err := os.ReadFile(filepath.Join(dir, "install.tf"))
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile(`(?ms)^module "install_(\d+)" \{\n(.*?)^\}`).FindAllStringSubmatch(string(b), -1)
	if len(blocks) != 16 {
		t.Fatalf("install.tf has %d install_N module calls, want 16 (a region has up to 16 gateways)", len(blocks))
	}
	for i, blk := range blocks {
		if blk[1] != strconv.Itoa(i) {
			t.Errorf("module call %d is install_%s", i, blk[1])
			continue
		}
		body := blk[2]
		if !regexp.MustCompile(fmt.Sprintf(`count\s+= length\(var\.gateways\) > %d \? 1 : 0\n`, i)).MatchString(body) {
			t.Errorf("install_%d: count is not length(var.gateways) > %d ? 1 : 0", i, i)
		}
		dep := regexp.MustCompile(`depends_on\s+= \[module\.install_(\d+)\]`).FindStringSubmatch(body)
		switch {
		case i == 0 && dep != nil:
			t.Errorf("install_0 depends on install_%s", dep[1])
		case i > 0 && (dep == nil || dep[1] != strconv.Itoa(i-1)):
			t.Errorf("install_%d does not depend on install_%d: %v", i, i-1, dep)
		}
		for _, idx := range regexp.MustCompile(`local\.install\[(\d+)\]`).FindAllStringSubmatch(body, -1) {
			if idx[1] != strconv.Itoa(i) {
				t.Errorf("install_%d installs local.install[%s]", i, idx[1])
			}
		}
		if !strings.Contains(body, "enabled     = var.deploy") || strings.Count(body, "local.install[") != 5 {
			t.Errorf("install_%d: not enabled by var.deploy, or not every input from local.install[%d]:\n%s", i, i, body)
		}
	}
	out, err := os.ReadFile(filepath.Join(dir, "outputs.tf"))
	if err != nil {
		t.Fatal(err)
	}
	var want strings.Builder
	for i := range 16 {
		fmt.Fprintf(&want, "    module.install_%d[*].installed,\n", i)
	}
	if !strings.Contains(string(out), want.String()) {
		t.Errorf("outputs.tf: installed does not list install_0..15 in order")
	}
}
