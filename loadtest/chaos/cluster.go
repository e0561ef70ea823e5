//go:build linux

package chaos

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"github.com/mrgw/mrgw/loadtest/lab"
	"io"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/mrgw/mrgw/gateway"
	"github.com/mrgw/mrgw/netem"
	"github.com/mrgw/mrgw/tunnel/pki"

	"github.com/mrgw/mrgw/units"
)

// Regions of the chaos deployment; each is at one site of the emulator.
const (
	RegionA = "eu-west"
	RegionB = "us-east"
)

// Loopback addresses: the scenario keeps to 127.13.0.0/24 so that it never
// shares an address with the in-process labs of other tests (127.0.0.x).
var (
	emuIP   = netip.MustParseAddr("127.13.0.200")
	relayIP = netip.MustParseAddr("127.13.0.201")
	junkIP  = netip.MustParseAddr("127.13.0.250")
)

// gwProc is one gateway daemon: its addresses, files and current process.
type gwProc struct {
	name, region string
	ip           netip.Addr
	lan, wan     netip.AddrPort
	ctl, gossip  netip.AddrPort
	admin        netip.AddrPort
	standIn      netip.AddrPort // the emulator's stand-in for wan, seen by the other region
	relay        *gossipRelay
	cfgPath      string
	logPath      string
	bin          string   // the binary it runs ["": the cluster's]
	args         []string // more arguments of `mrgw run`

	mu       sync.Mutex
	cmd      *exec.Cmd
	exited   chan struct{}
	exitErr  error
	killed   bool // the harness killed it: its exit is expected
	starts   int
	unexpect atomic.Int64 // exits the harness did not cause
}

// cluster is the deployment: emulator, relays, four gateway processes.
type cluster struct {
	o      *Options
	dir    string
	bin    string
	emu    *netem.Emulator
	cut    atomic.Bool // the gossip partition switch
	gws    []*gwProc   // euw-gw1, euw-gw2, use-gw1, use-gw2
	byName map[string]*gwProc
	cancel context.CancelFunc
}

func gwIP(region string, i int) netip.Addr {
	b := byte(11 + i)
	if region == RegionB {
		b = byte(21 + i)
	}
	return netip.AddrFrom4([4]byte{127, 13, 0, b})
}

// regionOf names the region of a gateway IP ("" for anything else).
func regionOf(a netip.Addr) string {
	if !a.Is4() {
		return ""
	}
	b := a.As4()
	if b[0] != 127 || b[1] != 13 || b[2] != 0 {
		return ""
	}
	switch b[3] {
	case 11, 12:
		return RegionA
	case 21, 22:
		return RegionB
	}
	return ""
}

