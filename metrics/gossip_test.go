package metrics

import (
	"slices"
	"testing"

	"github.com/mrgw/mrgw/region"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// The label values are region's reasons, and other.
func TestGossipReasonsFollowRegion(t *testing.T) {
	if want := append(slices.Clone(region.DropReasons), Other); !slices.Equal(GossipDropReasons, want) {
		t.Errorf("GossipDropReasons = %v, region has %v", GossipDropReasons, want)
	}
	if want := append(slices.Clone(region.RefuseReasons), Other); !slices.Equal(GossipRefuseReasons, want) {
		t.Errorf("GossipRefuseReasons = %v, region has %v", GossipRefuseReasons, want)
	}
}

func TestSyncGossip(t *testing.T) {
	m := New(WithIdentity("euw-gw1", "eu-west"))
	m.SyncGossip(map[string]uint64{"decrypt": 5, "rate": 0, "bogus": 2}, map[string]uint64{"keyring": 1})
	m.SyncGossip(map[string]uint64{"decrypt": 8, "rate": 4, "bogus": 3}, map[string]uint64{"keyring": 1})
	for _, c := range []struct {
		got  float64
		want float64
	}{
		{counterValue(t, m.GossipDatagramsDropped.WithLabelValues("decrypt")), 8},
		{counterValue(t, m.GossipDatagramsDropped.WithLabelValues("rate")), 4},
		{counterValue(t, m.GossipDatagramsDropped.WithLabelValues(Other)), 3},
		{counterValue(t, m.GossipRefused.WithLabelValues("keyring")), 1},
	} {
		if c.got != c.want {
			t.Errorf("got %v, want %v", c.got, c.want)
		}
	}
}

// TestSyncGossipHealth: region.Stats' cumulative flap-damping and eviction
// counts become counter increments, each in its own family.
func TestSyncGossipHealth(t *testing.T) {
	m := New(WithIdentity("euw-gw1", "eu-west"))
	m.SyncGossipHealth(GossipHealth{Held: 3, Released: 1})
	m.SyncGossipHealth(GossipHealth{Held: 5, Released: 2, Absorbed: 4, DownEvicted: 1})
	for _, c := range []struct {
		name      string
		got, want float64
	}{
		{"held", counterValue(t, m.GossipHealthHeld), 5},
		{"released", counterValue(t, m.GossipHealthReleased), 2},
		{"absorbed", counterValue(t, m.GossipHealthAbsorbed), 4},
		{"down evicted", counterValue(t, m.GossipHealthDownEvicted), 1},
	} {
		if c.got != c.want {
			t.Errorf("%s: %v, want %v", c.name, c.got, c.want)
		}
	}
}

// TestSilenceDrop: a liveness verdict counts on the peer's series.
func TestSilenceDrop(t *testing.T) {
	m := New(WithIdentity("euw-gw1", "eu-west"))
	p := m.Peer("use-gw1", "us-east")
	p.SilenceDrop()
	p.SilenceDrop()
	if v := counterValue(t, m.PeerSilenceDrops.WithLabelValues("use-gw1", "us-east")); v != 2 {
		t.Errorf("mrgw_peer_silence_drops_total = %v, want 2", v)
	}
}

// TestSyncDetoured: the relay's running count of detoured routes becomes
// a counter that only grows (a restart of the count adds the new value).
func TestSyncDetoured(t *testing.T) {
	m := New(WithIdentity("euw-gw1", "eu-west"))
	for _, n := range []uint64{2, 5, 5, 1} {
		m.SyncDetoured(n)
	}
	if got := counterValue(t, m.HostFlowsDetoured); got != 6 {
		t.Errorf("mrgw_host_flows_detoured_total %v, want 6 (2, then +3, then +1 after the count restarted)", got)
	}
}
