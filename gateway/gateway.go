//go:build linux

package gateway

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mrgw/mrgw/cc"
	_ "github.com/mrgw/mrgw/cc/longrtt" // registers the long-RTT controllers by name
	"github.com/mrgw/mrgw/config"
	"github.com/mrgw/mrgw/flowctl"
	"github.com/mrgw/mrgw/internal/ratelog"
	"github.com/mrgw/mrgw/metaroce"
	"github.com/mrgw/mrgw/metrics"
	"github.com/mrgw/mrgw/netio"
	"github.com/mrgw/mrgw/netio/seal"
	"github.com/mrgw/mrgw/netio/udp"
	"github.com/mrgw/mrgw/pathmgr"
	"github.com/mrgw/mrgw/region"
	"github.com/mrgw/mrgw/tunnel"
	"github.com/mrgw/mrgw/tunnel/control"
	"github.com/mrgw/mrgw/tunnel/pki"
	"github.com/mrgw/mrgw/units"
)

// hostPathPool is the default number of path sockets the hosts share
// (Options.HostPathSockets): enough source ports that the 4 paths of a
// host rarely share one, few enough that they cost 64 × ~0.4 MiB at most.
const hostPathPool = 64

func (g *Gateway) wireVersions() []uint8 {
	if len(g.opts.WireVersions) > 0 {
		return g.opts.WireVersions
	}
	return []uint8{metaroce.Version1, metaroce.Version2}
}

func (g *Gateway) hostPathPool() int {
	if n := g.opts.HostPathSockets; n > 0 {
		return n
	}
	return hostPathPool
}

// hostHintScale: see Config.AcceptOptions in protocol.
const hostHintScale = 8

// hostPeerBase is the first netio peer id given to hosts; ids below it are
// peer gateways (one per gateway gossip announces, a hash of its name:
// peerIDOf).
const hostPeerBase = 1 << 20

// Gateway is one mrgw gateway daemon.
type Gateway struct {
	opts    Options
	cfgv    atomic.Pointer[config.Config]
	log     *slog.Logger
	level   *slog.LevelVar
	metrics *metrics.Metrics

	ep       *netio.Endpoint
	cluster  *region.Cluster
	ctlCfg   control.Config
	listener *control.Listener
	router   *tunnel.Router
	suite    seal.Suite
	planeIPs []netip.Addr
	planes   []string // plane names, by index
	// planeIndex maps a plane name to its index; healthOut carries the
	// relay's path-health reports to gossip.
	planeIndex map[string]int
	healthOut  chan region.HealthReport
	wanCC      cc.Factory
	lanCC      cc.Factory
	// share is this gateway's static part of wan.region_rate_bps
	// (regionShare, packed by packShare), as syncPeers last read it from
	// gossip; demandFrac its demand-aware part, a fraction of the rate
	// (math.Float64bits; 0 until the demand exchange computed one), and
	// demand the exchange's state (regiondemand.go).
	share      atomic.Uint64
	demandFrac atomic.Uint64
	demand     *regionDemand
	// probe checks the region's other gateways directly for the share
	// (regionprobe.go).
	probe *regionProbe
	// rateCfg and the applied rates are what applyRates last set; only the
	// endpoint's goroutine touches them.
	rateCfg                *config.Config
	appliedWAN, appliedLAN units.BitRate
	// egress is the gateway's WAN capacity (wanRate) that the
	// connections it sends on to other gateways share max-min (cc.Egress):
	// without it each connection was capped by the
	// whole capacity alone. One for the gateway's life (its capacity 0
	// while the rate is unlimited), so that a reload reaches every open
	// connection (reloadEgress).
	egress  *cc.Egress
	admin   *http.Server
	adminLn net.Listener

	cancelListener context.CancelFunc

	// pt holds the peer gateways, made and torn down as gossip announces
	// gateways of other regions (peers.go); syncMu serialises syncPeers.
	pt           peerTable
	syncMu       sync.Mutex
	peerRefusals *ratelog.Logger
	pmtuLog      *ratelog.Logger // path MTU black-hole verdicts (wanPeer.logBlackHoles)
	sendFailLog  *ratelog.Logger // datagrams the kernel refused (syncSendFailures)
	demandLog    *ratelog.Logger // demand reports dropped (dropDemand)
	sendFailed   uint64          // netio's TxErrors at the last syncSendFailures
	startedAt    time.Time       // when Run started (unseen gateways)

	relay *relay // owner-goroutine state
	// wanPingEvery: each WAN connection is PINGed this often (DeadAfter/8,
	// as hosts ping their gateways), so that a live peer always has
	// something to answer and a dead one is found DeadAfter after the next
	// PING at the latest (wanPeer.keepalive, wanPeer.watchSilence). At
	// DeadAfter/4 a source gateway with nothing in flight to a killed peer
	// gave it up up to 625 ms after the kill in the chaos runs; a PING is
	// one small packet each way.
	wanPingEvery time.Duration
	// deadAfter is the endpoint's metaroce DeadAfter (wan.dead_after):
	// a WAN peer silent this long while waited on is dropped
	// (wanPeer.watchSilence).
	deadAfter time.Duration

	runMu   sync.Mutex
	started bool
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	stopped chan struct{}
	stopOne sync.Once
	joined  atomic.Bool
	runErr  error // why Run stopped by itself (ErrNameInUse); under runMu

	status atomic.Pointer[Status]
}

