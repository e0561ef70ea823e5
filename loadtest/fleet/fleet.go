//go:build linux

// Package fleet is `mrgw-lab loadtest fleet`: path-health and membership
// gossip at fleet size. It starts G gateways' gossip (real memberlist
// instances on the project's guarded transport, package region, encrypted)
// in R regions with P planes each, in this process on loopback, and gives
// each a stand-in for the gateway's relay built from pathmgr: per peer
// gateway of another region a pathmgr.Set with one path per plane, whose
// PlaneSummary verdicts it publishes (region.Cluster.PublishHealth), and a
// pathmgr.Reports that takes the others' verdicts in and takes its own
// paths down on them, as gateway/health.go does.
//
// It measures: a plane failing at one gateway until every gateway of the
// other regions (every one whose paths cross that plane) has the verdict;
// a gateway killed (no goodbye) until every other one routes around it; a
// new region's first gateway until every other one can route to it; gossip
// bytes, CPU, memory and table sizes per gateway in steady state and in a
// storm where a quarter of all planes flap, with the plane verdicts of the
// storm; broadcasts lost (gave way in a full queue before they were sent)
// and verdicts that never arrived.
//
// What it leaves out: the relay's own detection of a failed path (timeouts
// and probes, pathmgr and metaroce, a few round trips): the clock starts
// when the failing gateway's relay publishes, and only that gateway
// detects; the others learn by gossip (the slowest case).
package fleet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	rdebug "runtime/debug"
	"time"
)

// Options of a run; zero fields take the defaults.
type Options struct {
	Gateways int // G (default 32)
	Regions  int // R (default G/4 within 2..32)
	Planes   int // P (default 16)
	// Profile: "tuned" (probe 200 ms, timeout 100 ms, suspicion ×2,
	// gossip 50 ms: config/examples) or "lan" (memberlist's LAN preset).
	Profile  string
	Failures int           // plane failures measured in steady state (default 20)
	Deaths   int           // gateways killed (default 3)
	Joins    int           // new regions started (default 3)
	Steady   time.Duration // the steady-state window (default 10 s)
	Storm    time.Duration // the storm (default 20 s)
	// Flap is how long a flapping plane stays down, then up (default 3 s,
	// ±25%).
	Flap time.Duration
	// EventTimeout: a verdict not seen everywhere within it counts as
	// missed (default 10 s); a death or join gets memberlist's push/pull
	// interval more (membershipWait).
	EventTimeout time.Duration
	// Timeout bounds the whole run (0: none). When it passes, Run stops
	// and returns what it measured: the rows of the steps done, the step
	// it cut short as a row marked Partial (naming the timeout), a note,
	// and an error matching ErrTimeout. The same happens when ctx ends (an
	// interrupt): a run that took 25 minutes used to print nothing.
	Timeout time.Duration
	Seed    uint64
	// Compress keeps memberlist's compression of gossip (as the gateway
	// does); off by default, because in one process with G gateways it
	// was the largest CPU cost (region.Config.NoCompression). Bytes on
	// the wire are then uncompressed: an upper bound.
	Compress bool
	// NoDamping turns flap damping off (region.DampingConfig.Off): every
	// transition of a flapping plane goes on the wire, as before it.
	NoDamping bool
	Progress  io.Writer // progress lines; nil: none
}

func (o *Options) defaults() {
	if o.Gateways <= 0 {
		o.Gateways = 32
	}
	if o.Regions <= 0 {
		o.Regions = min(max(o.Gateways/4, 2), 32)
	}
	o.Regions = min(o.Regions, o.Gateways)
	if o.Planes <= 0 {
		o.Planes = 16
	}
	if o.Profile == "" {
		o.Profile = "tuned"
	}
	if o.Failures <= 0 {
		o.Failures = 20
	}
	if o.Deaths < 0 {
		o.Deaths = 0
	} else if o.Deaths == 0 {
		o.Deaths = 3
	}
	if o.Joins <= 0 {
		o.Joins = 3
	}
	if o.Steady <= 0 {
		o.Steady = 10 * time.Second
	}
	if o.Storm <= 0 {
		o.Storm = 20 * time.Second
	}
	if o.Flap <= 0 {
		o.Flap = 3 * time.Second
	}
	if o.EventTimeout <= 0 {
		o.EventTimeout = 10 * time.Second
	}
	if o.Seed == 0 {
		o.Seed = 1
	}
}

