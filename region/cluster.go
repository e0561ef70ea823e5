package region

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"math"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mrgw/mrgw/internal/ratelog"
	"github.com/mrgw/mrgw/pathmgr"

	"github.com/hashicorp/memberlist"
)

// Cluster is this gateway's membership in the gossip cluster.
type Cluster struct {
	cfg     Config
	log     *slog.Logger
	core    *core
	ml      *memberlist.Memberlist
	keyring *memberlist.Keyring // nil when gossip is not encrypted
	guard   *guardTransport
	queue   *healthQueue
	errs    *ratelog.Logger // error lines of Join, which the gateway retries

	keyMu sync.Mutex // orders keyring changes and their hand-over to guard

	joinMu  sync.Mutex
	joinErr *JoinError // why the last Join found nobody; nil once one succeeded

	// nameHolder is the gossip address of another member that claims this
	// gateway's name (NameHeldBy).
	nameHolder atomic.Pointer[string]

	gossipInterval time.Duration
	pushPull       time.Duration // memberlist's base push/pull (anti-entropy) interval

	metaMu sync.Mutex
	meta   []byte // encoded Meta announced by NodeMeta

	onMessage atomic.Pointer[MessageHandler] // gateway messages (OnMessage)

	// lifeMu orders Leave and Shutdown: memberlist panics on Leave after
	// Shutdown.
	lifeMu sync.Mutex
	closed bool
	stop   chan struct{}
	wg     sync.WaitGroup // the prune loop and Join attempts still running
}

// New starts memberlist on cfg.Bind and returns the running cluster of one
// member (this gateway). Call Join to meet the others. logger receives
// memberlist's own log lines at debug level, this package's state changes
// at info, gossip it drops or refuses at warn (rate-limited) and a Join
// that finds nobody at error; nil discards all.
//
// memberlist runs on a guarded transport: junk datagrams are dropped and
// counted before they can queue in front of real probes, and streams are
// bounded in number and time (see [DropReasons] and [RefuseReasons]).
func New(cfg Config, logger *slog.Logger) (*Cluster, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	mc, kr, err := cfg.memberlistConfig()
	if err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	meta, _ := cfg.encodeMeta(cfg.Meta) // checked by memberlistConfig
	logger = logger.With("component", "region", "self", cfg.Name)
	c := &Cluster{
		cfg:     cfg,
		log:     logger,
		keyring: kr,
		meta:    meta,
		stop:    make(chan struct{}),

		gossipInterval: mc.GossipInterval,
	}
	c.core = newCore(cfg.Name, &cfg, logger)
	c.core.own.attrDelay = attrDelay(mc.GossipInterval)
	c.queue = newCoreQueue(c.core, mc.RetransmitMult)
	d := &delegate{c: c}
	mc.Delegate, mc.Events, mc.Conflict, mc.Alive = d, d, d, d
	// Logger only, never LogOutput as well: memberlist refuses both. No
	// timestamp prefix: slog adds its own.
	mc.Logger = log.New(slogWriter{logger}, "", 0)
	c.errs = ratelog.New(logger, joinErrorLogEvery)

	var keys [][]byte
	if kr != nil {
		keys = kr.GetKeys()
	}
	bind, _ := netip.ParseAddrPort(cfg.Bind) // checked by memberlistConfig
	c.guard, err = newGuardTransport(bind, keys, mc.TCPTimeout, logger)
	if err != nil {
		return nil, fmt.Errorf("region: starting memberlist on %s: %w", cfg.Bind, err)
	}
	mc.Transport = c.guard
	if cfg.wrapTransport != nil {
		mc.Transport = cfg.wrapTransport(c.guard)
	}
	// The guard drops datagrams longer than maxDatagram: memberlist must
	// never send one (it is 1400 in both presets; set it to be sure).
	mc.UDPBufferSize = udpBufferSize
	if mc.BindPort == 0 {
		mc.BindPort = c.guard.port
	}
	if mc.AdvertisePort == 0 {
		mc.AdvertisePort = c.guard.port
	}
	ml, err := memberlist.Create(mc)
	if err != nil {
		_ = c.guard.Shutdown()
		return nil, fmt.Errorf("region: starting memberlist on %s: %w", cfg.Bind, err)
	}
	c.ml = ml
	c.pushPull = mc.PushPullInterval
	c.wg.Add(1)
	go c.pruneLoop()
	return c, nil
}

