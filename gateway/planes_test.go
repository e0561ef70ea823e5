//go:build linux

package gateway_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/mrgw/mrgw/loadtest/lab/labtest"

	"github.com/mrgw/mrgw/config"
	"github.com/mrgw/mrgw/gateway"
	"github.com/mrgw/mrgw/host"
	"github.com/mrgw/mrgw/metaroce"
	"github.com/mrgw/mrgw/netem"
	"github.com/mrgw/mrgw/pathmgr"
	"github.com/mrgw/mrgw/tunnel/pki"
)

// planeLab is a small deployment whose gateways have several configured
// WAN planes (loadtest/lab gives each gateway one plane and lets the
// emulator hash paths onto its planes). Each plane is its own emulator
// with a single link, so path i of a WAN connection crosses plane
// i mod P, as the gateway assumes, and failing emulator k kills plane k.
//
// Region "west" is A (emulator site A), "east" is B.
type planeLab struct {
	emus     []*netem.Emulator
	gws      map[string]*gateway.Gateway
	cfgs     map[string]*config.Config
	regionOf map[string]string
}

type planeLabConfig struct {
	planes  int
	paths   int
	oneWay  time.Duration
	rateBps uint64 // per plane and direction (0: unlimited)
	gws     map[string][]string
	classes map[string]int
	admin   bool
	tweak   func(name string, c *config.Config)
	// mtus clamp emulator plane k's MTU (0: none); maxDatagram is the
	// emulators' largest datagram [1400+256]; options adjusts every
	// gateway's options.
	mtus        []int
	maxDatagram int
	options     func(*gateway.Options)
}

// planeLabIPs gives each gateway its own loopback address.
var planeLabIPs = map[string]string{"w1": "127.0.3.1", "w2": "127.0.3.2", "e1": "127.0.4.1", "e2": "127.0.4.2"}

