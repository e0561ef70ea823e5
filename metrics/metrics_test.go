package metrics

import (
	"io"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"

	"github.com/mrgw/mrgw/metaroce"
	"github.com/mrgw/mrgw/pathmgr"
)

// touchAll gives every vector at least one child, so Gather reports every
// family.
func touchAll(m *Metrics) {
	m.MemoryBufferedBytes.Set(1 << 20)
	m.MemoryLimitBytes.Set(1 << 30)
	m.HostFlowsActive.Set(3)
	m.HostFlowsLimit.Set(4096)
	m.FlowRefused(RefuseLimit)
	m.LANGoodputBytes.WithLabelValues(DirOut).Add(100)
	m.MessageCompleted("us-east", DirOut, 20*time.Millisecond)
	m.MessageFailed("us-east", DirIn)
	m.ConfigReload(ResultOK)
	m.SetRegionReachable("us-east", true)
	m.PeersAlive.WithLabelValues("us-east").Set(2)
	m.SyncGossip(map[string]uint64{"decrypt": 3}, map[string]uint64{"keyring": 1})
	m.ControlSessionsActive.WithLabelValues("us-east").Set(2)
	m.ControlSession(ResultEstablished)
	m.ControlRefused("expired")
	m.AdmissionRefused(AdmitFull)
	m.HostPeerReclaimed(ReclaimIdle)
	m.RegistrationRefused(RegisterDuplicate)
	m.LANPeers.Set(3)
	m.LANPeersPending.Set(1)
	m.AdmissionSaturated.Set(0)
	m.WANDatagramsSent.WithLabelValues("use-gw1", "us-east", "plane-a").Add(10)
	m.WANDatagramsReceived.WithLabelValues("use-gw1", "us-east", "plane-a").Add(9)
	m.WANSentBytes.WithLabelValues("use-gw1", "us-east", "plane-a").Add(1e4)
	m.WANReceivedBytes.WithLabelValues("use-gw1", "us-east", "plane-a").Add(9e3)
	m.DatagramDropped("plane-a", DropReplay)
	m.PathsAvoided("use-gw1", "us-east", "plane-a", 2)
	pm := m.Peer("use-gw1", "us-east")
	pm.SetConnected(true)
	pm.SetRates(1e9, 5e8)
	pm.KeyRotation(true)
	pm.Sync(metaroce.ConnStats{DataSent: 10, Retransmits: 1, PacketsLost: 1, PayloadBytesSent: 4096, PayloadBytesPlaced: 2048, Timeouts: 1, Duplicates: 1})
	m.Path("use-gw1", "us-east", "plane-a", 0).Sync(PathSnapshot{State: pathmgr.Up, SRTT: 80 * time.Millisecond, MinRTT: 79 * time.Millisecond, WindowBytes: 1 << 20, InflightBytes: 1 << 19, Sent: 10, Acked: 9, Lost: 1, Marked: 2, Timeouts: 1, AckedBytes: 9 * 4096})
	m.Path("use-gw1", "us-east", "plane-a", 0).SetState(pathmgr.Down)
	m.SetPathMTU("use-gw1", "us-east", "plane-a", 1500)
	m.SetCertExpiry(CertGateway, time.Now().Add(90*24*time.Hour))
	m.SyncLANDropped(LANDropBuffer, 3)
	m.SyncProtocolDropped(map[string]uint64{"bad_version": 5})
	m.SyncControl(ControlListener{Dropped: map[string]uint64{"retry": 7}, HandshakesInProgress: 1, HandshakeTimeouts: 1})
}

