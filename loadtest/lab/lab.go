//go:build linux

// Package lab builds a complete two-region mrgw deployment inside one
// process, on loopback: two gateways per region (eu-west: euw-gw1,
// euw-gw2; us-east: use-gw1, use-gw2; Region.Gateways: 1 to 9), a
// throwaway CA and certificates naming each gateway's region in a
// temporary directory, fast gossip timings, and the link emulator
// (netem) between the regions, so that every WAN datagram crosses
// emulated planes with delay, loss and a rate. The configurations are
// seed-only, as a fleet's are: each names its own gateway, planes, TLS
// files, gossip seeds and keys, and nothing about other regions; the
// gateways find each other by gossip (a plane announces its emulator
// stand-in as wan.planes[].advertise). Regions at one site of the
// emulator cannot reach each other through it, so they deny each other
// (control.deny REGION/*). Config.Direct drops the emulator (every region
// reaches every other over loopback) and AddRegion starts another region
// in a running lab, touching nothing else. `mrgw-lab demo` and the
// gateway's end-to-end tests run on it. Config.Regions builds other
// layouts: any regions at either site of the emulator, each at its own
// distance (mrgw-lab loadtest fairness: three source regions 10, 50 and
// 150 ms away from one destination gateway).
//
// Each gateway gets its own loopback address (127.0.0.11, .12, .21, .22)
// and the emulator 127.0.0.200, so that hosts on 127.0.0.1 never share an
// address with a gateway or a stand-in.
//
// It is lab code: the daemon never imports it (internal/layering checks it).
package lab

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/mrgw/mrgw/config"
	"github.com/mrgw/mrgw/gateway"
	"github.com/mrgw/mrgw/host"
	"github.com/mrgw/mrgw/metaroce"
	"github.com/mrgw/mrgw/netem"
	"github.com/mrgw/mrgw/pathmgr"
	"github.com/mrgw/mrgw/tunnel/pki"

	"github.com/mrgw/mrgw/units"
)

// Regions of the lab and the emulator site of each.
const (
	RegionA = "eu-west" // emulator site A
	RegionB = "us-east" // emulator site B
)

// Gateway names per region, in order, of the default two-region lab.
var Names = map[string][]string{
	RegionA: {"euw-gw1", "euw-gw2"},
	RegionB: {"use-gw1", "use-gw2"},
}

// Region is one region of a lab built from Config.Regions.
type Region struct {
	Name string
	// Site is the emulator side the region is on: every WAN datagram
	// between regions of different sites crosses the emulated planes;
	// regions of one site do not talk to each other.
	Site netem.Site
	// Gateways in the region [2], named Prefix-gw1, Prefix-gw2, ...
	// (Prefix defaults to the name).
	Gateways int
	Prefix   string
	// OneWay, if set, is the one-way delay between this region's gateways
	// and every gateway at the other site, instead of the planes' delay:
	// regions at different distances share the planes' queues and rates
	// (one bottleneck) but not their propagation delays.
	OneWay time.Duration
}

// DefaultRegions is the two-region lab: eu-west (site A) and us-east
// (site B), two gateways each.
func DefaultRegions() []Region {
	return []Region{
		{Name: RegionA, Site: netem.SiteA, Gateways: 2, Prefix: "euw"},
		{Name: RegionB, Site: netem.SiteB, Gateways: 2, Prefix: "use"},
	}
}

// Limits of Config.Regions (loopback addresses 127.0.0.11 to .99).
const (
	MaxRegions        = 8
	MaxRegionGateways = 9
)

