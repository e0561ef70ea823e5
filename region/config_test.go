package region

import (
	"math"
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
		// Damping took its defaults for a negative value without a word.
		"negative half-life": {func(c *Config) { c.FlapDamping.HalfLife = -time.Second }, "FlapDamping.HalfLife -1s: must not be negative"},
		"negative suppress":  {func(c *Config) { c.FlapDamping.Suppress = -1 }, "FlapDamping.Suppress -1"},
		"reuse >= suppress":  {func(c *Config) { c.FlapDamping.Reuse = 2 }, "FlapDamping.Reuse 2: must be below Suppress 1.8"},
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

// Every invalid damping setting is refused by name and reason; zero fields
// and sound settings are accepted. Before, a negative value (or a Reuse
// not below Suppress) silently took the default.
func TestDampingConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		d    DampingConfig
		want string // "" means valid
	}{
		{DampingConfig{}, ""},
		{DampingConfig{Off: true}, ""},
		{DampingConfig{HalfLife: 10 * time.Second, Suppress: 3, Reuse: 1, MaxHold: 2 * time.Minute}, ""},
		{DampingConfig{Suppress: 1}, ""}, // Reuse 0: half of Suppress, 0.5
		{DampingConfig{HalfLife: -1}, "FlapDamping.HalfLife -1ns: must not be negative (0 takes the default 15s)"},
		{DampingConfig{MaxHold: -time.Minute}, "FlapDamping.MaxHold -1m0s: must not be negative"},
		{DampingConfig{Suppress: -0.5}, "FlapDamping.Suppress -0.5: must be a finite number, not negative"},
		{DampingConfig{Suppress: math.NaN()}, "FlapDamping.Suppress NaN"},
		{DampingConfig{Reuse: math.Inf(1)}, "FlapDamping.Reuse +Inf"},
		{DampingConfig{Reuse: -1, Off: true}, "FlapDamping.Reuse -1"},
		{DampingConfig{Reuse: 1.8}, "FlapDamping.Reuse 1.8: must be below Suppress 1.8"},
		{DampingConfig{Suppress: 1, Reuse: 2}, "FlapDamping.Reuse 2: must be below Suppress 1"},
		// 15 s · log2(1.8/0.75) = 18.9 s from Suppress to Reuse.
		{DampingConfig{MaxHold: 10 * time.Second}, "FlapDamping.MaxHold 10s: shorter than the 18.946s"},
	} {
		err := tc.d.Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%+v: %v, want valid", tc.d, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%+v: error %v, want one containing %q", tc.d, err, tc.want)
		}
	}
}
