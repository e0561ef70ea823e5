package region

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/hashicorp/memberlist"
)

// Timing profiles. "wan" and "lan" are memberlist's DefaultWANConfig and
// DefaultLANConfig; "custom" takes [Config.Timings] as given.
const (
	ProfileWAN    = "wan"
	ProfileLAN    = "lan"
	ProfileCustom = "custom"
)

// Defaults for the optional fields of [Config].
const (
	DefaultHealthTTL        = 30 * time.Second
	DefaultMaxHealthReports = 4096
	DefaultJoinAttempts     = 5
)

// maxSuspicionMult mirrors the configuration's bound: beyond it a dead
// gateway would stay "suspect" for many minutes on the WAN profile.
const maxSuspicionMult = 100

// Timings are memberlist's failure-detection and gossip timings.
//
// On loopback with three nodes a dead gateway is noticed in about 39 s with
// the WAN preset, 6 s with the LAN preset, and under a second with probe
// 200ms / timeout 100ms / suspicion 2 / gossip 50ms.
type Timings struct {
	ProbeInterval  time.Duration // interval between failure probes
	ProbeTimeout   time.Duration // wait for a probe ack; less than ProbeInterval
	SuspicionMult  int           // suspicion timeout multiplier, 1..100
	GossipInterval time.Duration // interval between gossip rounds
}

// PresetTimings returns the timings of a named profile ("wan" or "lan"),
// read from memberlist itself so they cannot drift from the library.
func PresetTimings(profile string) (Timings, bool) {
	var c *memberlist.Config
	switch profile {
	case ProfileWAN:
		c = memberlist.DefaultWANConfig()
	case ProfileLAN:
		c = memberlist.DefaultLANConfig()
	default:
		return Timings{}, false
	}
	return Timings{c.ProbeInterval, c.ProbeTimeout, c.SuspicionMult, c.GossipInterval}, true
}

func (t Timings) validate() error {
	switch {
	case t.ProbeInterval <= 0, t.ProbeTimeout <= 0, t.GossipInterval <= 0:
		return fmt.Errorf("custom timings must all be positive (%+v)", t)
	case t.ProbeTimeout >= t.ProbeInterval:
		return fmt.Errorf("probe timeout %s is not less than probe interval %s", t.ProbeTimeout, t.ProbeInterval)
	case t.SuspicionMult < 1 || t.SuspicionMult > maxSuspicionMult:
		return fmt.Errorf("suspicion multiplier %d is outside 1..%d", t.SuspicionMult, maxSuspicionMult)
	}
	return nil
}

// Config is everything [New] needs. The gateway fills it from config.Node,
// config.Gossip, config.Control and config.WAN.
type Config struct {
	// Name is this gateway's member name; it must be unique in the whole
	// cluster (memberlist lets a duplicate "join" with only a log line).
	Name string
	// Meta is what other gateways learn about this one; Meta.Region is
	// this gateway's region and is required. MetaVersion is the metadata
	// version it is announced in (0: the newest; EncodeMetaVersion).
	Meta        Meta
	MetaVersion int
	// Bind is the ip:port memberlist listens on (TCP and UDP). Port 0
	// picks a free port (tests); [Cluster.Addr] tells which.
	Bind string
	// Advertise is the ip:port announced to others; empty means Bind,
	// which must then be a specific address, not 0.0.0.0 or ::.
	Advertise string
	// Seeds are host:port of members to contact when [Cluster.Join] is
	// called without seeds.
	Seeds []string
	// Keys is the gossip keyring: 16, 24 or 32 bytes each (AES-128/192/256);
	// the first encrypts, all decrypt. Empty disables encryption, and then
	// it cannot be switched on without a restart.
	Keys [][]byte
	// Profile names the timings: "wan" (also when empty), "lan" or "custom".
	Profile string
	// Timings are used with Profile "custom" only.
	Timings Timings
	// HealthTTL is how long a path-health report is believed after it was
	// measured (default 30 s). Reporters should republish well within it.
	HealthTTL time.Duration
	// MaxHealthReports bounds the health table; zero (the default) means
	// max(DefaultMaxHealthReports, 2·G·P), which follows the fleet
	// ([Cluster.HealthBound]). When full, the oldest report gives way (a
	// down only to another down, counted).
	MaxHealthReports int
	// JoinAttempts bounds the rounds [Cluster.Join] makes (default 5).
	JoinAttempts int
	// FlapDamping holds back the "up" of a verdict of this gateway's that
	// flaps (damping.go); zero: the defaults, Off: none; an invalid field
	// (negative, say) is an error of New that names it.
	FlapDamping DampingConfig
	// NoCompression turns off memberlist's compression of gossip packets
	// and state exchanges. memberlist compresses each one with a new LZW
	// writer, whose 64 KiB table is allocated and zeroed per packet: for
	// one gateway that is a few hundred microseconds a second, but the
	// fleet load test runs up to 128 gateways in one process, where it
	// was the largest single cost (a quarter of the CPU, and much of the
	// garbage collector's). The gateway keeps compression (it takes about
	// a fifth off the health messages' bytes).
	NoCompression bool
	// ExpectedRegions are regions known from configuration. Route for one
	// of them with no live gateway is ErrRegionUnreachable even before any
	// of its gateways has been seen, rather than ErrUnknownRegion.
	ExpectedRegions []string

	// wrapTransport, tests only, wraps the transport memberlist runs on
	// (to give TCP a WAN's round trips on loopback).
	wrapTransport func(memberlist.NodeAwareTransport) memberlist.NodeAwareTransport
}

