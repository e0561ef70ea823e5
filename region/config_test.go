package region

import (
	"strings"
	"testing"
	"time"
)

func TestPresetTimings(t *testing.T) {
	// The same numbers config.Gossip.Timings documents for the profiles.
	for profile, want := range map[string]Timings{
		ProfileWAN: {5 * time.Second, 3 * time.Second, 6, 500 * time.Millisecond},
		ProfileLAN: {time.Second, 500 * time.Millisecond, 4, 200 * time.Millisecond},
	} {
		got, ok := PresetTimings(profile)
		if !ok || got != want {
			t.Errorf("%s = %+v, want %+v", profile, got, want)
		}
	}
	var c Config
	if got, err := c.EffectiveTimings(); err != nil || got.ProbeInterval != 5*time.Second {
		t.Errorf("empty profile = %+v, %v; want the WAN preset", got, err)
	}
}

func TestConfigRejects(t *testing.T) {
	for name, tc := range map[string]struct {
		mut  func(*Config)
		want string
	}{
		"no name":          {func(c *Config) { c.Name = "" }, "Name is required"},
		"no region":        {func(c *Config) { c.Meta.Region = "" }, "Region is required"},
		"bad profile":      {func(c *Config) { c.Profile = "fast" }, "unknown profile"},
		"timings with wan": {func(c *Config) { c.Profile = ProfileWAN }, "only used with profile"},
		"timeout >= probe": {func(c *Config) { c.Timings.ProbeTimeout = c.Timings.ProbeInterval }, "not less than"},
		"suspicion 0":      {func(c *Config) { c.Timings.SuspicionMult = 0 }, "suspicion multiplier"},
		"zero gossip":      {func(c *Config) { c.Timings.GossipInterval = 0 }, "positive"},
		"bind no port":     {func(c *Config) { c.Bind = "127.0.0.1" }, "not ip:port"},
		"unspecified":      {func(c *Config) { c.Bind = "0.0.0.0:7946" }, "set Advertise"},
		"short key":        {func(c *Config) { c.Keys = [][]byte{make([]byte, 15)} }, "Keys[0]"},
		"negative ttl":     {func(c *Config) { c.HealthTTL = -1 }, "must not be negative"},
	} {
		cfg := testConfig("a1", "a")
		tc.mut(&cfg)
		_, err := New(cfg, nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: New error = %v, want one containing %q", name, err, tc.want)
		}
	}
}

func TestAdvertiseOverridesBind(t *testing.T) {
	cfg := testConfig("a1", "a")
	cfg.Bind = "0.0.0.0:0"
	cfg.Advertise = "127.0.0.1:0"
	c := start(t, cfg)
	if !strings.HasPrefix(c.Addr(), "127.0.0.1:") {
		t.Errorf("advertised %s", c.Addr())
	}
}
