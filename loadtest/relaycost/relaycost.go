//go:build linux

// Package relaycost is `mrgw-lab loadtest relay-cost`: what relaying costs
// each gateway, in cores per relayed Gbit/s, next to the datapath floor.
//
// Two gateway daemons (`mrgw run`, one process each, so that each one's CPU
// is its own: /proc/PID/stat) relay a bulk transfer between two hosts in
// this process: host → sending gateway (eu-west) → WAN → receiving gateway
// (us-east) → host. The WAN is loopback with no emulated delay, loss or
// rate, so the gateways and not a link are what limits the transfer. Each
// row runs the gateways with one GOMAXPROCS; the floor (raw UDP with the
// tunnel's AEAD, sealed and opened: loadtest/datapath's raw-udp+aead) and
// the tunnel alone (loadtest/datapath's mrgw) are measured in the same run
// on loopback at the same link MTU. Every address is in 127.14.0.0/24.
package relaycost

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.yaml.in/yaml/v3"

	"github.com/mrgw/mrgw/gateway"
	"github.com/mrgw/mrgw/host"
	"github.com/mrgw/mrgw/internal/report"
	"github.com/mrgw/mrgw/loadtest/lab"
	"github.com/mrgw/mrgw/metaroce"
	"github.com/mrgw/mrgw/netio/seal"
	"github.com/mrgw/mrgw/tunnel/pki"
	"github.com/mrgw/mrgw/units"
)

// Options configure a run. Zero values take the defaults in brackets.
type Options struct {
	// Gateway is the command that runs one gateway, its configuration
	// file's path appended after --config: the mrgw-lab binary with
	// GatewayArgs (RunGateway), or the mrgw daemon as `mrgw run --pprof`
	// [required]. GatewayEnv is added to its environment.
	Gateway    []string
	GatewayEnv []string
	// Duration is each relay row's measured window [6 s], after Warmup
	// [2 s] of traffic.
	Duration, Warmup time.Duration
	// Datapath measures the rows beside the relay on loopback at the
	// link MTU, each for d (loadtest/datapath's raw UDP, the floor and the
	// tunnel alone; the load tests share no floor of the stack, so the
	// command passes it in), and returns the floor's cores per Gbit/s
	// among them; nil skips them.
	Datapath func(ctx context.Context, linkMTU int, d time.Duration) (rows []report.Row, floorCPUPerGbps float64, err error)
	// FloorDuration is each datapath measurement's window [3 s];
	// negative skips them.
	FloorDuration time.Duration
	// LinkMTU is the WAN link's IP MTU [1400]: wan.mtu is the largest DATA
	// payload whose sealed datagram fits it, as in loadtest/datapath.
	LinkMTU int
	// Procs are the gateways' GOMAXPROCS, one relay row each [1 and the
	// number of CPUs].
	Procs []int
	// Flows is the number of host flows [4], each keeping Window WRITEs
	// of MessageBytes in flight [8 of 1 MiB].
	Flows, Window, MessageBytes int
	// ProfileDir, if set, receives a CPU profile of each gateway over each
	// row's measured window (relay-gomaxprocs-N-send.pprof, -recv.pprof).
	ProfileDir string
	// Dir keeps the configurations and the daemons' logs [a temporary
	// directory, removed].
	Dir      string
	Progress io.Writer
}

func (o *Options) fill() error {
	if len(o.Gateway) == 0 {
		return errors.New("relaycost: no gateway command")
	}
	if o.Duration <= 0 {
		o.Duration = 6 * time.Second
	}
	if o.Warmup <= 0 {
		o.Warmup = 2 * time.Second
	}
	if o.FloorDuration == 0 {
		o.FloorDuration = 3 * time.Second
	}
	if o.LinkMTU == 0 {
		o.LinkMTU = 1400
	}
	if o.LinkMTU < minLinkMTU || o.LinkMTU > maxLinkMTU {
		return fmt.Errorf("relaycost: link MTU %d outside [%d, %d]", o.LinkMTU, minLinkMTU, maxLinkMTU)
	}
	if len(o.Procs) == 0 {
		o.Procs = []int{1}
		if n := runtime.NumCPU(); n > 1 {
			o.Procs = append(o.Procs, n)
		}
	}
	for _, p := range o.Procs {
		if p < 1 || p > 1024 {
			return fmt.Errorf("relaycost: GOMAXPROCS %d", p)
		}
	}
	if o.Flows <= 0 {
		o.Flows = 4
	}
	if o.Window <= 0 {
		o.Window = 8
	}
	if o.MessageBytes <= 0 {
		o.MessageBytes = 1 << 20
	}
	return nil
}