// New builds a gateway from a validated configuration: it checks the
// configuration again, loads the TLS credentials and binds every socket
// (LAN, WAN planes, control, gossip, admin), so that every operator error
// surfaces here. Nothing runs until Run.
func New(cfg *config.Config, opts Options) (g *Gateway, err error) {
	if cfg == nil {
		return nil, fmt.Errorf("%w: no configuration", ErrInvalidConfig)
	}
	if verr := cfg.Validate(); verr != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, &config.Error{Path: cfg.Path, Problems: config.Problems(verr)})
	}
	if opts.StatsEvery <= 0 {
		opts.StatsEvery = time.Second
	}
	if opts.DrainTimeout <= 0 {
		opts.DrainTimeout = 5 * time.Second
	}
	if opts.HostRegisterTimeout <= 0 {
		opts.HostRegisterTimeout = defaultHostRegisterTimeout
	}
	if opts.HostIdleTimeout <= 0 {
		opts.HostIdleTimeout = defaultHostIdleTimeout
	}
	g = &Gateway{opts: opts, stopped: make(chan struct{}), pt: peerTable{byName: map[string]*wanPeer{}, byID: map[metaroce.PeerID]*wanPeer{}},
		planeIndex: map[string]int{}, healthOut: make(chan region.HealthReport, healthQueue)}
	g.cfgv.Store(cfg)
	g.level = new(slog.LevelVar)
	g.level.Set(parseLevel(cfg.Log.Level))
	if opts.Logger != nil {
		g.log = opts.Logger
	} else {
		out := opts.LogOutput
		if out == nil {
			out = os.Stderr
		}
		ho := &slog.HandlerOptions{Level: g.level}
		if cfg.Log.Format == config.LogJSON {
			g.log = slog.New(slog.NewJSONHandler(out, ho))
		} else {
			g.log = slog.New(slog.NewTextHandler(out, ho))
		}
	}
	g.log = g.log.With("gateway", cfg.Node.Name)
	g.peerRefusals = ratelog.New(g.log, 10*time.Second)
	g.pmtuLog = ratelog.New(g.log.With("part", "pmtu"), 10*time.Second)
	g.sendFailLog = ratelog.New(g.log, 10*time.Second)
	g.demandLog = ratelog.New(g.log.With("part", "region-demand"), 10*time.Second)
	g.metrics = newMetrics(cfg)
	if g.suite, err = suiteOf(cfg.WAN.Cipher); err != nil {
		return nil, fmt.Errorf("%w: wan.cipher: %w", ErrInvalidConfig, err)
	}
	// Alone in its region until gossip says otherwise: no WAN connection
	// opens before the first join (syncPeers), which sets the share.
	g.rateCfg, g.appliedWAN, g.appliedLAN = cfg, wanRate(cfg, regionPart{}), cfg.LAN.MaxRate()
	g.probe = newRegionProbe()
	g.demand = newRegionDemand()
	g.metrics.WANRateBps.Set(float64(wanWire(cfg, regionPart{})))
	g.egress = newEgress(g.appliedWAN, slowestHint(cfg))
	if g.wanCC, err = controller(cfg.WAN.CongestionControl, wanParams(cfg, g.appliedWAN, g.egress)); err != nil {
		return nil, fmt.Errorf("%w: wan.congestion_control: %w", ErrInvalidConfig, err)
	}
	if g.lanCC, err = controller(cfg.LAN.CongestionControl, cc.Params{LineRate: cfg.LAN.MaxRate()}); err != nil {
		return nil, fmt.Errorf("%w: lan.congestion_control: %w", ErrInvalidConfig, err)
	}
	creds, err := pki.LoadCredentials(cfg.Control.TLS.CAFile, cfg.Control.TLS.CertFile, cfg.Control.TLS.KeyFile, time.Now())
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCredentials, err)
	}
	if creds.Identity.Name != cfg.Node.Name {
		return nil, fmt.Errorf("%w: certificate %s names %q, node.name is %q", ErrCredentials, cfg.Control.TLS.CertFile, creds.Identity.Name, cfg.Node.Name)
	}
	if r := creds.Identity.Region; r != "" && r != cfg.Node.Region {
		return nil, fmt.Errorf("%w: certificate %s names %s, node.region is %q", ErrCredentials, cfg.Control.TLS.CertFile,
			pki.IdentityURI(r, creds.Identity.Name), cfg.Node.Region)
	}
	setCertMetrics(g.metrics, creds)
	var closers []func()
	defer func() {
		if err != nil {
			for i := len(closers) - 1; i >= 0; i-- {
				closers[i]()
			}
		}
	}()
	onClose := func(f func()) { closers = append(closers, f) }
	planeAddrs := g.newPlanes(cfg)
	if err := g.newEndpoint(cfg, planeAddrs, onClose); err != nil {
		return nil, err
	}
	// Gossip before the control listener: the listener verifies a peer's
	// handshake (acceptPeer, against the gossip view) from the moment it
	// is bound, before Run. In the other order a peer that dialled in
	// between read g.cluster while newRegion wrote it (the race detector
	// caught it in TestPlaneReportAvoidedByPeer under -race at load 16; a
	// nil cluster would have panicked).
	if err := g.newRegion(cfg, onClose); err != nil {
		return nil, err
	}
	if err := g.newControl(cfg, creds, onClose); err != nil {
		return nil, err
	}
	if err := g.newAdmin(cfg, onClose); err != nil {
		return nil, err
	}
	g.metrics.MemoryLimitBytes.Set(float64(cfg.Limits.MemoryBytes))
	g.metrics.HostFlowsLimit.Set(float64(cfg.Limits.MaxFlows))
	g.status.Store(&Status{Node: cfg.Node.Name, Region: cfg.Node.Region})
	if len(cfg.LAN.HostKeys) == 0 {
		g.log.Warn("lan.host_keys is empty: LAN hosts are not authenticated; anyone who reaches lan.listen can register any endpoint name")
	}
	return g, nil
}

