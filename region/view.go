package region

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mrgw/mrgw/pathmgr"
)

// State is a gateway's state in the region view.
type State uint8

const (
	// Unknown is the state before a gateway is first seen.
	Unknown State = iota
	// Alive gateways answer gossip probes and are routed to.
	Alive
	// Suspect gateways answer gossip, but the latest health report about
	// every one of their planes says down: their WAN paths are unusable
	// although their gossip path works. Route offers them after the alive
	// ones. (memberlist's own short-lived "suspect" is not exposed by
	// v0.7.0: no event fires for it, and Members() hands out nodes whose
	// state memberlist writes under its own lock.)
	Suspect
	// Dead gateways stopped answering probes and were declared failed.
	Dead
	// Left gateways said goodbye (Leave) before stopping.
	Left
)

func (s State) String() string {
	switch s {
	case Unknown:
		return "unknown"
	case Alive:
		return "alive"
	case Suspect:
		return "suspect"
	case Dead:
		return "dead"
	case Left:
		return "left"
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// Live reports whether a gateway in this state may be routed to.
func (s State) Live() bool { return s == Alive || s == Suspect }

// Gateway is one gateway as the view sees it.
type Gateway struct {
	Name   string
	Meta   Meta           // what it announced: region, control, planes
	Gossip netip.AddrPort // its memberlist address
	State  State
	Since  time.Time // when State last changed, on this gateway's clock
}

// View is a snapshot of the region view.
type View struct {
	Self string
	// Regions maps a region to its gateways, sorted by name, in every
	// state (dead and left ones are kept so that their region stays
	// known and reports ErrRegionUnreachable).
	Regions map[string][]Gateway
}

// Gateway finds a gateway by name.
func (v View) Gateway(name string) (Gateway, bool) {
	for _, gws := range v.Regions {
		for _, g := range gws {
			if g.Name == name {
				return g, true
			}
		}
	}
	return Gateway{}, false
}

// Change is one change of a gateway's state, delivered to watchers.
type Change struct {
	Name, Region string
	From, To     State
	At           time.Time
}

var (
	// ErrUnknownRegion: no gateway of the region has ever been seen and
	// the region is not among Config.ExpectedRegions.
	ErrUnknownRegion = errors.New("unknown region")
	// ErrRegionUnreachable: the region is known but none of its gateways
	// is alive or suspect.
	ErrRegionUnreachable = errors.New("region unreachable")
	// ErrClosed: the cluster has been shut down.
	ErrClosed = errors.New("region: cluster shut down")
)

// RouteError is Route's error; errors.Is matches ErrUnknownRegion or
// ErrRegionUnreachable. Gateways lists the region's gateways and their
// states, so the host's error says why ("b1 dead, b2 left").
type RouteError struct {
	Region   string
	Err      error
	Gateways []Gateway
}

func (e *RouteError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "region %q: %v", e.Region, e.Err)
	for i, g := range e.Gateways {
		if i == 0 {
			b.WriteString(" (")
		} else {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %s", g.Name, g.State)
		if i == len(e.Gateways)-1 {
			b.WriteString(")")
		}
	}
	return b.String()
}

func (e *RouteError) Unwrap() error { return e.Err }

// Stats counts what the cluster has seen; every counter only grows.
type Stats struct {
	Messages       uint64 // user messages received
	BadMessages    uint64 // user messages that failed to decode
	BadMeta        uint64 // member metadata that failed to decode (member ignored)
	HealthDropped  uint64 // health reports a full watcher channel missed
	ChangesDropped uint64 // changes a full watcher channel missed
	NameConflicts  uint64 // another member announced this gateway's name

	// Path-health gossip (docs/GATEWAY.md, "What path-health gossip
	// costs"). HealthOriginated: verdicts this gateway put on the wire
	// (changes and renewals); HealthRelayed: others' verdicts it passed
	// on (news only); HealthDeduped: own verdicts not sent because the
	// cluster already held them; HealthCovered: verdicts on peers not
	// sent because this gateway's verdict on its own plane said it;
	// HealthSent and HealthSentBytes: health messages handed to
	// memberlist, each transmission counted.
	HealthOriginated, HealthRelayed, HealthDeduped, HealthCovered uint64
	HealthSent, HealthSentBytes                                   uint64
	// HealthDownEvicted: down verdicts that gave way in a table full of
	// down verdicts (logged at warn). BroadcastsLost: health messages (and
	// goodbyes) that gave way in a full gossip queue before they were
	// sent once, BroadcastsLostDown of them down verdicts and goodbyes.
	HealthDownEvicted, BroadcastsLost, BroadcastsLostDown uint64
	// HealthDirect: verdicts on peers also sent straight to the peer (one
	// datagram each: the gossip keeps one verdict per (gateway, plane)
	// and may hold another reporter's, see healthtable.go directLocked);
	// HealthDirectLost: those that could not be sent.
	HealthDirect, HealthDirectLost uint64
	// Flap damping (damping.go): HealthHeld: ups of this gateway's own
	// verdicts held back (each up the relay reported while its verdict was
	// held); HealthReleased: held ups that
	// went out once their penalty decayed; HealthAbsorbed: downs that
	// needed no message, because the wire still said down.
	HealthHeld, HealthReleased, HealthAbsorbed uint64
	// Bytes of gossip on the wire, both ways: datagrams (probes, acks,
	// gossip with its piggybacked health messages) and streams
	// (push/pull exchanges, joins).
	PacketBytesSent, PacketBytesReceived uint64
	StreamBytesSent, StreamBytesReceived uint64

	// DatagramsAccepted counts gossip datagrams the guard passed to
	// memberlist (authenticated, when gossip is encrypted).
	DatagramsAccepted uint64
	// MemberSockets is how many members have a socket of their own on the
	// gossip port, out of reach of junk sent to the port (a gauge).
	MemberSockets int
	// DatagramsDropped counts gossip datagrams dropped before memberlist
	// saw them, by reason: every one of [DropReasons] is present.
	DatagramsDropped map[string]uint64
	// Refused counts refused gossip streams and members, by reason: every
	// one of [RefuseReasons] is present.
	Refused map[string]uint64
}

type member struct {
	gw       Gateway
	gossip   State // what memberlist says: Alive, Dead or Left
	notified State // the effective state last announced
}

// core is the view and the health table, without memberlist, so that its
// rules can be tested with a fake clock.
type core struct {
	self      string
	ttl       time.Duration
	maxHealth int
	expected  map[string]bool
	now       func() time.Time
	log       *slog.Logger

	mu       sync.Mutex
	members  map[string]*member
	health   map[healthKey]*healthEntry // one verdict per (gateway, plane): healthtable.go
	own      ownHealth                  // this gateway's own verdicts: healthtable.go
	goodbyes map[string]bool            // members that said they are leaving

	// Running totals over members, kept by setMember and goodbye (the
	// only writers of a member's metadata and gossip state), so that what
	// the gossip queue asks for every new message and every packet costs
	// the same at 8 gateways and at thousands, instead of a walk of every
	// member under mu: planeSum is Σ max(len(planes), 1) over every member
	// whatever its state (healthBoundLocked), alive the members
	// memberlist says are alive (aliveCount), aliveCaps how many of those
	// announce each capability (allHave). Bounded: a member's
	// capabilities are bounded by MaxMetaSize, and a capability no alive
	// member announces is deleted.
	planeSum  int
	alive     int
	aliveCaps map[string]int

	messages, badMessages, badMeta, conflicts atomic.Uint64

	changes fanout[Change]
	reports fanout[HealthReport]
}

func newCore(self string, cfg *Config, log *slog.Logger) *core {
	c := &core{
		self:      self,
		ttl:       cfg.HealthTTL,
		maxHealth: cfg.MaxHealthReports,
		expected:  map[string]bool{},
		now:       time.Now,
		log:       log,
		members:   map[string]*member{},
		health:    map[healthKey]*healthEntry{},
		own:       newOwnHealth(),
		goodbyes:  map[string]bool{},
		aliveCaps: map[string]int{},
	}
	c.own.damp = newDamper(cfg.FlapDamping)
	for _, r := range cfg.ExpectedRegions {
		c.expected[r] = true
	}
	return c
}

// setMember records what memberlist says of a member: Alive, or Dead,
// which becomes Left when the member said goodbye. meta is decoded first
// (nil keeps the known metadata); a member whose metadata is not ours is
// ignored and counted.
func (c *core) setMember(name string, addr netip.AddrPort, rawMeta []byte, st State) {
	var meta Meta
	if rawMeta != nil || st == Alive {
		var err error
		if meta, err = DecodeMeta(rawMeta); err != nil {
			c.badMeta.Add(1)
			c.log.Warn("ignoring gossip member with unreadable metadata", "member", name, "err", err)
			return
		}
	}
	c.mu.Lock()
	m := c.members[name]
	if m == nil {
		if st != Alive {
			c.mu.Unlock()
			return // never seen alive: nothing to route to or away from
		}
		m = &member{gw: Gateway{Name: name}}
		c.members[name] = m
	} else {
		c.tallyLocked(m, -1) // counted again below, as it is now
	}
	if st == Alive || rawMeta != nil {
		m.gw.Meta, m.gw.Gossip = meta, addr
	}
	switch {
	case st == Alive && m.gossip != Alive:
		delete(c.goodbyes, name) // back after dying or leaving
	case st == Dead && c.goodbyes[name]:
		st = Left
	}
	m.gossip = st
	c.tallyLocked(m, +1)
	ch, ok := c.refreshLocked(m)
	c.mu.Unlock()
	if ok {
		c.announce(ch)
	}
}

// goodbye records that a member announced its leave. It reports whether
// that was news (to be passed on). A goodbye that arrives after the member
// was already found dead turns it into left.
func (c *core) goodbye(name string) bool {
	c.mu.Lock()
	if c.goodbyes[name] {
		c.mu.Unlock()
		return false
	}
	c.goodbyes[name] = true
	var ch Change
	var ok bool
	if m := c.members[name]; m != nil && m.gossip == Dead {
		c.tallyLocked(m, -1)
		m.gossip = Left
		c.tallyLocked(m, +1)
		ch, ok = c.refreshLocked(m)
	}
	c.mu.Unlock()
	if ok {
		c.announce(ch)
	}
	return true
}

// effectiveLocked combines memberlist's verdict with path health.
func (c *core) effectiveLocked(m *member) State {
	if m.gossip != Alive || len(m.gw.Meta.Planes) == 0 {
		return m.gossip
	}
	now := c.now()
	for _, p := range m.gw.Meta.Planes {
		h, ok := c.latestLocked(m.gw.Name, p.Name, now)
		if !ok || h.State != pathmgr.Down {
			return Alive
		}
	}
	return Suspect
}

func (c *core) refreshLocked(m *member) (Change, bool) {
	st := c.effectiveLocked(m)
	if st == m.notified {
		return Change{}, false
	}
	now := c.now()
	ch := Change{Name: m.gw.Name, Region: m.gw.Meta.Region, From: m.notified, To: st, At: now}
	m.notified, m.gw.State, m.gw.Since = st, st, now
	return ch, true
}

func (c *core) announce(ch Change) {
	c.log.Info("gateway state", "member", ch.Name, "region", ch.Region, "from", ch.From, "to", ch.To)
	c.changes.send(ch)
}

func (c *core) view() View {
	c.mu.Lock()
	defer c.mu.Unlock()
	v := View{Self: c.self, Regions: map[string][]Gateway{}}
	for r := range c.expected {
		v.Regions[r] = nil
	}
	for _, m := range c.members {
		g := m.gw
		g.Meta = cloneMeta(g.Meta)
		v.Regions[g.Meta.Region] = append(v.Regions[g.Meta.Region], g)
	}
	for _, gws := range v.Regions {
		slices.SortFunc(gws, func(a, b Gateway) int { return strings.Compare(a.Name, b.Name) })
	}
	return v
}

func (c *core) route(region string) ([]Gateway, error) {
	c.mu.Lock()
	var all []Gateway
	for _, m := range c.members {
		if m.gw.Meta.Region == region {
			g := m.gw
			g.Meta = cloneMeta(g.Meta)
			all = append(all, g)
		}
	}
	expected := c.expected[region]
	c.mu.Unlock()

	// Alive before suspect, then by name, so every gateway of a region
	// picks the same first choice.
	slices.SortFunc(all, func(a, b Gateway) int {
		if a.State != b.State {
			return int(a.State) - int(b.State)
		}
		return strings.Compare(a.Name, b.Name)
	})
	var live []Gateway
	for _, g := range all {
		if g.State.Live() {
			live = append(live, g)
		}
	}
	switch {
	case len(live) > 0:
		return live, nil
	case len(all) == 0 && !expected:
		return nil, &RouteError{Region: region, Err: ErrUnknownRegion}
	}
	return nil, &RouteError{Region: region, Err: ErrRegionUnreachable, Gateways: all}
}

// tallyLocked adds m's share to the running totals (sign +1), or takes
// it away (-1) before m's metadata or gossip state changes.
func (c *core) tallyLocked(m *member, sign int) {
	c.planeSum += sign * max(len(m.gw.Meta.Planes), 1)
	if m.gossip != Alive {
		return
	}
	c.alive += sign
	caps := m.gw.Meta.Capabilities
	for i, cp := range caps {
		if slices.Index(caps, cp) != i {
			continue // announced twice, counted once
		}
		if n := c.aliveCaps[cp] + sign; n > 0 {
			c.aliveCaps[cp] = n
		} else {
			delete(c.aliveCaps, cp)
		}
	}
}

// aliveCount is how many members memberlist says are alive (this gateway
// included, once it has seen itself join).
func (c *core) aliveCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.alive
}

// allHave reports whether every alive member announces capability.
func (c *core) allHave(capability string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.aliveCaps[capability] == c.alive
}

func cloneMeta(m Meta) Meta {
	m.Planes = slices.Clone(m.Planes)
	m.Capabilities = slices.Clone(m.Capabilities)
	m.Wire = slices.Clone(m.Wire)
	return m
}

// fanout delivers values to bounded channels without ever blocking the
// sender: gossip callbacks must not wait for a slow watcher.
type fanout[T any] struct {
	mu      sync.Mutex
	subs    map[int]chan T
	next    int
	closed  bool
	dropped atomic.Uint64
}

func (f *fanout[T]) add(n int) (<-chan T, func()) {
	ch := make(chan T, max(n, 1))
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		close(ch)
		return ch, func() {}
	}
	if f.subs == nil {
		f.subs = map[int]chan T{}
	}
	id := f.next
	f.next++
	f.subs[id] = ch
	return ch, func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		if c, ok := f.subs[id]; ok {
			delete(f.subs, id)
			close(c)
		}
	}
}

func (f *fanout[T]) send(v T) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, ch := range f.subs {
		select {
		case ch <- v:
		default:
			f.dropped.Add(1)
		}
	}
}

func (f *fanout[T]) close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	for id, ch := range f.subs {
		delete(f.subs, id)
		close(ch)
	}
}