// Config configures a Lab. Zero values take the defaults in brackets.
type Config struct {
	Planes  int           // emulated ECMP planes [4]
	OneWay  time.Duration // one-way delay of every plane [20 ms]
	Loss    float64       // random loss per plane and direction [0]
	RateBps uint64        // per plane and direction, bit/s [0: unlimited]
	Queue   int           // drop-tail queue per plane, bytes [emulator default]
	MTU     int           // wan.mtu [1400]
	Paths   int           // wan.paths_per_peer [16]
	// WANControl is wan.congestion_control ["longrtt-htcp"]; with "fixed",
	// WANRateBps is its rate.
	WANControl string
	WANRateBps int64
	// RegionRateBps is every gateway's wan.region_rate_bps [0: none]: the
	// WAN capacity a region's gateways share, split among the live ones
	// by gossip.
	RegionRateBps int64
	// SuspicionMult is every gateway's gossip.suspicion_mult [3]: how
	// many probe intervals (500 ms) gossip suspects a silent gateway
	// before it declares it dead.
	SuspicionMult int
	// Admin gives every gateway an admin listener on an ephemeral port.
	Admin bool
	// Classes are scheduler classes (name → weight) besides "default".
	Classes map[string]int
	Seed    uint64
	// Logger for the gateways [discard]; LogLevel is log.level ["info"].
	Logger   *slog.Logger
	LogLevel string
	// Dir holds the certificates [a temporary directory removed by Close].
	Dir string
	// Regions [DefaultRegions]; at least one per site.
	Regions []Region
	// FlowCreditBytes is limits.flow_credit_bytes and MemoryBytes
	// limits.memory_bytes of every gateway [4 MiB and 256 MiB]: with the
	// defaults a gateway admits 64 flows.
	FlowCreditBytes, MemoryBytes int64
	// MaxFlows is limits.max_flows of every gateway [the config default].
	MaxFlows int
	// Direct: no emulator; gateways send WAN datagrams to each other over
	// loopback, every region reaches every other, and sites are ignored
	// (Lab.Emu is nil).
	Direct bool
}

// Lab is the running deployment.
type Lab struct {
	Emu      *netem.Emulator
	Gateways map[string]*gateway.Gateway
	Configs  map[string]*config.Config
	// Names are the gateways of each region, in order.
	Names map[string][]string
	// HostKey is the host credential every gateway's lan.host_keys holds:
	// hosts of the lab register with it.
	HostKey *host.Key
	cfg     Config
	ca      *pki.CA
	ips     map[string]netip.Addr
	addrs   map[string]*gatewayAddrs
	// realOf maps each gateway's WAN stand-in to its real address (for
	// the gateways' ECMPLane).
	realOf map[netip.AddrPort]netip.AddrPort
	dir    string
	ownDir bool
	wg     sync.WaitGroup
	cancel context.CancelFunc
	closed sync.Once
}

// New creates the emulator, the certificates and the gateways (bound,
// not running: see Start).
func New(ctx context.Context, cfg Config) (_ *Lab, err error) {
	cfg.fill()
	ips, err := checkRegions(cfg.Regions, cfg.Direct)
	if err != nil {
		return nil, err
	}
	l := &Lab{cfg: cfg, Gateways: map[string]*gateway.Gateway{}, Configs: map[string]*config.Config{}, Names: map[string][]string{}, ips: ips}
	secret := make([]byte, 32)
	_, _ = rand.Read(secret)
	l.HostKey = &host.Key{ID: "lab", Secret: secret}
	for _, r := range cfg.Regions {
		for i := range r.Gateways {
			l.Names[r.Name] = append(l.Names[r.Name], fmt.Sprintf("%s-gw%d", r.Prefix, i+1))
		}
	}
	pairs := l.pairDelays(ips)
	var held []io.Closer // probe sockets, kept open so no port is chosen twice
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	defer func() {
		if err != nil {
			l.Close()
		}
	}()
	l.dir = cfg.Dir
	if l.dir == "" {
		if l.dir, err = os.MkdirTemp("", "mrgw-lab-"); err != nil {
			return nil, err
		}
		l.ownDir = true
	}
	if err := l.startEmulator(pairs); err != nil {
		return nil, err
	}
	if err := l.certs(ips); err != nil {
		return nil, err
	}
	all, err := l.ports(ips, &held)
	if err != nil {
		return nil, err
	}
	l.addrs = all
	for reg, names := range l.Names {
		for _, n := range names {
			c, err := l.gatewayConfig(reg, n, all)
			if err != nil {
				return nil, err
			}
			l.Configs[n] = c
		}
	}
	for _, c := range held {
		c.Close()
	}
	held = nil
	var names []string
	for n := range l.Configs {
		names = append(names, n)
	}
	if err := l.newGateways(names); err != nil {
		return nil, err
	}
	return l, nil
}

