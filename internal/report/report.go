// Package report holds the result rows shared by `mrgw-lab sim` and `mrgw
// loadtest`, and prints them as a readable table or as JSON lines.
//
// A Row's JSON field names are a published interface: scripts and
// docs/RESULTS.md depend on them, so fields are only ever added.
package report

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Row is one measured point.
type Row struct {
	Scenario    string  `json:"scenario"`
	System      string  `json:"system"`
	CC          string  `json:"cc,omitempty"`
	Planes      int     `json:"planes,omitempty"`
	Paths       int     `json:"paths,omitempty"`
	RTTms       float64 `json:"rtt_ms"`
	Loss        float64 `json:"loss"`
	Flows       int     `json:"flows,omitempty"`
	Streams     int     `json:"streams,omitempty"`
	CapacityBps float64 `json:"capacity_bps"`
	GoodputBps  float64 `json:"goodput_bps"`
	Fraction    float64 `json:"fraction"`
	// RelLossFree is goodput relative to the same system's loss-free goodput
	// in the same run (loss sweeps only).
	RelLossFree   float64   `json:"rel_loss_free,omitempty"`
	Jain          float64   `json:"jain,omitempty"`
	SettleRTTs    float64   `json:"settle_rtts,omitempty"`
	MaxQueueBytes int       `json:"max_queue_bytes,omitempty"`
	Shares        []float64 `json:"shares,omitempty"`
	// Efficiency is goodput per plane relative to one plane's (planes only).
	Efficiency  float64 `json:"efficiency,omitempty"`
	Retransmits uint64  `json:"retransmits,omitempty"`
	// SimSeconds, WallSeconds and SimPacketsPerSec describe the simulator run.
	SimSeconds       float64 `json:"sim_seconds,omitempty"`
	WallSeconds      float64 `json:"wall_seconds,omitempty"`
	SimPacketsPerSec float64 `json:"sim_packets_per_sec,omitempty"`
	Note             string  `json:"note,omitempty"`
	// StateBytesPerConn is the protocol state held per connection.
	StateBytesPerConn float64 `json:"state_bytes_per_conn,omitempty"`
	// QueueDrops counts packets the bottleneck queue dropped (cc scenarios).
	QueueDrops uint64 `json:"queue_drops,omitempty"`
	// Variant names a scenario's sub-case (cc scenarios), e.g. which side
	// is the bottleneck.
	Variant string `json:"variant,omitempty"`
	// RawUDPBps is raw batched UDP between sockets like the measured
	// system's, on the same machine in the same run; RatioToRawUDP is
	// GoodputBps / RawUDPBps (datapath only).
	RawUDPBps     float64 `json:"raw_udp_bps,omitempty"`
	RatioToRawUDP float64 `json:"ratio_to_raw_udp,omitempty"`
	// CPUPerGbps is the CPU spent (cores: CPU seconds per second, sender
	// and receiver together) per Gbit/s of goodput (datapath only).
	CPUPerGbps float64 `json:"cpu_per_gbps,omitempty"`
	// AllocsPerPacket is heap allocations per datagram in steady state;
	// NsPerPacket a per-datagram cost (datapath only).
	AllocsPerPacket float64 `json:"allocs_per_packet,omitempty"`
	NsPerPacket     float64 `json:"ns_per_packet,omitempty"`
	// Emulator names the link emulator a loadtest row ran through: "emu"
	// (the UDP relay) or "tunemu" (TUN devices and namespaces, same model).
	Emulator string `json:"emulator,omitempty"`
	// EmulatorOK is tunemu's self-check of the row's measured window
	// (loadtest/tunemu.Health.Check): false when the emulator released
	// packets late, was saturated or dropped packets before its model, so
	// the figure may be the emulator's and not the system's. EmulatorCheck
	// holds the figures. Both are absent where no self-check ran.
	EmulatorOK    *bool     `json:"emulator_ok,omitempty"`
	EmulatorCheck *EmuCheck `json:"emulator_check,omitempty"`
	// MRGWRatio is mrgw's goodput over this row's at the same point of the
	// same run (peer comparisons; above 1: mrgw is ahead). In the
	// peers-rtt-fairness rows it is mrgw's Jain index over this row's; in
	// peers-plane-failure rows, mrgw's goodput in the same phase (Variant).
	MRGWRatio float64 `json:"mrgw_ratio,omitempty"`
	// MessageBytes, Messages, Incomplete, P50ms and P99ms describe message
	// completion times (completion-time scenario): the message size, how
	// many completed, how many did not within the time limit, and the
	// median and 99th percentile in milliseconds.
	MessageBytes int64   `json:"message_bytes,omitempty"`
	Messages     int     `json:"messages,omitempty"`
	Incomplete   int     `json:"incomplete,omitempty"`
	P50ms        float64 `json:"p50_ms,omitempty"`
	P99ms        float64 `json:"p99_ms,omitempty"`
	// P50Ratio and P99Ratio are this row's percentile over mrgw's (above
	// 1: mrgw completes sooner).
	P50Ratio float64 `json:"p50_ratio,omitempty"`
	P99Ratio float64 `json:"p99_ratio,omitempty"`
	// MessagesLost and MessagesDuplicated count messages that a source saw
	// complete but its destination never delivered, and messages delivered
	// to a destination application more than once (gateway load tests:
	// both must be 0). Pointers so that a measured 0 is printed and rows of
	// other scenarios omit them.
	MessagesLost       *int64 `json:"messages_lost,omitempty"`
	MessagesDuplicated *int64 `json:"messages_duplicated,omitempty"`
	// MessagesFailed counts messages whose completion returned an error
	// (for example no route within the host's FailAfter).
	MessagesFailed int `json:"messages_failed,omitempty"`
	// Fault names the fault injected in the run (gateway load tests), e.g.
	// "plane-fail 1 @5s"; RecoveryRTTs and RecoveryMs are the time from the
	// fault until goodput is back to (P-1)/P of its level before it, in
	// round trips and milliseconds (-1: not within the run).
	Fault        string  `json:"fault,omitempty"`
	RecoveryRTTs float64 `json:"recovery_rtts,omitempty"`
	RecoveryMs   float64 `json:"recovery_ms,omitempty"`
	// GatewayBytesPerFlow is the gateways' relay buffer budget reserved
	// per active flow at its peak; HeapBytesPerFlow the growth of the Go
	// heap per idle open flow (hosts and gateways share the process).
	GatewayBytesPerFlow float64 `json:"gateway_bytes_per_flow,omitempty"`
	HeapBytesPerFlow    float64 `json:"heap_bytes_per_flow,omitempty"`
	// StepMs is the mean step time of a synchronized job (incast,
	// allreduce: a step ends with its slowest transfer), MaxStepMs the
	// slowest step, IdealStepMs the bytes of a step over the capacity, and
	// StepRatio StepMs / IdealStepMs.
	StepMs      float64 `json:"step_ms,omitempty"`
	MaxStepMs   float64 `json:"max_step_ms,omitempty"`
	IdealStepMs float64 `json:"ideal_step_ms,omitempty"`
	StepRatio   float64 `json:"step_ratio,omitempty"`
	Steps       int     `json:"steps,omitempty"`
	// Competitor names the system this row's flow shared its bottleneck
	// with (coexistence); Share is this flow's part of the two flows'
	// goodput and Utilization their goodput together over the capacity.
	Competitor  string  `json:"competitor,omitempty"`
	Share       float64 `json:"share,omitempty"`
	Utilization float64 `json:"utilization,omitempty"`
	// RelBaseline is this row's Share over the same system's Share in the
	// scenario's baseline pair of the same run (coexistence: a cubic
	// flow's share against X over its share against another cubic).
	RelBaseline float64 `json:"rel_baseline,omitempty"`
	// Starved says whether the flow got less than a quarter of its fair
	// share (coexistence: a Share below 1/8). A pointer, so that a
	// measured false is printed and other scenarios omit it.
	Starved *bool `json:"starved,omitempty"`
	// Workload names what an application benchmark ran (apps: iperf3-p1,
	// iperf3-p8, copy); CPUCores is the CPU time the run took over its
	// wall time (cores), its scope said in the scenario's documentation.
	Workload string  `json:"workload,omitempty"`
	CPUCores float64 `json:"cpu_cores,omitempty"`
}