// newCoreQueue is the gossip queue of health messages for core's view.
// Members are counted from our own view: the queue asks from memberlist's
// gossip goroutine, and the view needs no memberlist lock (and keeps the
// counts as running totals: asking costs the same at any fleet size). The
// queue holds at most two messages per verdict (a down is never replaced
// by an up before it was sent). Verdict batches only while every alive
// member reads them: a gateway of an earlier build drops a batch as an
// unknown kind, and would miss every verdict in it.
func newCoreQueue(core *core, mult int) *healthQueue {
	q := newHealthQueue(func() int { return max(core.aliveCount(), 1) },
		mult, func() int { return 2*core.healthBound() + 64 })
	q.limit = healthRetransmitLimit
	q.batch = func() bool { return core.allHave(CapHealthBatch) }
	return q
}

// Addr is the address other members reach this one at (with the real
// port when Bind asked for port 0).
func (c *Cluster) Addr() string { return c.ml.LocalNode().Address() }

// AntiEntropyInterval is how often memberlist exchanges its whole state
// with one random member (push/pull) at the current fleet size: the bound
// on how long a gateway that missed every copy of a broadcast (a join, a
// death) goes without it. memberlist scales its base interval by
// ⌈log₂ n − log₂ 32⌉ + 1 above 32 members (pushPullScale in its util.go).
func (c *Cluster) AntiEntropyInterval() time.Duration {
	return pushPullScale(c.pushPull, c.ml.NumMembers())
}

// pushPullScale mirrors memberlist's unexported scaling of the push/pull
// interval with the number of members.
func pushPullScale(interval time.Duration, n int) time.Duration {
	const threshold = 32
	if n <= threshold {
		return interval
	}
	return time.Duration(math.Ceil(math.Log2(float64(n))-math.Log2(threshold))+1) * interval
}

// Name is this gateway's member name.
func (c *Cluster) Name() string { return c.cfg.Name }

// Join contacts seeds (Config.Seeds when seeds is empty) until one answers,
// at most Config.JoinAttempts rounds with growing pauses, and never past
// ctx. It returns how many members answered. No seeds at all is not an
// error: the first gateway of a cluster has nobody to join.
//
// memberlist's Join cannot be cancelled, so an attempt abandoned because
// ctx ended finishes in the background within memberlist's TCP timeout;
// Shutdown waits for it.
//
// A Join that finds nobody (every attempt failed, or ctx's deadline
// passed) is logged at error, at most once per joinErrorLogEvery, and
// kept for [Cluster.JoinErr] until a Join succeeds: a gateway whose keyring
// differs from the cluster's would otherwise run alone, unnoticed.
func (c *Cluster) Join(ctx context.Context, seeds []string) (int, error) {
	if len(seeds) == 0 {
		seeds = c.cfg.Seeds
	}
	if len(seeds) == 0 {
		return 0, nil
	}
	n, attempts, err := c.join(ctx, seeds)
	if err == nil {
		c.joinMu.Lock()
		c.joinErr = nil
		c.joinMu.Unlock()
		return n, nil
	}
	if errors.Is(err, ErrClosed) {
		return 0, err
	}
	if errors.Is(err, context.Canceled) {
		return 0, fmt.Errorf("region: join %v: %w", seeds, err) // stopping, not failing
	}
	je := &JoinError{Seeds: slices.Clone(seeds), Attempts: attempts, Err: err, Hint: joinHint(err)}
	c.joinMu.Lock()
	c.joinErr = je
	c.joinMu.Unlock()
	args := []any{"seeds", seeds, "attempts", attempts, "err", strings.Join(strings.Fields(err.Error()), " ")}
	if je.Hint != "" {
		args = append(args, "hint", je.Hint)
	}
	c.errs.Log(slog.LevelError, "join", "cannot join gossip: this gateway runs alone", args...)
	return 0, je
}

