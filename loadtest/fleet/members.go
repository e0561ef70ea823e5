//go:build linux

package fleet

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/mrgw/mrgw/units"

	"github.com/mrgw/mrgw/internal/sleep"
	"github.com/mrgw/mrgw/pathmgr"
	"github.com/mrgw/mrgw/region"
)

// The fleet as a whole: forming it, membership convergence and repair,
// which planes are failed, shutdown.

type fleet struct {
	failMu sync.Mutex
	failed map[string]bool // name/plane of the planes failed now (the truth n's probes would find)
	o      Options
	keys   [][]byte
	rng    *rand.Rand
	mu     sync.Mutex
	nodes  []*node // live and dead, in start order
	tr     tracker
	logf   func(format string, args ...any)
	begin  time.Time // when forming began
	lagMu  sync.Mutex
	lags   []float64     // scheduling lag samples, ms (at most maxLags)
	cpu0   time.Duration // the process's CPU time then
}

// Scheduling lag probe (Row.SchedLagP99ms).
const (
	lagTick = 10 * time.Millisecond
	maxLags = 1 << 17 // 22 min of ticks; the run is shorter
)

// probeLag records how late each lagTick sleep wakes up, until ctx ends.
func (f *fleet) probeLag(ctx context.Context) {
	for ctx.Err() == nil {
		t0 := time.Now()
		time.Sleep(lagTick)
		late := units.Ms(time.Since(t0) - lagTick)
		f.lagMu.Lock()
		if len(f.lags) < maxLags {
			f.lags = append(f.lags, late)
		}
		f.lagMu.Unlock()
	}
}

// cpuSoFar is the cores this process used on average since forming began.
func (f *fleet) cpuSoFar() float64 {
	return (cpuTime() - f.cpu0).Seconds() / max(time.Since(f.begin).Seconds(), 1e-3)
}

// form starts the G gateways and waits until every one sees every other
// alive.
//
// Joining one gateway at a time, each waiting for the last, made forming
// 64 gateways take 204 s on a loaded machine and 128 never finish: every
// join is a push/pull stream with a seed plus an alive broadcast that every
// member relays L times, each gossip packet compressed with a fresh LZW
// table, so the process's CPU grows with G² while forming; on a machine
// whose other load leaves this process a fraction of a core, the garbage
// collector's assists parked the joins behind it (goroutine dumps: joins
// waiting in gcParkAssist inside the TCP dial) and 100 ms probe timeouts
// fired, whose suspicions and refutations added broadcasts of their own.
// So: gateways join in waves that double the fleet (each joining through
// formSeeds random members of the part already formed, formParallel at a
// time), each wave awaited by membership progress (converge), not by the
// wall clock; and the heap target is raised while the fleet runs
// (gcPercent), because this process stands for G processes, each of which
// would have a heap (and a collector) of its own.
func (f *fleet) form(ctx context.Context) error {
	o := f.o
	f.logf("starting %d gateways in %d regions, %d planes each (%s profile)", o.Gateways, o.Regions, o.Planes, o.Profile)
	started := 0
	startOne := func(i int) (*node, error) {
		r := fmt.Sprintf("r%02d", i%o.Regions)
		return f.start(fmt.Sprintf("g%03d-%s", i, r), r)
	}
	if _, err := startOne(0); err != nil {
		return err
	}
	started = 1
	for started < o.Gateways {
		formed := f.live()
		wave := min(max(started, formParallel), o.Gateways-started)
		nodes := make([]*node, wave)
		for j := range wave {
			n, err := startOne(started + j)
			if err != nil {
				return err
			}
			nodes[j] = n
		}
		seeds := make([][]string, wave)
		for j := range wave {
			for range formSeeds {
				seeds[j] = append(seeds[j], formed[f.rng.IntN(len(formed))].c.Addr())
			}
		}
		errs := make(chan error, wave)
		sem := make(chan struct{}, formParallel)
		for j, n := range nodes {
			sem <- struct{}{}
			go func() {
				defer func() { <-sem }()
				errs <- f.joinVia(ctx, n, seeds[j])
			}()
		}
		for range wave {
			if err := <-errs; err != nil {
				return err
			}
		}
		started += wave
		if err := f.converge(ctx, formStall); err != nil {
			return err
		}
		f.logf("%d gateways formed (%.2f cores used by this process so far)", started, f.cpuSoFar())
	}
	return nil
}

