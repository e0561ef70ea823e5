//go:build linux

package demo

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/mrgw/mrgw/netem"
)

// The demo's figures depend on the machine as much as on the gateways: a
// report without a yardstick said "errors: none" over 50 Mbit/s and 107 RTT
// of recovery as over 265 Mbit/s and 8 RTT. Each figure is therefore set
// against the range that runs on quiet machines gave (the ranges below),
// and the machine itself is judged from what it says about its load: the
// load average, the CPU time the hypervisor stole, and how late the link
// emulator (the demo's own clock for the WAN) delivered datagrams.

// Check is one figure of the report against its expected range.
type Check struct {
	Figure string  `json:"figure"`
	Value  float64 `json:"value"`
	Unit   string  `json:"unit"`
	Min    float64 `json:"expected_min"`
	Max    float64 `json:"expected_max"`
	Basis  string  `json:"basis"` // where the range comes from
	Met    bool    `json:"met"`
}

// Machine is how busy the machine was during the run.
type Machine struct {
	Cores int `json:"cores"`
	// Load1Start and Load1End are the 1-minute load average before the
	// demo built anything and at its end (-1: unknown).
	Load1Start float64 `json:"load1_start"`
	Load1End   float64 `json:"load1_end"`
	// Steal is the share of CPU time the hypervisor gave to others during
	// the run (-1: unknown).
	Steal float64 `json:"cpu_steal"`
	// OtherCores is the CPU other processes of the machine used during
	// the run, in cores (the machine's busy time less this process's;
	// -1: unknown).
	OtherCores float64 `json:"other_processes_cores"`
	// EmuLateMeanMs and EmuLateMaxMs: how long after their due time the
	// emulator handed datagrams to the kernel.
	EmuLateMeanMs float64 `json:"emulator_late_mean_ms"`
	EmuLateMaxMs  float64 `json:"emulator_late_max_ms"`
	// Busy: the machine was too busy for the figures to mean much; Why
	// says by which measure.
	Busy bool     `json:"busy"`
	Why  []string `json:"busy_why,omitempty"`
}

// Thresholds of a busy machine. The load average is reported, not
// judged: it lags by a minute, and counts the compilation of `go run` that
// usually precedes the demo and the demo's own threads alike.
const (
	// busyOtherCores: other processes used this much CPU during the run
	// (the demo needs about one and a half cores of its own).
	busyOtherCores = 0.5
	busySteal      = 0.05
	// busyLateMean: the emulator's dispatcher wakes within tens of µs on
	// a quiet machine (internal/hrtimer); a mean lateness of a millisecond
	// is scheduling delay, and it adds to every RTT the demo measures.
	busyLateMean = time.Millisecond
)

// judge sets Busy and Why from the measures.
func (m *Machine) judge(rtt time.Duration) {
	m.Busy, m.Why = false, nil
	if m.OtherCores > busyOtherCores {
		m.Why = append(m.Why, fmt.Sprintf("other processes used %.1f of %d cores during the run", m.OtherCores, m.Cores))
	}
	if m.Steal > busySteal {
		m.Why = append(m.Why, fmt.Sprintf("%.0f%% of the CPU time stolen by the hypervisor", 100*m.Steal))
	}
	if m.EmuLateMeanMs > float64(busyLateMean)/float64(time.Millisecond) || m.EmuLateMaxMs > float64(rtt)/float64(time.Millisecond)/2 {
		m.Why = append(m.Why, fmt.Sprintf("the link emulator delivered datagrams %.2f ms late on average, %.1f ms at worst (its dispatcher wakes within tens of µs when it gets a CPU)", m.EmuLateMeanMs, m.EmuLateMaxMs))
	}
	m.Busy = len(m.Why) > 0
}

// expectedGoodputShare is the range of end-to-end goodput, as a share of
// the emulated capacity averaged over the run, that quiet machines gave:
// 175-304 Mbit/s of 350 with the defaults (0.50-0.87); the lower bound
// leaves a margin.
const expectedGoodputShare = 0.45

// expectedRecoveryRTTs: goodput back to (P-1)/P within this many round
// trips of the failure (quiet machines: 4.0-12.8).
const expectedRecoveryRTTs = 20