// TestInitServesEveryFamily: after New and Init, before any event, every
// family of the catalogue has its series (the certificate expiry aside,
// which the gateway sets from its files), at zero for the counters, with
// every fixed label value and every label set the topology makes known.
func TestInitServesEveryFamily(t *testing.T) {
	m := New(WithIdentity("euw-gw1", "eu-west"), WithMaxPaths(16))
	planes := []string{"p0", "p1"}
	m.Init(Topology{Region: "eu-west", Peers: []PeerName{{"use-gw1", "us-east"}, {"use-gw2", "us-east"}, {"apn-gw1", "ap-north"}},
		Planes: planes, Paths: 4, PlaneOfPath: func(i int) string { return planes[i%len(planes)] }})
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]*dto.MetricFamily{}
	for _, mf := range mfs {
		got[mf.GetName()] = mf
	}
	for _, f := range m.Families() {
		switch f.Name {
		case "mrgw_certificate_expiry_timestamp_seconds":
			continue
		case "mrgw_path_rtt_seconds", "mrgw_path_min_rtt_seconds", "mrgw_path_mtu_bytes":
			// No path has measured an RTT or validated an MTU yet:
			// unknown is absent, not 0.
			if _, ok := got[f.Name]; ok {
				t.Errorf("%s: served before any path measured an RTT", f.Name)
			}
			continue
		}
		if _, ok := got[f.Name]; !ok {
			t.Errorf("%s: not served before its first event", f.Name)
		}
	}
	count := func(name string, want map[string]string) int {
		n := 0
		for _, mt := range got[name].GetMetric() {
			ok := true
			for k, v := range want {
				if !slices.ContainsFunc(mt.GetLabel(), func(lp *dto.LabelPair) bool { return lp.GetName() == k && lp.GetValue() == v }) {
					ok = false
				}
			}
			if ok {
				n++
			}
		}
		return n
	}
	for _, c := range []struct {
		name  string
		label map[string]string
		want  int
	}{
		{"mrgw_config_reloads_total", nil, len(ReloadResults)},
		{"mrgw_config_reloads_total", map[string]string{"result": ResultFailed}, 1},
		{"mrgw_host_flows_refused_total", nil, len(RefuseReasons)},
		{"mrgw_control_sessions_total", nil, len(SessionResults)},
		{"mrgw_lan_datagrams_dropped_total", nil, len(LANDropReasons)},
		{"mrgw_protocol_datagrams_dropped_total", nil, len(ProtocolDropReasons)},
		{"mrgw_control_packets_dropped_total", nil, len(ControlDropReasons)},
		{"mrgw_messages_failed_total", nil, 2 * 2}, // 2 remote regions x 2 directions
		{"mrgw_messages_failed_total", map[string]string{"peer_region": "ap-north", "direction": DirOut}, 1},
		{"mrgw_region_reachable", nil, 2},        // remote regions only
		{"mrgw_peers_alive", nil, 3},             // and this gateway's own
		{"mrgw_paths_avoided_total", nil, 3 * 2}, // peers x planes
		{"mrgw_wan_datagrams_dropped_total", nil, 2 * len(DropReasons)},
		{"mrgw_wan_datagrams_sent_total", nil, 3 * 2},
		{"mrgw_path_state", nil, 3 * 4 * len(PathStates)}, // peers x paths x states
		{"mrgw_path_state", map[string]string{"path": "3", "plane": "p1"}, 3 * len(PathStates)},
		{"mrgw_key_rotations_total", map[string]string{"result": ResultFailed}, 3},
		{"mrgw_peer_silence_drops_total", nil, 3}, // every peer, at zero
	} {
		if n := count(c.name, c.label); n != c.want {
			t.Errorf("%s%v: %d series, want %d", c.name, c.label, n, c.want)
		}
	}
	for _, mf := range mfs {
		if !strings.HasPrefix(mf.GetName(), "mrgw_") || mf.GetName() == "mrgw_build_info" {
			continue
		}
		for _, mt := range mf.GetMetric() {
			if v := mt.GetCounter().GetValue() + mt.GetGauge().GetValue() + float64(mt.GetHistogram().GetSampleCount()); v != 0 {
				t.Errorf("%s: %v before any event", mf.GetName(), v)
			}
		}
	}
}

