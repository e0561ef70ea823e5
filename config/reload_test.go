package config

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestReloadable(t *testing.T) {
	cases := []struct {
		name    string
		change  func(c *Config)
		changed []string
		refused []string
	}{
		{"nothing", func(*Config) {}, nil, nil},
		{"log level", func(c *Config) { c.Log.Level = "debug" }, []string{"log.level"}, nil},
		{"node name", func(c *Config) { c.Node.Name = "gw9" }, []string{"node.name"}, []string{"node.name"}},
		{"live and not", func(c *Config) {
			c.Scheduler.Classes[0].Weight = 5
			c.WAN.MTU = 9000
			c.Limits.MaxFlows = 10
			c.Log.Format = "json"
		}, []string{"wan.mtu", "limits.max_flows", "scheduler.classes", "log.format"}, []string{"wan.mtu", "log.format"}},
		{"gossip keyring is live, timings are not", func(c *Config) {
			c.Gossip.Keyring = []string{"AAAAAAAAAAAAAAAAAAAAAA=="}
			c.Gossip.Profile = "lan"
		}, []string{"gossip.keyring", "gossip.profile"}, []string{"gossip.profile"}},
		{"rates and rotation", func(c *Config) {
			c.WAN.MaxRateBps, c.LAN.MaxRateBps, c.WAN.KeyRotation = 1e9, 1e9, time.Minute
		}, []string{"lan.max_rate_bps", "wan.max_rate_bps", "wan.key_rotation"}, nil},
		{"regions", func(c *Config) { c.Regions[0].Gateways[0].Control = "127.0.0.9:7443" },
			[]string{"regions"}, []string{"regions"}},
		{"a region list element", func(c *Config) { c.WAN.Planes[0].Local = "127.0.0.1:15999" },
			[]string{"wan.planes"}, []string{"wan.planes"}},
		{"empty list equals absent", func(c *Config) { c.Control.PeerNames = []string{} }, nil, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			old, next := minimal(t), minimal(t)
			tc.change(next)
			changed, err := Reloadable(old, next)
			if !slices.Equal(changed, tc.changed) {
				t.Errorf("changed = %q, want %q", changed, tc.changed)
			}
			var refused []string
			for _, p := range Problems(err) {
				var fe *FieldError
				if !errors.As(p, &fe) || !strings.Contains(fe.Msg, "restart") {
					t.Errorf("refusal %v is not a FieldError asking for a restart", p)
					continue
				}
				refused = append(refused, fe.Key)
			}
			if !slices.Equal(refused, tc.refused) {
				t.Errorf("refused = %q, want %q", refused, tc.refused)
			}
		})
	}
	if _, err := Reloadable(nil, minimal(t)); err == nil {
		t.Error("Reloadable(nil, c) succeeded")
	}
}