// AddRegion adds region r to a running lab (Direct, or at the site
// opposite every region it must reach): certificates, seed-only
// configurations whose seeds are the lab's gateways, and its gateways,
// started. Nothing of the running gateways changes: they learn of the new
// region by gossip. It returns the new gateways' names.
func (l *Lab) AddRegion(r Region) ([]string, error) {
	all := append(slices.Clone(l.cfg.Regions), r)
	ips, err := checkRegions(all, l.cfg.Direct)
	if err != nil {
		return nil, err
	}
	r = all[len(all)-1]
	var names []string
	for i := range r.Gateways {
		names = append(names, fmt.Sprintf("%s-gw%d", r.Prefix, i+1))
	}
	var held []io.Closer
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	l.cfg.Regions = all
	l.Names[r.Name] = names
	for _, n := range names {
		l.ips[n] = ips[n]
		if err := l.issue(r.Name, n); err != nil {
			return nil, err
		}
		a, err := l.gatewayPorts(r, n, ips[n], &held)
		if err != nil {
			return nil, err
		}
		l.addrs[n] = a
	}
	for _, n := range names {
		c, err := l.gatewayConfig(r.Name, n, l.addrs)
		if err != nil {
			return nil, err
		}
		l.Configs[n] = c
	}
	for _, c := range held {
		c.Close()
	}
	held = nil
	if err := l.newGateways(names); err != nil {
		return nil, err
	}
	for _, n := range names {
		l.run(l.Gateways[n])
	}
	return names, nil
}

