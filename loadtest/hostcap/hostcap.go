//go:build linux

// Package hostcap is `mrgw-lab loadtest hosts`: what a registered host
// costs a gateway. It runs one gateway daemon (`mrgw run`, its own process,
// so that its memory and descriptors are its own), registers hosts with it
// from generator processes (the host library, each host on its own
// loopback source; this process, and child processes running ServeWorker
// when there are more hosts than one process holds), keeps them
// registered and PINGing, and reads the daemon's RSS, Go heap, CPU, open
// descriptors and path sockets before and after, and the generator's own
// memory per host. Every address is in 127.0.0.0/8.
package hostcap

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/mrgw/mrgw/gateway"
	"github.com/mrgw/mrgw/host"
	"github.com/mrgw/mrgw/loadtest/lab"
	"github.com/mrgw/mrgw/tunnel/pki"
)

// Options configure a run. Zero values take the defaults in brackets.
type Options struct {
	Binary string // the mrgw daemon binary [required]
	Hosts  int    // hosts to register [1000]
	// Parallel is how many registrations run at once, shared out among
	// the generator processes [16]; SourceIPs how many loopback addresses the hosts spread
	// over (the gateway admits 20 a second and holds 32 unregistered per
	// source IP) [64].
	Parallel, SourceIPs int
	// PerProcess is the most hosts one generator process holds [2000]:
	// each holds five sockets (a listening socket and a path socket per
	// path), and a process may open 20,000 descriptors here. More hosts
	// are spread over child processes started with Worker.
	PerProcess int
	// Worker is the command that starts a generator process: it runs
	// ServeWorker on its standard input and output. Required when Hosts
	// is above PerProcess.
	Worker []string
	// Stall bounds the registrations by progress: a host whose
	// registration timed out is tried again as long as some host of its
	// process registered within Stall; after that it counts as failed
	// [1 min].
	Stall time.Duration
	// Settle is how long the hosts stay registered and PINGing before the
	// gateway is measured again [3 s].
	Settle time.Duration
	// Dir keeps the configuration and the daemon's log [a temporary
	// directory, removed].
	Dir      string
	Progress io.Writer
	// MemoryBytes is the gateway's limits.memory_bytes [256 MiB].
	MemoryBytes int64
	// DeadAfter is the gateway's wan.dead_after [10 s]: a host whose
	// paths have all been down this long is declared gone. At the default
	// of 500 ms a generator process starved for half a second (thousands
	// of hosts on a busy machine) lost some of its hosts' registrations
	// without the hosts noticing for their own DeadAfter; what is measured
	// here is what a registered host costs, not how fast a gateway drops
	// a dead one.
	DeadAfter time.Duration
	// HeapProfile, if set, is where the generator's heap profile is
	// written with every host registered (the hosts of this process only)
	// [none].
	HeapProfile string
}