// checks sets the report's figures against their expected ranges.
func checks(r *Report, o Options) []Check {
	var out []Check
	planeTime := float64(o.Planes)
	if r.FailedPlane >= 0 && r.Duration > 0 {
		fa := min(r.FailedAt/r.Duration, 1)
		planeTime = float64(o.Planes)*fa + float64(o.Planes-1)*(1-fa)
	}
	capacity := 2 * o.RateMbit * planeTime // both directions
	out = append(out, Check{Figure: "host goodput", Value: r.GoodputMbit, Unit: "Mbit/s",
		Min: expectedGoodputShare * capacity, Max: capacity,
		Basis: fmt.Sprintf("%.0f-100%% of the emulated capacity, %.0f Mbit/s both ways over the run (quiet machines: 50-87%%)", 100*expectedGoodputShare, capacity)})
	if r.FailedPlane >= 0 {
		v := r.RecoveryRTTs
		c := Check{Figure: "recovery after the plane failure", Value: v, Unit: "RTT", Min: 0, Max: expectedRecoveryRTTs,
			Basis: "goodput back to (P-1)/P within 20 round trips (quiet machines: 4-13)"}
		out = append(out, c)
	}
	// Each direction's plane holds at most 20 ms of queue (build), and
	// the gateways and hosts add little on a quiet machine.
	queue := 2 * 20.0
	out = append(out, Check{Figure: "smoothed path RTT", Value: r.MeasuredRTTms, Unit: "ms",
		Min: r.RTTms, Max: r.RTTms + queue + 10,
		Basis: fmt.Sprintf("the configured %.0f ms plus at most 20 ms of emulator queue each way and 10 ms of processing", r.RTTms)})
	out = append(out, Check{Figure: "duplicates at the destinations", Value: float64(r.Duplicates), Min: 0, Max: 0, Basis: "delivery is exactly once"})
	out = append(out, Check{Figure: "errors", Value: float64(len(r.Errors)), Min: 0, Max: 0, Basis: "every message completes"})
	for i := range out {
		c := &out[i]
		c.Met = c.Value >= c.Min && c.Value <= c.Max
	}
	return out
}

// readLoad1 is the 1-minute load average (-1 if unknown).
func readLoad1() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return -1
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return -1
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return -1
	}
	return v
}

// userHZ is the unit of /proc/stat's times (USER_HZ, 100 on Linux).
const userHZ = 100

// cpuTimes is the machine's CPU time so far (/proc/stat, all CPUs), in
// seconds: stolen, busy (neither idle nor waiting for I/O) and in all;
// ok false if unknown.
func cpuTimes() (steal, busy, total float64, ok bool) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, 0, false
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0, 0, 0, false
	}
	// user nice system idle iowait irq softirq steal (guest time is in user)
	for i, s := range f[1:9] {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return 0, 0, 0, false
		}
		sec := float64(v) / userHZ
		total += sec
		switch i {
		case 3, 4: // idle, iowait
		case 7:
			steal = sec
		default:
			busy += sec
		}
	}
	return steal, busy, total, true
}

// ownCPU is this process's CPU time so far, in seconds.
func ownCPU() float64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// machineWatch measures the machine across a run.
type machineWatch struct {
	m                     Machine
	start                 time.Time
	steal0, busy0, total0 float64
	own0                  float64
	cpuOK                 bool
}

func watchMachine() *machineWatch {
	w := &machineWatch{m: Machine{Cores: runtime.NumCPU(), Load1Start: readLoad1(), Steal: -1, OtherCores: -1}, start: time.Now()}
	w.steal0, w.busy0, w.total0, w.cpuOK = cpuTimes()
	w.own0 = ownCPU()
	return w
}

// done finishes the measures with the emulator's lateness.
func (w *machineWatch) done(es netem.Stats, rtt time.Duration) Machine {
	m := w.m
	m.Load1End = readLoad1()
	if steal, busy, total, ok := cpuTimes(); ok && w.cpuOK && total > w.total0 {
		m.Steal = (steal - w.steal0) / (total - w.total0)
		if wall := time.Since(w.start).Seconds(); wall > 0 {
			m.OtherCores = max(0, (busy-w.busy0)-(ownCPU()-w.own0)) / wall
		}
	}
	var n uint64
	var sum time.Duration
	for _, l := range es.Late {
		n += l.Count
		sum += l.Mean * time.Duration(l.Count)
		m.EmuLateMaxMs = max(m.EmuLateMaxMs, float64(l.Max)/float64(time.Millisecond))
	}
	if n > 0 {
		m.EmuLateMeanMs = float64(sum/time.Duration(n)) / float64(time.Millisecond)
	}
	m.judge(rtt)
	return m
}
