package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// minimal returns testdata/minimal.yaml loaded without file checks, for
// tests that change one field and validate.
func minimal(t *testing.T) *Config {
	t.Helper()
	return mustLoad(t, filepath.Join("testdata", "minimal.yaml"), SkipFileChecks())
}

func TestValidateCases(t *testing.T) {
	cases := []struct {
		name   string
		change func(c *Config)
		want   []string // the exact problems, in order
	}{
		{"valid", func(*Config) {}, nil},
		{"no host credential", func(c *Config) { c.LAN.HostKeys = nil }, []string{
			`lan.host_keys: is empty: hosts would register unauthenticated; give each host a credential (docs/OPERATIONS.md, "Authenticating hosts") or set lan.allow_unauthenticated_hosts: true`,
		}},
		{"unauthenticated hosts by choice", func(c *Config) { c.LAN.HostKeys = nil; c.LAN.AllowUnauthenticatedHosts = true }, nil},
		{"missing node", func(c *Config) { c.Node = Node{} }, []string{
			"node.name: is required", "node.region: is required",
		}},
		{"capacity", func(c *Config) { c.Node.Capacity = 65536 }, []string{
			"node.capacity: 65536 is out of range 0..65535",
		}},
		{"bad name", func(c *Config) { c.Node.Name = "gw 1" }, []string{
			`node.name: "gw 1" is not a valid name (letters, digits, '.', '_', '-'; at most 63; starting and ending with a letter or digit)`,
		}},
		{"no planes", func(c *Config) { c.WAN.Planes = nil }, []string{"wan.planes: needs at least one plane"}},
		{"hostname as bind address", func(c *Config) { c.LAN.Listen = "gw1.example:4791" }, []string{
			`lan.listen: "gw1.example:4791" is not an IP address`,
		}},
		{"no host", func(c *Config) { c.Control.Listen = ":7443" }, []string{
			`control.listen: ":7443" has no host (write 0.0.0.0:7443 to mean every interface)`,
		}},
		{"port 0 for a listener", func(c *Config) { c.WAN.Planes[0].Local = "127.0.0.1:0" }, []string{
			`wan.planes[0].local: "127.0.0.1:0": port 0 is out of range 1..65535`,
		}},
		{"port not a number", func(c *Config) { c.Admin.Listen = "127.0.0.1:http" }, []string{
			`admin.listen: "127.0.0.1:http": port "http" is not a number`,
		}},
		{"admin off", func(c *Config) { c.Admin.Listen = "" }, nil},
		{"IPv6", func(c *Config) { c.Control.Listen = "[::1]:7443" }, nil},
		{"socket conflict", func(c *Config) { c.Control.Listen = c.LAN.Listen }, []string{
			`control.listen: "127.0.0.1:4791" is already used by lan.listen`,
		}},
		{"wildcard conflict", func(c *Config) { c.Gossip.Bind = "0.0.0.0:4791"; c.Gossip.Advertise = "192.0.2.1:4791" }, []string{
			`gossip.bind: "0.0.0.0:4791" is already used by lan.listen`,
		}},
		{"IPv6 wildcard covers IPv4", func(c *Config) { c.Control.Listen, c.Control.Advertise = "[::]:4791", "192.0.2.1:4791" }, []string{
			`control.listen: "[::]:4791" is already used by lan.listen`,
		}},
		{"IPv4 wildcard leaves IPv6 alone", func(c *Config) { c.LAN.Listen = "0.0.0.0:7443"; c.Control.Listen = "[::1]:7443" }, nil},
		{"TCP and UDP may share a port", func(c *Config) { c.Admin.Listen = c.LAN.Listen }, nil},
		{"remote DNS name", func(c *Config) { c.Regions[0].Gateways[0].Control = "gw2.eu-west.example:7443" }, nil},
		{"remote mistyped IP", func(c *Config) { c.Regions[0].Gateways[0].WAN[0] = "127.0.0.256:15000" }, []string{
			`regions[0].gateways[0].wan[0]: "127.0.0.256:15000" is not an IP address`,
		}},
		{"remote unspecified", func(c *Config) { c.Regions[0].Gateways[0].Control = "0.0.0.0:7443" }, []string{
			`regions[0].gateways[0].control: "0.0.0.0:7443" is the unspecified address; nothing can be reached there`,
		}},
		{"duplicate region", func(c *Config) { c.Regions = append(c.Regions, c.Regions[0]) }, []string{
			`regions[1].name: "r2" is also the name of regions[0]`,
			`regions[1].gateways[0].name: "gw2" is also the name of regions[0].gateways[0]`,
		}},
		{"self as remote", func(c *Config) { c.Regions[0].Gateways[0].Name = "gw1" }, []string{
			`regions[0].gateways[0].name: "gw1" is this gateway's own node.name`,
		}},
		// A fleet's configuration names no remote region, or only
		// overrides: gossip announces the gateways.
		{"region without gateways", func(c *Config) { c.Regions[0].Gateways = nil }, nil},
		{"no regions", func(c *Config) { c.Regions = nil }, nil},
		{"gateway pinned by name only", func(c *Config) { c.Regions[0].Gateways[0].Control, c.Regions[0].Gateways[0].WAN = "", nil }, nil},
		{"bad overrides", func(c *Config) {
			c.Regions[0].Gateways[0].Weight = -1
			c.Regions[0].Gateways[0].Control = "0.0.0.0:1"
			c.WAN.Planes[0].Advertise = "gw.example:1"
		}, []string{
			`wan.planes[0].advertise: "gw.example:1" is not an IP address`,
			`regions[0].gateways[0].control: "0.0.0.0:1" is the unspecified address; nothing can be reached there`,
			"regions[0].gateways[0].weight: -1 is out of range 0..65535",
		}},
		{"deny list", func(c *Config) {
			c.Control.Deny = []string{"gw3", "us-east/gw3", "us-east/*", "serial:0A:ff", "a/b/c", "serial:xyz", "*"}
		}, []string{
			`control.deny[4]: "a/b/c": "b/c" is not a valid gateway name (want NAME, REGION/NAME, REGION/* or serial:HEX)`,
			`control.deny[5]: "serial:xyz": serial:HEX needs hexadecimal digits, not 'x'`,
			`control.deny[6]: "*": "*" is not a valid gateway name (want NAME, REGION/NAME, REGION/* or serial:HEX)`,
		}},
		{"rtt hint", func(c *Config) { c.Regions[0].RTTHint = time.Minute }, []string{
			"regions[0].rtt_hint: 1m is out of range 0s..10s",
		}},
		{"peer not expected", func(c *Config) { c.Control.PeerNames = []string{"gw3", "gw1", "gw3"} }, []string{
			`control.peer_names[1]: "gw1" is this gateway's own node.name`,
			`control.peer_names[2]: "gw3" is listed twice`,
			`regions[0].gateways[0].name: "gw2" is not in control.peer_names, so its control connection would be refused`,
		}},
		{"paths 0", func(c *Config) { c.WAN.PathsPerPeer = 0 }, []string{"wan.paths_per_peer: 0 is out of range 1..1024"}},
		{"paths max", func(c *Config) { c.WAN.PathsPerPeer = 1024 }, nil},
		{"mtu bounds", func(c *Config) { c.WAN.MTU = 511; c.Limits.FlowCreditBytes = 1 << 20 }, []string{
			"wan.mtu: 511 is out of range 512..65000",
		}},
		{"cipher", func(c *Config) { c.WAN.Cipher = "rc4" }, []string{
			`wan.cipher: "rc4" is not one of aes-128-gcm, aes-256-gcm, chacha20-poly1305`,
		}},
		{"fixed needs a rate", func(c *Config) { c.WAN.CongestionControl = "fixed"; c.LAN.CongestionControl = "fixed" }, []string{
			`lan.max_rate_bps: must be set (bit/s) when lan.congestion_control is "fixed"`,
			`wan.max_rate_bps: must be set (bit/s) when wan.congestion_control is "fixed"`,
		}},
		{"fixed takes the region's rate", func(c *Config) { c.WAN.CongestionControl = "fixed"; c.WAN.RegionRateBps = 1e9 }, nil},
		{"region rate negative", func(c *Config) { c.WAN.RegionRateBps = -1 }, []string{"wan.region_rate_bps: -1 is negative"}},
		{"lan controller", func(c *Config) { c.LAN.CongestionControl = "dcqcn" }, []string{
			`lan.congestion_control: "dcqcn" is not one of dc-aimd, fixed`,
		}},
		{"key rotation", func(c *Config) { c.WAN.KeyRotation = 0 }, []string{
			"wan.key_rotation: 0s is out of range 1s..24h",
		}},
		{"advertise needed", func(c *Config) { c.Gossip.Bind = "0.0.0.0:7946" }, []string{
			`gossip.advertise: is required when gossip.bind ("0.0.0.0:7946") listens on every interface: memberlist would guess which address to announce`,
		}},
		// A wildcard control.listen or plane local was accepted
		// and announced in gossip as 0.0.0.0.
		{"control advertise needed", func(c *Config) { c.Control.Listen = "0.0.0.0:7443" }, []string{
			`control.advertise: is required when control.listen ("0.0.0.0:7443") listens on every interface: gossip would announce 0.0.0.0, which the other gateways cannot dial`,
		}},
		{"control advertise needed, IPv6", func(c *Config) { c.Control.Listen = "[::]:7443" }, []string{
			`control.advertise: is required when control.listen ("[::]:7443") listens on every interface: gossip would announce ::, which the other gateways cannot dial`,
		}},
		{"control advertise given", func(c *Config) { c.Control.Listen, c.Control.Advertise = "0.0.0.0:7443", "192.0.2.1:443" }, nil},
		{"control advertise beside a specific listen", func(c *Config) { c.Control.Advertise = "[2001:db8::1]:7443" }, nil},
		{"control advertise must be an IP", func(c *Config) { c.Control.Listen, c.Control.Advertise = "0.0.0.0:7443", "gw1.example:7443" }, []string{
			`control.advertise: "gw1.example:7443" is not an IP address`,
		}},
		{"control advertise unspecified", func(c *Config) { c.Control.Advertise = "[::]:7443" }, []string{
			`control.advertise: "[::]:7443" is the unspecified address; nothing can be reached there`,
		}},
		{"control advertise without a port", func(c *Config) { c.Control.Advertise = "192.0.2.1" }, []string{
			`control.advertise: "192.0.2.1" is not host:port (missing port in address)`,
		}},
		{"plane advertise needed", func(c *Config) {
			c.WAN.Planes = append(c.WAN.Planes, Plane{Name: "p1", Local: "0.0.0.0:15001"}, Plane{Name: "p2", Local: "[::]:15002", Advertise: "[2001:db8::2]:15002"})
			c.Regions[0].Gateways[0].WAN = nil
		}, []string{
			`wan.planes[1].advertise: is required when wan.planes[1].local ("0.0.0.0:15001") listens on every interface: gossip would announce 0.0.0.0, where the peers cannot send datagrams`,
		}},
		{"plane advertise unspecified", func(c *Config) { c.WAN.Planes[0].Advertise = "0.0.0.0:15000" }, []string{
			`wan.planes[0].advertise: "0.0.0.0:15000" is the unspecified address; nothing can be reached there`,
		}},
		{"advertise must be an IP", func(c *Config) { c.Gossip.Advertise = "gw1.example:7946" }, []string{
			`gossip.advertise: "gw1.example:7946" is not an IP address`,
		}},
		{"timings need custom", func(c *Config) { c.Gossip.ProbeInterval = time.Second }, []string{
			`gossip.probe_interval: is only used with gossip.profile "custom" (the profile is "wan")`,
		}},
		{"custom needs timings", func(c *Config) { c.Gossip.Profile = "custom" }, []string{
			`gossip.probe_interval: must be positive with gossip.profile "custom"`,
			`gossip.probe_timeout: must be positive with gossip.profile "custom"`,
			`gossip.gossip_interval: must be positive with gossip.profile "custom"`,
			"gossip.suspicion_mult: 0 is out of range 1..100",
		}},
		{"timeout not below interval", func(c *Config) {
			c.Gossip = Gossip{Bind: c.Gossip.Bind, Profile: "custom", ProbeInterval: time.Second,
				ProbeTimeout: time.Second, SuspicionMult: 3, GossipInterval: time.Second}
		}, []string{"gossip.probe_timeout: 1s is not less than gossip.probe_interval (1s)"}},
		{"duplicate gossip key", func(c *Config) {
			c.Gossip.Keyring = []string{"AAAAAAAAAAAAAAAAAAAAAA==", "AAAAAAAAAAAAAAAAAAAAAA=="}
		}, []string{"gossip.keyring[1]: is the same key as gossip.keyring[0]"}},
		{"limits", func(c *Config) { c.Limits = Limits{MemoryBytes: 1 << 20, MaxFlows: 0, FlowCreditBytes: 2 << 20} }, []string{
			"limits.max_flows: 0 is out of range 1..1000000",
			"limits.flow_credit_bytes: 2097152 is more than limits.memory_bytes (1048576)",
		}},
		{"credit below mtu", func(c *Config) { c.Limits.FlowCreditBytes = 1000 }, []string{
			"limits.flow_credit_bytes: 1000 is less than wan.mtu (1024): a flow could never send a full datagram",
		}},
		{"weights", func(c *Config) {
			c.Scheduler.Classes = []Class{{"default", 1}, {"bulk", -3}, {"bulk", 2}}
		}, []string{
			"scheduler.classes[1].weight: -3 is out of range 1..1000000",
			`scheduler.classes[2].name: "bulk" is listed twice`,
		}},
		{"no classes", func(c *Config) { c.Scheduler.Classes = nil }, []string{"scheduler.classes: needs at least one class"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := minimal(t)
			tc.change(c)
			var got []string
			for _, fe := range c.check(false) {
				got = append(got, fe.Error())
			}
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("problems:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(tc.want, "\n  "))
			}
		})
	}
}

