//go:build linux

// Package chaos is `mrgw-lab loadtest chaos`: real gateway daemons (`mrgw run`,
// one process each, two regions of two) and hosts on both sides move
// checked messages while faults are injected one at a time at seeded
// random times: a plane lost and restored, a gateway killed with SIGKILL
// and restarted, the gossip between the regions partitioned and healed,
// live key rotation, SIGHUP with a good and with a bad file, a host
// process killed with SIGKILL and restarted, and floods of junk datagrams
// at every listening socket. After every fault it checks that no message
// was lost, duplicated or corrupted and that every flow delivers again,
// and it reports the worst stall per fault type.
//
// Everything runs on loopback, in 127.13.0.0/24: the WAN of every gateway
// crosses the link emulator (netem) in this process, and every gossip
// packet crosses a relay in this process (gossip.advertise and the seeds
// point at it), which is what the partition cuts.
package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/mrgw/mrgw/units"

	"github.com/mrgw/mrgw/host"
	"github.com/mrgw/mrgw/internal/sleep"
)

// Fault types.
const (
	FaultPlaneLoss   = "plane-loss"       // an emulated plane fails, then is restored
	FaultGatewayKill = "gateway-kill"     // SIGKILL a gateway process, restart it
	FaultPartition   = "gossip-partition" // cut the gossip between the regions, heal it
	FaultKeyRotation = "key-rotation"     // SIGHUP a gateway to wan.key_rotation 1s, back after a while
	FaultHUPGood     = "sighup-good"      // SIGHUP with changed live keys, then back
	FaultHUPBad      = "sighup-bad"       // SIGHUP with a file that must be refused
	FaultHostKill    = "host-kill"        // SIGKILL a host process, restart it
	FaultJunk        = "junk-flood"       // random datagrams at every listening socket
	FaultUpgrade     = "rolling-upgrade"  // every gateway in turn: SIGTERM (drain), binary replaced, started, ready before the next
)

// AllFaults are the fault types, in report order.
var AllFaults = []string{FaultPlaneLoss, FaultGatewayKill, FaultPartition, FaultKeyRotation, FaultHUPGood, FaultHUPBad, FaultHostKill, FaultJunk, FaultUpgrade}

// Options configure a run. Zero values take the defaults in brackets.
type Options struct {
	Duration time.Duration // of the fault phase [3m]
	Seed     uint64        // fault order, times and targets [1]
	Faults   []string      // fault types to inject [AllFaults]
	// Binary is the mrgw daemon binary that runs the gateways (`run`)
	// [built from the module: go build ./cmd/mrgw].
	Binary string
	// UpgradeBinary is the mrgw binary a rolling upgrade replaces each
	// gateway's with, one gateway at a time [Binary]; later starts run it.
	// OldArgs are more arguments of `mrgw run` for the gateways a rolling
	// upgrade has not replaced yet: ["--wire-versions", "1"] runs them as
	// the release before wire version 2, so that both versions carry
	// traffic side by side during the upgrade.
	UpgradeBinary string
	OldArgs       []string
	// LabBinary is the mrgw-lab binary that runs the host processes
	// (ChildArgs) [built from the module: go build ./cmd/mrgw-lab].
	LabBinary string
	// HostDeadAfter is host.Config.DeadAfter of every host [the host
	// library's default].
	HostDeadAfter time.Duration
	Planes        int           // emulated planes [4]
	RTT           time.Duration // between the regions [20ms]
	PlaneRateBps  uint64        // per plane and direction [25 Mbit/s]
	Paths         int           // wan.paths_per_peer [8]
	GossipProbe   time.Duration // gossip.probe_interval [500ms]
	Flows         int           // in-process writers per direction [3]
	MessageSize   int           // bytes [32 KiB]
	Window        int           // messages in flight per writer [8]
	JunkPerSocket int           // datagrams per socket per flood [500]
	// RecoverBound bounds the wait for flows to deliver again after a
	// fault is cleared [30s]; Settle is the least time after it [2s].
	RecoverBound, Settle time.Duration
	// Progress receives a line per event [discard]; Logger the hosts' logs.
	Progress io.Writer
	Logger   *slog.Logger
	// KeepDir keeps the directory of configurations and logs.
	KeepDir bool
	// LogLevel is the gateways' log.level and the level of the host
	// process's log (a-proc.log) and, unless Logger is set, of the
	// in-process hosts' log (hosts.log in the directory) ["": info for
	// the gateways, warn for the host process, no in-process host log].
	// "debug" traces every flow opening, path transition and WAN
	// connection loss, for reading a stall out of the logs (--keep).
	LogLevel string
}