// fill fills in the defaults.
func (cfg *Config) fill() {
	if cfg.Planes == 0 {
		cfg.Planes = 4
	}
	if cfg.OneWay == 0 {
		cfg.OneWay = 20 * time.Millisecond
	}
	if cfg.MTU == 0 {
		cfg.MTU = 1400
	}
	if cfg.Paths == 0 {
		cfg.Paths = 16
	}
	if cfg.WANRateBps == 0 && cfg.RegionRateBps == 0 && cfg.RateBps > 0 {
		// The gateways are told the fabric's capacity on the wire, as an
		// operator configures wan.max_rate_bps; they take out the
		// headers the planes carry and charge (gateway wanRate).
		cfg.WANRateBps = int64(cfg.RateBps) * int64(cfg.Planes)
	}
	if cfg.WANControl == "" {
		cfg.WANControl = config.WANControllerHTCP
	}
	if cfg.LogLevel == "" {
		cfg.LogLevel = config.LogInfo
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if len(cfg.Regions) == 0 {
		cfg.Regions = DefaultRegions()
	}
	cfg.Regions = append([]Region(nil), cfg.Regions...) // defaults are filled in
}

// region returns the region called name.
func (l *Lab) region(name string) Region {
	for _, r := range l.cfg.Regions {
		if r.Name == name {
			return r
		}
	}
	return Region{}
}

// pairDelays returns the propagation delay of each pair of gateway IPs
// across the sites that differs from the planes'.
func (l *Lab) pairDelays(ips map[string]netip.Addr) []netem.PairDelay {
	var pairs []netem.PairDelay
	if l.cfg.Direct {
		return nil
	}
	for _, ra := range l.cfg.Regions {
		for _, rb := range l.cfg.Regions {
			if ra.Site != netem.SiteA || rb.Site != netem.SiteB {
				continue
			}
			d := ra.OneWay
			if d == 0 {
				d = rb.OneWay
			}
			if d == 0 {
				continue
			}
			for _, na := range l.Names[ra.Name] {
				for _, nb := range l.Names[rb.Name] {
					pairs = append(pairs, netem.PairDelay{A: ips[na], B: ips[nb], Delay: d})
				}
			}
		}
	}
	return pairs
}

// startEmulator starts the emulator between the sites.
func (l *Lab) startEmulator(pairs []netem.PairDelay) error {
	cfg := &l.cfg
	if cfg.Direct {
		return nil
	}
	var ectx context.Context
	ectx, l.cancel = context.WithCancel(context.Background())
	var err error
	l.Emu, err = netem.New(ectx, netem.Config{
		Planes: cfg.Planes, Seed: cfg.Seed + 1,
		Link:        cfg.link(),
		Bind:        netip.MustParseAddr("127.0.0.200"),
		MaxDatagram: cfg.MTU + 256,
		MaxMappings: 8192,
		PairDelays:  pairs,
	})
	if err != nil {
		return fmt.Errorf("lab: emulator: %w", err)
	}
	return nil
}

// gatewayAddrs are the addresses of one gateway of the lab.
type gatewayAddrs struct {
	lan, wan, ctl, gossip, admin netip.AddrPort
	standIn                      netip.AddrPort // its WAN address as the other site sees it
}

// ports chooses every gateway's ports and exposes its WAN address through
// the emulator. The sockets that prove the ports free are added to held.
func (l *Lab) ports(ips map[string]netip.Addr, held *[]io.Closer) (map[string]*gatewayAddrs, error) {
	all := map[string]*gatewayAddrs{}
	for reg, names := range l.Names {
		for _, n := range names {
			a, err := l.gatewayPorts(l.region(reg), n, ips[n], held)
			if err != nil {
				return nil, err
			}
			all[n] = a
		}
	}
	return all, nil
}

// gatewayPorts chooses the ports of gateway n of region r at ip and
// exposes its WAN address through the emulator (Direct: the stand-in is
// the address itself).
func (l *Lab) gatewayPorts(r Region, n string, ip netip.Addr, held *[]io.Closer) (*gatewayAddrs, error) {
	a := &gatewayAddrs{}
	for _, p := range []*netip.AddrPort{&a.lan, &a.wan, &a.ctl, &a.gossip, &a.admin} {
		var hold []io.Closer
		var perr error
		if *p, hold, perr = FreePort(ip); perr != nil {
			return nil, perr
		}
		*held = append(*held, hold...)
	}
	if l.cfg.Direct {
		a.standIn = a.wan
		return a, nil
	}
	var err error
	if a.standIn, err = l.Emu.Expose(r.Site, a.wan); err != nil {
		return nil, fmt.Errorf("lab: expose %s: %w", n, err)
	}
	if l.realOf == nil {
		l.realOf = map[netip.AddrPort]netip.AddrPort{}
	}
	l.realOf[a.standIn] = a.wan
	return a, nil
}

// gatewayConfig is the configuration of gateway n of region reg.
func (l *Lab) gatewayConfig(reg, n string, all map[string]*gatewayAddrs) (*config.Config, error) {
	cfg := &l.cfg
	a := all[n]
	c := config.Default()
	c.Node = config.Node{Name: n, Region: reg}
	c.LAN.Listen = a.lan.String()
	c.LAN.HostKeys = []string{l.HostKey.ID + ":" + base64.StdEncoding.EncodeToString(l.HostKey.Secret)}
	// Peers learn where to send from gossip: the emulator's stand-in.
	c.WAN.Planes = []config.Plane{{Name: "wan", Local: a.wan.String()}}
	if a.standIn != a.wan {
		c.WAN.Planes[0].Advertise = a.standIn.String()
	}
	c.WAN.MTU = cfg.MTU
	c.WAN.PathsPerPeer = cfg.Paths
	c.WAN.CongestionControl = cfg.WANControl
	c.WAN.MaxRateBps = cfg.WANRateBps
	c.WAN.RegionRateBps = cfg.RegionRateBps
	c.WAN.KeyRotation = 10 * time.Minute
	c.Control.Listen = a.ctl.String()
	c.Control.TLS = config.TLS{
		CAFile:   filepath.Join(l.dir, "ca.pem"),
		CertFile: filepath.Join(l.dir, n+".pem"),
		KeyFile:  filepath.Join(l.dir, n+"-key.pem"),
	}
	// Seed-only: nothing about other regions. Regions of one site do
	// not talk to each other (the emulator only joins the sites), so
	// they deny each other.
	self := l.region(reg)
	c.Regions = nil
	if !cfg.Direct {
		for _, or := range cfg.Regions {
			if or.Site == self.Site && or.Name != reg {
				c.Control.Deny = append(c.Control.Deny, or.Name+"/*")
			}
		}
	}
	c.Gossip.Bind = a.gossip.String()
	for m, b := range all {
		if m != n {
			c.Gossip.Seeds = append(c.Gossip.Seeds, b.gossip.String())
		}
	}
	slices.Sort(c.Gossip.Seeds)
	c.Gossip.Profile = config.GossipProfileCustom
	// Fast, but not so fast that a loaded machine's scheduling
	// stalls read as deaths: with a 100 ms probe timeout and
	// suspicion ×2, and 4 control keepalives 250 ms apart, the
	// gateways declared each other dead under load (load average
	// 10-15 on 2 cores: route lost: gossip: dead, control: peer
	// dead), which failed 7,374 of 10,000 flows of mrgw-lab loadtest
	// connections. A real gateway death is still seen within
	// about two seconds; hosts see theirs within DeadAfter.
	c.Gossip.ProbeInterval = 500 * time.Millisecond
	c.Gossip.ProbeTimeout = 400 * time.Millisecond
	c.Gossip.SuspicionMult = 3
	if cfg.SuspicionMult > 0 {
		c.Gossip.SuspicionMult = cfg.SuspicionMult
	}
	c.Gossip.GossipInterval = 50 * time.Millisecond
	c.Limits.MemoryBytes = 256 << 20
	c.Limits.FlowCreditBytes = 4 << 20
	if cfg.MemoryBytes > 0 {
		c.Limits.MemoryBytes = cfg.MemoryBytes
	}
	if cfg.FlowCreditBytes > 0 {
		c.Limits.FlowCreditBytes = cfg.FlowCreditBytes
	}
	if cfg.MaxFlows > 0 {
		c.Limits.MaxFlows = cfg.MaxFlows
	}
	for cn, w := range cfg.Classes {
		c.Scheduler.Classes = append(c.Scheduler.Classes, config.Class{Name: cn, Weight: w})
	}
	c.Admin.Listen = ""
	if cfg.Admin {
		c.Admin.Listen = a.admin.String()
	}
	c.Log.Level = cfg.LogLevel
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("lab: config of %s: %w", n, err)
	}
	return c, nil
}