// newCluster writes certificates and configurations and starts the
// emulator and the relays; the gateways are started by start.
func newCluster(ctx context.Context, o *Options, dir, bin string) (_ *cluster, err error) {
	c := &cluster{o: o, dir: dir, bin: bin, byName: map[string]*gwProc{}}
	defer func() {
		if err != nil {
			c.close()
		}
	}()
	ectx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	c.emu, err = netem.New(ectx, netem.Config{
		Planes: o.Planes, Seed: o.Seed + 1,
		Link: netem.LinkConfig{Delay: o.RTT / 2, Rate: o.PlaneRateBps, QueueBytes: int(uint64(units.BitRate(o.PlaneRateBps).Bytes()) / 50),
			ECNThreshold: max(int(uint64(units.BitRate(o.PlaneRateBps).Bytes())*2/1000), 3000)},
		Bind: emuIP, MaxDatagram: 4096 + 256, MaxMappings: 8192,
	})
	if err != nil {
		return nil, fmt.Errorf("chaos: emulator: %w", err)
	}
	var held []io.Closer
	defer func() {
		for _, h := range held {
			h.Close()
		}
	}()
	for _, reg := range []string{RegionA, RegionB} {
		for i := range 2 {
			p := &gwProc{region: reg, ip: gwIP(reg, i), args: o.OldArgs}
			p.name = fmt.Sprintf("%s-gw%d", map[string]string{RegionA: "euw", RegionB: "use"}[reg], i+1)
			for _, a := range []*netip.AddrPort{&p.lan, &p.wan, &p.ctl, &p.gossip, &p.admin} {
				var h []io.Closer
				if *a, h, err = lab.FreePort(p.ip); err != nil {
					return nil, err
				}
				held = append(held, h...)
			}
			site := netem.SiteA
			if reg == RegionB {
				site = netem.SiteB
			}
			if p.standIn, err = c.emu.Expose(site, p.wan); err != nil {
				return nil, fmt.Errorf("chaos: expose %s: %w", p.name, err)
			}
			if p.relay, err = newGossipRelay(relayIP, reg, p.gossip, &c.cut, regionOf); err != nil {
				return nil, err
			}
			p.cfgPath = filepath.Join(dir, p.name+".yaml")
			p.logPath = filepath.Join(dir, p.name+".log")
			c.gws = append(c.gws, p)
			c.byName[p.name] = p
		}
	}
	if err := c.certs(); err != nil {
		return nil, err
	}
	for _, p := range c.gws {
		if err := c.writeConfig(p, variantBase); err != nil {
			return nil, err
		}
	}
	_ = ctx
	return c, nil
}

func (c *cluster) certs() error {
	now := time.Now().Add(-time.Hour)
	ca, err := pki.NewCA("mrgw chaos CA", now, 48*time.Hour)
	if err != nil {
		return err
	}
	if err := pki.WriteCertPEM(filepath.Join(c.dir, "ca.pem"), ca.Cert); err != nil {
		return err
	}
	for _, p := range c.gws {
		id, err := ca.IssueIn(p.region, p.name, now, 24*time.Hour)
		if err != nil {
			return err
		}
		if err := id.WriteFiles(filepath.Join(c.dir, p.name+".pem"), filepath.Join(c.dir, p.name+"-key.pem")); err != nil {
			return err
		}
	}
	return nil
}

// Configuration variants written for SIGHUP faults.
type cfgVariant int

const (
	variantBase     cfgVariant = iota
	variantRotate              // wan.key_rotation 1s: every session rekeys each second
	variantGood                // live keys changed: limits, scheduler weights, wan.max_rate_bps
	variantBadParse            // not YAML
	variantBadValue            // valid YAML, invalid value (wan.key_rotation: 5)
	variantBadLive             // valid, but changes a restart-only key (wan.mtu)
)

var gossipKey = "bHYDV+/5GBweqpewk0dctiqWKF+/evzgcq7YC811nps="