// Result is what the hosts cost the gateway.
type Result struct {
	Hosts      int `json:"hosts"`
	Registered int `json:"registered"` // the gateway's /status hosts at the end
	// The daemon's resident memory and open descriptors before the first
	// host and with every host registered; path sockets from /status.
	RSSBeforeMB float64 `json:"rss_before_mb"`
	RSSAfterMB  float64 `json:"rss_after_mb"`
	FDsBefore   int     `json:"fds_before"`
	FDsAfter    int     `json:"fds_after"`
	PathSockets uint64  `json:"path_sockets"`
	// KiBPerHost and FDsPerHost divide the growth by the hosts
	// registered; HeapKiBPerHost divides that of the daemon's Go heap
	// (go_memstats_heap_alloc_bytes from its /metrics: the objects
	// allocated, garbage not yet collected included).
	KiBPerHost     float64 `json:"rss_kib_per_host"`
	HeapBeforeMB   float64 `json:"heap_before_mb"`
	HeapAfterMB    float64 `json:"heap_after_mb"`
	HeapKiBPerHost float64 `json:"heap_kib_per_host"`
	FDsPerHost     float64 `json:"fds_per_host"`
	RegisterSecs   float64 `json:"register_seconds"`
	// Each host's registration time, from its first attempt to its
	// success (retries included): median and 99th percentile.
	RegisterP50 float64 `json:"register_p50_seconds"`
	RegisterP99 float64 `json:"register_p99_seconds"`
	// Retries counts registrations tried again after a timeout while
	// others still completed; RegisterFails the hosts that never
	// registered, Failures them by reason (refused, no_gateway, error),
	// FailureExamples one message per reason.
	Retries         int               `json:"register_retries"`
	RegisterFails   int               `json:"register_failures"`
	Failures        map[string]int    `json:"failures_by_reason,omitempty"`
	FailureExamples map[string]string `json:"failure_examples,omitempty"`
	// RSSPeakMB is the daemon's peak resident memory (VmHWM) over the run,
	// registration storm included; BoundMB the most it may hold:
	// limits.memory_bytes (MemoryMB) plus gateway.MemoryOverhead plus
	// gateway.MemoryPerHost per host of lan.max_hosts, the Go memory
	// limit `mrgw run` sets. Within says RSSPeakMB ≤ BoundMB.
	RSSPeakMB float64 `json:"rss_peak_mb"`
	MemoryMB  float64 `json:"memory_mb"`
	BoundMB   float64 `json:"bound_mb"`
	Within    bool    `json:"within_bound"`
	// The generator's side, apart from the daemon's: its processes, and
	// the growth of their Go heap in use (after a collection) and of their
	// resident memory from before the first host to every host
	// registered, per host registered.
	Processes         int     `json:"generator_processes"`
	GenHeapKiBPerHost float64 `json:"generator_heap_kib_per_host"`
	GenRSSKiBPerHost  float64 `json:"generator_rss_kib_per_host"`
	// GatewayIdleCPU is the daemon's CPU time over Settle, in cores: what
	// the registered hosts cost it while they only PING.
	GatewayIdleCPU float64 `json:"gateway_idle_cpu_cores"`
	// The hosts' counters when the gateway was measured: registrations
	// accepted (more than Hosts when hosts lost their gateway and
	// registered again), connections established, handshakes that failed,
	// and gateways given up as silent.
	HostRegistrations   uint64 `json:"host_registrations"`
	HostConnects        uint64 `json:"host_connects"`
	HostConnectFailures uint64 `json:"host_connect_failures"`
	HostSilentGateways  uint64 `json:"host_silent_gateways"`
}

func (o *Options) fill() error {
	if o.Binary == "" {
		return errors.New("hostcap: the mrgw binary is required")
	}
	if o.Hosts <= 0 {
		o.Hosts = 1000
	}
	if o.Parallel <= 0 {
		o.Parallel = 16
	}
	if o.SourceIPs <= 0 {
		o.SourceIPs = 64
	}
	if o.PerProcess <= 0 {
		o.PerProcess = 2000
	}
	if o.Hosts > o.PerProcess && len(o.Worker) == 0 {
		return fmt.Errorf("hostcap: %d hosts are more than one process holds (%d): a worker command is required", o.Hosts, o.PerProcess)
	}
	if o.Stall <= 0 {
		o.Stall = time.Minute
	}
	if o.Settle <= 0 {
		o.Settle = 3 * time.Second
	}
	if o.MemoryBytes <= 0 {
		o.MemoryBytes = 256 << 20
	}
	if o.DeadAfter <= 0 {
		o.DeadAfter = 10 * time.Second
	}
	return nil
}

func (o *Options) say(format string, a ...any) {
	if o.Progress != nil {
		fmt.Fprintf(o.Progress, format+"\n", a...)
	}
}