// Row is one measured event or window.
type Row struct {
	Gateways int    `json:"gateways"`
	Regions  int    `json:"regions"`
	Planes   int    `json:"planes"`
	Event    string `json:"event"` // steady, plane_verdict, gateway_dead, region_join, storm, storm_plane_verdict
	Samples  int    `json:"samples"`
	// Time until every gateway that needs it has it, over the events.
	P50ms float64 `json:"p50_ms"`
	P99ms float64 `json:"p99_ms"`
	MaxMs float64 `json:"max_ms"`
	// Per receiving gateway (each delivery one sample).
	DeliveryP50ms float64 `json:"delivery_p50_ms"`
	DeliveryP99ms float64 `json:"delivery_p99_ms"`
	// Gossip per gateway over the row's window: all of it (datagrams and
	// streams), and the health messages this gateway sent.
	BytesSentPerS   float64 `json:"gossip_bytes_sent_per_s"`
	BytesRecvPerS   float64 `json:"gossip_bytes_recv_per_s"`
	HealthBytesPerS float64 `json:"health_bytes_sent_per_s"`
	HealthMsgsPerS  float64 `json:"health_msgs_sent_per_s"`
	StreamBytesPerS float64 `json:"stream_bytes_per_s"`
	CPUPerGateway   float64 `json:"cpu_per_gateway"` // cores
	MemPerGateway   float64 `json:"mem_per_gateway_bytes"`
	RSSPerGateway   float64 `json:"rss_per_gateway_bytes"`
	VerdictsMax     int     `json:"verdicts_max"`
	VerdictBound    int     `json:"verdict_bound"`
	OwnMax          int     `json:"own_max"`
	QueuedMax       int     `json:"queued_max"`
	ReportsMax      int     `json:"reports_max"`
	ReportsBound    int     `json:"reports_bound"`
	ReportsEvicted  uint64  `json:"reports_evicted"`
	// Flap damping: the most verdicts of one gateway held back at the
	// end of the window; ups held, and downs that needed no message,
	// over the window, all gateways; Known: storm episodes every user
	// already knew when the plane went down (its up had been held back,
	// so they never saw it come up: 0 ms).
	HeldMax  int    `json:"held_max"`
	UpsHeld  uint64 `json:"ups_held"`
	Absorbed uint64 `json:"downs_absorbed"`
	Known    int    `json:"known_at_t0"`
	// DampedUsers: (episode, user) pairs counted at t0 because the
	// failing gateway's own verdict on its paths to that user over the
	// plane already said down on the wire (left from the user's earlier
	// flap of the plane, whose up damping held back): no message is due
	// to it (see knownDown).
	DampedUsers      int `json:"damped_users"`
	MemberSocketsMax int `json:"member_sockets_max"`
	// BroadcastsLost: health messages (and goodbyes) that gave way in a
	// full queue before they were sent; DownEvicted: down verdicts that
	// gave way in a full table; WatchDropped: reports a full watcher
	// channel missed; Missed: events not seen everywhere in time.
	// DirectSent: verdicts on peers also sent straight to the peer over
	// the window, all gateways (region.Stats.HealthDirect); DirectLost:
	// those that could not be sent (counted in OK as lost).
	DirectSent     uint64 `json:"direct_sent"`
	DirectLost     uint64 `json:"direct_lost"`
	BroadcastsLost uint64 `json:"broadcasts_lost"`
	DownEvicted    uint64 `json:"down_evicted"`
	WatchDropped   uint64 `json:"watch_dropped"`
	Missed         int    `json:"missed"`
	// Late: deliveries of a death or join that took longer than
	// EventTimeout (they missed every copy of memberlist's broadcast and
	// came by its push/pull anti-entropy; see membershipWait).
	Late    int     `json:"late,omitempty"`
	WindowS float64 `json:"window_s"`
	LoadAvg float64 `json:"load_avg"`
	Profile string  `json:"profile"`
	// SchedLag: how late a goroutine that sleeps lagTick at a time wakes
	// up, p99 and max over the window. It tells a starved process: the
	// gossip timings of a window whose lag is comparable to the probe
	// timeout (100 ms) measure the machine, not the gossip.
	SchedLagP99ms float64 `json:"sched_lag_p99_ms"`
	SchedLagMaxMs float64 `json:"sched_lag_max_ms"`
	// Partial: the step was cut short (the run's timeout passed, it was
	// interrupted, or forming failed), and why: the row holds what was
	// measured until then; the event in flight is left out (not counted
	// as missed). Empty for a step that ran to its end.
	Partial string `json:"partial,omitempty"`
}

// Report is a run's result.
type Report struct {
	Rows  []Row
	Notes []string
}

// ErrTimeout: the run's Options.Timeout passed before it finished (Run's
// error matches it with errors.Is; its Report holds what was measured).
var ErrTimeout = errors.New("fleet: the run's timeout passed")

// timeoutError is ErrTimeout naming the timeout.
type timeoutError time.Duration