// newGateways creates the gateways of the configurations named.
func (l *Lab) newGateways(names []string) error {
	for _, n := range names {
		c := l.Configs[n]
		dir := netem.From(l.region(c.Node.Region).Site)
		var lane gateway.ECMPLaneOf
		if l.Emu != nil {
			// Which emulated plane a WAN datagram takes (mrgw probe).
			lane = func(src, dst netip.AddrPort) int {
				real, ok := l.realOf[dst]
				if !ok {
					return -1
				}
				return l.Emu.PlaneOf(dir, src, real)
			}
		}
		g, err := gateway.New(c, gateway.Options{
			ECMPLane:         lane,
			Logger:           l.cfg.Logger,
			Protocol:         l.tune,
			ControlKeepalive: 500 * time.Millisecond,
			ControlMisses:    6,
			StatsEvery:       200 * time.Millisecond,
			DrainTimeout:     2 * time.Second,
		})
		if err != nil {
			return fmt.Errorf("lab: gateway %s: %w", n, err)
		}
		l.Gateways[n] = g
	}
	return nil
}

// LANMinPTO is the smallest probe timeout of every path in the lab, the
// gateways' and the hosts'. The WAN paths' timeouts are above it anyway
// (their RTT is tens of ms); it matters on the loopback LAN hop, whose RTT
// is microseconds: there everything of the lab (4 gateways, the emulator,
// up to 66 hosts) shares this machine's two cores with whatever else runs,
// and an ack held up 10 ms by the scheduler is routine. With 10 ms, the
// gateways declared host paths suspect hundreds of times per run and
// recovered on the late ack ("ack after timeout"), and paths that were
// declared down took their connections with them (allreduce 8×8, incast
// 64→1 in mrgw-lab loadtest).
const LANMinPTO = 30 * time.Millisecond

