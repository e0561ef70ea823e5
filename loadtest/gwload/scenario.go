package gwload

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/mrgw/mrgw/netem"
	"github.com/mrgw/mrgw/units"
)

// Workload patterns.
const (
	// PatternBulk: Flows flows from Hosts hosts of region A to one host of
	// region B keep Window messages each in flight for the whole run.
	PatternBulk = "bulk"
	// PatternIncast: Flows hosts of region A (one flow each) send one
	// message each to one host of region B at the same instant; a step
	// ends when the last arrives; Steps steps.
	PatternIncast = "incast"
	// PatternAllreduce: Hosts hosts per region; each step every host sends
	// one shard (MessageSize) to its peer in the other region, in both
	// directions at once; a step ends with the slowest transfer.
	PatternAllreduce = "allreduce"
)

// Fault kinds.
const (
	FaultPlaneFail    = "plane-fail"
	FaultPlaneRestore = "plane-restore"
	FaultGatewayKill  = "gateway-kill"
)

// Gateway-kill targets besides a gateway's name: the gateway of the
// source (or destination) region relaying the most flows at that moment.
const (
	TargetBusiestSrc = "busiest-src"
	TargetBusiestDst = "busiest-dst"
)

// Limits of a scenario, so that a scenario file cannot ask for an
// unbounded run.
const (
	MaxDuration    = 10 * time.Minute
	MinDuration    = time.Second
	MaxFlows       = 10000
	MaxHosts       = 64
	MaxMessageSize = 64 << 20
	MaxSteps       = 10000
	MaxFaults      = 64
	MaxWindow      = 256
	MaxLabPlanes   = 16
)

// Link describes a plane's link in compact units, as in a scenario file:
//
//	rate: 50mbit   # bits/s with a unit (bit, kbit, mbit, gbit)
//	delay: 20ms    # one way
//	loss: 1%       # or 0.01
//	queue: 125KB   # drop-tail queue (B, KB, MB, KiB, MiB)
//
// Empty fields keep the value they override.
type Link struct {
	Rate  string        `yaml:"rate,omitempty"`
	Delay time.Duration `yaml:"delay,omitempty"`
	Loss  string        `yaml:"loss,omitempty"`
	Queue string        `yaml:"queue,omitempty"`
}

// PlaneLink overrides the link of one plane in one direction ("a-b",
// "b-a") or both ("" or "both").
type PlaneLink struct {
	Plane int    `yaml:"plane"`
	Dir   string `yaml:"dir,omitempty"`
	Link  `yaml:",inline"`
}

// Workload is the traffic of a scenario.
type Workload struct {
	Pattern string `yaml:"pattern"`
	// Flows: bulk, the number of flows; incast, the number of senders.
	Flows int `yaml:"flows,omitempty"`
	// Hosts: bulk, the source hosts the flows are spread over [1];
	// allreduce, the hosts per region [2]; incast: one per sender.
	Hosts int `yaml:"hosts,omitempty"`
	// MessageSize in bytes with an optional unit (KiB, MiB, KB, ...)
	// [bulk 256KiB, incast 1MiB, allreduce 4MiB].
	MessageSize string `yaml:"message_size,omitempty"`
	// Class is the flows' scheduling class ["" = default].
	Class string `yaml:"class,omitempty"`
	// Steps of incast and allreduce [5]; the run also stops at Duration.
	Steps int `yaml:"steps,omitempty"`
	// Window is the messages each bulk flow keeps in flight [4].
	Window int `yaml:"window,omitempty"`
}

// Fault is an event at a time from the start of traffic.
type Fault struct {
	At     time.Duration `yaml:"at"`
	Kind   string        `yaml:"kind"`
	Target string        `yaml:"target"`
}

func (f Fault) String() string { return fmt.Sprintf("%s %s @%v", f.Kind, f.Target, f.At) }