func (o *Options) say(format string, a ...any) {
	if o.Progress != nil {
		fmt.Fprintf(o.Progress, format+"\n", a...)
	}
}

// GatewayCost is one gateway's CPU over a row's measured window.
type GatewayCost struct {
	// Cores is CPU seconds per second (user + system), from /proc/PID/stat.
	Cores float64 `json:"cores"`
	// KernelShare is the system time's share of Cores.
	KernelShare float64 `json:"kernel_share"`
	// CPUPerGbps is Cores per Gbit/s of the relay's goodput.
	CPUPerGbps float64 `json:"cpu_per_gbps"`
	// XFloor is CPUPerGbps over the floor's.
	XFloor float64 `json:"x_floor,omitempty"`
	// Profile is the CPU profile's file, if one was taken.
	Profile string `json:"profile,omitempty"`
	// OwnerShare is the share of the profile's CPU taken under the
	// endpoint's owner goroutine (ownerShare), if a profile was taken.
	OwnerShare float64 `json:"owner_share,omitempty"`
}

// Row is one relay measurement.
type Row struct {
	GOMAXPROCS int `json:"gomaxprocs"`
	// GoodputBps is what completed end to end at the sending host (the
	// bytes are in the receiving host's memory), bit/s.
	GoodputBps float64     `json:"goodput_bps"`
	Send       GatewayCost `json:"sending_gateway"`
	Recv       GatewayCost `json:"receiving_gateway"`
	// HostsCores is this process's CPU (both hosts), cores.
	HostsCores float64 `json:"hosts_cores"`
	// FloorCPUPerGbps is the floor's cores per Gbit/s in the same run.
	FloorCPUPerGbps float64 `json:"floor_cpu_per_gbps,omitempty"`
	// WANRetransmits are the sending gateway's WAN retransmissions during
	// the window, WANDataSent its DATA datagrams (retransmissions
	// included): the WAN is loss-free, so what is lost is dropped by the
	// receiving gateway's full socket (the sender's controller finds the
	// receiving gateway's capacity so).
	WANRetransmits uint64 `json:"wan_retransmits"`
	WANDataSent    uint64 `json:"wan_data_sent"`
	// RecvDrops are the datagrams the receiving gateway's WAN plane
	// sockets dropped during the window, by reason
	// (mrgw_wan_datagrams_dropped_total): buffer is the kernel's receive
	// buffer (a coalesced GRO run counts once: about nine datagrams
	// each on loopback), queue its readers' queue, the others refusals;
	// RecvDuplicates the DATA packets it received that it had placed
	// already (a retransmission of a packet that was not lost). Both come
	// from its /metrics, which it folds every second, so they are the
	// window's to within a second.
	RecvDrops      map[string]uint64 `json:"receiving_gateway_wan_drops,omitempty"`
	RecvDuplicates uint64            `json:"receiving_gateway_duplicates,omitempty"`
	// SendFailed are the datagrams the sending gateway's kernel refused
	// (mrgw_datagrams_send_failed_total), as lost as a dropped one.
	SendFailed uint64  `json:"sending_gateway_send_failed,omitempty"`
	LoadStart  float64 `json:"load_start"`
	LoadEnd    float64 `json:"load_end"`
	Note       string  `json:"note,omitempty"`
}