func (o *Options) defaults() error {
	def := func(p *time.Duration, d time.Duration) {
		if *p == 0 {
			*p = d
		}
	}
	def(&o.Duration, 3*time.Minute)
	def(&o.RTT, 20*time.Millisecond)
	def(&o.GossipProbe, 500*time.Millisecond)
	def(&o.RecoverBound, 30*time.Second)
	def(&o.Settle, 2*time.Second)
	if o.Seed == 0 {
		o.Seed = 1
	}
	if len(o.Faults) == 0 {
		o.Faults = AllFaults
	}
	for _, f := range o.Faults {
		if !slices.Contains(AllFaults, f) {
			return fmt.Errorf("chaos: unknown fault %q (known: %s)", f, strings.Join(AllFaults, ", "))
		}
	}
	if o.Planes == 0 {
		o.Planes = 4
	}
	if o.PlaneRateBps == 0 {
		o.PlaneRateBps = 25e6
	}
	if o.Paths == 0 {
		o.Paths = 8
	}
	if o.Flows == 0 {
		o.Flows = 3
	}
	if o.MessageSize == 0 {
		o.MessageSize = 32 << 10
	}
	if o.Window == 0 {
		o.Window = 8
	}
	if o.JunkPerSocket == 0 {
		o.JunkPerSocket = 500
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	switch o.LogLevel {
	case "", "debug", "info", "warn", "error":
	default:
		return fmt.Errorf("chaos: log level %q is not one of debug, info, warn, error", o.LogLevel)
	}
	switch {
	case o.Duration < 10*time.Second:
		return errors.New("chaos: duration must be at least 10s")
	case o.Planes < 2:
		return errors.New("chaos: at least 2 planes (one is lost)")
	case o.MessageSize < hdrSize || o.MessageSize > 1<<20:
		return fmt.Errorf("chaos: message size must be %d..%d", hdrSize, 1<<20)
	case o.Window < 1 || o.Window > 64:
		return errors.New("chaos: window must be 1..64")
	case o.HostDeadAfter < 0:
		return errors.New("chaos: negative host dead-after")
	}
	return nil
}

// Row is one fault type's result.
type Row struct {
	Fault      string `json:"fault"`
	Injections int    `json:"injections"`
	// RecoveryMs is the worst stall: the longest time any flow went
	// without a delivery, from an injection until the flows delivered
	// again (a flow not recovered counts its whole window).
	RecoveryMs         float64 `json:"recovery_ms"`
	MessagesLost       int64   `json:"messages_lost"`
	MessagesDuplicated int64   `json:"messages_duplicated"`
	MessagesCorrupted  int64   `json:"messages_corrupted"`
	// MessagesFailed are messages whose sender was told they failed
	// (no route for host.Config.FailAfter): not silent, but not delivered.
	MessagesFailed    int64  `json:"messages_failed"`
	FlowsNotRecovered int    `json:"flows_not_recovered"`
	Note              string `json:"note,omitempty"`
}

// Injection is one fault as it happened.
type Injection struct {
	Fault    string  `json:"fault"`
	Target   string  `json:"target"`
	AtS      float64 `json:"at_seconds"`
	ClearS   float64 `json:"cleared_seconds"`
	EndS     float64 `json:"end_seconds"`
	StallMs  float64 `json:"stall_ms"`
	Worst    string  `json:"worst_flow"`
	Lost     int64   `json:"messages_lost"`
	Dup      int64   `json:"messages_duplicated"`
	Corrupt  int64   `json:"messages_corrupted"`
	Failed   int64   `json:"messages_failed"`
	NotRecov int     `json:"flows_not_recovered"`
	Note     string  `json:"note,omitempty"`
	// CutSeen: in a gossip partition, a gateway saw the other region's
	// gateways fewer alive during the cut (the cut reached gossip).
	CutSeen bool   `json:"cut_seen,omitempty"`
	Err     string `json:"error,omitempty"`

	t0, tClear, tEnd time.Time
	entering         map[int]bool // gateway-kill: writers whose flow entered at the killed gateway
}

// Report is a run's result.
type Report struct {
	Seed          uint64      `json:"seed"`
	DurationS     float64     `json:"duration_seconds"`
	HostDeadAfter string      `json:"host_dead_after"`
	Rows          []Row       `json:"rows"` // one per fault type injected, then "baseline"
	Injections    []Injection `json:"injections"`
	Messages      uint64      `json:"messages_delivered"`
	Bytes         uint64      `json:"bytes_delivered"`
	Completed     int         `json:"messages_completed"`
	Lost          int64       `json:"messages_lost"`
	Duplicated    int64       `json:"messages_duplicated"`
	Corrupted     int64       `json:"messages_corrupted"`
	Failed        int64       `json:"messages_failed"`
	Overwritten   int         `json:"messages_overwritten_before_check"`
	JunkSent      uint64      `json:"junk_datagrams_sent"`
	Errors        []string    `json:"errors"`
	Dir           string      `json:"dir,omitempty"`
}

// OK reports whether the run found no loss, duplicate, corruption, failed
// message, unrecovered flow or error.
func (r *Report) OK() bool {
	if r.Lost+r.Duplicated+r.Corrupted+r.Failed > 0 || len(r.Errors) > 0 {
		return false
	}
	for _, row := range r.Rows {
		if row.FlowsNotRecovered > 0 {
			return false
		}
	}
	return true
}

// run is one scenario run.
type run struct {
	o      Options
	rng    *rand.Rand
	start  time.Time
	dir    string
	cl     *cluster
	ck     *checker
	lay    layout
	hosts  map[string]*host.Host // by region
	names  map[string]string     // region -> the in-process host's endpoint name
	child  *hostProc
	inproc []*writer

	writersStop chan struct{}
	writersWG   sync.WaitGroup
	recvCancel  context.CancelFunc
	recvWG      sync.WaitGroup

	errMu sync.Mutex
	errs  []string
	junk  uint64
}

func (r *run) say(format string, a ...any) {
	fmt.Fprintf(r.o.Progress, "[%6.1fs] %s\n", time.Since(r.start).Seconds(), fmt.Sprintf(format, a...))
}

func (r *run) addErr(format string, a ...any) {
	e := fmt.Sprintf(format, a...)
	r.errMu.Lock()
	if len(r.errs) < 50 {
		r.errs = append(r.errs, e)
	}
	r.errMu.Unlock()
	r.say("ERROR: %s", e)
}

// Writer ids: the in-process writers of region A, then of region B, then
// two for the host process's incarnations (alternating, so that a killed
// incarnation's late chunks never land in its successor's slots).
func (r *run) childID(incarnation int) int { return 2*r.o.Flows + incarnation%2 }
func (r *run) writers() int                { return 2*r.o.Flows + 2 }

// Run runs the scenario. The report holds the findings (losses, stalls,
// errors); err is set only when the deployment could not be built.
func Run(ctx context.Context, o Options) (*Report, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	// A hard bound on the whole run, whatever hangs: the fault phase, a
	// recovery bound per fault, the drain.
	ctx, cancel := context.WithTimeout(ctx, o.Duration+10*time.Minute)
	defer cancel()
	r := &run{o: o, rng: rand.New(rand.NewPCG(o.Seed, o.Seed^0x636861)), start: time.Now(),
		lay: layout{size: o.MessageSize, slots: max(64, 8*o.Window), window: o.Window}, hosts: map[string]*host.Host{},
		names: map[string]string{RegionA: "a-host", RegionB: "b-host"}, writersStop: make(chan struct{})}
	var err error
	if r.dir, err = os.MkdirTemp("", "mrgw-chaos-"); err != nil {
		return nil, err
	}
	keep := o.KeepDir
	defer func() {
		if !keep {
			os.RemoveAll(r.dir)
		}
	}()
	if r.o.Logger == nil {
		r.o.Logger = slog.New(slog.DiscardHandler)
		if lv, ok := slogLevel(r.o.LogLevel); ok {
			lf, err := os.OpenFile(filepath.Join(r.dir, "hosts.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
			if err != nil {
				return nil, err
			}
			defer lf.Close()
			r.o.Logger = slog.New(slog.NewTextHandler(lf, &slog.HandlerOptions{Level: lv}))
		}
	}
	bin := o.Binary
	if bin == "" {
		r.say("building mrgw")
		if bin, err = Build(ctx, r.dir, "mrgw"); err != nil {
			return nil, err
		}
	}
	if r.o.LabBinary == "" {
		r.say("building mrgw-lab")
		if r.o.LabBinary, err = Build(ctx, r.dir, "mrgw-lab"); err != nil {
			return nil, err
		}
	}
	if r.cl, err = newCluster(ctx, &r.o, r.dir, bin); err != nil {
		return nil, err
	}
	defer r.cl.close()
	for _, p := range r.cl.gws {
		if err := r.cl.start(p); err != nil {
			return nil, err
		}
	}
	if err := r.cl.waitReady(ctx, 60*time.Second); err != nil {
		keep = true
		return nil, fmt.Errorf("%w\n%s", err, r.logTails())
	}
	r.say("4 gateway processes up (%s), WAN connections established; files in %s", bin, r.dir)
	r.ck = newChecker(r.lay)
	if err := r.startHosts(ctx); err != nil {
		keep = true
		return nil, fmt.Errorf("%w\n%s", err, r.logTails())
	}
	defer r.closeHosts()

	// Warm up, then measure the calm stall as the baseline.
	warm := time.Now()
	sleep.Ctx(ctx, 3*time.Second)
	base := Injection{Fault: "baseline", Target: "-", t0: warm.Add(time.Second), tClear: warm.Add(time.Second), tEnd: time.Now()}
	r.measure(&base)
	r.say("baseline: worst gap between deliveries of a flow %.0f ms (%s)", base.StallMs, base.Worst)

	injections := r.faultLoop(ctx)

	// Stop writing, let what is in flight complete, and account.
	close(r.writersStop)
	drained := make(chan struct{})
	go func() { r.writersWG.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(20 * time.Second):
		r.addErr("writers' messages still incomplete 20 s after the end")
	}
	if r.child != nil {
		r.child.stop()
	}
	time.Sleep(500 * time.Millisecond) // deliveries racing the last completions
	r.ck.checkLost(time.Now())
	for _, p := range r.cl.gws {
		if n := p.unexpect.Load(); n > 0 {
			r.addErr("%s exited %d times without being killed; log:\n%s", p.name, n, p.logTail(20))
		}
	}
	rep := r.report(base, injections)
	if !rep.OK() {
		keep = true
	}
	if keep {
		rep.Dir = r.dir
	}
	return rep, nil
}

// Build builds mrgw from the module this package belongs to (found with go
// env GOMOD) into dir.
func Build(ctx context.Context, dir, command string) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("chaos: go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("chaos: not inside the mrgw module (go env GOMOD is empty); pass the binary")
	}
	bin := filepath.Join(dir, command)
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/"+command)
	cmd.Dir = filepath.Dir(mod)
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("chaos: go build ./cmd/%s: %w\n%s", command, err, b)
	}
	return bin, nil
}

func (r *run) logTails() string {
	var b strings.Builder
	for _, p := range r.cl.gws {
		fmt.Fprintf(&b, "--- %s (%s), last lines:\n%s\n", p.name, p.logPath, p.logTail(15))
	}
	return b.String()
}

// liveWriters are the writers expected to deliver throughout [t0, now]:
// the in-process ones and the host process's current incarnation if it
// was already running at t0.
func (r *run) liveWriters(t0 time.Time) []int {
	var ids []int
	for i := range 2 * r.o.Flows {
		ids = append(ids, i)
	}
	if id, since, ok := r.child.current(); ok && since.Before(t0) {
		ids = append(ids, id)
	}
	return ids
}

// measure fills in an injection's stall (worst over its flows) and the
// events in its window.
func (r *run) measure(in *Injection) {
	ids := r.liveWriters(in.t0)
	if in.Fault == FaultHostKill {
		ids = slices.DeleteFunc(ids, func(id int) bool { return id >= 2*r.o.Flows })
	}
	var worst time.Duration
	for _, id := range ids {
		s, ok := r.ck.stall(id, in.t0, in.tEnd)
		if !ok {
			in.NotRecov++
		}
		if s > worst {
			worst = s
			in.Worst = r.writerName(id)
		}
	}
	in.StallMs = units.Ms(worst)
	if in.Fault == FaultGatewayKill {
		// Flows entering the killed gateway from their source host see it
		// die through the host's DeadAfter; the others through the source
		// gateway's timers and gossip (flows to the killed gateway), or
		// not at all.
		var enter, other time.Duration
		n := 0
		for _, id := range ids {
			s, _ := r.ck.stall(id, in.t0, in.tEnd)
			if in.entering[id] {
				enter = max(enter, s)
				n++
			} else {
				other = max(other, s)
			}
		}
		in.Note = fmt.Sprintf("%d flows entering at %s: worst %.0f ms; the others (leaving through it or not using it): %.0f ms", n, in.Target, units.Ms(enter), units.Ms(other))
	}
	in.AtS = in.t0.Sub(r.start).Seconds()
	in.ClearS = in.tClear.Sub(r.start).Seconds()
	in.EndS = in.tEnd.Sub(r.start).Seconds()
	r.ck.mu.Lock()
	in.Dup = countIn(r.ck.dups, in.t0, in.tEnd)
	in.Corrupt = countIn(r.ck.corrupt, in.t0, in.tEnd)
	in.Failed = countIn(r.ck.failed, in.t0, in.tEnd)
	r.ck.mu.Unlock()
}

// entering returns the writers whose flow enters the deployment at the
// gateway with LAN address lan.
func (r *run) entering(lan netip.AddrPort) map[int]bool {
	m := map[int]bool{}
	for _, w := range r.inproc {
		if w.gateway() == lan {
			m[w.id] = true
		}
	}
	if id, _, ok := r.child.current(); ok {
		r.child.mu.Lock()
		m[id] = r.child.gw == lan
		r.child.mu.Unlock()
	}
	return m
}

func (r *run) writerName(id int) string {
	switch {
	case id < r.o.Flows:
		return fmt.Sprintf("%s->%s flow %d", r.names[RegionA], r.names[RegionB], id)
	case id < 2*r.o.Flows:
		return fmt.Sprintf("%s->%s flow %d", r.names[RegionB], r.names[RegionA], id-r.o.Flows)
	}
	return fmt.Sprintf("a-proc->%s", r.names[RegionB])
}

// junkFlood sends n random datagrams (1..1400 bytes) to every listening UDP
// socket of every gateway: LAN, WAN plane, QUIC control, gossip.
func (r *run) junkFlood(n int) (uint64, error) {
	c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(junkIP, 0)))
	if err != nil {
		return 0, err
	}
	defer c.Close()
	var targets []netip.AddrPort
	for _, p := range r.cl.gws {
		targets = append(targets, p.lan, p.wan, p.ctl, p.gossip)
	}
	buf := make([]byte, 1400)
	var sent uint64
	for i := range n {
		for _, t := range targets {
			b := buf[:1+r.rng.IntN(len(buf))]
			for j := range b {
				b[j] = byte(r.rng.Uint32())
			}
			if _, err := c.WriteToUDPAddrPort(b, t); err == nil {
				sent++
			}
		}
		if i%16 == 15 {
			time.Sleep(time.Millisecond) // bounded: about n/16 ms per flood
		}
	}
	return sent, nil
}