// EffectiveTimings returns the timings memberlist will be given.
func (c *Config) EffectiveTimings() (Timings, error) {
	switch c.Profile {
	case "", ProfileWAN, ProfileLAN:
		p := c.Profile
		if p == "" {
			p = ProfileWAN
		}
		if c.Timings != (Timings{}) {
			return Timings{}, fmt.Errorf("region: timings are only used with profile %q (profile is %q)", ProfileCustom, p)
		}
		t, _ := PresetTimings(p)
		return t, nil
	case ProfileCustom:
		if err := c.Timings.validate(); err != nil {
			return Timings{}, fmt.Errorf("region: %w", err)
		}
		return c.Timings, nil
	}
	return Timings{}, fmt.Errorf("region: unknown profile %q (want wan, lan or custom)", c.Profile)
}

// memberlistConfig validates c and builds memberlist's configuration.
// Delegates and logger are filled in by New.
func (c *Config) memberlistConfig() (*memberlist.Config, *memberlist.Keyring, error) {
	if c.Name == "" {
		return nil, nil, errors.New("region: Name is required")
	}
	if _, err := c.encodeMeta(c.Meta); err != nil {
		return nil, nil, err
	}
	t, err := c.EffectiveTimings()
	if err != nil {
		return nil, nil, err
	}
	bind, err := netip.ParseAddrPort(c.Bind)
	if err != nil {
		return nil, nil, fmt.Errorf("region: Bind %q is not ip:port: %w", c.Bind, err)
	}
	adv := bind
	if c.Advertise != "" {
		if adv, err = netip.ParseAddrPort(c.Advertise); err != nil {
			return nil, nil, fmt.Errorf("region: Advertise %q is not ip:port: %w", c.Advertise, err)
		}
	}
	if adv.Addr().IsUnspecified() {
		// memberlist would pick an interface by itself and may announce
		// one the other regions cannot reach.
		return nil, nil, fmt.Errorf("region: advertise address %s is unspecified; set Advertise", adv)
	}
	for i, k := range c.Keys {
		if err := memberlist.ValidateKey(k); err != nil {
			return nil, nil, fmt.Errorf("region: Keys[%d]: %w", i, err)
		}
	}
	if c.HealthTTL < 0 || c.MaxHealthReports < 0 || c.JoinAttempts < 0 {
		return nil, nil, errors.New("region: HealthTTL, MaxHealthReports and JoinAttempts must not be negative")
	}
	if err := c.FlapDamping.Validate(); err != nil {
		return nil, nil, fmt.Errorf("region: %w", err)
	}

	var mc *memberlist.Config
	if c.Profile == ProfileLAN || c.Profile == ProfileCustom {
		mc = memberlist.DefaultLANConfig()
	} else {
		mc = memberlist.DefaultWANConfig()
	}
	mc.ProbeInterval, mc.ProbeTimeout = t.ProbeInterval, t.ProbeTimeout
	mc.SuspicionMult, mc.GossipInterval = t.SuspicionMult, t.GossipInterval
	mc.EnableCompression = !c.NoCompression
	mc.Name = c.Name
	mc.BindAddr, mc.BindPort = bind.Addr().String(), int(bind.Port())
	mc.AdvertiseAddr, mc.AdvertisePort = adv.Addr().String(), int(adv.Port())

	var kr *memberlist.Keyring
	if len(c.Keys) > 0 {
		kr, err = memberlist.NewKeyring(c.Keys, c.Keys[0])
		if err != nil {
			return nil, nil, fmt.Errorf("region: keyring: %w", err)
		}
		mc.Keyring = kr
		// Both default to true; set them anyway, since a gateway must
		// never accept or send clear gossip once it has keys.
		mc.GossipVerifyIncoming, mc.GossipVerifyOutgoing = true, true
	}
	return mc, kr, nil
}

func (c *Config) withDefaults() Config {
	d := *c
	if d.HealthTTL == 0 {
		d.HealthTTL = DefaultHealthTTL
	}
	if d.JoinAttempts == 0 {
		d.JoinAttempts = DefaultJoinAttempts
	}
	return d
}

// encodeMeta encodes m in the metadata version c announces.
func (c Config) encodeMeta(m Meta) ([]byte, error) {
	if c.MetaVersion == 0 {
		return EncodeMeta(m)
	}
	return EncodeMetaVersion(m, c.MetaVersion)
}