// Result is a run: the datapath rows measured beside the relay, then the
// relay rows, one per GOMAXPROCS.
type Result struct {
	LinkMTU int `json:"link_mtu"`
	// WANMTU is wan.mtu (the DATA payload) the gateways ran with.
	WANMTU int `json:"wan_mtu"`
	// Datapath holds raw-udp, the floor (raw-udp+aead) and the tunnel
	// alone (mrgw), on loopback, in this run.
	Datapath []report.Row `json:"datapath,omitempty"`
	// FloorCPUPerGbps is the floor's row's cores per Gbit/s (0: skipped).
	FloorCPUPerGbps float64 `json:"floor_cpu_per_gbps"`
	Rows            []Row   `json:"relay"`
	// Scaling is the goodput of the last row over the first's (GOMAXPROCS
	// Procs[last] against Procs[0]); CoreScaling the same of the two
	// gateways' cores together.
	Scaling     float64 `json:"goodput_scaling,omitempty"`
	CoreScaling float64 `json:"core_scaling,omitempty"`
	// SendGainBound and RecvGainBound are the most a gateway given cores
	// of its own would carry at the last row's GOMAXPROCS over the first
	// row's, at the costs per Gbit/s the rows measured: procs ratio × the
	// first cost over the last (what the cores cost to coordinate is in
	// the last cost). An upper bound, not a measurement: the rows share
	// the machine with the hosts and the other gateway.
	SendGainBound float64 `json:"send_gain_bound,omitempty"`
	RecvGainBound float64 `json:"recv_gain_bound,omitempty"`
}

// Run measures the datapath rows, then the relay at each GOMAXPROCS.
func Run(ctx context.Context, o Options) (*Result, error) {
	if err := o.fill(); err != nil {
		return nil, err
	}
	res := &Result{LinkMTU: o.LinkMTU, WANMTU: WANMTU(o.LinkMTU)}
	if o.FloorDuration > 0 && o.Datapath != nil {
		o.say("datapath on loopback at link MTU %d: raw UDP, the floor (raw UDP + AEAD), the tunnel alone (%v each)", o.LinkMTU, o.FloorDuration)
		rows, floor, err := o.Datapath(ctx, o.LinkMTU, o.FloorDuration)
		if err != nil {
			return nil, err
		}
		res.Datapath, res.FloorCPUPerGbps = rows, floor
	}
	dir := o.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "mrgw-relaycost-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(d)
		dir = d
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if o.ProfileDir != "" {
		if err := os.MkdirAll(o.ProfileDir, 0o755); err != nil {
			return nil, err
		}
	}
	for _, p := range o.Procs {
		row, err := relay(ctx, o, dir, res.WANMTU, p)
		if err != nil {
			return res, err
		}
		row.FloorCPUPerGbps = res.FloorCPUPerGbps
		if f := res.FloorCPUPerGbps; f > 0 {
			row.Send.XFloor, row.Recv.XFloor = row.Send.CPUPerGbps/f, row.Recv.CPUPerGbps/f
		}
		res.Rows = append(res.Rows, row)
	}
	if n := len(res.Rows); n > 1 && res.Rows[0].GoodputBps > 0 {
		first, last := res.Rows[0], res.Rows[n-1]
		res.Scaling = last.GoodputBps / first.GoodputBps
		if c := first.Send.Cores + first.Recv.Cores; c > 0 {
			res.CoreScaling = (last.Send.Cores + last.Recv.Cores) / c
		}
		res.SendGainBound = gainBound(first.GOMAXPROCS, last.GOMAXPROCS, first.Send.CPUPerGbps, last.Send.CPUPerGbps)
		res.RecvGainBound = gainBound(first.GOMAXPROCS, last.GOMAXPROCS, first.Recv.CPUPerGbps, last.Recv.CPUPerGbps)
	}
	return res, nil
}

// gainBound is the most a gateway on p2 cores of its own carries over one on
// p1 when it costs c1 and c2 cores per Gbit/s: p2/c2 over p1/c1, and at
// most p2/p1 (0 when a cost is unknown). A c1 above c2 comes from the
// shared machine (at GOMAXPROCS 1 the gateway's goroutines wait for each
// other behind the other processes on its one thread), which a core of its
// own would not charge, so it does not raise the bound past linear.
func gainBound(p1, p2 int, c1, c2 float64) float64 {
	if p1 <= 0 || c1 <= 0 || c2 <= 0 {
		return 0
	}
	return min(float64(p2)/c2/(float64(p1)/c1), float64(p2)/float64(p1))
}

