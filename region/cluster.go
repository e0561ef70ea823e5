package region

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/mrgw/mrgw/internal/ratelog"
	"github.com/mrgw/mrgw/pathmgr"
	"log"
	"log/slog"
	"math"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

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

// InstallKey adds a key that decrypts, without using it to encrypt yet.
func (c *Cluster) InstallKey(key []byte) error {
	if c.keyring == nil {
		return ErrEncryptionDisabled
	}
	c.keyMu.Lock()
	defer c.keyMu.Unlock()
	defer c.syncKeys()
	return wrapKeyErr("install", c.keyring.AddKey(key))
}

// UseKey makes an installed key the one that encrypts.
func (c *Cluster) UseKey(key []byte) error {
	if c.keyring == nil {
		return ErrEncryptionDisabled
	}
	c.keyMu.Lock()
	defer c.keyMu.Unlock()
	defer c.syncKeys()
	return wrapKeyErr("use", c.keyring.UseKey(key))
}

// RemoveKey removes a key that is not the primary one.
func (c *Cluster) RemoveKey(key []byte) error {
	if c.keyring == nil {
		return ErrEncryptionDisabled
	}
	c.keyMu.Lock()
	defer c.keyMu.Unlock()
	defer c.syncKeys()
	return wrapKeyErr("remove", c.keyring.RemoveKey(key))
}

// Keys returns the keyring, primary first.
func (c *Cluster) Keys() [][]byte {
	if c.keyring == nil {
		return nil
	}
	return c.keyring.GetKeys()
}

// SetKeyring makes the keyring exactly keys, keys[0] encrypting: it
// installs what is new, switches the primary, then removes what is gone.
// This is what a configuration reload calls. Keys are local to each
// gateway, so a rotation is three reloads of every gateway, each finished
// everywhere before the next starts: add the new key second; move it
// first; drop the old key. Skipping a step cuts gateways off each other.
func (c *Cluster) SetKeyring(keys [][]byte) error {
	if c.keyring == nil {
		return ErrEncryptionDisabled
	}
	if len(keys) == 0 {
		return errors.New("region: an empty keyring would turn encryption off; that needs a restart")
	}
	for i, k := range keys {
		if err := memberlist.ValidateKey(k); err != nil {
			return fmt.Errorf("region: keys[%d]: %w", i, err)
		}
	}
	c.keyMu.Lock()
	defer c.keyMu.Unlock()
	// The guard must know every key memberlist decrypts with, at once:
	// each step is followed by a sync.
	defer c.syncKeys()
	for _, k := range keys {
		if err := c.keyring.AddKey(k); err != nil {
			return wrapKeyErr("install", err)
		}
	}
	c.syncKeys()
	if err := c.keyring.UseKey(keys[0]); err != nil {
		return wrapKeyErr("use", err)
	}
	for _, old := range c.keyring.GetKeys() {
		if !slices.ContainsFunc(keys, func(k []byte) bool { return bytes.Equal(k, old) }) {
			if err := c.keyring.RemoveKey(old); err != nil {
				return wrapKeyErr("remove", err)
			}
		}
	}
	return nil
}

// syncKeys hands the keyring to the guarded transport, which
// authenticates datagrams and streams with it before memberlist does.
func (c *Cluster) syncKeys() {
	// Keys were validated on their way into the keyring.
	_ = c.guard.setKeys(c.keyring.GetKeys())
}

func wrapKeyErr(op string, err error) error {
	if err != nil {
		return fmt.Errorf("region: %s key: %w", op, err)
	}
	return nil
}

// broadcastName identifies a health message in the gossip queue: by the
// verdict's gateway and plane, whoever reported it, so that a newer verdict
// replaces the older one instead of both being sent; but an up never
// replaces a down (the down is sent first: a plane that failed for a moment
// is still avoided for a moment, never silently).
func broadcastName(h HealthReport) string {
	class := "u"
	if notUp(h.State) {
		class = "d"
	}
	return h.Peer + "\x00" + h.Plane + "\x00" + class
}

// delegate receives memberlist's callbacks. Every method runs on one of
// memberlist's goroutines, some with memberlist's node lock held: none
// blocks and none calls back into memberlist.
type delegate struct{ c *Cluster }

func (d *delegate) NodeMeta(limit int) []byte {
	d.c.metaMu.Lock()
	defer d.c.metaMu.Unlock()
	if len(d.c.meta) > limit {
		// Cannot happen: EncodeMeta caps at MaxMetaSize. Announcing
		// nothing beats memberlist's panic on oversize metadata.
		return nil
	}
	return slices.Clone(d.c.meta)
}

func (d *delegate) NotifyMsg(b []byte) {
	core := d.c.core
	core.messages.Add(1)
	// Decoding copies every field out of b, which memberlist reuses after
	// we return.
	switch {
	case len(b) > 0 && b[0] == kindHealth:
		h, age, err := decodeHealth(b)
		if err == nil {
			err = checkHealth(&h)
		}
		if err != nil {
			core.badMessages.Add(1)
			core.log.Debug("dropping health message", "err", err)
			return
		}
		d.c.relay(h, age)
	case len(b) > 0 && b[0] == kindBatch:
		hs, ages, err := decodeBatch(b)
		if err != nil {
			core.badMessages.Add(1)
			core.log.Debug("dropping verdict batch", "err", err)
			return
		}
		for i, h := range hs {
			d.c.relay(h, ages[i])
		}
	case len(b) > 0 && b[0] == kindGoodbye:
		name, err := decodeGoodbye(b)
		if err != nil {
			core.badMessages.Add(1)
			return
		}
		if core.goodbye(name) {
			d.c.queue.queue("\x00goodbye\x00"+name, slices.Clone(b), true)
		}
	default:
		// An unknown kind: a newer gateway's message, or garbage.
		core.badMessages.Add(1)
	}
}