// Scenario is one run of the lab. The zero values of its fields take the
// defaults in brackets (see Normalize).
type Scenario struct {
	Name        string `yaml:"name"`
	Description string `yaml:"description,omitempty"`
	// Duration is how long traffic runs [10s]; draining what is in flight
	// afterwards ends once nothing was delivered for Options.Drain.
	Duration time.Duration `yaml:"duration"`
	// Planes are the emulated ECMP planes [4].
	Planes int `yaml:"planes,omitempty"`
	// Link is every plane's link in both directions [rate 50mbit, delay
	// 20ms, loss 0, queue 20 ms at the rate].
	Link Link `yaml:"link,omitempty"`
	// Links override single planes and directions.
	Links    []PlaneLink `yaml:"links,omitempty"`
	Workload Workload    `yaml:"workload"`
	Faults   []Fault     `yaml:"faults,omitempty"`
	// FlowCredit is the gateways' limits.flow_credit_bytes (bytes with an
	// optional unit) [4MiB]: each gateway's 256 MiB budget admits 256 MiB /
	// FlowCredit flows, so thousands of flows need a smaller credit.
	FlowCredit string `yaml:"flow_credit,omitempty"`
	// GatewayWANRate is every gateway's wan.max_rate_bps, a rate as in
	// link.rate [the planes' whole rate: each gateway is told the whole
	// fabric, which the two gateways of a region share, so that their
	// connections' hints sum to twice what it carries]. Half the fabric
	// tells each gateway of a region its share.
	GatewayWANRate string `yaml:"gateway_wan_rate,omitempty"`
	// RegionWANRate is every gateway's wan.region_rate_bps, a rate as in
	// link.rate [none]: the capacity a region's gateways share, which
	// each divides with the region's other live gateways by gossip. The
	// planes' whole rate states the fabric truthfully.
	RegionWANRate string `yaml:"region_wan_rate,omitempty"`
	// Seed of the emulator [1].
	Seed uint64 `yaml:"seed,omitempty"`
	// Sources, if set, replace the lab's two regions (bulk only): one
	// source region per entry, one gateway each, at its own round trip
	// from a destination region of one gateway. Every source region's WAN
	// traffic crosses the same planes (their queues and rates: the
	// destination gateway's WAN capacity) and then its own propagation
	// delay. Flows are spread over the sources in turn; Hosts is per
	// source region.
	Sources []Source `yaml:"sources,omitempty"`
}

// Source is a source region of a multi-region scenario.
type Source struct {
	// Name of the region [src-<rtt>].
	Name string `yaml:"name,omitempty"`
	// RTT between the region's gateway and the destination's (through
	// the emulator; the planes' queueing comes on top).
	RTT time.Duration `yaml:"rtt"`
}

// DestRegion is the destination region of a scenario with Sources.
const DestRegion = "dst"

// MaxSources bounds Scenario.Sources.
const MaxSources = 6

// linkConfig parses l over base.
func (l Link) apply(base netem.LinkConfig) (netem.LinkConfig, error) {
	var parts []string
	if l.Rate != "" {
		parts = append(parts, "rate="+l.Rate)
	}
	if l.Loss != "" {
		parts = append(parts, "loss="+l.Loss)
	}
	if l.Queue != "" {
		parts = append(parts, "queue="+l.Queue)
	}
	for _, p := range parts {
		if strings.Contains(p, ",") {
			return base, fmt.Errorf("link value %q contains a comma", p)
		}
	}
	lc, err := netem.ParseLink(strings.Join(parts, ","))
	if err != nil {
		return base, err
	}
	out := base
	if l.Rate != "" {
		out.Rate = lc.Rate
	}
	if l.Loss != "" {
		out.Loss = lc.Loss
	}
	if l.Queue != "" {
		out.QueueBytes = lc.QueueBytes
	}
	if l.Delay < 0 || l.Delay > netem.MaxDelay {
		return base, fmt.Errorf("link delay %v outside 0..%v", l.Delay, netem.MaxDelay)
	}
	if l.Delay > 0 {
		out.Delay = l.Delay
	}
	return out, out.Validate()
}

// parseSize parses "256KiB", "4MiB", "1.5MB", "1000" (bytes): the size
// flags' parser (units).
func parseSize(s string) (int, error) {
	n, err := units.ParseBytes(s)
	if err != nil {
		return 0, err
	}
	if n > math.MaxInt32 {
		return 0, fmt.Errorf("size %q is too large", s)
	}
	return int(n), nil
}

// resolved is a validated scenario with its units parsed.
type resolved struct {
	Scenario
	base       netem.LinkConfig
	links      [2][]netem.LinkConfig // per direction and plane
	msgSize    int
	flowCredit int
	wanRate    float64 // GatewayWANRate, bit/s; 0: the lab's default
	regionRate float64 // RegionWANRate, bit/s; 0: none
}

// Normalize fills in defaults and checks the scenario against the limits.
// It returns the normalized copy.
func (s Scenario) Normalize() (Scenario, error) {
	r, err := s.resolve()
	if err != nil {
		return Scenario{}, err
	}
	return r.Scenario, nil
}