// Link MTUs the load test takes (wan.mtu's range, with the headers).
const (
	minLinkMTU = 576
	maxLinkMTU = 9216
)

// WANMTU is wan.mtu for a link of IP MTU linkMTU: the largest DATA
// payload (wire version 2) whose sealed datagram fits the link.
func WANMTU(linkMTU int) int {
	return linkMTU - 28 - seal.Overhead - metaroce.DataHeaderLenV2
}

// Addresses of the deployment.
var (
	ipSend  = netip.MustParseAddr("127.14.0.11") // eu-west's gateway
	ipRecv  = netip.MustParseAddr("127.14.0.21") // us-east's gateway
	ipHostA = netip.MustParseAddr("127.14.0.1")
	ipHostB = netip.MustParseAddr("127.14.0.2")
)

const (
	regionA, regionB = "eu-west", "us-east"
	memoryKey        = 1
)

// relay runs one row: both daemons at GOMAXPROCS procs, the hosts, the
// transfer, the measurement.
func relay(ctx context.Context, o Options, dir string, wanMTU, procs int) (Row, error) {
	row := Row{GOMAXPROCS: procs}
	key := &host.Key{ID: "relaycost", Secret: make([]byte, 32)}
	if _, err := rand.Read(key.Secret); err != nil {
		return row, err
	}
	gws, err := startGateways(ctx, o, dir, key, wanMTU, procs)
	for _, g := range gws {
		defer g.stop()
	}
	if err != nil {
		return row, err
	}
	send, recv := gws[0], gws[1]
	o.say("GOMAXPROCS %d: gateways up (pid %d sending, %d receiving), WAN connected; starting the hosts", procs, send.pid(), recv.pid())

	proto := lab.HostProtocol()
	proto.MTU = wanMTU
	// The receiving host must not be what limits the transfer.
	proto.ReceiveCapacity = 400 * units.Gbps
	hb, err := host.New(host.Config{Name: "dst", Region: regionB, Gateways: []netip.AddrPort{recv.lan},
		Listen: netip.AddrPortFrom(ipHostB, 0), Key: key, Protocol: proto})
	if err != nil {
		return row, fmt.Errorf("relaycost: receiving host: %w", err)
	}
	defer hb.Close()
	if err := hb.RegisterMemory(memoryKey, make([]byte, o.Flows*o.MessageBytes)); err != nil {
		return row, err
	}
	ha, err := host.New(host.Config{Name: "src", Region: regionA, Gateways: []netip.AddrPort{send.lan},
		Listen: netip.AddrPortFrom(ipHostA, 0), Key: key, Protocol: proto})
	if err != nil {
		return row, fmt.Errorf("relaycost: sending host: %w", err)
	}
	defer ha.Close()

	tctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Go(func() { drain(tctx, hb) })
	var done atomic.Uint64
	errs := make(chan error, o.Flows)
	for i := range o.Flows {
		wg.Go(func() {
			if err := write(tctx, ha, o, i, &done); err != nil && tctx.Err() == nil {
				errs <- err
				cancel()
			}
		})
	}
	if err := waitErr(tctx, errs, o.Warmup); err != nil {
		return row, err
	}
	if done.Load() == 0 {
		return row, fmt.Errorf("relaycost: nothing completed in the %v of warm-up; see the logs in %s", o.Warmup, dir)
	}
	var profs [2]chan error
	if o.ProfileDir != "" {
		for i, g := range gws {
			name := filepath.Join(o.ProfileDir, fmt.Sprintf("relay-gomaxprocs-%d-%s.pprof", procs, []string{"send", "recv"}[i]))
			if i == 0 {
				row.Send.Profile = name
			} else {
				row.Recv.Profile = name
			}
			profs[i] = make(chan error, 1)
			go func() { profs[i] <- g.profile(tctx, o.Duration, name) }()
		}
	}
	st0, _ := send.status(tctx)
	s0, _ := send.counters(tctx)
	r0, _ := recv.counters(tctx)
	row.LoadStart = report.LoadAvg()
	c0s, c0r, c0h := send.cpu(), recv.cpu(), selfCPU()
	t0, d0 := time.Now(), done.Load()
	if err := waitErr(tctx, errs, o.Duration); err != nil {
		return row, err
	}
	c1s, c1r, c1h := send.cpu(), recv.cpu(), selfCPU()
	t1, d1 := time.Now(), done.Load()
	row.LoadEnd = report.LoadAvg()
	st1, _ := send.status(tctx)
	if r1, err := recv.counters(tctx); err == nil && r0 != nil {
		row.RecvDrops = map[string]uint64{}
		for reason, n := range r1.drops {
			if d := n - r0.drops[reason]; d > 0 {
				row.RecvDrops[reason] = d
			}
		}
		row.RecvDuplicates = r1.duplicates - r0.duplicates
		row.Note = report.JoinNote(row.Note, fmt.Sprintf("receiving gateway: WAN drops %s (a GRO run counts once), duplicates %d",
			dropsNote(row.RecvDrops), row.RecvDuplicates))
	}
	if s1, err := send.counters(tctx); err == nil && s0 != nil {
		row.SendFailed = s1.sendFailed - s0.sendFailed
		row.Note = report.JoinNote(row.Note, fmt.Sprintf("sending gateway: datagrams the kernel refused %d", row.SendFailed))
	}
	secs := t1.Sub(t0).Seconds()
	row.GoodputBps = float64(units.Throughput(float64(d1-d0), secs))
	row.Send = cost(c0s, c1s, secs, row.GoodputBps, row.Send.Profile)
	row.Recv = cost(c0r, c1r, secs, row.GoodputBps, row.Recv.Profile)
	row.HostsCores = (c1h.total() - c0h.total()).Seconds() / secs
	if st0 != nil && st1 != nil && len(st0.Peers) == 1 && len(st1.Peers) == 1 {
		p0, p1 := st0.Peers[0], st1.Peers[0]
		row.WANRetransmits = p1.Retrans - p0.Retrans
		row.WANDataSent = p1.DataSent - p0.DataSent
		row.Note = report.JoinNote(row.Note, fmt.Sprintf("WAN retransmits by cause: gap %d, timeout %d, spurious %d",
			p1.RetransGap-p0.RetransGap, p1.RetransTimeout-p0.RetransTimeout, p1.RetransSpurious-p0.RetransSpurious))
	}
	for i, ch := range profs {
		if ch == nil {
			continue
		}
		gc := []*GatewayCost{&row.Send, &row.Recv}[i]
		err := <-ch
		if err == nil {
			gc.OwnerShare, err = ownerShare(gc.Profile)
		}
		if err != nil {
			row.Note = report.JoinNote(row.Note, fmt.Sprintf("profile of gateway %d: %v", i, err))
		}
	}
	if row.Send.OwnerShare > 0 && row.Recv.OwnerShare > 0 {
		row.Note = report.JoinNote(row.Note, fmt.Sprintf("owner goroutine (profiles): %.1f%% of the sending gateway's CPU, %.1f%% of the receiving one's (it fills a core when the gateway keeps %.1f and %.1f cores busy)",
			100*row.Send.OwnerShare, 100*row.Recv.OwnerShare, ownerBound(row.Send.OwnerShare), ownerBound(row.Recv.OwnerShare)))
	}
	if d1 == d0 {
		return row, errors.New("relaycost: no message completed during the measurement")
	}
	row.Note = report.JoinNote(row.Note, fmt.Sprintf("link mtu %d (wan.mtu %d), %d flows of %d × %d KiB WRITEs, loopback WAN without emulation",
		o.LinkMTU, wanMTU, o.Flows, o.Window, o.MessageBytes>>10))
	o.say("GOMAXPROCS %d: %s, sending gateway %.2f cores (%.3f per Gbit/s), receiving %.2f (%.3f), hosts %.2f, load %.2f → %.2f",
		procs, report.FormatBps(row.GoodputBps), row.Send.Cores, row.Send.CPUPerGbps, row.Recv.Cores, row.Recv.CPUPerGbps, row.HostsCores, row.LoadStart, row.LoadEnd)
	return row, nil
}