func TestGatherEveryFamily(t *testing.T) {
	m := New(WithIdentity("euw-gw1", "eu-west"), WithMaxPaths(16))
	touchAll(m)
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	got := map[string]*dto.MetricFamily{}
	for _, mf := range mfs {
		got[mf.GetName()] = mf
	}
	for _, f := range m.Families() {
		mf, ok := got[f.Name]
		if !ok {
			t.Errorf("%s: not gathered", f.Name)
			continue
		}
		if mf.GetHelp() != f.Help {
			t.Errorf("%s: help %q, catalogue says %q", f.Name, mf.GetHelp(), f.Help)
		}
		if want := map[Type]dto.MetricType{Counter: dto.MetricType_COUNTER, Gauge: dto.MetricType_GAUGE, Histogram: dto.MetricType_HISTOGRAM}[f.Type]; mf.GetType() != want {
			t.Errorf("%s: type %v, catalogue says %s", f.Name, mf.GetType(), f.Type)
		}
		for _, mt := range mf.GetMetric() {
			var names []string
			for _, lp := range mt.GetLabel() {
				names = append(names, lp.GetName())
			}
			want := append([]string{LabelGateway, LabelRegion}, f.Labels...)
			slices.Sort(want)
			slices.Sort(names)
			if !slices.Equal(names, want) {
				t.Errorf("%s: labels %v, want %v", f.Name, names, want)
			}
		}
	}
	// Every mrgw_ family gathered is in the catalogue, and the standard
	// collectors are there too.
	var mrgw int
	for name := range got {
		if strings.HasPrefix(name, "mrgw_") {
			mrgw++
			if _, ok := Lookup(name); !ok {
				t.Errorf("%s: gathered but not in the catalogue", name)
			}
		}
	}
	if mrgw != len(Names()) {
		t.Errorf("gathered %d mrgw_ families, Names() has %d", mrgw, len(Names()))
	}
	if _, ok := got["go_goroutines"]; !ok {
		t.Error("the standard Go collector is not registered")
	}
}

func TestNamingConventions(t *testing.T) {
	nameRE := regexp.MustCompile(`^mrgw_[a-z][a-z0-9_]*[a-z0-9]$`)
	units := []string{"_bytes", "_seconds", "_bytes_per_second"}
	names := Names()
	if !slices.IsSorted(names) {
		t.Errorf("Names() is not sorted")
	}
	if len(names) < 40 {
		t.Errorf("only %d families", len(names))
	}
	for _, f := range Catalogue() {
		if !nameRE.MatchString(f.Name) {
			t.Errorf("%s: not a mrgw_ snake_case name", f.Name)
		}
		if len(f.Help) < 20 || !strings.HasSuffix(f.Help, ".") {
			t.Errorf("%s: help %q is not a sentence", f.Name, f.Help)
		}
		switch f.Type {
		case Counter:
			if !strings.HasSuffix(f.Name, "_total") {
				t.Errorf("%s: counter without _total", f.Name)
			}
		default:
			if strings.HasSuffix(f.Name, "_total") {
				t.Errorf("%s: %s ending in _total", f.Name, f.Type)
			}
		}
		base := strings.TrimSuffix(f.Name, "_total")
		for _, bad := range []string{"_ms", "_milliseconds", "_kb", "_mb", "_bits", "_percent"} {
			if strings.HasSuffix(base, bad) {
				t.Errorf("%s: non-base unit %s", f.Name, bad)
			}
		}
		if strings.Contains(f.Help, "in seconds") || strings.Contains(f.Help, "in bytes") {
			hasUnit := false
			for _, u := range units {
				hasUnit = hasUnit || strings.HasSuffix(base, u)
			}
			if !hasUnit {
				t.Errorf("%s: help names a unit the name does not carry", f.Name)
			}
		}
		for _, l := range f.Labels {
			if !slices.Contains([]string{LabelPeer, LabelPeerRegion, LabelPlane, LabelPath, LabelState, LabelReason, LabelResult, LabelDirection, LabelVersion, LabelRevision, LabelGoVersion, LabelCert, LabelCause}, l) {
				t.Errorf("%s: label %q is not one of the bounded labels", f.Name, l)
			}
		}
	}
}