// newPlanes indexes the WAN planes and returns their local addresses. Peer
// gateways are not made here: gossip announces them (peers.go).
func (g *Gateway) newPlanes(cfg *config.Config) []netip.AddrPort {
	var planeAddrs []netip.AddrPort
	for _, p := range cfg.WAN.Planes {
		a := netip.MustParseAddrPort(p.Local)
		planeAddrs = append(planeAddrs, a)
		g.planeIPs = append(g.planeIPs, a.Addr())
		g.planeIndex[p.Name] = len(g.planes)
		g.planes = append(g.planes, p.Name)
	}
	return planeAddrs
}

// newEndpoint binds the endpoint: LAN listen plus one socket per plane.
func (g *Gateway) newEndpoint(cfg *config.Config, planeAddrs []netip.AddrPort, onClose func(func())) error {
	lanAddr := netip.MustParseAddrPort(cfg.LAN.Listen)
	proto := g.protocol(cfg)
	g.wanPingEvery = g.opts.WANPingEvery
	if g.wanPingEvery == 0 {
		g.wanPingEvery = max(proto.DeadAfter/8, 10*time.Millisecond)
	}
	g.relay = newRelay(g, cfg)
	var err error
	g.ep, err = netio.New(netio.Config{
		Protocol:    proto,
		Listen:      lanAddr,
		ExtraListen: planeAddrs,
		// LAN admission: cookies under load, rate limits, bounds (admission.go).
		AcceptPeer:    g.relay.adm.accept,
		Cookies:       netio.NewCookies(nil),
		RequireCookie: g.relay.adm.requireCookie,
		OnEvent:       g.relay.onEvent,
		Logger:        g.log,
		UDP:           udpOptions(cfg),
		// Hosts send from a pool of path sockets they share: a socket
		// of its own per host path cost a descriptor, a reader and ~0.4
		// MiB each, and with 1,024 in all hosts beyond about 250 were
		// admitted and never answered. The WAN's peers keep their own
		// (each path on its plane's address).
		SharePaths:        func(id netio.PeerID) bool { return id >= hostPeerBase },
		SharedPathSockets: g.hostPathPool(),
		MaxPathSockets:    netio.DefaultMaxPathSockets + g.hostPathPool(),
		MaxPeers:          max(netio.DefaultMaxPeers, cfg.LAN.MaxHosts+maxWANPeers),
	})
	if err != nil {
		return fmt.Errorf("%w: lan/wan sockets: %w", ErrBind, err)
	}
	onClose(func() { g.ep.Close() })
	if err = g.ep.Call(context.Background(), func(now time.Duration, ep *metaroce.Endpoint) {
		g.deadAfter = ep.Config().DeadAfter
		ep.BindSinkAll(flowctl.ControlStream, g.relay)
	}); err != nil {
		return err
	}
	return nil
}