// WriteJSON writes one JSON object per line.
func WriteJSON(w io.Writer, rows []Row) error {
	enc := json.NewEncoder(w)
	for i := range rows {
		if err := enc.Encode(&rows[i]); err != nil {
			return err
		}
	}
	return nil
}

// WriteJSONLines writes rows of any type as JSON, one object per line, with
// <, > and & left as they are (the load tests' notes carry them).
func WriteJSONLines[T any](w io.Writer, rows []T) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	for i := range rows {
		if err := enc.Encode(&rows[i]); err != nil {
			return err
		}
	}
	return nil
}

// Column is one column of a table.
type Column struct {
	Title string
	Value func(r *Row) string
}

// Common columns.
var (
	ColSystem   = Column{"system", func(r *Row) string { return r.System }}
	ColCC       = Column{"cc", func(r *Row) string { return r.CC }}
	ColPlanes   = Column{"planes", func(r *Row) string { return fmt.Sprint(r.Planes) }}
	ColRTT      = Column{"rtt", func(r *Row) string { return orDash(r.RTTms, FormatRTT) }}
	ColLoss     = Column{"loss", func(r *Row) string { return FormatPercent(r.Loss) }}
	ColFlows    = Column{"flows", func(r *Row) string { return fmt.Sprint(r.Flows) }}
	ColCapacity = Column{"capacity", func(r *Row) string { return FormatBps(r.CapacityBps) }}
	ColGoodput  = Column{"goodput", func(r *Row) string { return FormatBps(r.GoodputBps) }}
	ColFraction = Column{"fraction", func(r *Row) string { return fmt.Sprintf("%.3f", r.Fraction) }}
	ColRel      = Column{"vs loss-free", func(r *Row) string { return fmt.Sprintf("%.3f", r.RelLossFree) }}
	ColEff      = Column{"efficiency", func(r *Row) string { return fmt.Sprintf("%.3f", r.Efficiency) }}
	ColJain     = Column{"jain", func(r *Row) string { return fmt.Sprintf("%.3f", r.Jain) }}
	ColRetx     = Column{"retransmits", func(r *Row) string { return fmt.Sprint(r.Retransmits) }}
	ColSpeed    = Column{"sim pkts/s", func(r *Row) string { return fmt.Sprintf("%.2gM", r.SimPacketsPerSec/1e6) }}
)