// NameHeldBy returns the gossip address of the last other member seen
// claiming this gateway's own name, and whether one was. memberlist
// reports the conflict on both sides alike; which of the two holds the
// name is the gateway's to decide: one that sees it during its first Join
// came second (the seeds already knew the other), and must not serve.
func (c *Cluster) NameHeldBy() (string, bool) {
	if p := c.nameHolder.Load(); p != nil {
		return *p, true
	}
	return "", false
}

// JoinErr is why the last Join found no member, or nil once a Join has
// succeeded (and before any Join failed). The gateway reports it in
// /readyz. A *JoinError.
func (c *Cluster) JoinErr() error {
	c.joinMu.Lock()
	defer c.joinMu.Unlock()
	if c.joinErr == nil {
		return nil
	}
	return c.joinErr
}

// joinErrorLogEvery: a gateway retrying Join forever logs its failure at
// most this often (with the count of failures in between).
const joinErrorLogEvery = 30 * time.Second

// JoinError is a Join that found no member.
type JoinError struct {
	Seeds    []string
	Attempts int    // rounds made
	Err      error  // the last round's error, or ctx's
	Hint     string // the likely cause, when the error tells it; else empty
}

func (e *JoinError) Error() string {
	// memberlist's errors span lines (go-multierror); /readyz and logs
	// want one.
	msg := fmt.Sprintf("region: cannot join gossip through %v after %d attempts: %s",
		e.Seeds, e.Attempts, strings.Join(strings.Fields(e.Err.Error()), " "))
	if e.Hint != "" {
		msg += " (" + e.Hint + ")"
	}
	return msg
}

func (e *JoinError) Unwrap() error { return e.Err }

// joinHint names the likely cause of a failed join from memberlist's
// error text (v0.7.0), which is all it gives.
func joinHint(err error) string {
	msg := strings.ToLower(err.Error())
	switch {
	case strings.Contains(msg, "no installed keys could decrypt"):
		return "the seeds' gossip is encrypted with a key this gateway does not have: check gossip.keyring"
	case strings.Contains(msg, "remote state is encrypted and encryption is not configured"):
		return "the seeds encrypt gossip and this gateway has no gossip.keyring"
	case strings.Contains(msg, "encryption is configured but remote state is not encrypted"):
		return "this gateway encrypts gossip and the seeds do not"
	case strings.Contains(msg, "connection refused"):
		return "nothing listens at the seeds' gossip address"
	case strings.Contains(msg, "eof"), strings.Contains(msg, "connection reset"):
		return "the seeds closed the connection: refused (another keyring?) or overloaded"
	case strings.Contains(msg, "timeout"), strings.Contains(msg, "deadline"):
		return "the seeds did not answer in time"
	}
	return ""
}

// join makes the attempts of Join; it returns how many members answered,
// the rounds made and the last error.
func (c *Cluster) join(ctx context.Context, seeds []string) (int, int, error) {
	pause := 100 * time.Millisecond
	var last error
	for attempt := 1; attempt <= c.cfg.JoinAttempts; attempt++ {
		type result struct {
			n   int
			err error
		}
		res := make(chan result, 1)
		if !c.track() {
			return 0, attempt - 1, ErrClosed
		}
		go func() {
			defer c.wg.Done()
			n, err := c.ml.Join(seeds)
			res <- result{n, err}
		}()
		select {
		case r := <-res:
			if r.n > 0 {
				if r.err != nil {
					c.log.Debug("some seeds did not answer", "err", r.err)
				}
				return r.n, attempt, nil
			}
			last = r.err
			if last == nil {
				last = errors.New("no seed answered")
			}
		case <-ctx.Done():
			return 0, attempt, fmt.Errorf("%w (last error: %v)", ctx.Err(), last)
		}
		if attempt == c.cfg.JoinAttempts {
			break
		}
		c.log.Debug("join attempt failed", "attempt", attempt, "err", last)
		t := time.NewTimer(pause)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return 0, attempt, fmt.Errorf("%w (last error: %v)", ctx.Err(), last)
		case <-c.stop:
			t.Stop()
			return 0, attempt, ErrClosed
		}
		pause = min(2*pause, 5*time.Second)
	}
	return 0, c.cfg.JoinAttempts, last
}