// HostProtocol is the protocol of the hosts the load tests run beside the
// lab's gateways: four paths, a 4 Gbit/s receive capacity, and LAN path
// timings with LANMinPTO.
func HostProtocol() metaroce.Config {
	return metaroce.Config{
		Paths:           4,
		ReceiveCapacity: 4 * units.Gbps,
		Path: pathmgr.Config{
			InitialRTT: 5 * time.Millisecond, MinPTO: LANMinPTO, MaxAckDelay: time.Millisecond,
			DownAfter: 3, ProbeInterval: 20 * time.Millisecond, MaxProbeInterval: time.Second, UpAfter: 2,
		},
	}
}

// checkRegions validates the regions and returns each gateway's IP:
// 127.0.0.(10(k+1)+i+1) for gateway i of region k (127.0.0.11, .12, .21,
// .22 in the default lab).
func checkRegions(rs []Region, direct bool) (map[string]netip.Addr, error) {
	if len(rs) > MaxRegions {
		return nil, fmt.Errorf("lab: %d regions (at most %d)", len(rs), MaxRegions)
	}
	ips := map[string]netip.Addr{}
	seen := map[string]bool{}
	var sites [2]bool
	for k := range rs {
		r := &rs[k]
		if r.Gateways == 0 {
			r.Gateways = 2
		}
		if r.Prefix == "" {
			r.Prefix = r.Name
		}
		switch {
		case r.Name == "" || seen[r.Name]:
			return nil, fmt.Errorf("lab: region %d: empty or repeated name %q", k, r.Name)
		case r.Site > netem.SiteB:
			return nil, fmt.Errorf("lab: region %s: site %d", r.Name, r.Site)
		case r.Gateways < 1 || r.Gateways > MaxRegionGateways:
			return nil, fmt.Errorf("lab: region %s: %d gateways outside 1..%d", r.Name, r.Gateways, MaxRegionGateways)
		case r.OneWay < 0 || r.OneWay > netem.MaxDelay:
			return nil, fmt.Errorf("lab: region %s: one-way delay %v outside 0..%v", r.Name, r.OneWay, netem.MaxDelay)
		}
		seen[r.Name] = true
		sites[r.Site] = true
		for i := range r.Gateways {
			n := fmt.Sprintf("%s-gw%d", r.Prefix, i+1)
			if _, dup := ips[n]; dup {
				return nil, fmt.Errorf("lab: gateway name %s twice", n)
			}
			ips[n] = netip.AddrFrom4([4]byte{127, 0, 0, byte(10*(k+1) + i + 1)})
		}
	}
	if (!sites[netem.SiteA] || !sites[netem.SiteB]) && !direct {
		return nil, errors.New("lab: the regions must cover both emulator sites")
	}
	return ips, nil
}

// tune sets path timings for the lab's round trip: a dead path or gateway
// is noticed within a few hundred milliseconds.
func (l *Lab) tune(p *metaroce.Config) {
	rtt := 2 * l.cfg.OneWay
	p.Path = pathmgr.Config{
		InitialRTT: rtt, MinPTO: LANMinPTO, MaxAckDelay: 2 * time.Millisecond,
		DownAfter: 3, ProbeInterval: 20 * time.Millisecond, MaxProbeInterval: time.Second, UpAfter: 2,
	}
	p.MaxAckDelay = 2 * time.Millisecond
	p.DeadAfter = time.Second
}

func (l *Lab) certs(ips map[string]netip.Addr) error {
	now := time.Now().Add(-time.Hour)
	ca, err := pki.NewCA("mrgw lab CA", now, 48*time.Hour)
	if err != nil {
		return err
	}
	if err := pki.WriteCertPEM(filepath.Join(l.dir, "ca.pem"), ca.Cert); err != nil {
		return err
	}
	l.ca = ca
	for reg, names := range l.Names {
		for _, n := range names {
			if err := l.issue(reg, n); err != nil {
				return err
			}
		}
	}
	return nil
}

// issue writes the certificate of gateway n of region reg: its identity
// mrgw://REGION/NAME is what peers compare with its gossip announcement.
func (l *Lab) issue(reg, n string) error {
	id, err := l.ca.IssueIn(reg, n, time.Now().Add(-time.Hour), 24*time.Hour)
	if err != nil {
		return err
	}
	return id.WriteFiles(filepath.Join(l.dir, n+".pem"), filepath.Join(l.dir, n+"-key.pem"))
}

