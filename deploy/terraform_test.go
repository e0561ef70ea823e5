package deploy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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

// TestTerraformExampleRendersValidConfigs applies the two-region example
// render-only (deploy = false: no host is contacted, local state in a
// temporary directory), writes every rendered configuration next to freshly
// issued certificates and checks each with config.Check, the code behind
// `mrgw config check`, and with the mrgw binary itself once cmd/mrgw exists.
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
	var endpoints map[string]struct {
		Region  string            `json:"region"`
		Control string            `json:"control"`
		Planes  map[string]string `json:"planes"`
		Reach   struct {
			Control string   `json:"control"`
			Wan     []string `json:"wan"`
			Gossip  string   `json:"gossip"`
		} `json:"reach"`
		Metrics string `json:"metrics"`
	}
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
	scraped := 0
	for _, g := range groups {
		if len(g.Labels) != 1 || g.Labels["pair"] == "" {
			t.Errorf("metrics_targets group labels %v, want only pair", g.Labels)
		}
		for _, tg := range g.Targets {
			scraped++
			found := false
			for _, e := range endpoints {
				found = found || (e.Region == g.Labels["pair"] && e.Metrics == "http://"+tg+"/metrics")
			}
			if !found {
				t.Errorf("metrics_targets: %s in group %v is no admin address of that region", tg, g.Labels)
			}
		}
	}
	if scraped != 4 {
		t.Errorf("metrics_targets has %d targets, want the 4 gateways: %+v", scraped, groups)
	}

	want := []string{"euw-gw1", "euw-gw2", "use-gw1", "use-gw2"}
	var names []string
	for n := range configs {
		names = append(names, n)
	}
	slices.Sort(names)
	if !slices.Equal(names, want) {
		t.Fatalf("rendered configurations for %v, want %v", names, want)
	}

	// One CA for all, one certificate per gateway, as in production.
	now := time.Now()
	ca, err := pki.NewCA("mrgw-test-ca", now.Add(-time.Minute), 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	mrgw := mrgwBinary(t)
	render := t.TempDir()
	loaded := map[string]*config.Config{}
	for _, name := range want {
		dir := filepath.Join(render, name)
		if err := os.MkdirAll(filepath.Join(dir, "certs"), 0o755); err != nil {
			t.Fatal(err)
		}
		id, err := ca.Issue(name, now.Add(-time.Minute), time.Hour)
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
		if err := os.WriteFile(path, []byte(configs[name]), 0o640); err != nil {
			t.Fatal(err)
		}
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

	// The regions are wired to each other: every gateway lists the other
	// region's gateways at the addresses they advertise, accepts its pair
	// partner and every remote gateway, and seeds gossip with all of them.
	for name, c := range loaded {
		if c.Node.Name != name || c.Node.Region != endpoints[name].Region {
			t.Errorf("%s: node %s/%s, want %s/%s", name, c.Node.Name, c.Node.Region, name, endpoints[name].Region)
		}
		if len(c.Regions) != 1 {
			t.Fatalf("%s: %d remote regions, want 1", name, len(c.Regions))
		}
		r := c.Regions[0]
		if r.Name == c.Node.Region {
			t.Errorf("%s: lists its own region", name)
		}
		if r.RTTHint != 80*time.Millisecond {
			t.Errorf("%s: rtt_hint %v, want 80ms from rtt_hints", name, r.RTTHint)
		}
		var peers []string
		for _, g := range r.Gateways {
			e := endpoints[g.Name]
			if e.Region != r.Name {
				t.Errorf("%s: %s listed under %s, it serves %s", name, g.Name, r.Name, e.Region)
			}
			if g.Control != e.Reach.Control || !slices.Equal(g.WAN, e.Reach.Wan) {
				t.Errorf("%s: reaches %s at %s %v, it advertises %s %v", name, g.Name, g.Control, g.WAN, e.Reach.Control, e.Reach.Wan)
			}
			if !slices.Contains(c.Gossip.Seeds, e.Reach.Gossip) {
				t.Errorf("%s: gossip seeds %v lack %s's %s", name, c.Gossip.Seeds, g.Name, e.Reach.Gossip)
			}
			peers = append(peers, g.Name)
		}
		for _, other := range want {
			if other == name {
				continue
			}
			if !slices.Contains(c.Control.PeerNames, other) {
				t.Errorf("%s: control.peer_names %v lacks %s", name, c.Control.PeerNames, other)
			}
		}
		if len(c.Control.PeerNames) != 3 || len(peers) != 2 {
			t.Errorf("%s: peer_names %v, remote gateways %v", name, c.Control.PeerNames, peers)
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
		if e := endpoints[name]; e.Metrics != "http://"+c.Admin.Listen+"/metrics" {
			t.Errorf("%s: metrics endpoint %q, admin.listen %q", name, e.Metrics, c.Admin.Listen)
		}
	}
	// use-gw1 listens on 0.0.0.0 and advertises a name: the others dial the name.
	if got := loaded["euw-gw1"].Regions[0].Gateways[0]; got.Name != "use-gw1" || got.Control != "use-gw1.gw.example.net:7443" {
		t.Errorf("euw-gw1 reaches use-gw1 at %+v", got)
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

// TestTerraformValidationRefusesBadInput plans the module with one bad input
// at a time and expects the validation message that names the mistake.
func TestTerraformValidationRefusesBadInput(t *testing.T) {
	bin := terraformBin(t)
	ws := tfWorkspace(t)
	good := map[string]string{
		"region":   `"eu-west"`,
		"gw1_lan":  `"10.0.0.1:4791"`,
		"gw1_ctl":  `"192.0.2.1:7443"`,
		"gw2_name": `"euw-gw2"`,
		"planes2":  `[{ name = "plane-a", local = "192.0.2.2:7500" }]`,
		"remote":   `"us-east"`,
		"rctl":     `"use-gw1.example.net:7443"`,
		"key":      `"bHYDV+/5GBweqpewk0dctiqWKF+/evzgcq7YC811nps="`,
		"mtu":      `1400`,
	}
	const root = `
module "pair" {
  source = "../terraform/modules/gateway-pair"
  region = {{region}}
  gateways = [
    { name = "euw-gw1", ssh_host = "192.0.2.1", lan_listen = {{gw1_lan}}, control_listen = {{gw1_ctl}},
      gossip_bind = "192.0.2.1:7946", planes = [{ name = "plane-a", local = "192.0.2.1:7500" }] },
    { name = {{gw2_name}}, ssh_host = "192.0.2.2", lan_listen = "10.0.0.2:4791", control_listen = "192.0.2.2:7443",
      gossip_bind = "192.0.2.2:7946", planes = {{planes2}} },
  ]
  remote_regions = [{ name = {{remote}}, rtt_hint = "80ms", gateways = [
    { name = "use-gw1", control = {{rctl}}, wan = ["203.0.113.1:7500"] },
  ] }]
  gossip_keyring = [{{key}}]
  host_keys      = ["demo:bXJndy1kZW1vLWhvc3Qta2V5LW5ldmVyLXJldXNlLWl0IQ=="]
  wan            = { mtu = {{mtu}} }
}
output "n" { value = length(module.pair.gateways) }
`
	cases := []struct {
		name, key, value, want string
	}{
		{"good", "", "", ""},
		{"bad region name", "region", `"eu west"`, "The region must be a name"},
		{"name for a listen address", "gw1_lan", `"gw1.example.net:4791"`, "DNS names are not allowed"},
		{"octet out of range", "gw1_ctl", `"192.0.2.300:7443"`, "must be ip:port with an IP literal"},
		{"port out of range", "gw1_ctl", `"192.0.2.1:70000"`, "must be ip:port with an IP literal"},
		{"duplicate gateway", "gw2_name", `"euw-gw1"`, "Gateway names must be distinct"},
		{"planes differ", "planes2", `[{ name = "plane-z", local = "192.0.2.2:7500" }]`, "same plane names"},
		{"own region as remote", "remote", `"eu-west"`, "lists this pair's own region"},
		{"mistyped remote IP", "rctl", `"10.0.0.300:7443"`, "Remote gateway addresses"},
		{"short key", "key", `"c2hvcnQ="`, "base64 encoding of 16, 24 or 32 bytes"},
		{"mtu too small", "mtu", `100`, "wan.mtu must be an integer 512..65000"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			vals := map[string]string{}
			for k, v := range good {
				vals[k] = v
			}
			if tc.key != "" {
				vals[tc.key] = tc.value
			}
			text := root
			for k, v := range vals {
				text = strings.ReplaceAll(text, "{{"+k+"}}", v)
			}
			dir := filepath.Join(ws, "case"+string(rune('a'+i)))
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "main.tf"), []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
			tf(t, bin, dir, false, "init", "-backend=false", "-input=false", "-no-color")
			if tc.want == "" {
				tf(t, bin, dir, false, "plan", "-input=false", "-no-color")
				return
			}
			stderr := tf(t, bin, dir, true, "plan", "-input=false", "-no-color")
			// Terraform wraps long messages; compare with whitespace folded.
			if !strings.Contains(strings.Join(strings.Fields(stderr), " "), tc.want) {
				t.Errorf("plan error does not say %q:\n%s", tc.want, stderr)
			}
		})
	}
}