func TestRegisterTwiceIsRefused(t *testing.T) {
	m := New(WithoutStandardCollectors())
	err := m.Registry.Register(prometheus.NewGauge(prometheus.GaugeOpts{Name: "mrgw_memory_buffered_bytes", Help: "again"}))
	if err == nil {
		t.Fatal("registering a catalogue name twice succeeded")
	}
	// Two catalogues are independent: private registries.
	a, b := New(), New()
	a.MemoryBufferedBytes.Set(5)
	if got := value(b.MemoryBufferedBytes); got != 0 {
		t.Errorf("second registry sees %v", got)
	}
}

func TestBoundedLabels(t *testing.T) {
	m := New(WithoutStandardCollectors(), WithMaxPaths(4))
	m.DatagramDropped("plane-a", DropReason("attacker-chosen-string"))
	m.DatagramDropped("plane-a", DropAuth)
	m.FlowRefused("whatever")
	m.ControlSession("nope")
	if got := value(m.WANDatagramsDropped.WithLabelValues("plane-a", Other)); got != 1 {
		t.Errorf("unknown drop reason counted as other %v times, want 1", got)
	}
	if got := value(m.WANDatagramsDropped.WithLabelValues("plane-a", "auth")); got != 1 {
		t.Errorf("auth drops %v, want 1", got)
	}
	if got := value(m.HostFlowsRefused.WithLabelValues(Other)); got != 1 {
		t.Errorf("unknown refuse reason: %v", got)
	}
	for _, id := range []int{0, 3, 4, 1000, -1} {
		m.Path("p", "r", "plane-a", id).SetState(pathmgr.Up)
	}
	if n := count(m.PathState); n != 3*len(PathStates) {
		t.Errorf("path state series %d, want %d (ids 0, 3 and overflow)", n, 3*len(PathStates))
	}
	if got := value(m.PathState.WithLabelValues("p", "r", "plane-a", OverflowPath, "up")); got != 1 {
		t.Errorf("overflow path state up = %v", got)
	}
	if m.PathLabel(3) != "3" || m.PathLabel(4) != OverflowPath {
		t.Errorf("PathLabel: %q %q", m.PathLabel(3), m.PathLabel(4))
	}
}

func TestPeerSyncCounts(t *testing.T) {
	m := New(WithoutStandardCollectors())
	p := m.Peer("use-gw1", "us-east")
	if m.Peer("use-gw1", "us-east") != p {
		t.Fatal("Peer is not memoised")
	}
	p.SetConnected(true)
	p.Sync(metaroce.ConnStats{DataSent: 100, Retransmits: 5, PacketsLost: 4, PayloadBytesPlaced: 1000})
	p.Sync(metaroce.ConnStats{DataSent: 150, Retransmits: 7, PacketsLost: 6, PayloadBytesPlaced: 1500,
		RetransmitsGap: 4, RetransmitsTimeout: 3, RetransmitsSpurious: 2})
	check := func(c prometheus.Collector, want float64) {
		t.Helper()
		if got := value(c); got != want {
			t.Errorf("got %v, want %v", got, want)
		}
	}
	check(m.PeerDataPacketsSent.WithLabelValues("use-gw1", "us-east"), 150)
	check(m.PeerRetransmits.WithLabelValues("use-gw1", "us-east"), 7)
	check(m.PeerPacketsLost.WithLabelValues("use-gw1", "us-east"), 6)
	check(m.PeerRetransmitsCause.WithLabelValues("use-gw1", "us-east", RetxGap), 4)
	check(m.PeerRetransmitsCause.WithLabelValues("use-gw1", "us-east", RetxTimeout), 3)
	check(m.PeerSpurious.WithLabelValues("use-gw1", "us-east"), 2)
	check(m.PeerGoodputBytes.WithLabelValues("use-gw1", "us-east", DirIn), 1500)
	// Reconnect: the new connection's counters start at zero; the series
	// keep growing.
	p.SetConnected(false)
	check(m.PeerConnected.WithLabelValues("use-gw1", "us-east"), 0)
	p.SetConnected(true)
	p.Sync(metaroce.ConnStats{DataSent: 20, Retransmits: 1})
	check(m.PeerDataPacketsSent.WithLabelValues("use-gw1", "us-east"), 170)
	check(m.PeerRetransmits.WithLabelValues("use-gw1", "us-east"), 8)
	// A source that went backwards without a reconnect is a reset too.
	p.Sync(metaroce.ConnStats{DataSent: 5})
	check(m.PeerDataPacketsSent.WithLabelValues("use-gw1", "us-east"), 175)

	p.KeyRotation(true)
	p.KeyRotation(false)
	check(m.KeyRotations.WithLabelValues("use-gw1", "us-east", ResultOK), 1)
	check(m.KeyRotations.WithLabelValues("use-gw1", "us-east", ResultFailed), 1)
}