// waitErr waits d, or until a writer fails or ctx ends.
func waitErr(ctx context.Context, errs <-chan error, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case err := <-errs:
		return err
	case <-ctx.Done():
		select {
		case err := <-errs:
			return err
		default:
		}
		return ctx.Err()
	}
}

func cost(c0, c1 cpuTimes, secs, bps float64, prof string) GatewayCost {
	g := GatewayCost{Cores: (c1.total() - c0.total()).Seconds() / secs, Profile: prof}
	if g.Cores > 0 {
		g.KernelShare = (c1.sys - c0.sys).Seconds() / secs / g.Cores
	}
	if bps > 0 {
		g.CPUPerGbps = g.Cores / (bps / 1e9)
	}
	return g
}

// drain takes the receiving host's deliveries, so that its completions
// are reported (a host withholds DONE for deliveries not taken).
func drain(ctx context.Context, h *host.Host) {
	for {
		select {
		case _, ok := <-h.Received():
			if !ok {
				return
			}
		case <-ctx.Done():
			return
		}
	}
}

// write is flow i: WRITEs of o.MessageBytes into its own area of the
// receiving host's memory, o.Window in flight, each completion (end to
// end) counted into done.
func write(ctx context.Context, h *host.Host, o Options, i int, done *atomic.Uint64) error {
	octx, cancel := context.WithTimeout(ctx, 10*time.Second)
	f, err := h.OpenFlow(octx, regionB, "dst", host.FlowOptions{})
	cancel()
	if err != nil {
		return fmt.Errorf("relaycost: open flow %d: %w", i, err)
	}
	defer f.Close()
	buf := make([]byte, o.MessageBytes)
	addr := uint64(i) * uint64(o.MessageBytes)
	q := make([]*host.Pending, 0, o.Window)
	for ctx.Err() == nil {
		if len(q) == o.Window {
			if err := q[0].Wait(ctx); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("relaycost: flow %d: %w", i, err)
			}
			done.Add(uint64(o.MessageBytes))
			q = append(q[:0], q[1:]...)
		}
		p, err := f.Write(ctx, memoryKey, addr, buf)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("relaycost: flow %d: write: %w", i, err)
		}
		q = append(q, p)
	}
	return nil
}