// newControl sets up the control channel and binds its listener.
func (g *Gateway) newControl(cfg *config.Config, creds *pki.Credentials, onClose func(func())) error {
	g.router = tunnel.NewRouter()
	local := g.ep.LocalAddrs()[1:]
	g.ctlCfg = control.Config{
		Credentials: creds,
		Local:       control.LocalInfo{Name: cfg.Node.Name, Region: cfg.Node.Region, Planes: local, NumPaths: uint16(cfg.WAN.PathsPerPeer)},
		// Trust by certificate: chained to the CA, naming the gateway
		// as gossip announces it, not denied (peers.go).
		AcceptPeer:        g.acceptPeer,
		KeepaliveInterval: g.opts.ControlKeepalive,
		KeepaliveMisses:   g.opts.ControlMisses,
		// The gateway rotates keys itself (maybeRotate) so that a reloaded
		// wan.key_rotation reaches the sessions already up.
		KeyLifetime: -1,
		Logger:      g.log.With("part", "control"),
		OnEvent:     g.onControlEvent,
		// Every refusal, by the listener or a dial, inside TLS or after.
		OnRefused: func(remote net.Addr, err error) {
			g.metrics.ControlRefused(control.RefusalReason(err))
		},
		Refusals: ratelog.New(g.log.With("part", "control"), time.Second),
	}
	if cfg.Control.Listen != "" {
		lctx, lcancel := context.WithCancel(context.Background())
		var err error
		g.listener, err = control.Listen(lctx, cfg.Control.Listen, g.ctlCfg)
		if err != nil {
			lcancel()
			return fmt.Errorf("%w: control.listen %s: %w", ErrBind, cfg.Control.Listen, err)
		}
		onClose(func() { g.listener.Close(); lcancel() })
		g.cancelListener = lcancel
	}
	return nil
}

// newRegion sets up gossip: the cluster of every region's gateways.
func (g *Gateway) newRegion(cfg *config.Config, onClose func(func())) error {
	rc, err := g.regionConfig(cfg)
	if err != nil {
		return fmt.Errorf("%w: gossip: %w", ErrInvalidConfig, err)
	}
	g.cluster, err = region.New(rc, g.log.With("part", "gossip"))
	if err != nil {
		return fmt.Errorf("%w: gossip.bind %s: %w", ErrBind, cfg.Gossip.Bind, err)
	}
	g.cluster.OnMessage(g.onDemandMessage)
	onClose(func() { g.cluster.Shutdown() })
	return nil
}

// newAdmin binds the admin listener, if configured.
func (g *Gateway) newAdmin(cfg *config.Config, onClose func(func())) error {
	if cfg.Admin.Listen != "" {
		var err error
		g.adminLn, err = net.Listen("tcp", cfg.Admin.Listen)
		if err != nil {
			return fmt.Errorf("%w: admin.listen %s: %w", ErrBind, cfg.Admin.Listen, err)
		}
		onClose(func() { g.adminLn.Close() })
		g.admin = g.adminServer()
	}
	return nil
}