func newPlaneLab(t *testing.T, pc planeLabConfig) *planeLab {
	t.Helper()
	if pc.oneWay == 0 {
		pc.oneWay = 10 * time.Millisecond
	}
	pl := &planeLab{gws: map[string]*gateway.Gateway{}, cfgs: map[string]*config.Config{}, regionOf: map[string]string{}}
	t.Cleanup(pl.close)
	dir := t.TempDir()
	now := time.Now().Add(-time.Hour)
	ca, err := pki.NewCA("mrgw plane lab CA", now, 48*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := pki.WriteCertPEM(filepath.Join(dir, "ca.pem"), ca.Cert); err != nil {
		t.Fatal(err)
	}
	for k := range pc.planes {
		var thr int
		if pc.rateBps > 0 {
			thr = int(pc.rateBps / 8 * 2 / 1000) // ECN above 2 ms of queue
		}
		maxDatagram := 1400 + 256
		if pc.maxDatagram > 0 {
			maxDatagram = pc.maxDatagram
		}
		var mtu int
		if k < len(pc.mtus) {
			mtu = pc.mtus[k]
		}
		e, err := netem.New(context.Background(), netem.Config{
			Planes: 1, Seed: uint64(k + 1),
			Link:        netem.LinkConfig{Delay: pc.oneWay, Rate: pc.rateBps, ECNThreshold: thr, MTU: mtu},
			Bind:        netip.AddrFrom4([4]byte{127, 0, 5, byte(k + 1)}),
			MaxDatagram: maxDatagram, MaxMappings: 8192,
		})
		if err != nil {
			t.Fatal(err)
		}
		pl.emus = append(pl.emus, e)
	}
	all := map[string]*planeLabAddrs{}
	var held []io.Closer
	var names []string
	for reg, ns := range pc.gws {
		site := netem.SiteA
		if reg == "east" {
			site = netem.SiteB
		}
		for _, n := range ns {
			names = append(names, n)
			pl.regionOf[n] = reg
			ip := netip.MustParseAddr(planeLabIPs[n])
			a := &planeLabAddrs{}
			for _, p := range []*netip.AddrPort{&a.lan, &a.ctl, &a.gossip, &a.admin} {
				ap, hold := freePort(t, ip)
				*p, held = ap, append(held, hold...)
			}
			for k := range pc.planes {
				ap, hold := freePort(t, ip)
				held = append(held, hold...)
				si, err := pl.emus[k].Expose(site, ap)
				if err != nil {
					t.Fatal(err)
				}
				a.wan, a.standIn = append(a.wan, ap), append(a.standIn, si)
			}
			all[n] = a
			id, err := ca.Issue(n, now, 24*time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			if err := id.WriteFiles(filepath.Join(dir, n+".pem"), filepath.Join(dir, n+"-key.pem")); err != nil {
				t.Fatal(err)
			}
		}
	}
	sort.Strings(names)
	for _, n := range names {
		c := pc.gatewayConfig(n, pl.regionOf[n], names, all, dir)
		if err := c.Validate(); err != nil {
			t.Fatalf("config of %s: %v", n, err)
		}
		pl.cfgs[n] = c
	}
	for _, c := range held {
		c.Close()
	}
	pl.start(t, pc, names)
	return pl
}

// planeLabAddrs are one gateway's addresses: WAN and stand-in per plane.
type planeLabAddrs struct {
	lan, ctl, gossip, admin netip.AddrPort
	wan, standIn            []netip.AddrPort
}

// gatewayConfig is the configuration of gateway n of region reg, its
// certificates in dir.
func (pc planeLabConfig) gatewayConfig(n, reg string, names []string, all map[string]*planeLabAddrs, dir string) *config.Config {
	other := "east"
	if reg == "east" {
		other = "west"
	}
	a := all[n]
	c := config.Default()
	c.Node = config.Node{Name: n, Region: reg}
	c.LAN.Listen = a.lan.String()
	c.LAN.AllowUnauthenticatedHosts = true // planes are the point here, not host credentials
	c.WAN.Planes = nil
	for k, w := range a.wan {
		c.WAN.Planes = append(c.WAN.Planes, config.Plane{Name: fmt.Sprintf("p%d", k), Local: w.String()})
	}
	c.WAN.MTU = 1400
	c.WAN.PathsPerPeer = pc.paths
	if pc.rateBps > 0 {
		c.WAN.MaxRateBps = int64(pc.rateBps) * int64(pc.planes)
	}
	c.WAN.KeyRotation = 10 * time.Minute
	c.Control.Listen = a.ctl.String()
	c.Control.TLS = config.TLS{CAFile: filepath.Join(dir, "ca.pem"), CertFile: filepath.Join(dir, n+".pem"), KeyFile: filepath.Join(dir, n+"-key.pem")}
	r := config.Region{Name: other, RTTHint: 2 * pc.oneWay}
	for _, pn := range pc.gws[other] {
		rg := config.RemoteGateway{Name: pn, Control: all[pn].ctl.String()}
		for _, si := range all[pn].standIn {
			rg.WAN = append(rg.WAN, si.String())
		}
		r.Gateways = append(r.Gateways, rg)
	}
	c.Regions = []config.Region{r}
	c.Gossip.Bind = a.gossip.String()
	for _, m := range names {
		if m != n {
			c.Gossip.Seeds = append(c.Gossip.Seeds, all[m].gossip.String())
		}
	}
	c.Gossip.Profile = config.GossipProfileCustom
	c.Gossip.ProbeInterval = 200 * time.Millisecond
	c.Gossip.ProbeTimeout = 100 * time.Millisecond
	c.Gossip.SuspicionMult = 2
	c.Gossip.GossipInterval = 50 * time.Millisecond
	c.Limits.MemoryBytes = 256 << 20
	c.Limits.FlowCreditBytes = 4 << 20
	for cn, w := range pc.classes {
		c.Scheduler.Classes = append(c.Scheduler.Classes, config.Class{Name: cn, Weight: w})
	}
	c.Admin.Listen = ""
	if pc.admin {
		c.Admin.Listen = a.admin.String()
	}
	if pc.tweak != nil {
		pc.tweak(n, c)
	}
	return c
}

// start creates and runs every gateway.
func (pl *planeLab) start(t *testing.T, pc planeLabConfig, names []string) {
	t.Helper()
	rtt := 2 * pc.oneWay
	for _, n := range names {
		opts := gateway.Options{
			Logger: labtest.Logger().With("gw", n),
			Protocol: func(p *metaroce.Config) {
				p.Path = pathmgr.Config{
					InitialRTT: rtt, MinPTO: 10 * time.Millisecond, MaxAckDelay: 2 * time.Millisecond,
					DownAfter: 3, ProbeInterval: 20 * time.Millisecond, MaxProbeInterval: time.Second, UpAfter: 2,
				}
				p.MaxAckDelay = 2 * time.Millisecond
				p.DeadAfter = time.Second
			},
			ControlKeepalive: 250 * time.Millisecond,
			ControlMisses:    4,
			StatsEvery:       200 * time.Millisecond,
			DrainTimeout:     2 * time.Second,
		}
		if pc.options != nil {
			pc.options(&opts)
		}
		g, err := gateway.New(pl.cfgs[n], opts)
		if err != nil {
			t.Fatalf("gateway %s: %v", n, err)
		}
		pl.gws[n] = g
		go func() { _ = g.Run(context.Background()) }()
	}
}

func freePort(t *testing.T, ip netip.Addr) (netip.AddrPort, []io.Closer) {
	t.Helper()
	for range 64 {
		u, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(ip, 0)))
		if err != nil {
			t.Fatal(err)
		}
		a := u.LocalAddr().(*net.UDPAddr).AddrPort()
		l, err := net.Listen("tcp", a.String())
		if err != nil {
			u.Close()
			continue
		}
		return a, []io.Closer{u, l}
	}
	t.Fatal("no free port")
	return netip.AddrPort{}, nil
}