// report aggregates the injections per fault type.
func (r *run) report(base Injection, ins []Injection) *Report {
	rep := &Report{Seed: r.o.Seed, DurationS: time.Since(r.start).Seconds(), Injections: ins}
	rep.HostDeadAfter = "default"
	if r.o.HostDeadAfter > 0 {
		rep.HostDeadAfter = r.o.HostDeadAfter.String()
	}
	lost := r.ck.lost()
	// Lost messages belong to the fault whose window holds their completion.
	for i := range ins {
		for _, at := range lost {
			if !at.Before(ins[i].t0) && at.Before(ins[i].tEnd) {
				ins[i].Lost++
			}
		}
	}
	rows := map[string]*Row{}
	for _, in := range ins {
		row := rows[in.Fault]
		if row == nil {
			row = &Row{Fault: in.Fault}
			rows[in.Fault] = row
		}
		row.Injections++
		if in.StallMs > row.RecoveryMs {
			row.RecoveryMs = in.StallMs
			row.Note = fmt.Sprintf("worst: %s at %.1fs, flow %s", in.Target, in.AtS, in.Worst)
			if in.Note != "" {
				row.Note += "; " + in.Note
			}
		}
		row.MessagesLost += in.Lost
		row.MessagesDuplicated += in.Dup
		row.MessagesCorrupted += in.Corrupt
		row.MessagesFailed += in.Failed
		row.FlowsNotRecovered += in.NotRecov
		if in.Err != "" {
			rep.Errors = append(rep.Errors, fmt.Sprintf("%s %s at %.1fs: %s", in.Fault, in.Target, in.AtS, in.Err))
		}
	}
	for _, f := range AllFaults {
		if row := rows[f]; row != nil {
			rep.Rows = append(rep.Rows, *row)
		}
	}
	rep.Rows = append(rep.Rows, Row{Fault: "baseline", RecoveryMs: base.StallMs, Note: "worst gap between deliveries of a flow with no fault (1-3 s after start)"})
	rep.Messages, rep.Bytes = r.ck.totals()
	r.ck.mu.Lock()
	rep.Completed = len(r.ck.done)
	rep.Duplicated = int64(len(r.ck.dups))
	rep.Corrupted = int64(len(r.ck.corrupt))
	rep.Failed = int64(len(r.ck.failed))
	rep.Overwritten = r.ck.overwrote
	var firsts []string
	for _, evs := range [][]event{r.ck.dups, r.ck.corrupt, r.ck.failed} {
		for i, e := range evs {
			if i == 3 {
				break
			}
			firsts = append(firsts, fmt.Sprintf("at %.1fs: %s", e.at.Sub(r.start).Seconds(), e.what))
		}
	}
	r.ck.mu.Unlock()
	rep.Lost = int64(len(lost))
	for i, at := range lost {
		if i == 3 {
			break
		}
		firsts = append(firsts, fmt.Sprintf("completed at %.1fs, never delivered", at.Sub(r.start).Seconds()))
	}
	rep.JunkSent = r.junk
	r.errMu.Lock()
	rep.Errors = append(rep.Errors, r.errs...)
	r.errMu.Unlock()
	rep.Errors = append(rep.Errors, firsts...)
	sort.SliceStable(rep.Injections, func(i, j int) bool { return rep.Injections[i].AtS < rep.Injections[j].AtS })
	return rep
}

// slogLevel parses a log level name ("" is no level).
func slogLevel(name string) (slog.Level, bool) {
	var lv slog.Level
	if name == "" || lv.UnmarshalText([]byte(name)) != nil {
		return 0, false
	}
	return lv, true
}