func (s Scenario) resolve() (*resolved, error) {
	if s.Name == "" {
		s.Name = "custom"
	}
	r := &resolved{}
	for _, step := range []func(*Scenario, *resolved) error{
		(*Scenario).resolveRun, (*Scenario).resolveLinks, (*Scenario).resolveSources,
		(*Scenario).resolveWorkload, (*Scenario).resolveLimits, (*Scenario).resolveFaults,
	} {
		if err := step(&s, r); err != nil {
			return nil, fmt.Errorf("gwload: scenario %q: %s", s.Name, err)
		}
	}
	r.Scenario = s
	return r, nil
}

// resolveRun checks the run's duration, planes and seed.
func (s *Scenario) resolveRun(*resolved) error {
	if s.Duration == 0 {
		s.Duration = 10 * time.Second
	}
	if s.Duration < MinDuration || s.Duration > MaxDuration {
		return fmt.Errorf("duration %v outside %v..%v", s.Duration, MinDuration, MaxDuration)
	}
	if s.Planes == 0 {
		s.Planes = 4
	}
	if s.Planes < 1 || s.Planes > MaxLabPlanes {
		return fmt.Errorf("planes %d outside 1..%d", s.Planes, MaxLabPlanes)
	}
	if s.Seed == 0 {
		s.Seed = 1
	}
	return nil
}

// resolveLinks parses the planes' links and their overrides.
func (s *Scenario) resolveLinks(r *resolved) error {
	base, err := s.Link.apply(netem.LinkConfig{Rate: 50e6, Delay: 20 * time.Millisecond})
	if err != nil {
		return fmt.Errorf("link: %v", err)
	}
	if base.QueueBytes == 0 && base.Rate > 0 {
		base.QueueBytes = max(int(uint64(units.BitRate(base.Rate).Bytes())/50), 16<<10) // 20 ms at the rate
	}
	if base.Rate > 10e9 {
		return errors.New("link rate above 10 Gbit/s (this is a loopback lab)")
	}
	r.base = base
	for d := range 2 {
		r.links[d] = make([]netem.LinkConfig, s.Planes)
		for p := range r.links[d] {
			r.links[d][p] = base
		}
	}
	if len(s.Links) > 2*s.Planes {
		return fmt.Errorf("%d link overrides for %d planes", len(s.Links), s.Planes)
	}
	for i, pl := range s.Links {
		if pl.Plane < 0 || pl.Plane >= s.Planes {
			return fmt.Errorf("links[%d]: plane %d outside 0..%d", i, pl.Plane, s.Planes-1)
		}
		var dirs []int
		switch strings.ToLower(pl.Dir) {
		case "", "both":
			dirs = []int{0, 1}
		case "a-b":
			dirs = []int{0}
		case "b-a":
			dirs = []int{1}
		default:
			return fmt.Errorf("links[%d]: dir %q (want a-b, b-a or both)", i, pl.Dir)
		}
		for _, d := range dirs {
			lc, err := pl.Link.apply(r.links[d][pl.Plane])
			if err != nil {
				return fmt.Errorf("links[%d]: %v", i, err)
			}
			r.links[d][pl.Plane] = lc
		}
	}
	return nil
}

// resolveSources checks the source regions and names them.
func (s *Scenario) resolveSources(*resolved) error {
	if len(s.Sources) > MaxSources {
		return fmt.Errorf("%d sources (at most %d)", len(s.Sources), MaxSources)
	}
	seenSrc := map[string]bool{DestRegion: true}
	for i := range s.Sources {
		src := &s.Sources[i]
		if src.RTT < 2*time.Millisecond || src.RTT > 2*netem.MaxDelay {
			return fmt.Errorf("sources[%d]: rtt %v outside 2ms..%v", i, src.RTT, 2*netem.MaxDelay)
		}
		if src.Name == "" {
			src.Name = "src-" + src.RTT.String()
		}
		if len(src.Name) > 32 || seenSrc[src.Name] {
			return fmt.Errorf("sources[%d]: name %q repeated, reserved or longer than 32 bytes", i, src.Name)
		}
		seenSrc[src.Name] = true
	}
	return nil
}