// relay stores a received report and, if it was news, passes it on: a
// broadcast reaches only a few members directly, so every member spreads
// what it has not seen before, and old news stops at once.
func (c *Cluster) relay(h HealthReport, age time.Duration) {
	received := c.core.now()
	if !c.core.addHealth(h, age, false) {
		return
	}
	if c.queueVerdict(h, age+c.core.now().Sub(received)) {
		c.core.own.relayed.Add(1)
	}
}

// queueVerdict queues h, sent age after it was measured, as a verdict
// batch entry: GetBroadcasts packs the entries of one reporter into one
// message (health.go, "verdict batch").
func (c *Cluster) queueVerdict(h HealthReport, age time.Duration) bool {
	entry, err := appendBatchEntry(nil, h, age)
	if err != nil {
		return false // validated when published or decoded
	}
	v1, err := appendHealth(nil, h, age)
	if err != nil {
		return false
	}
	c.queue.queueEntry(broadcastName(h), h.From, entry, v1, notUp(h.State))
	return true
}

func (d *delegate) GetBroadcasts(overhead, limit int) [][]byte {
	return d.c.queue.GetBroadcasts(overhead, limit)
}

// LocalState hands the health table to a member doing a push/pull (every
// join, and periodically), so a gateway that joins late or missed
// broadcasts learns the current path health without waiting for reports.
func (d *delegate) LocalState(join bool) []byte {
	rs, ages := d.c.core.freshHealth()
	msgs := make([][]byte, 0, len(rs))
	for i, h := range rs {
		if m, err := appendHealth(nil, h, ages[i]); err == nil {
			msgs = append(msgs, m)
		}
	}
	return appendHealthBatch(nil, msgs)
}

func (d *delegate) MergeRemoteState(buf []byte, join bool) {
	if len(buf) == 0 {
		return
	}
	msgs, err := decodeHealthBatch(buf)
	if err != nil {
		d.c.core.badMessages.Add(1)
		return
	}
	for _, m := range msgs {
		h, age, err := decodeHealth(m)
		if err == nil {
			err = checkHealth(&h)
		}
		if err != nil {
			d.c.core.badMessages.Add(1)
			continue
		}
		// Stored, not relayed: push/pull already reaches everyone in
		// time, and relaying a whole table per exchange would flood.
		d.c.core.addHealth(h, age, false)
	}
}

func (d *delegate) NotifyJoin(n *memberlist.Node) {
	d.c.guard.setMember(n.Name, nodeAddr(n), true, n.Name == d.c.cfg.Name)
	d.c.core.setMember(n.Name, nodeAddr(n), n.Meta, Alive)
}

func (d *delegate) NotifyUpdate(n *memberlist.Node) {
	d.c.guard.setMember(n.Name, nodeAddr(n), true, n.Name == d.c.cfg.Name)
	d.c.core.setMember(n.Name, nodeAddr(n), n.Meta, Alive)
}

// NotifyLeave cannot tell a leave from a death: memberlist v0.7.0 never
// sets n.State (its real state field shadows it). Dead it is, unless the
// member said goodbye.
func (d *delegate) NotifyLeave(n *memberlist.Node) {
	d.c.guard.setMember(n.Name, nodeAddr(n), false, n.Name == d.c.cfg.Name)
	d.c.core.setMember(n.Name, nodeAddr(n), nil, Dead)
}

// NotifyConflict: two members claim one name. memberlist keeps the first
// and only logs; a gateway needs to know, because routing by name would
// send traffic to whichever it believes.
func (d *delegate) NotifyConflict(existing, other *memberlist.Node) {
	d.c.core.conflicts.Add(1)
	if existing.Name == d.c.cfg.Name {
		addr := other.Address()
		d.c.nameHolder.Store(&addr)
	}
	d.c.guard.refuse(rNameConflict, other.Address(), "two gossip members claim one gateway name; the first is kept",
		"name", existing.Name, "existing", existing.Address())
}

// NotifyAlive keeps members that are not gateways (metadata we cannot
// read) out of the cluster instead of letting them gossip along.
func (d *delegate) NotifyAlive(n *memberlist.Node) error {
	if _, err := DecodeMeta(n.Meta); err != nil {
		d.c.core.badMeta.Add(1)
		d.c.guard.refuse(rNotGateway, n.Address(), "refused a gossip member that is not a gateway",
			"name", n.Name, "err", err)
		return fmt.Errorf("member %q is not a gateway: %w", n.Name, err)
	}
	return nil
}

func nodeAddr(n *memberlist.Node) netip.AddrPort {
	a, ok := netip.AddrFromSlice(n.Addr)
	if !ok {
		return netip.AddrPort{}
	}
	return netip.AddrPortFrom(a.Unmap(), n.Port)
}

// slogWriter turns memberlist's log lines ("[DEBUG] memberlist: ...") into
// slog records at debug level; the bracketed level is kept as an attribute
// so an operator can still pick out memberlist's warnings and errors (for
// example gossip that no installed key decrypts).
type slogWriter struct{ l *slog.Logger }

func (w slogWriter) Write(p []byte) (int, error) {
	msg := strings.TrimSpace(string(p))
	level := ""
	if strings.HasPrefix(msg, "[") {
		if i := strings.IndexByte(msg, ']'); i > 0 {
			level, msg = msg[1:i], strings.TrimSpace(msg[i+1:])
		}
	}
	msg = strings.TrimPrefix(msg, "memberlist: ")
	w.l.Log(context.Background(), slog.LevelDebug, msg, "source", "memberlist", "memberlist_level", level)
	return len(p), nil
}