// Config returns the configuration the gateway runs with.
func (g *Gateway) Config() *config.Config { return g.cfgv.Load() }

// Metrics returns the gateway's metric catalogue.
func (g *Gateway) Metrics() *metrics.Metrics { return g.metrics }

// Cluster returns the gossip cluster (its view and routes).
func (g *Gateway) Cluster() *region.Cluster { return g.cluster }

// Endpoint returns the gateway's MetaRoCE endpoint.
func (g *Gateway) Endpoint() *netio.Endpoint { return g.ep }

// LANAddr returns the address hosts send to.
func (g *Gateway) LANAddr() netip.AddrPort { return g.ep.LocalAddr() }

// AdminAddr returns the admin server's address, if it has one.
func (g *Gateway) AdminAddr() string {
	if g.adminLn == nil {
		return ""
	}
	return g.adminLn.Addr().String()
}

// Done is closed when the gateway has stopped.
func (g *Gateway) Done() <-chan struct{} { return g.stopped }

func (g *Gateway) protocol(cfg *config.Config) metaroce.Config {
	pc := pathmgr.DefaultConfig()
	if hint := slowestHint(cfg); hint > 0 {
		pc.InitialRTT = hint
	}
	p := metaroce.Config{
		MTU:       cfg.WAN.MTU,
		Paths:     max(cfg.WAN.PathsPerPeer, 32),
		CC:        g.lanCC,
		Path:      pc,
		Listen:    true,
		RelayOnly: true,
		Seed:      uint64(time.Now().UnixNano()),
		DeadAfter: cfg.WAN.DeadAfter,
		// Wire version 2 (PROTOCOL.md §12: 56 bytes of DATA overhead with
		// the seal, against v1's 104) with every peer that speaks it;
		// version 1 with the others (hosts and gateways of earlier
		// releases): the handshake agrees on the highest both offer.
		WireVersions: g.wireVersions(),
		// The receiver loop divides the WAN capacity the operator declared
		// among the senders it serves (peer gateways and hosts), and tells
		// each its share in every ack: senders start there instead of
		// searching, and never exceed it. 0 (not configured): no hints.
		ReceiveCapacity: g.appliedWAN,
		AcceptOptions: func(peer metaroce.PeerID) metaroce.ConnOptions {
			if peer < hostPeerBase {
				return metaroce.ConnOptions{CC: g.wanCC, Paths: cfg.WAN.PathsPerPeer, PMTU: g.wanPMTU(cfg)}
			}
			// Hosts are told hostHintScale times their share of the WAN
			// capacity: enough that the queue forms here, where the WAN
			// connection's scheduler weighs classes (at exactly their
			// share, their own class-blind schedulers decided), little
			// enough that an incast of hosts stays paced (with no hint at
			// all, hosts sent at LAN rate and an incast of 12 starved the
			// gateway's WAN connections under load).
			return metaroce.ConnOptions{CC: g.lanCC, RateHintScale: hostHintScale}
		},
	}
	if g.opts.Protocol != nil {
		g.opts.Protocol(&p)
	}
	return p
}

func (g *Gateway) regionConfig(cfg *config.Config) (region.Config, error) {
	rc := region.Config{
		Name: cfg.Node.Name,
		Meta: region.Meta{Region: cfg.Node.Region, Capabilities: []string{"relay-v1", region.CapHealthBatch, capRegionDemand},
			Wire: g.wireVersions(), Capacity: uint32(cfg.Node.Capacity)},
		MetaVersion: g.opts.GossipMetaVersion,
		Bind:        cfg.Gossip.Bind, Advertise: cfg.Gossip.Advertise, Seeds: cfg.Gossip.Seeds,
		Profile: cfg.Gossip.Profile,
	}
	// What the other gateways dial and send to: the advertise addresses,
	// else the listen addresses (config requires advertise for a wildcard).
	if a, err := netip.ParseAddrPort(cfg.Control.Announced()); err == nil {
		rc.Meta.Control = a
	}
	for _, p := range cfg.WAN.Planes {
		if a, err := netip.ParseAddrPort(p.Announced()); err == nil {
			rc.Meta.Planes = append(rc.Meta.Planes, region.Plane{Name: p.Name, WAN: a})
		}
	}
	if cfg.Gossip.Profile == config.GossipProfileCustom {
		t := cfg.Gossip.Timings()
		rc.Timings = region.Timings{ProbeInterval: t.ProbeInterval, ProbeTimeout: t.ProbeTimeout, SuspicionMult: t.SuspicionMult, GossipInterval: t.GossipInterval}
	}
	for _, k := range cfg.Gossip.Keyring {
		b, err := base64.StdEncoding.DecodeString(k)
		if err != nil {
			return rc, err
		}
		rc.Keys = append(rc.Keys, b)
	}
	for _, r := range cfg.Regions {
		rc.ExpectedRegions = append(rc.ExpectedRegions, r.Name)
	}
	return rc, nil
}