// resolveWorkload fills in and checks the workload's pattern, flows,
// hosts, steps, window and message size.
func (s *Scenario) resolveWorkload(r *resolved) error {
	w := &s.Workload
	if w.Pattern == "" {
		w.Pattern = PatternBulk
	}
	defSize, err := s.resolvePattern()
	if err != nil {
		return err
	}
	if len(s.Sources) > 0 && w.Pattern != PatternBulk {
		return errors.New("sources need the bulk pattern")
	}
	if w.Pattern != PatternBulk {
		if w.Steps == 0 {
			w.Steps = 5
		}
		if w.Steps < 1 || w.Steps > MaxSteps {
			return fmt.Errorf("steps %d outside 1..%d", w.Steps, MaxSteps)
		}
	}
	if w.Window == 0 {
		w.Window = 4
	}
	if w.Window < 1 || w.Window > MaxWindow {
		return fmt.Errorf("window %d outside 1..%d", w.Window, MaxWindow)
	}
	if w.MessageSize == "" {
		w.MessageSize = defSize
	}
	if r.msgSize, err = parseSize(w.MessageSize); err != nil {
		return fmt.Errorf("message_size: %v", err)
	}
	if r.msgSize < 1 || r.msgSize > MaxMessageSize {
		return fmt.Errorf("message_size %d outside 1..%d bytes", r.msgSize, MaxMessageSize)
	}
	return nil
}

// resolvePattern fills in and checks the pattern's flows and hosts; it
// returns the pattern's default message size.
func (s *Scenario) resolvePattern() (defSize string, err error) {
	w := &s.Workload
	defSize = "256KiB"
	switch w.Pattern {
	case PatternBulk:
		if w.Flows == 0 {
			w.Flows = 4
		}
		if w.Hosts == 0 {
			w.Hosts = 1
		}
		if w.Flows < 1 || w.Flows > MaxFlows {
			return "", fmt.Errorf("flows %d outside 1..%d", w.Flows, MaxFlows)
		}
		if w.Hosts < 1 || w.Hosts > MaxHosts || w.Hosts > w.Flows {
			return "", fmt.Errorf("hosts %d outside 1..min(flows, %d)", w.Hosts, MaxHosts)
		}
		if n := len(s.Sources); n > 0 && (w.Flows%n != 0 || w.Hosts*n > MaxHosts) {
			return "", fmt.Errorf("flows %d must be a multiple of the %d sources, and hosts × sources at most %d", w.Flows, n, MaxHosts)
		}
	case PatternIncast:
		defSize = "1MiB"
		if w.Flows == 0 {
			w.Flows = 16
		}
		if w.Flows < 1 || w.Flows > MaxHosts {
			return "", fmt.Errorf("incast senders %d outside 1..%d", w.Flows, MaxHosts)
		}
		w.Hosts = w.Flows
	case PatternAllreduce:
		defSize = "4MiB"
		if w.Hosts == 0 {
			w.Hosts = 2
		}
		if w.Hosts < 1 || w.Hosts > MaxHosts/2 {
			return "", fmt.Errorf("allreduce hosts per region %d outside 1..%d", w.Hosts, MaxHosts/2)
		}
		w.Flows = 2 * w.Hosts
	default:
		return "", fmt.Errorf("workload pattern %q (want bulk, incast or allreduce)", w.Pattern)
	}
	return defSize, nil
}

// resolveLimits parses the flow credit and the gateways' WAN rate, and
// checks the class name.
func (s *Scenario) resolveLimits(r *resolved) error {
	if s.FlowCredit != "" {
		var err error
		if r.flowCredit, err = parseSize(s.FlowCredit); err != nil {
			return fmt.Errorf("flow_credit: %v", err)
		}
		if r.flowCredit < 4096 || r.flowCredit > 256<<20 {
			return fmt.Errorf("flow_credit %d outside 4096..%d bytes", r.flowCredit, 256<<20)
		}
	}
	var err error
	if r.wanRate, err = parseGatewayRate("gateway_wan_rate", s.GatewayWANRate); err != nil {
		return err
	}
	if r.regionRate, err = parseGatewayRate("region_wan_rate", s.RegionWANRate); err != nil {
		return err
	}
	if len(s.Workload.Class) > 64 {
		return errors.New("class name longer than 64 bytes")
	}
	return nil
}

// parseGatewayRate reads a gateway rate key: a rate as in link.rate, above
// 0 and at most 10 Gbit/s; "" is 0 (not set).
func parseGatewayRate(key, v string) (float64, error) {
	if v == "" {
		return 0, nil
	}
	lc, err := netem.ParseLink("rate=" + v)
	if err != nil || strings.Contains(v, ",") {
		return 0, fmt.Errorf("%s %q: not a rate (like 100mbit)", key, v)
	}
	if lc.Rate <= 0 || lc.Rate > 10e9 {
		return 0, fmt.Errorf("%s %q outside 0..10gbit", key, v)
	}
	return float64(lc.Rate), nil
}

