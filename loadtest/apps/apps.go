//go:build linux

// Package apps is the application benchmark: the workloads users run
// between regions (iperf3 with one and with eight streams, and a file
// copy) directly over kernel TCP and through mrgw, over the same emulated
// WAN, with mrgw's own transport on that WAN as the reference the adapters
// are held to.
//
// # Systems
//
//   - tcp-cubic, tcp-bbr: kernel TCP between two network namespaces through
//     loadtest/tunemu. iperf3 runs as a child process in each namespace
//     (-C picks the algorithm; the client reads it back from the kernel,
//     and a row whose sockets ran another is refused); the copy is this
//     process's copy loop over one TCP connection whose algorithm is set
//     per socket (TCP_CONGESTION).
//   - mrgw-forward (iperf3): a two-region lab (loadtest/lab: gateways over
//     netem), a host in each region, package forward on both: the client
//     connects to a Local port on the eu-west host, the us-east host's
//     Expose connects each stream on to the iperf3 server. iperf3 itself
//     runs on loopback.
//   - mrgw-stream (copy): the same lab, the copy loop writing the file into
//     a stream.Conn whose other end, on the us-east host, writes it to disk.
//     A native file copy is added as one more entry of copySystems.
//   - mrgw-transport: the reference, the same lab without adapters: host
//     flows from the eu-west host keep a stream's window of 1 MiB WRITEs
//     (a stream's largest message) in flight into the us-east host's
//     memory, one flow per stream of the workload; goodput is the bytes
//     the receiving host reported delivered in the measured window
//     (see Figures). The
//     same bytes in flight per flow as a stream: what the ratio measures
//     is what the adapters cost per byte, not the window.
//
// Every run starts from nothing: fresh namespaces for kernel TCP, a fresh
// lab for mrgw, so that no run inherits a warm window from the one before.
//
// # One WAN
//
// Config.Planes planes of PlaneRateBps each, a round trip of RTT (half each
// way on every plane), random loss after the queue in both directions, a
// drop-tail queue of one plane's bandwidth-delay product and ECN marking at
// the lab's threshold (2 ms of the plane's rate): lab.Config.Link, given
// unchanged to tunemu for kernel TCP. Kernel TCP keeps the kernel's ECN
// default (net.ipv4.tcp_ecn 2: answers ECN, never asks for it), so its
// packets are never marked; a TCP flow is hashed onto one plane by its
// 5-tuple, mrgw sprays every WAN connection over all of them.
//
// # Figures
//
// goodput_bps: iperf3's received rate over its measured time (-t, after
// -O seconds of warm-up); for the copy, the file's bytes on disk at the
// receiver (written and fsynced) over the time from the sender's dial to
// the receiver's fsync, or what arrived within Options.CopyLimit (the row
// then says "incomplete"); for mrgw-transport, bytes delivered from the
// first delivery after iperf3's warm-up to the first after its measured
// time, over the time between them (whole messages at both edges), the
// window stretched until it holds at least four messages per flow (the
// note then says over how long). fraction is goodput over the WAN's capacity
// (all planes). cpu_cores is CPU time over wall time across the run: this
// process's (getrusage), which holds the run's emulator and, for mrgw, the
// gateways, hosts and adapters, plus the CPU of the child processes of the
// run (iperf3 client and server); the note gives the split. For kernel TCP
// that is the iperf3 processes (the kernel's send path runs in their
// system calls) and tunemu (the receive path runs in the softirq of the
// emulator's TUN writes), so both sides count their emulator.
//
// # Targets
//
// At 1% and 5% loss, through mrgw: at least 0.9 of mrgw-transport with the
// same stream count, at least 10 times tcp-cubic and at least tcp-bbr
// (same workload, so the same stream count). Targets lists each one met or
// not; rows of other systems carry mrgw_ratio, the adapter's goodput over
// theirs.
package apps

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"time"

	"github.com/mrgw/mrgw/internal/report"
	"github.com/mrgw/mrgw/loadtest/lab"
	"github.com/mrgw/mrgw/loadtest/tunemu"
	"github.com/mrgw/mrgw/units"
)