// Run starts the gateway and blocks until it stops: after Shutdown or
// Close, or when ctx ends (which is a Close). It joins the gossip cluster,
// keeps a control session and a WAN connection to every peer gateway and
// serves the admin endpoint.
func (g *Gateway) Run(ctx context.Context) error {
	g.runMu.Lock()
	if g.started {
		g.runMu.Unlock()
		return ErrStarted
	}
	select {
	case <-g.stopped:
		g.runMu.Unlock()
		return ErrClosed
	default:
	}
	g.started = true
	g.ctx, g.cancel = context.WithCancel(context.Background())
	g.runMu.Unlock()

	if g.admin != nil {
		g.goTrack(func() {
			if err := g.admin.Serve(g.adminLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
				g.log.Error("admin server stopped", "err", err)
			}
		})
	}
	if g.listener != nil {
		g.goTrack(g.acceptLoop)
	}
	g.startedAt = time.Now()
	g.goTrack(g.joinLoop)
	g.goTrack(g.watchGossip)
	g.goTrack(g.probeRegion)
	g.goTrack(g.demandLoop)
	g.goTrack(g.watchHealth)
	g.goTrack(g.publishLoop)
	g.goTrack(g.statsLoop)
	g.goTrack(g.silenceLoop)
	g.log.Info("gateway running", "region", g.Config().Node.Region, "lan", g.LANAddr(), "wan", g.ep.LocalAddrs()[1:],
		"control", g.Config().Control.Listen, "admin", g.AdminAddr())
	select {
	case <-ctx.Done():
		g.Close()
	case <-g.stopped:
	}
	g.runMu.Lock()
	defer g.runMu.Unlock()
	return g.runErr
}

func (g *Gateway) goTrack(f func()) {
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		f()
	}()
}

// ticking runs f every interval until the gateway stops or f returns
// false.
func (g *Gateway) ticking(interval time.Duration, f func() bool) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-g.ctx.Done():
			return
		case <-t.C:
		}
		if !f() {
			return
		}
	}
}

// Shutdown stops the gateway gracefully: new flows are refused with
// OPEN_ERR gateway draining; the gateway leaves gossip so that peers route
// around it; in-flight messages get until the drain timeout (or ctx) to
// finish; the flows still open are RESET so their hosts re-open them
// through the region's other gateways; then connections and control sessions are
// closed and Run returns.
func (g *Gateway) Shutdown(ctx context.Context) error {
	select {
	case <-g.stopped:
		return nil
	default:
	}
	g.log.Info("gateway draining")
	if g.listener != nil {
		g.listener.Draining()
	}
	bg := context.Background()
	_ = g.ep.Call(bg, func(now time.Duration, _ *metaroce.Endpoint) { g.relay.draining = true })
	_ = g.cluster.Leave(time.Second)
	dctx, cancel := context.WithTimeout(ctx, g.opts.DrainTimeout)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		busy := 0
		if err := g.ep.Call(dctx, func(time.Duration, *metaroce.Endpoint) { busy = g.relay.inflightMessages() }); err != nil || busy == 0 {
			break
		}
		select {
		case <-tick.C:
			continue
		case <-dctx.Done():
		}
		break
	}
	var reset int
	_ = g.ep.Call(bg, func(now time.Duration, _ *metaroce.Endpoint) {
		reset = g.relay.resetAll(now, flowctl.CodeDraining, "gateway shutting down")
	})
	// Let the RESETs and the last acknowledgements leave, then close every
	// connection with a CLOSE the peers answer.
	g.waitQuiet(ctx, time.Second)
	_ = g.ep.Call(bg, func(now time.Duration, ep *metaroce.Endpoint) {
		for _, c := range ep.Conns() {
			c.Close(now)
		}
	})
	g.waitConnsClosed(ctx, time.Second)
	g.log.Info("gateway drained", "flows_reset", reset)
	// Tell peer gateways we are going; their sessions end cleanly.
	var wg sync.WaitGroup
	for _, p := range g.peerList() {
		if s := p.session(); s != nil {
			wg.Add(1)
			go func() {
				defer wg.Done()
				sctx, c := context.WithTimeout(ctx, time.Second)
				defer c()
				_ = s.Drain(sctx)
			}()
		}
	}
	wg.Wait()
	g.stop(true)
	return nil
}