// FreePort finds a port free for both UDP and TCP on ip. The sockets that
// prove it stay open (returned) until every port of the lab is chosen, so
// that the kernel cannot hand the same port out twice. The chaos scenario
// picks its daemons' ports with it too.
func FreePort(ip netip.Addr) (netip.AddrPort, []io.Closer, error) {
	for range 64 {
		u, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(ip, 0)))
		if err != nil {
			return netip.AddrPort{}, nil, err
		}
		a := u.LocalAddr().(*net.UDPAddr).AddrPort()
		t, err := net.Listen("tcp", a.String())
		if err != nil {
			u.Close()
			continue
		}
		return a, []io.Closer{u, t}, nil
	}
	return netip.AddrPort{}, nil, errors.New("lab: no free port")
}

// Start runs every gateway.
func (l *Lab) Start() {
	for _, g := range l.Gateways {
		l.run(g)
	}
}

func (l *Lab) run(g *gateway.Gateway) {
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		_ = g.Run(context.Background())
	}()
}

// WaitReady waits until every running gateway has its WAN connections up
// to every gateway of every region it reaches (the other site's, or with
// Direct every other region's), as gossip announced them.
func (l *Lab) WaitReady(ctx context.Context) error {
	for {
		ok := true
		for n, g := range l.Gateways {
			select {
			case <-g.Done():
				continue
			default:
			}
			st := g.Status()
			if len(st.Peers) < l.reachable(n) {
				ok = false
			}
			for _, p := range st.Peers {
				if p.State != "up" {
					ok = false
				}
			}
			if !st.Ready {
				ok = false
			}
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("lab: gateways not ready: %w", ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// reachable is the number of running gateways gateway n connects to.
func (l *Lab) reachable(n string) int {
	self := l.region(l.Configs[n].Node.Region)
	k := 0
	for _, r := range l.cfg.Regions {
		if r.Name == self.Name || (!l.cfg.Direct && r.Site == self.Site) {
			continue
		}
		for _, m := range l.Names[r.Name] {
			select {
			case <-l.Gateways[m].Done():
			default:
				k++
			}
		}
	}
	return k
}

// HostGateways returns the LAN addresses of a region's gateways.
func (l *Lab) HostGateways(region string) []netip.AddrPort {
	var out []netip.AddrPort
	for _, n := range l.Names[region] {
		out = append(out, netip.MustParseAddrPort(l.Configs[n].LAN.Listen))
	}
	return out
}

// Close stops every gateway at once and the emulator, and removes the
// temporary directory.
func (l *Lab) Close() {
	l.closed.Do(func() {
		for _, g := range l.Gateways {
			g.Close()
		}
		l.wg.Wait()
		if l.Emu != nil {
			l.Emu.Close()
		}
		if l.cancel != nil {
			l.cancel()
		}
		if l.ownDir {
			os.RemoveAll(l.dir)
		}
	})
}

// Link is the model every plane of a lab built with cfg runs, in each
// direction (the defaults filled in): a load test that carries another
// system over the same WAN through another emulator (tunemu) gives it this
// very link.
func (cfg Config) Link() netem.LinkConfig {
	cfg.fill()
	return cfg.link()
}

func (cfg Config) link() netem.LinkConfig {
	return netem.LinkConfig{Delay: cfg.OneWay, Loss: cfg.Loss, Rate: cfg.RateBps, QueueBytes: cfg.Queue, ECNThreshold: ecnThreshold(cfg)}
}

// ecnThreshold marks ECN-capable datagrams once a plane's queue holds more
// than 2 ms at its rate (or a quarter of the queue, if smaller): the early
// signal the controllers react to before the queue overflows.
func ecnThreshold(cfg Config) int {
	if cfg.RateBps == 0 {
		return 0
	}
	t := int(uint64(units.BitRate(cfg.RateBps).Bytes()) * 2 / 1000)
	if q := cfg.Queue / 4; q > 0 && q < t {
		t = q
	}
	return max(t, 3000)
}

// CA is the lab's certificate authority (tests mint certificates of
// gateways that are not in the lab with it).
func (l *Lab) CA() *pki.CA { return l.ca }