// Workloads, as in the rows' workload field.
const (
	IperfP1 = "iperf3-p1"
	IperfP8 = "iperf3-p8"
	Copy    = "copy"
)

// AllWorkloads in report order.
var AllWorkloads = []string{IperfP1, IperfP8, Copy}

// Systems, as in the rows' system field.
const (
	TCPCubic      = "tcp-cubic"
	TCPBBR        = "tcp-bbr"
	MRGWForward   = "mrgw-forward"   // iperf3 through forward Local/Expose
	MRGWStream    = "mrgw-stream"    // the copy through a stream.Conn
	MRGWCopy      = "mrgw-cp"        // the copy by package filecopy (mrgw host cp)
	MRGWTransport = "mrgw-transport" // host flows' WRITEs: the reference
)

// AllSystems in report order.
var AllSystems = []string{TCPCubic, TCPBBR, MRGWForward, MRGWStream, MRGWCopy, MRGWTransport}

// Scenario is the rows' scenario field.
const Scenario = "apps"

// Defaults of Options.
const (
	DefaultPlanes       = 4
	DefaultPlaneRateBps = 50e6
	DefaultDuration     = 20 * time.Second
	DefaultWarmup       = 5 * time.Second
	DefaultFileSize     = 4 << 30
	DefaultCopyLimit    = 10 * time.Minute
)

// Default grid.
var (
	DefaultRTTs   = []time.Duration{50 * time.Millisecond, 150 * time.Millisecond}
	DefaultLosses = []float64{0, 0.01, 0.05}
)

// Options configure Run. Zero values take the defaults.
type Options struct {
	// Planes [4] of PlaneRateBps [50 Mbit/s] each.
	Planes       int
	PlaneRateBps float64
	// RTTs [50 and 150 ms] and Losses [0, 1%, 5%] are the grid.
	RTTs   []time.Duration
	Losses []float64
	// Workloads and Systems select by name [all]; a system runs the
	// workloads it applies to.
	Workloads, Systems []string
	// Duration is iperf3's measured time (-t) [20 s], after Warmup (-O)
	// [5 s]; mrgw-transport measures the same window.
	Duration, Warmup time.Duration
	// FileSize is the copied file's size [4 GiB]; CopyLimit bounds one
	// copy [10 min: 4 GiB at 57 Mbit/s]: a copy still running then counts
	// what arrived.
	FileSize  int64
	CopyLimit time.Duration
	// Dir holds the source file and the copies [the system's temporary
	// directory]; each is removed after its run, the source at the end.
	Dir string
	// Window is each stream's receive window and the gateways' credit per
	// flow is twice it [0: the smallest power of two from 4 MiB up that
	// holds twice the WAN's bandwidth-delay product].
	Window int
	// Seed seeds the emulators.
	Seed uint64
	// Progress, if set, is called before each run.
	Progress func(i, n int, what string)
	// Logger receives the lab's and the hosts' logs [discarded].
	Logger *slog.Logger
}

