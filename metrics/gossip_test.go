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