func (pl *planeLab) close() {
	for _, g := range pl.gws {
		g.Close()
	}
	for _, g := range pl.gws {
		<-g.Done()
	}
	for _, e := range pl.emus {
		e.Close()
	}
}

// waitReady waits until every gateway has its WAN connections up.
func (pl *planeLab) waitReady(t *testing.T, ctx context.Context) {
	t.Helper()
	for {
		ok := true
		for _, g := range pl.gws {
			st := g.Status()
			if !st.Ready || len(st.Peers) == 0 {
				ok = false
			}
			for _, p := range st.Peers {
				if p.State != "up" {
					ok = false
				}
			}
		}
		if ok {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("gateways not ready: %v", ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// hostVia is a host that reaches its region only through gateway gw.
func (pl *planeLab) hostVia(t *testing.T, name, gw string) *host.Host {
	t.Helper()
	h, err := host.New(host.Config{Name: name, Region: pl.regionOf[gw],
		Gateways: []netip.AddrPort{netip.MustParseAddrPort(pl.cfgs[gw].LAN.Listen)}, DeadAfter: time.Second, OpenTimeout: hostOpenTimeout, Logger: labtest.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

// planePaths reads the paths of gw's WAN connection to peer that cross
// plane: their states and packets sent.
type pathInfo struct {
	state    pathmgr.State
	sent     uint64
	timeouts uint64
}

func planePaths(t *testing.T, g *gateway.Gateway, peerID metaroce.PeerID, plane, planes int) []pathInfo {
	t.Helper()
	var out []pathInfo
	err := g.Endpoint().Call(context.Background(), func(_ time.Duration, ep *metaroce.Endpoint) {
		for _, c := range ep.Conns() {
			if c.Peer() != peerID || !c.Established() || c.Closed() {
				continue
			}
			for i := range c.Paths().Paths {
				if i%planes == plane {
					p := &c.Paths().Paths[i]
					out = append(out, pathInfo{state: p.State, sent: p.SentPackets, timeouts: p.Timeouts})
				}
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
