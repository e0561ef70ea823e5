package gwload

import (
	"os"
	"strings"
	"testing"
	"time"
)

func TestParseExampleFile(t *testing.T) {
	s, err := LoadScenario("testdata/plane-failure.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if s.Name != "plane-failure-file" || s.Duration != 10*time.Second || s.Planes != 4 {
		t.Fatalf("got %+v", s)
	}
	if len(s.Faults) != 2 || s.Faults[0].Kind != FaultPlaneFail || s.Faults[0].At != 4*time.Second || s.Faults[1].Kind != FaultPlaneRestore {
		t.Fatalf("faults %+v", s.Faults)
	}
	r, err := s.resolve()
	if err != nil {
		t.Fatal(err)
	}
	if r.msgSize != 256<<10 || r.base.Rate != 50e6 || r.base.Delay != 20*time.Millisecond || r.base.Loss != 0.001 {
		t.Fatalf("resolved link %+v size %d", r.base, r.msgSize)
	}
	// The override touches plane 2 towards us-east only.
	if r.links[0][2].Loss != 0.01 || r.links[1][2].Loss != 0.001 || r.links[0][1].Loss != 0.001 {
		t.Fatalf("overrides: %+v / %+v", r.links[0], r.links[1])
	}
	if r.base.QueueBytes != 125000 {
		t.Fatalf("default queue %d, want 20 ms at 50 Mbit/s", r.base.QueueBytes)
	}
}

func TestParseRejects(t *testing.T) {
	for _, c := range []struct{ yaml, want string }{
		{"name: x\nduration: 1h\n", "duration"},
		{"name: x\nplanes: 99\n", "planes"},
		{"name: x\nworkload: {pattern: ring}\n", "pattern"},
		{"name: x\nworkload: {flows: 20000}\n", "flows"},
		{"name: x\nworkload: {pattern: incast, flows: 65}\n", "incast"},
		{"name: x\nduration: 5s\nfaults: [{at: 6s, kind: plane-fail, target: '0'}]\n", "outside the run"},
		{"name: x\nfaults: [{at: 1s, kind: plane-fail, target: '7'}]\n", "plane"},
		{"name: x\nfaults: [{at: 1s, kind: gateway-kill, target: nope}]\n", "gateway"},
		{"name: x\nfaults: [{at: 1s, kind: meteor, target: '1'}]\n", "kind"},
		{"name: x\nlink: {rate: fast}\n", "rate"},
		{"name: x\nlink: {loss: 200%}\n", "loss"},
		{"name: x\nworkload: {message_size: 1GiB}\n", "message_size"},
		{"name: x\nunknown_key: 1\n", "unknown_key"},
		{"name: x\nlinks: [{plane: 0, dir: up}]\n", "dir"},
		{"name: x\ngateway_wan_rate: fast\n", "gateway_wan_rate"},
		{"name: x\ngateway_wan_rate: 0mbit\n", "gateway_wan_rate"},
		{"name: x\ngateway_wan_rate: 20gbit\n", "gateway_wan_rate"},
		{"name: x\nregion_wan_rate: 100mbit,delay=1ms\n", "region_wan_rate"},
		{"name: x\nregion_wan_rate: -1mbit\n", "region_wan_rate"},
	} {
		_, err := ParseScenario([]byte(c.yaml))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: err %v, want one mentioning %q", c.yaml, err, c.want)
		}
	}
}

func TestBuiltinsValid(t *testing.T) {
	for _, quick := range []bool{false, true} {
		for _, n := range BuiltinNames {
			scs, err := Builtin(n, quick)
			if err != nil || len(scs) == 0 {
				t.Fatalf("%s: %v", n, err)
			}
			for _, s := range scs {
				ns, err := s.Normalize()
				if err != nil {
					t.Fatalf("%s: %v", n, err)
				}
				for _, f := range ns.Faults {
					if f.At >= ns.Duration {
						t.Fatalf("%s: fault after the end", n)
					}
				}
			}
		}
	}
	if _, err := Builtin("nonesuch", false); err == nil {
		t.Fatal("unknown built-in accepted")
	}
}