// daemon is one gateway process.
type daemon struct {
	name  string
	cmd   *exec.Cmd
	lan   netip.AddrPort
	admin string
	log   string
	done  chan struct{}
}

func (d *daemon) pid() int { return d.cmd.Process.Pid }

// startGateways writes the certificates and configurations and starts the
// sending and the receiving gateway, and waits until each has the other
// up as its WAN peer. The daemons returned must be stopped, also with an
// error.
func startGateways(ctx context.Context, o Options, dir string, key *host.Key, wanMTU, procs int) ([]*daemon, error) {
	ca, err := pki.NewCA("mrgw relay-cost CA", time.Now().Add(-time.Hour), 48*time.Hour)
	if err != nil {
		return nil, err
	}
	if err := pki.WriteCertPEM(filepath.Join(dir, "ca.pem"), ca.Cert); err != nil {
		return nil, err
	}
	type gw struct {
		name, region string
		ip           netip.Addr
		ports        [5]netip.AddrPort // lan, wan, control, gossip, admin
	}
	gs := []*gw{{name: "euw-gw1", region: regionA, ip: ipSend}, {name: "use-gw1", region: regionB, ip: ipRecv}}
	var held []io.Closer
	defer func() {
		for _, h := range held {
			h.Close()
		}
	}()
	for _, g := range gs {
		id, err := ca.IssueIn(g.region, g.name, time.Now().Add(-time.Hour), 24*time.Hour)
		if err != nil {
			return nil, err
		}
		if err := id.WriteFiles(filepath.Join(dir, g.name+".pem"), filepath.Join(dir, g.name+"-key.pem")); err != nil {
			return nil, err
		}
		for i := range g.ports {
			a, h, err := lab.FreePort(g.ip)
			if err != nil {
				return nil, err
			}
			held = append(held, h...)
			g.ports[i] = a
		}
	}
	for _, h := range held {
		h.Close()
	}
	held = nil
	var ds []*daemon
	for k, g := range gs {
		other := gs[1-k]
		doc := map[string]any{
			"node": map[string]any{"name": g.name, "region": g.region},
			"lan": map[string]any{"listen": g.ports[0].String(), "congestion_control": "dc-aimd",
				"host_keys": []string{key.ID + ":" + base64.StdEncoding.EncodeToString(key.Secret)}},
			"wan": map[string]any{"planes": []any{map[string]any{"name": "wan", "local": g.ports[1].String()}},
				"mtu": wanMTU, "paths_per_peer": 16, "cipher": "aes-128-gcm"},
			"control": map[string]any{"listen": g.ports[2].String(),
				"tls": map[string]any{"ca_file": "ca.pem", "cert_file": g.name + ".pem", "key_file": g.name + "-key.pem"}},
			"gossip": map[string]any{"bind": g.ports[3].String(), "seeds": []string{other.ports[3].String()},
				"profile": "custom", "probe_interval": "500ms", "probe_timeout": "400ms", "suspicion_mult": 3, "gossip_interval": "50ms"},
			"limits": map[string]any{"memory_bytes": 512 << 20, "flow_credit_bytes": 8 << 20, "max_flows": 64},
			"admin":  map[string]any{"listen": g.ports[4].String()},
			"log":    map[string]any{"level": "warn"},
		}
		b, err := yaml.Marshal(doc)
		if err != nil {
			return ds, err
		}
		cfg := filepath.Join(dir, g.name+".yaml")
		if err := os.WriteFile(cfg, b, 0o600); err != nil {
			return ds, err
		}
		d, err := startDaemon(o, g.name, cfg, filepath.Join(dir, fmt.Sprintf("%s-gomaxprocs-%d.log", g.name, procs)), procs)
		if err != nil {
			return ds, err
		}
		d.lan, d.admin = g.ports[0], g.ports[4].String()
		ds = append(ds, d)
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for _, d := range ds {
		if err := d.waitPeerUp(wctx); err != nil {
			return ds, err
		}
	}
	return ds, nil
}

// startDaemon runs o.Gateway with --config cfg and GOMAXPROCS procs,
// killed if this process dies, its output into logPath.
func startDaemon(o Options, name, cfg, logPath string, procs int) (*daemon, error) {
	lf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(o.Gateway[0], append(o.Gateway[1:len(o.Gateway):len(o.Gateway)], "--config", cfg)...)
	cmd.Dir = filepath.Dir(cfg)
	env := append([]string{"GOMAXPROCS=" + strconv.Itoa(procs)}, o.GatewayEnv...)
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "GOMAXPROCS=") {
			env = append(env, e)
		}
	}
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		lf.Close()
		return nil, fmt.Errorf("relaycost: start %s: %w", name, err)
	}
	d := &daemon{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		lf.Close()
		close(d.done)
	}()
	return d, nil
}