// track registers a background goroutine unless the cluster is closed.
func (c *Cluster) track() bool {
	c.lifeMu.Lock()
	defer c.lifeMu.Unlock()
	if c.closed {
		return false
	}
	c.wg.Add(1)
	return true
}

// Leave tells the cluster this gateway is going away, so the others see it
// as left at once instead of dead after the suspicion timeout. It waits at
// most timeout for the message to go out. Gossip keeps running until
// Shutdown.
func (c *Cluster) Leave(timeout time.Duration) error {
	c.lifeMu.Lock()
	defer c.lifeMu.Unlock()
	if c.closed {
		return ErrClosed
	}
	begin := time.Now()
	// Say goodbye first, through our own gossip queue, so the others
	// record "left" rather than "dead" (see decodeGoodbye for why
	// memberlist's own leave message is not enough).
	bye, err := appendGoodbye(nil, c.cfg.Name)
	if err != nil {
		return err
	}
	c.core.goodbye(c.cfg.Name)
	c.queue.queue("\x00goodbye", bye, true)
	if err := c.ml.Leave(timeout); err != nil {
		return fmt.Errorf("region: leave: %w", err)
	}
	// memberlist returns once its leave message has been sent to one
	// member, which may be a dead one (it gossips to the recently dead
	// too). Keep gossiping a few rounds so the goodbye reaches the living.
	// Serf does the same with its LeavePropagateDelay.
	wait := min(4*c.gossipInterval, timeout-time.Since(begin))
	if wait > 0 {
		time.Sleep(wait)
	}
	return nil
}

// Shutdown stops gossip without a goodbye (the others will find this
// gateway dead), stops background work and closes every watcher channel.
// It is safe to call more than once.
func (c *Cluster) Shutdown() error {
	c.lifeMu.Lock()
	if c.closed {
		c.lifeMu.Unlock()
		return nil
	}
	c.closed = true
	close(c.stop)
	c.lifeMu.Unlock()

	err := c.ml.Shutdown()
	c.wg.Wait()
	c.core.changes.close()
	c.core.reports.close()
	if err != nil {
		return fmt.Errorf("region: shutdown: %w", err)
	}
	return nil
}

func (c *Cluster) pruneLoop() {
	defer c.wg.Done()
	t := time.NewTicker(max(c.cfg.HealthTTL/4, 10*time.Millisecond))
	defer t.Stop()
	// Verdicts on peers wait c.core.own.attrDelay for this gateway's
	// verdict on its own plane (healthtable.go).
	flush := time.NewTicker(c.core.own.attrDelay / 4)
	defer flush.Stop()
	for {
		select {
		case <-flush.C:
			c.send(c.core.flushOwn())
		case <-t.C:
			c.core.prune()
			c.send(c.core.refreshOwn())
		case <-c.stop:
			return
		}
	}
}

// UpdateMeta announces new metadata (a plane added or moved) and waits at
// most timeout for it to be sent.
func (c *Cluster) UpdateMeta(m Meta, timeout time.Duration) error {
	b, err := c.cfg.encodeMeta(m)
	if err != nil {
		return err
	}
	c.lifeMu.Lock()
	defer c.lifeMu.Unlock()
	if c.closed {
		return ErrClosed
	}
	c.metaMu.Lock()
	c.meta = b
	c.metaMu.Unlock()
	if err := c.ml.UpdateNode(timeout); err != nil {
		return fmt.Errorf("region: update metadata: %w", err)
	}
	return nil
}