// Close stops the gateway at once, as a crash would as far as peers and
// hosts can tell (no RESET, no gossip goodbye): their timers and gossip
// must notice. Tests use it to kill a gateway mid-transfer.
func (g *Gateway) Close() error {
	g.stop(false)
	return nil
}

func (g *Gateway) stop(graceful bool) {
	g.stopOne.Do(func() {
		g.runMu.Lock()
		if g.cancel != nil {
			g.cancel()
		}
		g.runMu.Unlock()
		// Sessions before the listener: quic-go keeps a listener's
		// transport (and its goroutines) alive while connections it
		// accepted are open.
		for _, p := range g.peerList() {
			p.closeAll()
		}
		if g.admin != nil {
			sctx, c := context.WithTimeout(context.Background(), time.Second)
			_ = g.admin.Shutdown(sctx)
			c()
			g.adminLn.Close()
		}
		g.wg.Wait() // peer loops, accept loop, stats: they need the endpoint
		for _, p := range g.peerList() {
			p.closeAll() // sessions handed over while stopping
		}
		if g.listener != nil {
			g.listener.Close()
			g.cancelListener()
		}
		g.ep.Close()
		// A crash says no goodbye: without Leave, the others must detect
		// the failure through their probes, as they would in production.
		_ = g.cluster.Shutdown()
		close(g.stopped)
		g.log.Info("gateway stopped", "graceful", graceful)
	})
}

func (g *Gateway) waitQuiet(ctx context.Context, limit time.Duration) {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		q := 0
		if g.ep.Call(ctx, func(_ time.Duration, ep *metaroce.Endpoint) {
			for _, c := range ep.Conns() {
				q += c.Queued()
			}
		}) != nil || q == 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (g *Gateway) waitConnsClosed(ctx context.Context, limit time.Duration) {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		n := 0
		if g.ep.Call(ctx, func(_ time.Duration, ep *metaroce.Endpoint) { n = len(ep.Conns()) }) != nil || n == 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func parseLevel(s string) slog.Level {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return slog.LevelInfo
	}
	return l
}

func suiteOf(name string) (seal.Suite, error) {
	switch name {
	case "", "aes-128-gcm":
		return seal.AES128GCM, nil
	case "aes-256-gcm":
		return seal.AES256GCM, nil
	case "chacha20-poly1305":
		return seal.ChaCha20Poly1305, nil
	}
	return 0, fmt.Errorf("unknown cipher %q", name)
}

// socketBufferBytes is asked for as SO_RCVBUF and SO_SNDBUF on every
// socket (past net.core.rmem_max/wmem_max with CAP_NET_ADMIN, else capped
// by them, which netio logs at warn: udp.Options.ReadBuffer). The LAN socket
// receives from every host at once: with the kernel's default of 208 KiB
// (about 25 datagrams of 4 KiB), 32 hosts starting a message together
// overflowed it and the kernel dropped thousands of datagrams per second
// (incast 64→1 in mrgw-lab loadtest: 23,000 drops on one gateway's LAN
// socket, /proc/net/udp), which the hosts read as dead paths.
const socketBufferBytes = 4 << 20

func udpOptions(cfg *config.Config) udp.Options {
	// DontFragment: never fragmented, so that path MTU discovery sees
	// what does not fit as lost (pmtu.go).
	o := udp.Options{DisableGSO: !cfg.WAN.GSO, DisableGRO: !cfg.WAN.GRO, ReadBuffer: socketBufferBytes, WriteBuffer: socketBufferBytes, DontFragment: true}
	if !cfg.WAN.ECN {
		o.NotECT = true
	}
	return o
}