// waitPeerUp waits until the daemon answers /status with one WAN peer up
// and says it is ready.
func (d *daemon) waitPeerUp(ctx context.Context) error {
	for {
		st, err := d.status(ctx)
		if err == nil && st.Ready && len(st.Peers) == 1 && st.Peers[0].State == "up" {
			return nil
		}
		select {
		case <-d.done:
			return fmt.Errorf("relaycost: %s exited at start; see %s", d.name, d.log)
		case <-ctx.Done():
			return fmt.Errorf("relaycost: %s has no WAN peer up (%v); see %s", d.name, ctx.Err(), d.log)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (d *daemon) stop() {
	_ = d.cmd.Process.Signal(syscall.SIGKILL)
	<-d.done
}

func (d *daemon) get(ctx context.Context, path string, timeout time.Duration) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+d.admin+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := (&http.Client{Timeout: timeout}).Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, fmt.Errorf("%s: %s", path, resp.Status)
	}
	return resp, nil
}

func (d *daemon) status(ctx context.Context) (*gateway.Status, error) {
	resp, err := d.get(ctx, "/status", 5*time.Second)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var st gateway.Status
	return &st, json.NewDecoder(resp.Body).Decode(&st)
}

// wanCounters are a gateway's WAN counters, summed over planes and peers:
// datagrams dropped by reason, DATA packets received that had been placed
// already, and datagrams the kernel refused to send.
type wanCounters struct {
	duplicates, sendFailed uint64
	drops                  map[string]uint64
}

// counters reads the daemon's WAN counters from its /metrics.
func (d *daemon) counters(ctx context.Context) (*wanCounters, error) {
	resp, err := d.get(ctx, "/metrics", 5*time.Second)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, err
	}
	c := &wanCounters{drops: map[string]uint64{}}
	for _, m := range fams["mrgw_peer_duplicates_received_total"].GetMetric() {
		c.duplicates += uint64(m.GetCounter().GetValue())
	}
	for _, m := range fams["mrgw_datagrams_send_failed_total"].GetMetric() {
		c.sendFailed += uint64(m.GetCounter().GetValue())
	}
	for _, m := range fams["mrgw_wan_datagrams_dropped_total"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "reason" {
				c.drops[l.GetValue()] += uint64(m.GetCounter().GetValue())
			}
		}
	}
	return c, nil
}