// Ping sends one failure-detector probe to the member named name at addr
// (its gossip address) and waits memberlist's probe timeout for the ack: a
// direct check of one member, outside the probe rounds and the suspicion
// that decide who is dead.
func (c *Cluster) Ping(name string, addr netip.AddrPort) error {
	_, err := c.ml.Ping(name, net.UDPAddrFromAddrPort(addr))
	return err
}

// View returns a snapshot of all regions and their gateways.
func (c *Cluster) View() View { return c.core.view() }

// Route returns the live gateways of region, alive before suspect, sorted
// by name; or a *RouteError matching ErrUnknownRegion or
// ErrRegionUnreachable. It reads local state only and never blocks on the
// network.
func (c *Cluster) Route(region string) ([]Gateway, error) { return c.core.route(region) }

// WatchChanges returns a channel of gateway state changes holding up to n
// undelivered changes, and a function that stops the watch and closes the
// channel. Changes that find the channel full are dropped and counted;
// re-read View after a burst. Shutdown closes the channel.
func (c *Cluster) WatchChanges(n int) (<-chan Change, func()) { return c.core.changes.add(n) }

// WatchHealth is WatchChanges for health reports received from other
// gateways (not those this gateway publishes).
func (c *Cluster) WatchHealth(n int) (<-chan HealthReport, func()) { return c.core.reports.add(n) }

// PublishHealth records this gateway's verdict on its paths to a peer over
// one plane. From is set to this gateway's name (a different non-empty From
// is an error) and a zero At to now; a report not newer than the last one
// on the same peer and plane is an error. RTT is carried in microseconds
// and the fractions in 1/65535.
//
// Only what changes the verdicts others hold goes on the wire (see
// docs/GATEWAY.md, "What path-health gossip costs"): a change of state,
// unless another gateway already said the same; a verdict that holds and
// is not up, renewed every health TTL / 3 by the cluster itself; when most
// of this gateway's peers see one of its planes down, one verdict on its
// own plane (Peer = From) instead of one per peer. An "up" that holds, and
// a change of RTT, loss or ECN alone, are kept local (Health answers with
// them).
func (c *Cluster) PublishHealth(h HealthReport) error {
	if h.From != "" && h.From != c.cfg.Name {
		return fmt.Errorf("region: health report from %q published by %q", h.From, c.cfg.Name)
	}
	h.From = c.cfg.Name
	if h.At.IsZero() {
		h.At = c.core.now()
	}
	msg, err := appendHealth(nil, h, 0)
	if err != nil {
		return err
	}
	h, _, err = decodeHealth(msg) // what the others will see
	if err != nil {
		return err
	}
	out, err := c.core.publishOwn(h)
	if err != nil {
		return fmt.Errorf("region: health report on %s/%s: %w", h.Peer, h.Plane, err)
	}
	c.send(out)
	return nil
}

// send queues this gateway's own verdicts for gossip, and sends its
// verdicts on peers straight to those peers too (core.directLocked).
func (c *Cluster) send(out []HealthReport) {
	for _, h := range out {
		c.queueVerdict(h, 0)
	}
	for _, h := range c.core.takeDirect() {
		c.sendDirect(h)
	}
}

// sendDirect sends h to its peer in one gossip datagram (a version-1
// health message, which every build reads; encrypted as all gossip). A
// datagram lost on the way costs what the gossip alone would have: the
// verdict's next renewal, or the peer's own probes.
func (c *Cluster) sendDirect(h HealthReport) {
	addr, ok := c.core.gossipAddr(h.Peer)
	if !ok {
		return // not alive: nothing to tell
	}
	msg, err := appendHealth(nil, h, 0)
	if err != nil {
		return // validated when published
	}
	node := &memberlist.Node{Name: h.Peer, Addr: addr.Addr().AsSlice(), Port: addr.Port()}
	if err := c.ml.SendBestEffort(node, msg); err != nil {
		c.core.own.directLost.Add(1)
		c.log.Debug("cannot send a path-health verdict to its peer", "peer", h.Peer, "plane", h.Plane, "err", err)
		return
	}
	c.core.own.directSent.Add(1)
}