// writeConfig writes p's configuration file in a variant.
func (c *cluster) writeConfig(p *gwProc, v cfgVariant) error {
	if v == variantBadParse {
		return writeFileAtomic(p.cfgPath, []byte("node: {name: "+p.name+"\nwan: [this is not: yaml\n"))
	}
	var remote []any
	var seeds []string
	for _, q := range c.gws {
		if q != p {
			seeds = append(seeds, q.relay.addr.String())
		}
		if q.region == p.region {
			continue
		}
		remote = append(remote, map[string]any{"name": q.name, "control": q.ctl.String(), "wan": []string{q.standIn.String()}})
	}
	other := RegionB
	if p.region == RegionB {
		other = RegionA
	}
	rot := "10m"
	if v == variantRotate {
		rot = "1s"
	}
	mtu := 4096
	if v == variantBadLive {
		mtu = 4000
	}
	classes := []any{map[string]any{"name": "default", "weight": 1}, map[string]any{"name": "bulk", "weight": 2}}
	memory, credit := 256<<20, 4<<20
	wanRate := 0
	if v == variantGood {
		classes = []any{map[string]any{"name": "default", "weight": 3}, map[string]any{"name": "bulk", "weight": 1}}
		memory, credit = 192<<20, 3<<20
		wanRate = 1 << 30
	}
	wan := map[string]any{
		"planes":             []any{map[string]any{"name": "wan", "local": p.wan.String()}},
		"paths_per_peer":     c.o.Paths,
		"mtu":                mtu,
		"congestion_control": "longrtt-htcp",
		"key_rotation":       rot,
		"max_rate_bps":       wanRate,
		"cipher":             "aes-128-gcm",
	}
	if v == variantBadValue {
		wan["key_rotation"] = 5 // a bare number: refused (would be 5 ns)
	}
	doc := map[string]any{
		"node": map[string]any{"name": p.name, "region": p.region},
		"lan":  map[string]any{"listen": p.lan.String(), "congestion_control": "dc-aimd", "host_keys": []string{hostKeyEntry()}},
		"wan":  wan,
		"control": map[string]any{
			"listen": p.ctl.String(),
			"tls":    map[string]any{"ca_file": "ca.pem", "cert_file": p.name + ".pem", "key_file": p.name + "-key.pem"},
		},
		"regions": []any{map[string]any{"name": other, "rtt_hint": c.o.RTT.String(), "gateways": remote}},
		"gossip": map[string]any{
			"bind": p.gossip.String(), "advertise": p.relay.addr.String(), "seeds": seeds,
			"keyring": []string{gossipKey},
			"profile": "custom", "probe_interval": c.o.GossipProbe.String(), "probe_timeout": (c.o.GossipProbe * 4 / 5).String(),
			"suspicion_mult": 3, "gossip_interval": "50ms",
		},
		"limits":    map[string]any{"memory_bytes": memory, "flow_credit_bytes": credit, "max_flows": 1024},
		"scheduler": map[string]any{"default_class": "default", "classes": classes},
		"admin":     map[string]any{"listen": p.admin.String()},
		"log":       map[string]any{"level": cmp.Or(c.o.LogLevel, "info"), "format": "text"},
	}
	b, err := yaml.Marshal(doc)
	if err != nil {
		return err
	}
	head := fmt.Sprintf("# mrgw-lab loadtest chaos: gateway %s of %s (variant %d)\n", p.name, p.region, v)
	return writeFileAtomic(p.cfgPath, append([]byte(head), b...))
}

func writeFileAtomic(path string, b []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// start runs p's daemon: `mrgw run --config FILE` in its own process
// group, killed if this process dies (Pdeathsig), output appended to its
// log file.
func (c *cluster) start(p *gwProc) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		return fmt.Errorf("chaos: %s already running", p.name)
	}
	lf, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	p.starts++
	fmt.Fprintf(lf, "=== chaos: start %d of %s at %s\n", p.starts, p.name, time.Now().Format(time.RFC3339Nano))
	bin := c.bin
	if p.bin != "" {
		bin = p.bin
	}
	fmt.Fprintf(lf, "=== chaos: binary %s %v\n", bin, p.args)
	cmd := exec.Command(bin, append([]string{"run", "--config", p.cfgPath, "--drain-timeout", "2s"}, p.args...)...)
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		lf.Close()
		return fmt.Errorf("chaos: start %s: %w", p.name, err)
	}
	exited := make(chan struct{})
	p.cmd, p.exited, p.killed = cmd, exited, false
	go func() {
		err := cmd.Wait()
		lf.Close()
		p.mu.Lock()
		p.exitErr = err
		if !p.killed {
			p.unexpect.Add(1)
		}
		p.cmd = nil
		p.mu.Unlock()
		close(exited)
	}()
	return nil
}

// kill9 sends SIGKILL to p's process group and waits for it to exit.
func (c *cluster) kill9(p *gwProc) error {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	if cmd == nil {
		p.mu.Unlock()
		return fmt.Errorf("chaos: %s is not running", p.name)
	}
	p.killed = true
	pid := cmd.Process.Pid
	p.mu.Unlock()
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	select {
	case <-exited:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("chaos: %s (pid %d) did not exit 10 s after SIGKILL", p.name, pid)
	}
}