// dropsNote lists drops by reason in a stable order ("none" for none).
func dropsNote(drops map[string]uint64) string {
	reasons := slices.Sorted(maps.Keys(drops))
	if len(reasons) == 0 {
		return "none"
	}
	parts := make([]string, len(reasons))
	for i, r := range reasons {
		parts[i] = fmt.Sprintf("%s %d", r, drops[r])
	}
	return strings.Join(parts, ", ")
}

// profile writes a CPU profile of the daemon over the next d into path.
func (d *daemon) profile(ctx context.Context, dur time.Duration, path string) error {
	secs := max(int(dur.Round(time.Second)/time.Second), 1)
	resp, err := d.get(ctx, "/debug/pprof/profile?seconds="+strconv.Itoa(secs), dur+30*time.Second)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// cpuTimes is a process's CPU time, user and system.
type cpuTimes struct{ user, sys time.Duration }

func (c cpuTimes) total() time.Duration { return c.user + c.sys }

// clockTick is the kernel's USER_HZ, the unit of /proc/PID/stat's times
// (100 on every Linux architecture Go supports).
const clockTick = 100

// cpu reads the daemon's CPU time from /proc/PID/stat (zero if gone).
func (d *daemon) cpu() cpuTimes {
	c, _ := procCPU(d.pid())
	return c
}

// procCPU parses utime and stime (fields 14 and 15) of /proc/PID/stat.
func procCPU(pid int) (cpuTimes, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return cpuTimes{}, err
	}
	return parseStat(string(b))
}

// parseStat reads utime and stime from a /proc/PID/stat line. The command
// name (field 2) is in parentheses and may hold spaces and parentheses,
// so the fields are counted from the last ')'.
func parseStat(s string) (cpuTimes, error) {
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return cpuTimes{}, errors.New("relaycost: /proc/PID/stat: no command name")
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state): utime is field 14, stime 15.
	if len(f) < 13 {
		return cpuTimes{}, errors.New("relaycost: /proc/PID/stat: short")
	}
	u, err1 := strconv.ParseUint(f[11], 10, 64)
	k, err2 := strconv.ParseUint(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return cpuTimes{}, fmt.Errorf("relaycost: /proc/PID/stat: %w", err)
	}
	tick := time.Second / clockTick
	return cpuTimes{user: time.Duration(u) * tick, sys: time.Duration(k) * tick}, nil
}

// selfCPU is this process's CPU time (the hosts), from getrusage.
func selfCPU() cpuTimes {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return cpuTimes{user: time.Duration(ru.Utime.Nano()), sys: time.Duration(ru.Stime.Nano())}
}