// resolveFaults checks the faults and sorts them by time.
func (s *Scenario) resolveFaults(*resolved) error {
	if len(s.Faults) > MaxFaults {
		return fmt.Errorf("%d faults (at most %d)", len(s.Faults), MaxFaults)
	}
	for i, f := range s.Faults {
		if f.At < 0 || f.At >= s.Duration {
			return fmt.Errorf("faults[%d]: at %v outside the run (0..%v)", i, f.At, s.Duration)
		}
		switch f.Kind {
		case FaultPlaneFail, FaultPlaneRestore:
			p, err := strconv.Atoi(f.Target)
			if err != nil || p < 0 || p >= s.Planes {
				return fmt.Errorf("faults[%d]: target %q is not a plane 0..%d", i, f.Target, s.Planes-1)
			}
		case FaultGatewayKill:
			if len(s.Sources) > 0 {
				return fmt.Errorf("faults[%d]: gateway-kill in a scenario with sources (its gateways are not the lab's four)", i)
			}
			if !validGatewayTarget(f.Target) {
				return fmt.Errorf("faults[%d]: target %q (want a gateway name, %s or %s)", i, f.Target, TargetBusiestSrc, TargetBusiestDst)
			}
		default:
			return fmt.Errorf("faults[%d]: kind %q (want %s, %s or %s)", i, f.Kind, FaultPlaneFail, FaultPlaneRestore, FaultGatewayKill)
		}
	}
	sort.SliceStable(s.Faults, func(i, j int) bool { return s.Faults[i].At < s.Faults[j].At })
	return nil
}

// gatewayNames are the lab's gateways (loadtest/lab.Names), repeated here so
// that parsing does not need the lab.
var gatewayNames = []string{"euw-gw1", "euw-gw2", "use-gw1", "use-gw2"}

func validGatewayTarget(t string) bool {
	if t == TargetBusiestSrc || t == TargetBusiestDst {
		return true
	}
	for _, n := range gatewayNames {
		if t == n {
			return true
		}
	}
	return false
}

// ParseScenario decodes and validates one scenario from YAML. Unknown keys
// are errors.
func ParseScenario(data []byte) (Scenario, error) {
	if len(data) > 1<<20 {
		return Scenario{}, errors.New("gwload: scenario file larger than 1 MiB")
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var s Scenario
	if err := dec.Decode(&s); err != nil {
		return Scenario{}, fmt.Errorf("gwload: scenario: %w", err)
	}
	return s.Normalize()
}

// LoadScenario reads a scenario file.
func LoadScenario(path string) (Scenario, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Scenario{}, err
	}
	return ParseScenario(data)
}

// BuiltinNames lists the built-in scenario sets in report order.
var BuiltinNames = []string{"plane-failure", "gateway-failure", "connections", "incast", "allreduce", "fairness"}

// FairnessRTTs are the round trips of the fairness scenario's source
// regions (as the simulator's rtt-fairness).
var FairnessRTTs = []time.Duration{10 * time.Millisecond, 50 * time.Millisecond, 150 * time.Millisecond}

// ConnectionCounts are the flow counts of the connections set.
var ConnectionCounts = []int{1, 10, 100, 1000, 10000}