// stop sends SIGTERM to p's daemon (a graceful drain: its flows move to
// the region's other gateway) and waits for it to exit, at most d.
func (c *cluster) stop(p *gwProc, d time.Duration) error {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	if cmd == nil {
		p.mu.Unlock()
		return fmt.Errorf("chaos: %s is not running", p.name)
	}
	p.killed = true
	pid := cmd.Process.Pid
	p.mu.Unlock()
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
		return nil
	case <-time.After(d):
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		<-exited
		return fmt.Errorf("chaos: %s (pid %d) did not exit %v after SIGTERM", p.name, pid, d)
	}
}

// signal sends sig to p's daemon.
func (c *cluster) signal(p *gwProc, sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return fmt.Errorf("chaos: %s is not running", p.name)
	}
	return p.cmd.Process.Signal(sig)
}

func (p *gwProc) running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd != nil
}

var httpClient = &http.Client{Timeout: 2 * time.Second}

// status fetches p's /status.
func (p *gwProc) status(ctx context.Context) (*gateway.Status, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.admin.String()+"/status", nil)
	if err != nil {
		return nil, err
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var st gateway.Status
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return nil, err
	}
	return &st, nil
}

// metric sums the samples of a Prometheus counter on p's /metrics whose
// labels contain every given "key=\"value\"" pair.
func (p *gwProc) metric(ctx context.Context, name string, labels ...string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.admin.String()+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var sum float64
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name) {
			continue
		}
		rest := line[len(name):]
		if rest == "" || (rest[0] != '{' && rest[0] != ' ') {
			continue
		}
		ok := true
		for _, l := range labels {
			if !strings.Contains(rest, l) {
				ok = false
			}
		}
		if !ok {
			continue
		}
		f := strings.Fields(rest[strings.LastIndexByte(rest, '}')+1:])
		if len(f) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err == nil {
			sum += v
		}
	}
	return sum, sc.Err()
}

// ready reports whether p answers /status with gossip joined, WAN
// connections up to both gateways of the other region and gossip seeing
// both alive (routing follows gossip: a WAN connection is not enough).
func (c *cluster) ready(ctx context.Context, p *gwProc) bool {
	st, err := p.status(ctx)
	if err != nil || !st.Ready || len(st.Peers) < 2 {
		return false
	}
	for _, q := range st.Peers {
		if q.State != "up" {
			return false
		}
	}
	alive := map[string]bool{}
	for _, m := range st.Members {
		alive[m.Name] = m.State == "alive"
	}
	for _, q := range c.gws {
		if q.region != p.region && !alive[q.name] {
			return false
		}
	}
	return true
}

// waitReady waits until every running gateway is ready, at most d.
func (c *cluster) waitReady(ctx context.Context, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		var notReady []string
		for _, p := range c.gws {
			if !p.running() {
				notReady = append(notReady, p.name+" (not running)")
				continue
			}
			if !c.ready(ctx, p) {
				notReady = append(notReady, p.name)
			}
		}
		if len(notReady) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("chaos: gateways not ready after %v: %s", d, strings.Join(notReady, ", "))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// hostGateways are the LAN addresses of a region's pair.
func (c *cluster) hostGateways(region string) []netip.AddrPort {
	var out []netip.AddrPort
	for _, p := range c.gws {
		if p.region == region {
			out = append(out, p.lan)
		}
	}
	return out
}

// partition cuts or heals the gossip between the regions.
func (c *cluster) partition(on bool) {
	c.cut.Store(on)
	if on {
		for _, p := range c.gws {
			p.relay.cutTCP()
		}
	}
}

// logTail returns the last n lines of p's log.
func (p *gwProc) logTail(n int) string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func (c *cluster) close() {
	for _, p := range c.gws {
		if p.running() {
			_ = c.kill9(p)
		}
		if p.relay != nil {
			p.relay.Close()
		}
	}
	if c.emu != nil {
		c.emu.Close()
	}
	if c.cancel != nil {
		c.cancel()
	}
}