func TestValidateChecksFiles(t *testing.T) {
	dir := t.TempDir()
	c := minimal(t)
	c.Control.TLS = TLS{
		CAFile:   filepath.Join(dir, "absent.pem"),
		CertFile: dir, // a directory
		KeyFile:  filepath.Join(dir, "key.pem"),
	}
	if err := os.WriteFile(c.Control.TLS.KeyFile, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	err := c.Validate()
	got := problemStrings(err)
	if len(got) != 2 || !strings.HasPrefix(got[0], "control.tls.ca_file: file ") ||
		!strings.HasSuffix(got[0], "absent.pem\" does not exist") ||
		!strings.HasPrefix(got[1], "control.tls.cert_file: ") || !strings.HasSuffix(got[1], "is a directory, not a file") {
		t.Fatalf("problems = %q", got)
	}
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Key != "control.tls.ca_file" {
		t.Errorf("errors.As found %v, want the FieldError of control.tls.ca_file", fe)
	}
}

func TestKeyringErrorsDoNotLeakKeys(t *testing.T) {
	c := minimal(t)
	secret := "c2VjcmV0LXNlY3JldA==" // 13 bytes: rejected
	c.Gossip.Keyring = []string{secret}
	got := problemStrings(errors.Join(func() []error {
		var e []error
		for _, fe := range c.check(false) {
			e = append(e, fe)
		}
		return e
	}()...))
	if len(got) != 1 || strings.Contains(got[0], secret) {
		t.Fatalf("problems = %q: want one, without the key", got)
	}
}

func TestGossipTimings(t *testing.T) {
	for _, tc := range []struct {
		g    Gossip
		want GossipTimings
	}{
		{Gossip{Profile: "wan"}, GossipTimings{5 * time.Second, 3 * time.Second, 6, 500 * time.Millisecond}},
		{Gossip{Profile: "lan"}, GossipTimings{time.Second, 500 * time.Millisecond, 4, 200 * time.Millisecond}},
		{Gossip{Profile: "custom", ProbeInterval: 200 * time.Millisecond, ProbeTimeout: 100 * time.Millisecond,
			SuspicionMult: 2, GossipInterval: 50 * time.Millisecond},
			GossipTimings{200 * time.Millisecond, 100 * time.Millisecond, 2, 50 * time.Millisecond}},
	} {
		if got := tc.g.Timings(); got != tc.want {
			t.Errorf("%s: Timings() = %+v, want %+v", tc.g.Profile, got, tc.want)
		}
	}
}