// Run starts the gateway, registers the hosts and measures.
func Run(ctx context.Context, o Options) (*Result, error) {
	if err := o.fill(); err != nil {
		return nil, err
	}
	dir := o.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "mrgw-hostcap-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	key := &host.Key{ID: "hostcap", Secret: make([]byte, 32)}
	if _, err := rand.Read(key.Secret); err != nil {
		return nil, err
	}
	gw, err := startGateway(ctx, dir, o, key)
	if err != nil {
		return nil, err
	}
	defer gw.stop()
	res := &Result{Hosts: o.Hosts}
	res.RSSBeforeMB, res.FDsBefore = gw.usage()
	res.HeapBeforeMB = gw.heapAlloc(ctx)
	o.say("gateway up (pid %d): RSS %.1f MB, %d descriptors; registering %d hosts", gw.cmd.Process.Pid, res.RSSBeforeMB, res.FDsBefore, o.Hosts)

	base := Job{Gateway: gw.lan, KeyID: key.ID, Secret: key.Secret, SourceIPs: o.SourceIPs, Parallel: o.Parallel, Stall: o.Stall}
	t0 := time.Now()
	var reps []*Report
	var hostStats func() (host.Stats, error)
	if o.Hosts <= o.PerProcess {
		j := base
		j.Count = o.Hosts
		g := &generator{job: j, progress: func(n int) { o.say("  %d hosts registered (%.0f s)", n, time.Since(t0).Seconds()) }}
		rep, err := g.run(ctx)
		defer g.close()
		if err != nil {
			return nil, err
		}
		reps = append(reps, rep)
		hostStats = func() (host.Stats, error) { return g.stats(), nil }
		if o.HeapProfile != "" {
			if err := writeHeapProfile(o.HeapProfile); err != nil {
				return nil, err
			}
		}
	} else {
		ws, err := startWorkers(ctx, o, base, t0)
		defer ws.stop()
		if err != nil {
			return nil, err
		}
		reps = ws.reports
		hostStats = func() (host.Stats, error) { return ws.stats(ctx) }
	}
	res.RegisterSecs = time.Since(t0).Seconds()
	res.Processes = len(reps)
	merge(res, reps)
	o.say("registrations done in %.1f s (%d failed, %d retried): p50 %.2f s, p99 %.2f s; settling %v",
		res.RegisterSecs, res.RegisterFails, res.Retries, res.RegisterP50, res.RegisterP99, o.Settle)
	for why, n := range res.Failures {
		o.say("  %d failed: %s (%s)", n, why, res.FailureExamples[why])
	}
	o.say("generator (%d processes): %.1f KiB of heap, %.1f KiB resident per host", res.Processes, res.GenHeapKiBPerHost, res.GenRSSKiBPerHost)
	cpu0, t1 := gw.cpuSeconds(), time.Now()
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(o.Settle):
	}
	res.GatewayIdleCPU = (gw.cpuSeconds() - cpu0) / time.Since(t1).Seconds()
	st, err := gw.status(ctx)
	if err != nil {
		return nil, err
	}
	res.Registered, res.PathSockets = st.Hosts, st.PathSockets
	hs, err := hostStats()
	if err != nil {
		return nil, err
	}
	res.HostRegistrations, res.HostConnects, res.HostConnectFailures, res.HostSilentGateways = hs.Registrations, hs.Connects, hs.ConnectFailures, hs.SilentGateways
	o.say("hosts: %d registrations, %d connections, %d failed handshakes, %d gateways given up as silent",
		hs.Registrations, hs.Connects, hs.ConnectFailures, hs.SilentGateways)
	res.RSSAfterMB, res.FDsAfter = gw.usage()
	res.HeapAfterMB = gw.heapAlloc(ctx)
	if res.Registered > 0 {
		res.KiBPerHost = (res.RSSAfterMB - res.RSSBeforeMB) * 1024 / float64(res.Registered)
		res.HeapKiBPerHost = (res.HeapAfterMB - res.HeapBeforeMB) * 1024 / float64(res.Registered)
		res.FDsPerHost = float64(res.FDsAfter-res.FDsBefore) / float64(res.Registered)
	}
	o.say("gateway CPU while the hosts idled: %.3f of a core", res.GatewayIdleCPU)
	o.say("%d hosts registered: RSS %.1f → %.1f MB (%.1f KiB per host), heap %.1f → %.1f MiB (%.1f KiB per host), descriptors %d → %d (%.3f per host), %d path sockets",
		res.Registered, res.RSSBeforeMB, res.RSSAfterMB, res.KiBPerHost, res.HeapBeforeMB, res.HeapAfterMB, res.HeapKiBPerHost,
		res.FDsBefore, res.FDsAfter, res.FDsPerHost, res.PathSockets)
	res.RSSPeakMB = gw.peakRSS()
	res.MemoryMB = float64(o.MemoryBytes) / (1 << 20)
	res.BoundMB = float64(o.MemoryBytes+gateway.MemoryOverhead+gateway.MemoryPerHost*int64(maxHosts(o))) / (1 << 20)
	res.Within = res.RSSPeakMB <= res.BoundMB
	o.say("peak RSS %.1f MiB, bound %.1f MiB (limits.memory_bytes %.0f MiB + %d MiB + %d KiB × %d hosts): within %v",
		res.RSSPeakMB, res.BoundMB, res.MemoryMB, gateway.MemoryOverhead>>20, gateway.MemoryPerHost>>10, maxHosts(o), res.Within)
	return res, nil
}