// WriteTable writes rows as an aligned plain-text table that is also valid
// Markdown.
func WriteTable(w io.Writer, rows []Row, cols ...Column) error {
	cells := make([][]string, 0, len(rows)+2)
	head := make([]string, len(cols))
	for i, c := range cols {
		head[i] = c.Title
	}
	cells = append(cells, head, nil)
	for i := range rows {
		line := make([]string, len(cols))
		for j, c := range cols {
			line[j] = c.Value(&rows[i])
		}
		cells = append(cells, line)
	}
	width := make([]int, len(cols))
	for _, line := range cells {
		for j, v := range line {
			width[j] = max(width[j], utf8.RuneCountInString(v))
		}
	}
	var b strings.Builder
	for _, line := range cells {
		b.WriteString("|")
		for j := range cols {
			if line == nil {
				b.WriteString(strings.Repeat("-", width[j]+2) + "|")
				continue
			}
			v := line[j]
			b.WriteString(" " + v + strings.Repeat(" ", width[j]-utf8.RuneCountInString(v)) + " |")
		}
		b.WriteString("\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// FormatBps prints a rate with an SI unit.
func FormatBps(bps float64) string {
	switch {
	case bps >= 1e9:
		return fmt.Sprintf("%.2f Gbit/s", bps/1e9)
	case bps >= 1e6:
		return fmt.Sprintf("%.2f Mbit/s", bps/1e6)
	case bps >= 1e3:
		return fmt.Sprintf("%.2f kbit/s", bps/1e3)
	}
	return fmt.Sprintf("%.0f bit/s", bps)
}

// FormatRTT prints a round-trip time given in milliseconds.
func FormatRTT(ms float64) string {
	if ms < 1 {
		return FormatNumber(ms*1000) + "µs"
	}
	return FormatNumber(ms) + "ms"
}

// orDash prints 0 as "-": a row with no single value (rtt-fairness rows
// mix several round trips and say which in their note).
func orDash(x float64, f func(float64) string) string {
	if x == 0 {
		return "-"
	}
	return f(x)
}

// FormatNumber prints x for people: three significant digits at most,
// trailing zeros trimmed, never an exponent (0.07*100 prints 7, not
// 7.000000000000001; 12.345 prints 12.3; 1234 prints 1230).
func FormatNumber(x float64) string {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return strconv.FormatFloat(x, 'g', -1, 64)
	}
	// Round to 3 significant digits, then print the shortest decimal
	// that reads back as that value.
	r, _ := strconv.ParseFloat(strconv.FormatFloat(x, 'g', 3, 64), 64)
	return strconv.FormatFloat(r, 'f', -1, 64)
}

// FormatPercent prints a fraction (0.07) as a percentage (7%), with
// [FormatNumber]'s rounding.
func FormatPercent(frac float64) string {
	return FormatNumber(frac*100) + "%"
}

// Jain returns Jain's fairness index of xs: 1 when all are equal, 1/n when
// one takes everything.
func Jain(xs []float64) float64 {
	var s, s2 float64
	for _, x := range xs {
		s += x
		s2 += x * x
	}
	if s2 == 0 {
		return 0
	}
	// At most 1 (Cauchy-Schwarz); equal shares that do not sum exactly
	// in floating point gave 1.0000000000000002, which a check of the
	// index's range rejected (TestRTTFairnessRows, once in CI-like runs).
	return min(1, s*s/(float64(len(xs))*s2))
}

// Slug turns a row's label into a file-name part for its plots: lower
// case, letters, digits and '-' kept, '.' as 'p' (so "0.1%" and "01%"
// differ), anything else '_'.
func Slug(s string) string {
	s = strings.ToLower(s)
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-':
			return r
		case r == '.':
			return 'p'
		}
		return '_'
	}, s)
}

// EmuCheck is an emulator's self-check over a row's measured window: the
// release lateness of its packets (write start against due time; p50 and
// p99 to within a histogram bucket), its loops' busiest direction as a
// fraction of the window, packets refused at its buffer cap, packets the
// TUN devices dropped before it read them, the packets it forwarded and
// why the row is flagged.
type EmuCheck struct {
	LateP50us  float64  `json:"late_p50_us"`
	LateP99us  float64  `json:"late_p99_us"`
	LateMaxus  float64  `json:"late_max_us"`
	ReaderBusy float64  `json:"reader_busy"`
	WriterBusy float64  `json:"writer_busy"`
	Overflow   uint64   `json:"overflow"`
	TUNDrops   int64    `json:"tun_drops"`
	Packets    uint64   `json:"packets"`
	Why        []string `json:"why,omitempty"`
}