// A path that has not measured an RTT has no RTT series (Prometheus'
// way of saying unknown), not a 0 that min() would pick; the series
// appears with the first sample and goes when a new connection has none.
func TestPathRTTUnknownIsAbsent(t *testing.T) {
	m := New(WithoutStandardCollectors())
	pp := m.Path("use-gw1", "us-east", "plane-b", 2)
	lv := []string{"use-gw1", "us-east", "plane-b", "2"}
	var path pathmgr.Path
	path.SentPackets = 3
	pp.Sync(SnapshotOf(&path, 65536, 0))
	if n, k := count(m.PathRTT), count(m.PathMinRTT); n != 0 || k != 0 {
		t.Fatalf("unmeasured path: %d rtt and %d min rtt series, want none", n, k)
	}
	if n := count(m.PathCwnd); n != 1 {
		t.Fatalf("cwnd series %d, want 1", n)
	}
	path.OnRTTSample(40 * time.Millisecond)
	pp.Sync(SnapshotOf(&path, 65536, 0))
	if n := count(m.PathRTT); n != 1 || value(m.PathRTT.WithLabelValues(lv...)) != 0.04 || value(m.PathMinRTT.WithLabelValues(lv...)) != 0.04 {
		t.Fatalf("measured path: %d series, rtt %v", n, value(m.PathRTT.WithLabelValues(lv...)))
	}
	// The connection is re-established: its paths start unmeasured.
	pp.Sync(SnapshotOf(&pathmgr.Path{}, 65536, 0))
	if n, k := count(m.PathRTT), count(m.PathMinRTT); n != 0 || k != 0 {
		t.Fatalf("new connection: %d rtt and %d min rtt series, want none", n, k)
	}
}

func TestPathSync(t *testing.T) {
	m := New(WithoutStandardCollectors())
	pp := m.Path("use-gw1", "us-east", "plane-b", 2)
	lv := []string{"use-gw1", "us-east", "plane-b", "2"}

	var path pathmgr.Path
	path.OnRTTSample(80 * time.Millisecond)
	path.SentPackets, path.AckedPackets, path.LostPackets, path.MarkedPackets = 10, 8, 2, 3
	path.InflightBytes = 8192
	pp.Sync(SnapshotOf(&path, 65536, 8*4096))
	if got := value(m.PathRTT.WithLabelValues(lv...)); got != 0.08 {
		t.Errorf("rtt %v", got)
	}
	if got := value(m.PathCwnd.WithLabelValues(lv...)); got != 65536 {
		t.Errorf("cwnd %v", got)
	}
	if got := value(m.PathInflight.WithLabelValues(lv...)); got != 8192 {
		t.Errorf("inflight %v", got)
	}
	if got := value(m.PathECNMarked.WithLabelValues(lv...)); got != 3 {
		t.Errorf("ecn marked %v", got)
	}
	if got := value(m.PathState.WithLabelValues(append(lv, "up")...)); got != 1 {
		t.Errorf("state up %v", got)
	}
	if got := value(m.PathState.WithLabelValues(append(lv, "down")...)); got != 0 {
		t.Errorf("state down %v", got)
	}
	// The first state seen is not a transition.
	if n := value(m.PathTransitions.WithLabelValues(append(lv, "up")...)); n != 0 {
		t.Errorf("transitions to up %v after first sync", n)
	}

	pp.Transition(pathmgr.Transition{Path: 2, From: pathmgr.Up, To: pathmgr.Down})
	path.State = pathmgr.Down
	path.SentPackets, path.LostPackets = 12, 4
	pp.Sync(SnapshotOf(&path, 0, 9*4096)) // the same transition again: counted once
	if got := value(m.PathTransitions.WithLabelValues(append(lv, "down")...)); got != 1 {
		t.Errorf("transitions to down %v, want 1", got)
	}
	if got := value(m.PathState.WithLabelValues(append(lv, "down")...)); got != 1 {
		t.Errorf("state down %v", got)
	}
	if got := value(m.PathPacketsLost.WithLabelValues(lv...)); got != 4 {
		t.Errorf("lost %v", got)
	}
	if got := value(m.PathGoodputBytes.WithLabelValues(lv...)); got != 9*4096 {
		t.Errorf("path goodput %v", got)
	}
	if got := value(m.PeerGoodputBytes.WithLabelValues("use-gw1", "us-east", DirOut)); got != 9*4096 {
		t.Errorf("peer goodput out %v, want the path's acked bytes", got)
	}
}