func (o Options) withDefaults() Options {
	if o.Planes <= 0 {
		o.Planes = DefaultPlanes
	}
	if o.PlaneRateBps <= 0 {
		o.PlaneRateBps = DefaultPlaneRateBps
	}
	if len(o.RTTs) == 0 {
		o.RTTs = DefaultRTTs
	}
	if len(o.Losses) == 0 {
		o.Losses = DefaultLosses
	}
	if len(o.Workloads) == 0 {
		o.Workloads = AllWorkloads
	}
	if len(o.Systems) == 0 {
		o.Systems = AllSystems
	}
	if o.Duration <= 0 {
		o.Duration = DefaultDuration
	}
	if o.Warmup <= 0 {
		o.Warmup = DefaultWarmup
	}
	if o.FileSize <= 0 {
		o.FileSize = DefaultFileSize
	}
	if o.CopyLimit <= 0 {
		o.CopyLimit = DefaultCopyLimit
	}
	if o.Dir == "" {
		o.Dir = os.TempDir()
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

// Validate refuses options that cannot run, naming the option.
func (o Options) Validate() error { return o.withDefaults().check() }

// check refuses options that cannot run (defaults filled in).
func (o Options) check() error {
	for _, w := range o.Workloads {
		if !slices.Contains(AllWorkloads, w) {
			return fmt.Errorf("apps: unknown workload %q (want %v)", w, AllWorkloads)
		}
	}
	for _, s := range o.Systems {
		if !slices.Contains(AllSystems, s) {
			return fmt.Errorf("apps: unknown system %q (want %v)", s, AllSystems)
		}
	}
	for _, l := range o.Losses {
		if l < 0 || l >= 1 {
			return fmt.Errorf("apps: loss %g outside [0, 1)", l)
		}
	}
	if o.Warmup < time.Second || o.Duration < time.Second || o.Warmup%time.Second != 0 || o.Duration%time.Second != 0 {
		return fmt.Errorf("apps: warm-up %v and duration %v: iperf3 takes whole seconds, at least 1", o.Warmup, o.Duration)
	}
	if o.Window != 0 && (o.Window < 64<<10 || o.Window > 1<<30) {
		return fmt.Errorf("apps: window %d outside 64 KiB to 1 GiB", o.Window)
	}
	return nil
}

// streams is a workload's stream count.
func streams(workload string) int {
	if workload == IperfP8 {
		return 8
	}
	return 1
}

// applies says whether system runs workload.
func applies(system, workload string) bool {
	switch system {
	case MRGWForward:
		return workload != Copy
	case MRGWStream, MRGWCopy:
		return workload == Copy
	}
	return true
}

// point is one link setting of the grid.
type point struct {
	rtt  time.Duration
	loss float64
}

// labConfig is the lab of a point: the WAN every system runs over.
func (o *Options) labConfig(p point) lab.Config {
	bdp := units.BitRate(o.PlaneRateBps).Bytes().BytesIn(p.rtt)
	win := o.window(p)
	return lab.Config{
		Planes: o.Planes, OneWay: p.rtt / 2, Loss: p.loss, RateBps: uint64(o.PlaneRateBps),
		// One plane's bandwidth-delay product, as the peers load tests.
		Queue: max(64<<10, int(bdp)),
		Paths: wanPaths, Seed: o.Seed, Logger: o.Logger, LogLevel: "warn",
		// A flow's credit covers its stream's window twice: the window,
		// not the gateways' credit, is what bounds a stream. The memory
		// bound admits that credit for iperf3 -P 8's nine connections,
		// each a flow both ways, on one gateway.
		FlowCreditBytes: int64(2 * win),
		MemoryBytes:     max(256<<20, int64(20*2*2*win)),
	}
}

// wanPaths is every gateway's wan.paths_per_peer (the lab's default).
const wanPaths = 16

// window is the stream window at p (Options.Window).
func (o *Options) window(p point) int {
	if o.Window > 0 {
		return o.Window
	}
	bdp := units.BitRate(o.PlaneRateBps * float64(o.Planes)).Bytes().BytesIn(p.rtt)
	w := 4 << 20
	for float64(w) < 2*bdp && w < 1<<30 {
		w *= 2
	}
	return w
}

// capacity is the WAN's capacity in bit/s, all planes.
func (o *Options) capacity() float64 { return o.PlaneRateBps * float64(o.Planes) }

// tunConfig is the tunemu configuration of the same WAN.
func (o *Options) tunConfig(p point) tunemu.Config {
	return tunemu.Config{Planes: o.Planes, Seed: o.Seed + 1, Link: o.labConfig(p).Link()}
}

// run is one measurement to take.
type run struct {
	workload, system string
	p                point
}

func (r run) String() string {
	return fmt.Sprintf("%s %s rtt=%v loss=%s", r.workload, r.system, r.p.rtt, report.FormatPercent(r.p.loss))
}

// Result is one run's measurement.
type Result struct {
	GoodputBps float64
	// CPUSelf and CPUChildren are CPU seconds of this process and of the
	// run's child processes; Wall the wall time they were taken over.
	CPUSelf, CPUChildren float64
	Wall                 time.Duration
	CC                   string
	Retransmits          uint64
	Emulator             string
	Check                *tunemu.Verdict
	Note                 string
}

// Run measures every selected workload on every selected system at every
// point of the grid and returns the rows, in order of the grid, each
// point's rows carrying mrgw_ratio. When kernel TCP cannot run here (no
// root, no TUN), its rows are skipped and the returned error matches
// tunemu.ErrUnavailable and says why, with the other rows; a workload
// whose program is missing (iperf3) likewise, with ErrMissingProgram.
func Run(ctx context.Context, o Options) ([]report.Row, error) {
	o = o.withDefaults()
	if err := o.check(); err != nil {
		return nil, err
	}
	var runs []run
	for _, rtt := range o.RTTs {
		for _, loss := range o.Losses {
			for _, w := range AllWorkloads {
				if !slices.Contains(o.Workloads, w) {
					continue
				}
				for _, s := range AllSystems {
					if slices.Contains(o.Systems, s) && applies(s, w) {
						runs = append(runs, run{w, s, point{rtt, loss}})
					}
				}
			}
		}
	}
	var src *sourceFile
	if slices.Contains(o.Workloads, Copy) {
		var err error
		if src, err = newSourceFile(ctx, o.Dir, o.FileSize, o.Seed); err != nil {
			return nil, err
		}
		defer src.remove()
	}
	var rows []report.Row
	var skipTUN, skipIperf error
	if err := tunemu.Check(); err != nil {
		skipTUN = err
	}
	if err := haveIperf(); err != nil {
		skipIperf = err
	}
	// mrgw-transport is measured once per point and stream count; the
	// copy's reference is the one-stream run.
	ref := map[string]Result{}
	for i, r := range runs {
		if o.Progress != nil {
			o.Progress(i+1, len(runs), r.String())
		}
		if ctx.Err() != nil {
			return rows, ctx.Err()
		}
		kernel := r.system == TCPCubic || r.system == TCPBBR
		switch {
		case kernel && skipTUN != nil:
			continue
		case r.workload != Copy && r.system != MRGWTransport && skipIperf != nil:
			continue
		}
		var res Result
		var err error
		switch {
		case r.system == MRGWTransport:
			key := fmt.Sprintf("%v/%g/%d", r.p.rtt, r.p.loss, streams(r.workload))
			if prev, ok := ref[key]; ok {
				res = prev
				res.Note = report.JoinNote(res.Note, "the one-flow reference run, shared with iperf3-p1")
			} else {
				res, err = transportRun(ctx, &o, r.p, streams(r.workload))
				ref[key] = res
			}
		case kernel && r.workload == Copy:
			res, err = kernelCopy(ctx, &o, r.p, r.system[len("tcp-"):], src)
		case kernel:
			res, err = kernelIperf(ctx, &o, r.p, r.system[len("tcp-"):], streams(r.workload))
		case r.system == MRGWForward:
			res, err = forwardIperf(ctx, &o, r.p, streams(r.workload))
		default:
			cs, ok := copySystem(r.system)
			if !ok {
				return rows, fmt.Errorf("apps: %s: no copy system", r)
			}
			res, err = mrgwCopy(ctx, &o, r.p, cs, src)
		}
		if errors.Is(err, tunemu.ErrUnavailable) {
			skipTUN = err
			continue
		}
		if err != nil {
			return rows, fmt.Errorf("apps: %s: %w", r, err)
		}
		rows = append(rows, o.row(r, res))
	}
	setRatios(rows)
	var errs []error
	if skipTUN != nil {
		errs = append(errs, fmt.Errorf("apps: kernel TCP rows skipped: %w", skipTUN))
	}
	if skipIperf != nil {
		errs = append(errs, fmt.Errorf("apps: iperf3 rows skipped: %w", skipIperf))
	}
	return rows, errors.Join(errs...)
}

// row builds a run's report row.
func (o *Options) row(r run, res Result) report.Row {
	rw := report.Row{
		Scenario: Scenario, Workload: r.workload, System: r.system, CC: res.CC, Planes: o.Planes,
		RTTms: float64(r.p.rtt) / 1e6, Loss: r.p.loss, Streams: streams(r.workload),
		CapacityBps: o.capacity(), GoodputBps: res.GoodputBps, Fraction: res.GoodputBps / o.capacity(),
		Retransmits: res.Retransmits, Emulator: res.Emulator, Note: res.Note,
	}
	if r.system != TCPCubic && r.system != TCPBBR {
		rw.Paths = o.labConfig(r.p).Paths
	}
	if res.Wall > 0 {
		wall := res.Wall.Seconds()
		rw.CPUCores = (res.CPUSelf + res.CPUChildren) / wall
		split := fmt.Sprintf("cpu: this process %.2f", res.CPUSelf/wall)
		if res.CPUChildren > 0 {
			split += fmt.Sprintf(", iperf3 %.2f", res.CPUChildren/wall)
		}
		rw.Note = report.JoinNote(rw.Note, split)
	}
	tunemu.SetRowCheck(&rw, res.Check)
	return rw
}

// adapter reports whether a system carries the workload through mrgw's
// adapters (what the targets are about).
func adapter(system string) bool {
	return system != TCPCubic && system != TCPBBR && system != MRGWTransport
}

// setRatios gives every non-adapter row of a point and workload the
// adapter's goodput over its own (the first adapter of the group).
func setRatios(rows []report.Row) {
	for i := range rows {
		if adapter(rows[i].System) {
			continue
		}
		for _, a := range rows {
			if adapter(a.System) && sameGroup(a, rows[i]) {
				if rows[i].GoodputBps > 0 {
					rows[i].MRGWRatio = a.GoodputBps / rows[i].GoodputBps
				}
				break
			}
		}
	}
}

func sameGroup(a, b report.Row) bool {
	return a.Workload == b.Workload && a.RTTms == b.RTTms && a.Loss == b.Loss
}

// Set-up and tear-down of one run, about: a lab (gateways ready, hosts
// registered) and the namespaces of tunemu.
const (
	labSetup = 5 * time.Second
	tunSetup = 2 * time.Second
)

// Estimate is about how long Run takes with o, and how many runs it makes:
// each iperf3 and reference run its warm-up and measured time, each copy
// its file at half the capacity (kernel cubic under loss: the limit),
// never more than the limit, and each its set-up; and writing the source
// file and reading every copy back for its checksum, at 200 MB/s.
func Estimate(o Options) (int, time.Duration) {
	o = o.withDefaults()
	n := 0
	disk := time.Duration(float64(o.FileSize) / 200e6 * float64(time.Second))
	var d time.Duration
	if slices.Contains(o.Workloads, Copy) {
		d += disk
	}
	copyTime := time.Duration(float64(units.ByteRate(o.FileSize).Bits())/(0.5*o.capacity())*float64(time.Second)) + disk
	for range o.RTTs {
		for _, loss := range o.Losses {
			refs := map[int]bool{}
			for _, w := range o.Workloads {
				for _, s := range o.Systems {
					if !applies(s, w) {
						continue
					}
					n++
					setup := labSetup
					if s == TCPCubic || s == TCPBBR {
						setup = tunSetup
					}
					switch {
					case s == MRGWTransport && refs[streams(w)]:
						continue // measured once per stream count
					case s == MRGWTransport:
						refs[streams(w)] = true
						d += o.Warmup + o.Duration + setup
					case w != Copy:
						d += o.Warmup + o.Duration + setup
					case s == TCPCubic && loss > 0:
						d += o.CopyLimit + setup
					default:
						d += min(copyTime, o.CopyLimit) + setup
					}
				}
			}
		}
	}
	return n, d
}