func (e timeoutError) Error() string {
	return fmt.Sprintf("the run's timeout of %s passed", time.Duration(e))
}

func (e timeoutError) Is(target error) bool { return target == ErrTimeout }

// OK reports whether every step ran to its end and nothing was lost,
// missed or overflowed.
func (r *Report) OK() bool {
	for _, row := range r.Rows {
		if row.BroadcastsLost > 0 || row.DownEvicted > 0 || row.Missed > 0 || row.DirectLost > 0 ||
			row.VerdictsMax > row.VerdictBound || row.WatchDropped > 0 || row.Partial != "" {
			return false
		}
	}
	return true
}

// debug (FLEET_DEBUG): "1" lists the gateways that missed an event;
// "gateway/plane" also traces that plane's reports at g000.
var debug = os.Getenv("FLEET_DEBUG")

func planeName(i int) string { return fmt.Sprintf("p%02d", i) }

func planeOf(path int, _ uint16) int { return path }

// Run runs the scenario at o's size and returns its rows. When the run
// stops early (o.Timeout passed, ctx ended, or the fleet did not form),
// it returns the rows measured so far with the step it cut short marked
// Partial, and an error (matching ErrTimeout for o.Timeout).
func Run(ctx context.Context, o Options) (*Report, error) {
	o.defaults()
	if o.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, o.Timeout, timeoutError(o.Timeout))
		defer cancel()
	}
	raiseFDLimit()
	f := &fleet{o: o, failed: map[string]bool{}, rng: newRng(o.Seed)}
	f.logf = func(format string, args ...any) {
		if o.Progress != nil {
			fmt.Fprintf(o.Progress, "fleet G=%d P=%d: "+format+"\n", append([]any{o.Gateways, o.Planes}, args...)...)
		}
	}
	f.tr.init()
	key := make([]byte, 32)
	for i := range key {
		key[i] = byte(f.rng.IntN(256))
	}
	f.keys = [][]byte{key}
	defer f.shutdown()
	rep := &Report{}

	// This process stands for G gateways' processes: a heap target G
	// times one gateway's would be right; gcPercent is enough to keep the
	// collector from pacing every goroutine (see form).
	defer rdebug.SetGCPercent(rdebug.SetGCPercent(gcPercent))
	lctx, stopLag := context.WithCancel(ctx)
	defer stopLag()
	go f.probeLag(lctx)
	for _, step := range []func(context.Context, *Report) *stop{
		f.runForm, f.runSteady, f.runPlaneFailures, f.runDeaths, f.runJoins, f.runStorm,
	} {
		if s := step(ctx, rep); s != nil {
			if s.fatal != nil {
				return nil, s.fatal
			}
			return f.cut(ctx, rep, s)
		}
	}
	f.label(rep)
	return rep, nil
}

// stop is a step cut short: the error, the window it was measuring, the
// episodes measured so far and the rows (events) the step makes. A fatal
// error ends the run with no report.
type stop struct {
	err    error
	w      window
	evs    []*episode
	events []string
	fatal  error
}

// label stamps every row with the run's size.
func (f *fleet) label(rep *Report) {
	for i := range rep.Rows {
		rep.Rows[i].Gateways, rep.Rows[i].Regions, rep.Rows[i].Planes = f.o.Gateways, f.o.Regions, f.o.Planes
		rep.Rows[i].Profile = f.o.Profile
	}
}

// cut ends the run early: the rows of the steps done, then the rows of the
// step cut short (s.evs is what it had measured), marked Partial with the
// reason; the rows of the steps not run are absent.
func (f *fleet) cut(ctx context.Context, rep *Report, s *stop) (*Report, error) {
	o, err := f.o, s.err
	if c := context.Cause(ctx); c != nil {
		err = c // the timeout, or an interrupt, rather than what it broke
	}
	started := ""
	if s.events[0] == "form" {
		started = fmt.Sprintf(" (%d of %d gateways started)", len(f.live()), o.Gateways)
	}
	for _, ev := range s.events {
		r := f.row(ev, s.w, s.evs)
		r.Partial = fmt.Sprintf("cut short after %.1f s%s: %v", r.WindowS, started, err)
		rep.Rows = append(rep.Rows, r)
	}
	rep.Notes = append(rep.Notes, fmt.Sprintf("%d gateways × %d planes: stopped in %s after %.0f s: %v; the steps after it were not run",
		o.Gateways, o.Planes, s.events[0], time.Since(f.begin).Seconds(), err))
	f.logf("stopped in %s: %v", s.events[0], err)
	f.label(rep)
	return rep, fmt.Errorf("fleet: %d gateways × %d planes stopped in %s: %w", o.Gateways, o.Planes, s.events[0], err)
}

func newRng(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0x66_6c_65_65_74)) }