// Forming the fleet (see form).
const (
	formSeeds    = 3
	formParallel = 16
	// formStall: forming fails when no gateway's view of the fleet grew
	// for this long, repairs included (converge).
	formStall = 90 * time.Second
	gcPercent = 400
)

func (f *fleet) setFailed(name string, plane int, v bool) {
	f.failMu.Lock()
	defer f.failMu.Unlock()
	if v {
		f.failed[name+"/"+planeName(plane)] = true
	} else {
		delete(f.failed, name+"/"+planeName(plane))
	}
}

func (f *fleet) isFailed(name string, plane int) bool {
	f.failMu.Lock()
	defer f.failMu.Unlock()
	return f.failed[name+"/"+planeName(plane)]
}

// raiseFDLimit: every gateway opens a socket per other member (region's
// member sockets), G² in one process.
func raiseFDLimit() {
	var l syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l) == nil && l.Cur < l.Max {
		l.Cur = l.Max
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l)
	}
}

func (f *fleet) timings() (string, region.Timings) {
	if f.o.Profile == "lan" {
		return region.ProfileLAN, region.Timings{}
	}
	return region.ProfileCustom, region.Timings{ProbeInterval: 200 * time.Millisecond,
		ProbeTimeout: 100 * time.Millisecond, SuspicionMult: 2, GossipInterval: 50 * time.Millisecond}
}

func (f *fleet) start(name, reg string) (*node, error) {
	lo := netip.MustParseAddr("127.0.0.1")
	meta := region.Meta{Region: reg, Control: netip.AddrPortFrom(lo, 1), Capabilities: []string{region.CapHealthBatch}}
	for p := range f.o.Planes {
		meta.Planes = append(meta.Planes, region.Plane{Name: planeName(p), WAN: netip.AddrPortFrom(lo, uint16(2+p))})
	}
	prof, t := f.timings()
	c, err := region.New(region.Config{Name: name, Meta: meta, Bind: "127.0.0.1:0", Keys: f.keys,
		Profile: prof, Timings: t, JoinAttempts: 5, NoCompression: !f.o.Compress,
		FlapDamping: region.DampingConfig{Off: f.o.NoDamping}}, nil)
	if err != nil {
		return nil, fmt.Errorf("fleet: starting %s: %w", name, err)
	}
	n := &node{f: f, name: name, region: reg, c: c, sets: map[string]*pathmgr.Set{}, failed: map[int]bool{}, hearsay: map[hearsayKey]bool{},
		reports: pathmgr.NewReports(pathmgr.ReportsConfig{TTL: region.DefaultHealthTTL, HoldDown: 10 * time.Second,
			Bound: c.HealthBound}), // as gateway/health.go: 2·G·P
		epoch: time.Now()}
	hch, hstop := c.WatchHealth(8192)
	cch, cstop := c.WatchChanges(4096)
	n.stopWatch = []func(){hstop, cstop}
	n.wg.Add(2)
	go n.watchHealth(hch)
	go n.watchChanges(cch)
	f.mu.Lock()
	f.nodes = append(f.nodes, n)
	f.mu.Unlock()
	return n, nil
}

func (f *fleet) join(ctx context.Context, n *node) error {
	lv := f.live()
	var seeds []string
	for range 3 {
		s := lv[f.rng.IntN(len(lv))]
		if s != n {
			seeds = append(seeds, s.c.Addr())
		}
	}
	if len(seeds) == 0 {
		seeds = []string{lv[0].c.Addr()}
	}
	return f.joinVia(ctx, n, seeds)
}

func (f *fleet) joinVia(ctx context.Context, n *node, seeds []string) error {
	jctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := n.c.Join(jctx, seeds); err != nil {
		return fmt.Errorf("fleet: %s joining: %w", n.name, err)
	}
	return nil
}