func TestForgetPeer(t *testing.T) {
	m := New(WithoutStandardCollectors())
	touchAll(m)
	m.Path("use-gw2", "us-east", "plane-a", 1).SetState(pathmgr.Up)
	m.ForgetPeer("use-gw1")
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var gw2 bool
	for _, mf := range mfs {
		for _, mt := range mf.GetMetric() {
			for _, lp := range mt.GetLabel() {
				if lp.GetName() == LabelPeer && lp.GetValue() == "use-gw1" {
					t.Errorf("%s still has a use-gw1 series", mf.GetName())
				}
				if lp.GetName() == LabelPeer && lp.GetValue() == "use-gw2" {
					gw2 = true
				}
			}
		}
	}
	if !gw2 {
		t.Error("ForgetPeer removed another peer's series")
	}
	// The peer comes back with fresh series.
	m.Path("use-gw1", "us-east", "plane-a", 0).SetState(pathmgr.Probing)
	if got := value(m.PathState.WithLabelValues("use-gw1", "us-east", "plane-a", "0", "probing")); got != 1 {
		t.Errorf("state after ForgetPeer: %v", got)
	}
}

func TestHTTPExposition(t *testing.T) {
	m := New(WithIdentity("euw-gw1", "eu-west"))
	touchAll(m)
	srv := httptest.NewServer(promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{}))
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	text := string(body)
	for _, want := range []string{
		"# HELP mrgw_path_rtt_seconds ",
		"# TYPE mrgw_wan_datagrams_dropped_total counter",
		`mrgw_region_reachable{gateway="euw-gw1",peer_region="us-east",region="eu-west"} 1`,
		`mrgw_message_completion_seconds_bucket{`,
		`mrgw_build_info{`,
		"go_goroutines",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("exposition lacks %q", want)
		}
	}
}

// value reads the single sample of a counter or gauge (the testutil package
// of client_golang needs a module this repository does not require).
func value(c prometheus.Collector) float64 {
	ch := make(chan prometheus.Metric, 1)
	go func() { c.Collect(ch); close(ch) }()
	var v float64
	for m := range ch {
		var d dto.Metric
		if err := m.Write(&d); err != nil {
			panic(err)
		}
		switch {
		case d.Counter != nil:
			v = d.Counter.GetValue()
		case d.Gauge != nil:
			v = d.Gauge.GetValue()
		}
	}
	return v
}

// count is the number of series a collector has.
func count(c prometheus.Collector) int {
	ch := make(chan prometheus.Metric)
	go func() { c.Collect(ch); close(ch) }()
	n := 0
	for range ch {
		n++
	}
	return n
}