func TestSourcesValidated(t *testing.T) {
	base := Scenario{Sources: []Source{{RTT: 10 * time.Millisecond}, {RTT: 50 * time.Millisecond}},
		Workload: Workload{Flows: 4, Hosts: 1}}
	n, err := base.Normalize()
	if err != nil || n.Sources[0].Name != "src-10ms" {
		t.Fatalf("%+v %v", n.Sources, err)
	}
	for name, mod := range map[string]func(*Scenario){
		"flows not a multiple": func(s *Scenario) { s.Workload.Flows = 3 },
		"rtt too small":        func(s *Scenario) { s.Sources[1].RTT = time.Millisecond },
		"repeated name":        func(s *Scenario) { s.Sources[1].Name = "src-10ms" },
		"reserved name":        func(s *Scenario) { s.Sources[0].Name = DestRegion },
		"incast":               func(s *Scenario) { s.Workload = Workload{Pattern: PatternIncast} },
		"gateway kill":         func(s *Scenario) { s.Faults = []Fault{{At: time.Second, Kind: FaultGatewayKill, Target: "euw-gw1"}} },
		"too many sources":     func(s *Scenario) { s.Sources = make([]Source, MaxSources+1) },
	} {
		s := base
		s.Sources = append([]Source(nil), base.Sources...)
		mod(&s)
		if _, err := s.Normalize(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func FuzzParseScenario(f *testing.F) {
	if b, err := os.ReadFile("testdata/plane-failure.yaml"); err == nil {
		f.Add(b)
	}
	f.Add([]byte("name: x\nworkload: {pattern: incast, flows: 8}\n"))
	f.Add([]byte("name: y\nduration: 3s\nworkload: {pattern: allreduce, hosts: 2, steps: 2}\nfaults: [{at: 1s, kind: gateway-kill, target: busiest-src}]\n"))
	f.Add([]byte("links: [{plane: 0, dir: b-a, rate: 10mbit, delay: 5ms, queue: 64KiB}]\n"))
	f.Add([]byte("name: z\ngateway_wan_rate: 100mbit\n"))
	f.Add([]byte("name: z\nregion_wan_rate: 200mbit\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := ParseScenario(data)
		if err != nil {
			return
		}
		// A valid scenario is within the limits and normalizes to itself.
		if s.Duration < MinDuration || s.Duration > MaxDuration || s.Planes < 1 || s.Planes > MaxLabPlanes {
			t.Fatalf("out of limits: %+v", s)
		}
		if s.Workload.Flows < 1 || s.Workload.Flows > MaxFlows || len(s.Faults) > MaxFaults {
			t.Fatalf("out of limits: %+v", s.Workload)
		}
		again, err := s.Normalize()
		if err != nil {
			t.Fatalf("normalized scenario invalid: %v", err)
		}
		if again.Duration != s.Duration || again.Workload != s.Workload || len(again.Faults) != len(s.Faults) {
			t.Fatalf("normalize not idempotent: %+v vs %+v", s, again)
		}
	})
}

// The shipped scenario files parse and match the built-in points they
// stand for.
func TestShippedFiles(t *testing.T) {
	f, err := LoadScenario("testdata/fairness.yaml")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Builtin("fairness", false)
	if len(f.Sources) != 3 || f.Sources[2].RTT != FairnessRTTs[2] || f.Workload != b[0].Workload || f.FlowCredit != b[0].FlowCredit {
		t.Fatalf("fairness.yaml %+v, built-in %+v", f, b[0])
	}
	c, err := LoadScenario("testdata/connections-10000.yaml")
	if err != nil {
		t.Fatal(err)
	}
	bc, _ := Builtin("connections", false)
	last, _ := bc[len(bc)-1].Normalize()
	if c.Workload != last.Workload || c.FlowCredit != last.FlowCredit || c.Duration != last.Duration {
		t.Fatalf("connections-10000.yaml %+v, built-in %+v", c, last)
	}
	// gateway-failure-region.yaml is the built-in gateway failure with
	// the region's rate.
	g, err := LoadScenario("testdata/gateway-failure-region.yaml")
	if err != nil {
		t.Fatal(err)
	}
	bg, _ := Builtin("gateway-failure", false)
	want, _ := bg[0].Normalize()
	if g.RegionWANRate != "200mbit" || g.Workload != want.Workload || g.Duration != want.Duration || g.Planes != want.Planes ||
		g.Link != want.Link || len(g.Faults) != 1 || g.Faults[0] != want.Faults[0] {
		t.Fatalf("gateway-failure-region.yaml %+v, built-in %+v", g, want)
	}
}

// The two-pairs scenario files parse into the lab's default two regions
// with the workload they state; the -share ones tell each gateway half
// the fabric (4 planes of 50 Mbit/s), the -region ones tell every gateway
// the whole fabric as its region's rate (split by gossip), the others
// leave the lab's default (the whole fabric to each gateway).
func TestTwoPairsScenarioFiles(t *testing.T) {
	for f, flows := range map[string]int{"two-pairs": 8, "two-pairs-loss": 8, "two-pairs-64": 64, "two-pairs-64-loss": 64,
		"two-pairs-share": 8, "two-pairs-share-loss": 8, "two-pairs-share-64": 64, "two-pairs-share-64-loss": 64,
		"two-pairs-region": 8, "two-pairs-region-loss": 8, "two-pairs-region-64": 64, "two-pairs-region-64-loss": 64} {
		s, err := LoadScenario("testdata/" + f + ".yaml")
		if err != nil {
			t.Fatal(err)
		}
		if s.Name != f || s.Workload.Flows != flows || s.Workload.Hosts != 2 || len(s.Sources) != 0 || s.Duration != 20*time.Second {
			t.Errorf("%s: %+v", f, s)
		}
		r, err := s.resolve()
		if err != nil {
			t.Fatal(err)
		}
		want := 0.0
		if strings.Contains(f, "share") {
			want = float64(r.base.Rate) * float64(s.Planes) / 2
		}
		if r.wanRate != want {
			t.Errorf("%s: gateways' WAN rate %g bit/s, want %g", f, r.wanRate, want)
		}
		want = 0
		if strings.Contains(f, "region") {
			want = float64(r.base.Rate) * float64(s.Planes)
		}
		if r.regionRate != want {
			t.Errorf("%s: region's WAN rate %g bit/s, want %g", f, r.regionRate, want)
		}
	}
	// One flow: the region's rate split by demand, against half of it held
	// by each gateway.
	for f, rates := range map[string][2]float64{"one-flow-region": {0, 200e6}, "one-flow-share": {100e6, 0}} {
		s, err := LoadScenario("testdata/" + f + ".yaml")
		if err != nil {
			t.Fatal(err)
		}
		r, err := s.resolve()
		if err != nil {
			t.Fatal(err)
		}
		if s.Name != f || s.Workload.Flows != 1 || s.Workload.Hosts != 1 || r.wanRate != rates[0] || r.regionRate != rates[1] {
			t.Errorf("%s: %+v, gateways' rate %g, region's %g", f, s, r.wanRate, r.regionRate)
		}
	}
}