// merge adds the generator processes' reports to res.
func merge(res *Result, reps []*Report) {
	var secs []float64
	var heap, rss int64
	ok := 0
	for _, r := range reps {
		ok += r.Registered
		res.Retries += r.Retries
		secs = append(secs, r.RegisterSecs...)
		heap += int64(r.HeapAfter) - int64(r.HeapBefore)
		rss += int64(r.RSSAfter) - int64(r.RSSBefore)
		for why, n := range r.Failures {
			if res.Failures == nil {
				res.Failures, res.FailureExamples = map[string]int{}, map[string]string{}
			}
			res.Failures[why] += n
			res.RegisterFails += n
			if _, ok := res.FailureExamples[why]; !ok {
				res.FailureExamples[why] = r.Examples[why]
			}
		}
	}
	sort.Float64s(secs)
	res.RegisterP50, res.RegisterP99 = quantile(secs, 0.5), quantile(secs, 0.99)
	if ok > 0 {
		res.GenHeapKiBPerHost = float64(heap) / 1024 / float64(ok)
		res.GenRSSKiBPerHost = float64(rss) / 1024 / float64(ok)
	}
}

// quantile is the q-quantile of sorted xs (nearest rank; 0 if empty).
func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(xs)))) - 1
	return xs[min(max(i, 0), len(xs)-1)]
}

// daemon is the gateway process.
type daemon struct {
	cmd   *exec.Cmd
	lan   netip.AddrPort
	admin string
	done  chan struct{}
}