// TestConcurrentUse creates and feeds peers and paths from several
// goroutines while the registry is gathered (run with -race).
func TestConcurrentUse(t *testing.T) {
	m := New(WithoutStandardCollectors(), WithMaxPaths(8))
	done := make(chan struct{})
	for g := 0; g < 4; g++ {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := 0; i < 200; i++ {
				// Each goroutine owns its paths (ids g and g+4), as a
				// connection owns its own; lookups and drops are shared.
				m.Path("use-gw1", "us-east", "plane-a", g+4*(i%2)).SetState(pathmgr.State(i % 4))
				m.Peer("use-gw1", "us-east")
				m.DatagramDropped("plane-a", DropQueue)
				if _, err := m.Registry.Gather(); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	for g := 0; g < 4; g++ {
		<-done
	}
	if got := value(m.WANDatagramsDropped.WithLabelValues("plane-a", "queue")); got != 800 {
		t.Errorf("queue drops %v, want 800", got)
	}
	if n := count(m.PathCwnd); n != 8 {
		t.Errorf("%d path series, want 8", n)
	}
}

func TestSyncWANAndDropped(t *testing.T) {
	m := New(WithoutStandardCollectors())
	m.SyncWAN("use-gw1", "us-east", "p0", WANCounters{SentDatagrams: 10, SentBytes: 1000, ReceivedDatagrams: 7, ReceivedBytes: 700})
	m.SyncWAN("use-gw1", "us-east", "p0", WANCounters{SentDatagrams: 25, SentBytes: 2500, ReceivedDatagrams: 7, ReceivedBytes: 700})
	if got := value(m.WANDatagramsSent.WithLabelValues("use-gw1", "us-east", "p0")); got != 25 {
		t.Fatalf("sent %v, want 25 (cumulative, not summed)", got)
	}
	if got := value(m.WANReceivedBytes.WithLabelValues("use-gw1", "us-east", "p0")); got != 700 {
		t.Fatalf("received bytes %v, want 700", got)
	}
	m.SyncDropped("p1", DropUnknownPeer, 3)
	m.SyncDropped("p1", DropUnknownPeer, 5)
	m.SyncDropped("p1", DropReason("made-up"), 2)
	if got := value(m.WANDatagramsDropped.WithLabelValues("p1", "unknown_peer")); got != 5 {
		t.Fatalf("dropped %v, want 5", got)
	}
	if got := value(m.WANDatagramsDropped.WithLabelValues("p1", Other)); got != 2 {
		t.Fatalf("unknown reason counted as %v under other, want 2", got)
	}
}

// TestSyncByReason: cumulative counts become counter increments; an
// unknown reason is folded into other with the reason "other" itself.
func TestSyncByReason(t *testing.T) {
	m := New(WithoutStandardCollectors())
	val := func(c prometheus.Collector) float64 {
		var d dto.Metric
		_ = c.(prometheus.Metric).Write(&d)
		return d.GetCounter().GetValue() + d.GetGauge().GetValue()
	}
	m.SyncProtocolDropped(map[string]uint64{"bad_version": 5, "new_reason": 2, "other": 1})
	m.SyncProtocolDropped(map[string]uint64{"bad_version": 9, "new_reason": 2, "other": 1})
	if v := val(m.ProtocolDatagramsDropped.WithLabelValues("bad_version")); v != 9 {
		t.Errorf("bad_version %v, want 9", v)
	}
	if v := val(m.ProtocolDatagramsDropped.WithLabelValues(Other)); v != 3 {
		t.Errorf("other %v, want 3", v)
	}
	m.SyncControl(ControlListener{Dropped: map[string]uint64{"retry": 4, "busy": 1}, HandshakesInProgress: 3, HandshakeTimeouts: 2})
	m.SyncControl(ControlListener{Dropped: map[string]uint64{"retry": 10, "busy": 1}, HandshakesInProgress: 0, HandshakeTimeouts: 2})
	if v := val(m.ControlDropped.WithLabelValues("retry")); v != 10 {
		t.Errorf("retry %v, want 10", v)
	}
	if v := val(m.ControlTimeouts); v != 2 {
		t.Errorf("timeouts %v, want 2", v)
	}
	if v := val(m.ControlHandshakes); v != 0 {
		t.Errorf("in progress %v, want 0", v)
	}
}