// Builtin returns a built-in scenario set by name. quick shortens every
// run for smoke tests.
func Builtin(name string, quick bool) ([]Scenario, error) {
	dur := func(d time.Duration) time.Duration {
		if quick {
			return max(d/4, 2*time.Second)
		}
		return d
	}
	link := Link{Rate: "50mbit", Delay: 20 * time.Millisecond, Loss: "0.1%"}
	switch name {
	case "plane-failure":
		d := dur(12 * time.Second)
		return []Scenario{{
			Name:        name,
			Description: "8 bulk flows over 4 planes; plane 1 fails at a third of the run",
			Duration:    d, Planes: 4, Link: link,
			Workload: Workload{Pattern: PatternBulk, Flows: 8, Hosts: 2},
			Faults:   []Fault{{At: d / 3, Kind: FaultPlaneFail, Target: "1"}},
		}}, nil
	case "gateway-failure":
		d := dur(12 * time.Second)
		return []Scenario{{
			Name:        name,
			Description: "8 bulk flows; the source-region gateway relaying most of them is killed at a third of the run",
			Duration:    d, Planes: 4, Link: link,
			Workload: Workload{Pattern: PatternBulk, Flows: 8, Hosts: 2},
			Faults:   []Fault{{At: d / 3, Kind: FaultGatewayKill, Target: TargetBusiestSrc}},
		}}, nil
	case "connections":
		var out []Scenario
		for _, n := range ConnectionCounts {
			if quick && n > 100 {
				break
			}
			size, win, credit := "256KiB", 4, ""
			if n >= 100 {
				size, win = "64KiB", 2
			}
			if n >= 1000 {
				// 4 MiB of credit per flow would need 4 GiB per gateway.
				size, win, credit = "16KiB", 1, "128KiB"
			}
			d := 8 * time.Second
			if n >= 10000 {
				// ~5,000 flows per gateway within its 256 MiB budget:
				// 32 KiB each (the smallest grant is 4 MTUs, 16 KiB).
				// One round of 10,000 messages of 16 KiB is 164 MB,
				// longer than 8 s at this capacity, so nothing would
				// complete inside the run: 4 KiB messages and 30 s give
				// several rounds.
				size, credit, d = "4KiB", "32KiB", 30*time.Second
			}
			out = append(out, Scenario{
				Name:        name,
				Description: fmt.Sprintf("%d concurrent bulk flows through the gateway pairs", n),
				Duration:    dur(d), Planes: 4, Link: link, FlowCredit: credit,
				Workload: Workload{Pattern: PatternBulk, Flows: n, Hosts: min(n, 4), MessageSize: size, Window: win},
			})
		}
		return out, nil
	case "incast":
		var out []Scenario
		for _, n := range []int{8, 32, 64} {
			if quick && n > 8 {
				break
			}
			// Room for 5 steps at about three times the ideal step
			// (n MiB over 200 Mbit/s), the pace measured on 2 cores.
			d := max(20*time.Second, time.Duration(n)*700*time.Millisecond)
			out = append(out, Scenario{
				Name:        name,
				Description: fmt.Sprintf("%d hosts of eu-west send 1 MiB each at once to one host of us-east", n),
				Duration:    dur(d), Planes: 4, Link: link,
				Workload: Workload{Pattern: PatternIncast, Flows: n, MessageSize: "1MiB", Steps: 5},
			})
		}
		return out, nil
	case "allreduce":
		var out []Scenario
		for _, k := range []int{2, 4, 8} {
			if quick && k > 2 {
				break
			}
			// Room for 5 steps at about four times the ideal step
			// (k × 4 MiB over 200 Mbit/s), the pace measured on 2 shared
			// cores.
			d := max(20*time.Second, time.Duration(k)*5*time.Second)
			out = append(out, Scenario{
				Name:        name,
				Description: fmt.Sprintf("%d hosts per region exchange 4 MiB shards with their peers across regions, both directions, each step", k),
				Duration:    dur(d), Planes: 4, Link: link,
				Workload: Workload{Pattern: PatternAllreduce, Hosts: k, MessageSize: "4MiB", Steps: 5},
			})
		}
		return out, nil
	case "fairness":
		var src []Source
		for _, r := range FairnessRTTs {
			src = append(src, Source{Name: fmt.Sprintf("src-%dms", r.Milliseconds()), RTT: r})
		}
		var out []Scenario
		for _, per := range []int{1, 4} {
			if quick && per > 1 {
				break
			}
			out = append(out, Scenario{
				Name:        name,
				Description: fmt.Sprintf("%d bulk flow(s) from each of 3 regions 10, 50 and 150 ms away share one destination gateway's WAN (4 planes)", per),
				// 30 s: 200 round trips of the farthest region.
				Duration: dur(30 * time.Second), Planes: 4,
				Link:    Link{Rate: "50mbit", Delay: 5 * time.Millisecond, Loss: "0.1%"},
				Sources: src,
				// Windows of 6 MiB cover the farthest region's
				// bandwidth-delay product at the full 200 Mbit/s (3.75
				// MB), so the application never limits a flow: the
				// gateways' sharing does. Credit to match.
				FlowCredit: "16MiB",
				Workload:   Workload{Pattern: PatternBulk, Flows: 3 * per, Hosts: per, MessageSize: "256KiB", Window: 24},
			})
		}
		return out, nil
	}
	return nil, fmt.Errorf("gwload: no built-in scenario %q (have %s)", name, strings.Join(BuiltinNames, ", "))
}