// HealthBound is the health table's bound now: Config.MaxHealthReports
// when set, else max(DefaultMaxHealthReports, 2 × Σ planes of the
// gateways in the view) = 2·G·P. A gateway bounds its pathmgr.Reports by
// it too (pathmgr.ReportsConfig.Bound).
func (c *Cluster) HealthBound() int { return c.core.healthBound() }

// HealthTables returns the sizes of the path-health tables.
func (c *Cluster) HealthTables() HealthTables {
	c.core.mu.Lock()
	t := HealthTables{Verdicts: len(c.core.health), VerdictBound: c.core.healthBoundLocked(),
		Own: c.core.own.n + len(c.core.own.self), Damped: len(c.core.own.damp.entries), Held: c.core.own.damp.heldCount()}
	c.core.mu.Unlock()
	t.Queued = c.queue.len()
	return t
}

// Health returns the unexpired verdict on peer's plane, from whichever
// gateway said it last (this one included; peer's own verdict on its plane
// has From = Peer); else this gateway's own verdict on its paths to peer
// over plane.
func (c *Cluster) Health(peer, plane string) (HealthReport, bool) { return c.core.latest(peer, plane) }

// OwnWire returns what this gateway's own verdict on its paths to peer
// over plane last said on the wire, which differs from the local verdict
// while flap damping holds an up back (the wire keeps saying down).
func (c *Cluster) OwnWire(peer, plane string) (pathmgr.State, bool) {
	c.core.mu.Lock()
	defer c.core.mu.Unlock()
	o := c.core.own.peers[plane][peer]
	if o == nil {
		return pathmgr.Up, false
	}
	return o.wire, true
}

// Stats returns the cluster's counters.
func (c *Cluster) Stats() Stats {
	s := Stats{
		Messages:      c.core.messages.Load(),
		BadMessages:   c.core.badMessages.Load(),
		BadMeta:       c.core.badMeta.Load(),
		HealthDropped: c.core.reports.dropped.Load(),

		HealthOriginated:   c.core.own.originated.Load(),
		HealthRelayed:      c.core.own.relayed.Load(),
		HealthDeduped:      c.core.own.deduped.Load(),
		HealthCovered:      c.core.own.covered.Load(),
		HealthDownEvicted:  c.core.own.downEvicted.Load(),
		HealthDirect:       c.core.own.directSent.Load(),
		HealthDirectLost:   c.core.own.directLost.Load(),
		HealthSent:         c.queue.sent.Load(),
		HealthSentBytes:    c.queue.sentBytes.Load(),
		BroadcastsLost:     c.queue.lost.Load(),
		BroadcastsLostDown: c.queue.lostDown.Load(),
		ChangesDropped:     c.core.changes.dropped.Load(),
		NameConflicts:      c.core.conflicts.Load(),
	}
	s.DatagramsAccepted, s.DatagramsDropped, s.Refused = c.guard.stats()
	s.MemberSockets = c.guard.memberSocketCount()
	c.core.mu.Lock()
	d := &c.core.own.damp
	s.HealthHeld, s.HealthReleased, s.HealthAbsorbed = d.held, d.released, d.absorbed
	c.core.mu.Unlock()
	g := c.guard
	s.PacketBytesSent, s.PacketBytesReceived = g.pktSent.Load(), g.pktRecv.Load()
	s.StreamBytesSent, s.StreamBytesReceived = g.strSent.Load(), g.strRecv.Load()
	return s
}

// ErrEncryptionDisabled: key operations on a cluster started without keys.
// Switching encryption on or off needs every gateway restarted.
var ErrEncryptionDisabled = errors.New("region: gossip encryption is off; enabling it needs a restart")