// converge waits until every live gateway sees every other alive. It
// fails when the views stop growing for stall (membership progress, not
// the wall clock: a loaded machine is slow, a stuck fleet is stuck).
//
// A gateway that missed a member's alive broadcast (on a starved process
// the retransmissions can all go by before it is in anyone's view) learns
// of it only at its next push/pull, every 30 s × (log₂ G − 4) in
// memberlist: 60 s at 64 gateways, the first run's stall. So a gateway
// whose view has not grown for repairAfter re-joins through formSeeds
// random members, which is a push/pull of their whole state at once (what
// an operator's retrying seed list does).
func (f *fleet) converge(ctx context.Context, stall time.Duration) error {
	lv := f.live()
	progress, lastSum := time.Now(), -1
	repaired := time.Now()
	for {
		worst, sum := len(lv), 0
		var behind []*node
		for _, n := range lv {
			alive := 0
			for _, gws := range n.c.View().Regions {
				for _, g := range gws {
					if g.State.Live() {
						alive++
					}
				}
			}
			worst = min(worst, alive)
			sum += alive
			if alive < len(lv) {
				behind = append(behind, n)
			}
		}
		if worst == len(lv) {
			return nil
		}
		if sum != lastSum {
			progress, lastSum = time.Now(), sum
		} else if time.Since(progress) > stall {
			return fmt.Errorf("fleet: no progress for %s: a gateway sees only %d of %d alive", stall, worst, len(lv))
		}
		if time.Since(progress) > repairAfter && time.Since(repaired) > repairAfter {
			repaired = time.Now()
			f.logf("%d gateways behind (the worst sees %d of %d): re-joining them through %d members each",
				len(behind), worst, len(lv), formSeeds)
			f.rejoin(ctx, behind, lv)
		}
		if err := sleep.Ctx(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
}

// membershipWait bounds the wait for a death or a join to reach every
// gateway. memberlist spreads both by a broadcast that each holder sends
// to a few random members a few times (RetransmitMult × log₁₀ n); a
// gateway that none of those sends reached (likelier on a starved
// machine, where datagrams are lost to full socket buffers) learns it at
// its next push/pull with a random member, the anti-entropy that bounds
// the delay. So an event counts as missed only when it was not everywhere
// EventTimeout after that bound; deliveries later than EventTimeout are
// counted in Row.Late (they came by push/pull, not by the broadcast).
func (f *fleet) membershipWait() time.Duration {
	ae := time.Duration(0)
	if lv := f.live(); len(lv) > 0 {
		ae = lv[0].c.AntiEntropyInterval()
	}
	return ae + f.o.EventTimeout
}

// repairAfter: see converge.
const repairAfter = 5 * time.Second

// rejoin makes each of behind push/pull with formSeeds random members of
// lv, formParallel at a time; errors only mean the repair did not help.
func (f *fleet) rejoin(ctx context.Context, behind, lv []*node) {
	sem := make(chan struct{}, formParallel)
	var wg sync.WaitGroup
	for _, n := range behind {
		var seeds []string
		for range formSeeds {
			if s := lv[f.rng.IntN(len(lv))]; s != n {
				seeds = append(seeds, s.c.Addr())
			}
		}
		if len(seeds) == 0 {
			continue
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			_ = f.joinVia(ctx, n, seeds)
		}()
	}
	wg.Wait()
}

func (f *fleet) live() []*node {
	f.mu.Lock()
	defer f.mu.Unlock()
	var lv []*node
	for _, n := range f.nodes {
		if !n.dead.Load() {
			lv = append(lv, n)
		}
	}
	return lv
}

// users are the live gateways whose paths cross b's planes: those of the
// other regions.
func (f *fleet) users(b *node) []string {
	var u []string
	for _, n := range f.live() {
		if n.region != b.region {
			u = append(u, n.name)
		}
	}
	return u
}

func (f *fleet) shutdown() {
	f.mu.Lock()
	nodes := slices.Clone(f.nodes)
	f.mu.Unlock()
	var wg sync.WaitGroup
	for _, n := range nodes {
		wg.Add(1)
		go func() { defer wg.Done(); n.kill() }()
	}
	wg.Wait()
}