func startGateway(ctx context.Context, dir string, o Options, key *host.Key) (*daemon, error) {
	ca, err := pki.NewCA("mrgw hostcap CA", time.Now().Add(-time.Hour), 48*time.Hour)
	if err != nil {
		return nil, err
	}
	if err := pki.WriteCertPEM(filepath.Join(dir, "ca.pem"), ca.Cert); err != nil {
		return nil, err
	}
	id, err := ca.IssueIn("r1", "gw1", time.Now().Add(-time.Hour), 24*time.Hour)
	if err != nil {
		return nil, err
	}
	if err := id.WriteFiles(filepath.Join(dir, "gw1.pem"), filepath.Join(dir, "gw1-key.pem")); err != nil {
		return nil, err
	}
	lo := netip.MustParseAddr("127.0.0.1")
	var ports [5]netip.AddrPort
	for i := range ports {
		a, held, err := lab.FreePort(lo)
		if err != nil {
			return nil, err
		}
		for _, h := range held {
			h.Close()
		}
		ports[i] = a
	}
	doc := map[string]any{
		"node": map[string]any{"name": "gw1", "region": "r1"},
		"lan": map[string]any{"listen": ports[0].String(), "congestion_control": "dc-aimd", "max_hosts": maxHosts(o),
			"host_keys": []string{key.ID + ":" + base64.StdEncoding.EncodeToString(key.Secret)}},
		"wan": map[string]any{"planes": []any{map[string]any{"name": "p0", "local": ports[1].String()}}, "dead_after": o.DeadAfter.String()},
		"control": map[string]any{"listen": ports[2].String(),
			"tls": map[string]any{"ca_file": "ca.pem", "cert_file": "gw1.pem", "key_file": "gw1-key.pem"}},
		"gossip": map[string]any{"bind": ports[3].String()},
		"admin":  map[string]any{"listen": ports[4].String()},
		"log":    map[string]any{"level": "warn"},
		"limits": map[string]any{"memory_bytes": o.MemoryBytes},
	}
	b, err := yaml.Marshal(doc)
	if err != nil {
		return nil, err
	}
	cfgPath := filepath.Join(dir, "gw1.yaml")
	if err := os.WriteFile(cfgPath, b, 0o600); err != nil {
		return nil, err
	}
	logf, err := os.Create(filepath.Join(dir, "gw1.log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(o.Binary, "run", "--config", cfgPath)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, err
	}
	d := &daemon{cmd: cmd, lan: ports[0], admin: ports[4].String(), done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		logf.Close()
		close(d.done)
	}()
	// Up when /status answers.
	for {
		if _, err := d.status(ctx); err == nil {
			return d, nil
		}
		select {
		case <-d.done:
			b, _ := os.ReadFile(filepath.Join(dir, "gw1.log"))
			return nil, fmt.Errorf("hostcap: the gateway exited at start: %s", strings.TrimSpace(string(b[max(len(b)-2000, 0):])))
		case <-ctx.Done():
			d.stop()
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (d *daemon) stop() {
	_ = d.cmd.Process.Signal(syscall.SIGKILL)
	<-d.done
}

func (d *daemon) status(ctx context.Context) (*gateway.Status, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+d.admin+"/status", nil)
	if err != nil {
		return nil, err
	}
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var st gateway.Status
	return &st, json.NewDecoder(resp.Body).Decode(&st)
}

// cpuSeconds is the daemon's user and system CPU time so far.
func (d *daemon) cpuSeconds() float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", d.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	// The fields after the command name (which may hold spaces): state is
	// the first, utime the 12th and stime the 13th, in clock ticks (100 a
	// second on Linux).
	i := strings.LastIndexByte(string(b), ')')
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (u + st) / 100
}

// heapAlloc is the daemon's go_memstats_heap_alloc_bytes, in MiB (0 if
// its /metrics does not answer).
func (d *daemon) heapAlloc(ctx context.Context) float64 {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+d.admin+"/metrics", nil)
	if err != nil {
		return 0
	}
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		// go_memstats_heap_alloc_bytes{gateway="gw1",region="r1"} 1.9e+07
		if v, ok := strings.CutPrefix(sc.Text(), "go_memstats_heap_alloc_bytes"); ok && (v[0] == '{' || v[0] == ' ') {
			f := strings.Fields(v)
			b, _ := strconv.ParseFloat(f[len(f)-1], 64)
			return b / (1 << 20)
		}
	}
	return 0
}

// maxHosts is the gateway's lan.max_hosts.
func maxHosts(o Options) int { return o.Hosts + 16 }

// peakRSS is the daemon's peak resident memory (VmHWM), in MiB.
func (d *daemon) peakRSS() float64 { return procStatusKB(d.cmd.Process.Pid, "VmHWM:") / 1024 }

// usage is the daemon's resident memory (MB) and open descriptors.
func (d *daemon) usage() (rssMB float64, fds int) {
	pid := d.cmd.Process.Pid
	if f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid)); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
				kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
				rssMB = kb / 1024
			}
		}
		f.Close()
	}
	if ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid)); err == nil {
		fds = len(ents)
	}
	return rssMB, fds
}

// selfUsage is this process's Go heap in use and its resident memory, in
// bytes, after a collection that returns the freed memory to the system
// (the garbage of hosts whose registration was tried again counts not).
func selfUsage() (heap, rss uint64) {
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse, uint64(procStatusKB(os.Getpid(), "VmRSS:") * 1024)
}

func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	runtime.GC()
	if err := pprof.WriteHeapProfile(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// procStatusKB reads a kB field of /proc/pid/status (0 if absent).
func procStatusKB(pid int, field string) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, field); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb
		}
	}
	return 0
}
