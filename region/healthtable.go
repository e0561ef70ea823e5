package region

import (
	"errors"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/mrgw/mrgw/pathmgr"
)

// Path-health gossip at fleet size (docs/GATEWAY.md, "What path-health
// gossip costs").
//
// The table holds one verdict per (gateway, plane): the plane of that
// gateway, as the gateways that use it see it. Whoever reports it, a
// verdict on gateway B's plane p tells every other gateway the same thing
// (its own paths to B cross that plane), so reports are deduplicated by
// (B, p), not kept per reporter: when B's plane fails and many of B's peers
// notice at once, the first report to arrive is news and relayed, the
// others are not, and each gateway sends every (B, p) change about
// retransmit-limit times whatever the number of reporters. A gateway
// whose plane p fails towards most of its peers says so once, as a verdict
// on its own plane (Peer = From), instead of once per peer.
//
// Only changes go on the wire (deltas); a verdict that holds and is not
// "up" is re-sent every health TTL / 3 so that it does not expire, and an
// "up" that holds is never re-sent (no verdict means up). The push/pull
// exchange of memberlist carries the table (the periodic digest): in steady
// state it is empty.
//
// Bounds: the table holds at most one entry per gateway and plane of the
// view (G·P), with room to spare (healthBound); this gateway's own
// verdicts are one per peer and plane it publishes about; the gossip queue
// holds at most two messages per table key (an up never replaces a down
// that was not sent). A "down" that must give way is counted
// (Stats.HealthDownEvicted, Stats.BroadcastsLost), never dropped silently.

type healthKey struct{ peer, plane string }

type healthEntry struct {
	r    HealthReport
	born time.Time // local estimate of when it was measured: receipt − age
}

// ownEntry is this gateway's own verdict on its paths to one peer over one
// plane, and what of it went on the wire.
type ownEntry struct {
	r      HealthReport  // the last one published (PublishHealth)
	seen   time.Time     // when it was published, local clock
	wire   pathmgr.State // the state last sent for it (Up: nothing sent)
	sentAt time.Time
	wireAt time.Time // At of the last message sent: strictly increasing
}

// selfEntry is this gateway's verdict on one of its own planes.
type selfEntry struct {
	local  pathmgr.State // the verdict as computed, before damping
	wire   pathmgr.State
	sentAt time.Time
	wireAt time.Time
}

// ownHealth is this gateway's side of the gossip (under core.mu).
type ownHealth struct {
	peers map[string]map[string]*ownEntry // by plane, then peer
	n     int                             // entries in peers
	self  map[string]*selfEntry           // by plane
	// pending: verdicts on peers that went down or probing and wait
	// attrDelay before they go out, unless this gateway's verdict on its
	// own plane covers them by then (when its plane fails, its paths to
	// its peers fail one after another: without the wait, the first half
	// would each go out on their own).
	pending   map[healthKey]time.Time
	attrDelay time.Duration
	// damp holds back the ups of verdicts that flap (damping.go).
	damp damper

	originated, relayed, deduped, covered atomic.Uint64
	downEvicted                           atomic.Uint64

	// direct: verdicts on peers to send straight to their peer as well
	// (see directLocked), drained by Cluster.send; at most maxDirect
	// (what does not fit is counted in directLost).
	direct                 []HealthReport
	directSent, directLost atomic.Uint64
	// aboutSelf: the last verdict each reporter gave on its paths to this
	// gateway, per plane (see aboutSelfLocked); expired entries are
	// pruned, and it holds at most the health table's bound.
	aboutSelf map[healthKey]aboutEntry
}

// aboutEntry is one reporter's last verdict on its paths to this gateway.
type aboutEntry struct {
	state pathmgr.State
	at    time.Time // the reporter's At
	born  time.Time
}

// maxDirect bounds the verdicts waiting for a direct send between a
// publish and Cluster.send (one call's worth: at most the own verdicts).
const maxDirect = 4096

func newOwnHealth() ownHealth {
	return ownHealth{peers: map[string]map[string]*ownEntry{}, self: map[string]*selfEntry{},
		pending: map[healthKey]time.Time{}, attrDelay: defaultAttrDelay, damp: newDamper(DampingConfig{}),
		aboutSelf: map[healthKey]aboutEntry{}}
}

// Self verdict thresholds: a gateway says its own plane is down when at
// least half the peers it has verdicts on (two or more, in two regions or
// more) see it down or probing, and says it is up again when fewer than a
// quarter do.
const (
	selfMinPeers   = 2
	selfMinRegions = 2
)

// defaultAttrDelay is how long a peer's plane seen down waits for this
// gateway's verdict on its own plane; New sets it to 4 gossip intervals,
// within 100 ms and 1 s.
const defaultAttrDelay = 200 * time.Millisecond

func attrDelay(gossip time.Duration) time.Duration {
	return min(max(4*gossip, 100*time.Millisecond), time.Second)
}

var errNotNewer = errors.New("not newer than the one already published")

// refreshEvery is how often a verdict that holds and is not up is re-sent.
func (c *core) refreshEvery() time.Duration { return c.ttl / 3 }

// dedupWindow: a report of the verdict the table already holds, measured
// less than this after it, is a duplicate (another reporter of the same
// failure, or a copy).
func (c *core) dedupWindow() time.Duration { return c.ttl / 6 }

// healthBound is the most entries the table holds: Config.MaxHealthReports
// when set, else max(DefaultMaxHealthReports, 2 × Σ planes of the
// gateways in the view), i.e. twice G·P. The sum is kept as members come
// and go (core.planeSum): the queue asks for every new message.
func (c *core) healthBoundLocked() int {
	if c.maxHealth > 0 {
		return c.maxHealth
	}
	return max(DefaultMaxHealthReports, 2*c.planeSum)
}

func (c *core) healthBound() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.healthBoundLocked()
}

func notUp(s pathmgr.State) bool { return s == pathmgr.Down || s == pathmgr.Probing }

// latestLocked is the verdict on peer's plane, if unexpired.
func (c *core) latestLocked(peer, plane string, now time.Time) (HealthReport, bool) {
	e := c.health[healthKey{peer, plane}]
	if e == nil || now.Sub(e.born) >= c.ttl {
		return HealthReport{}, false
	}
	return e.r, true
}

// newsLocked reports whether h, measured at born, changes what the table
// holds on its key.
func (c *core) newsLocked(h HealthReport, born, now time.Time) bool {
	old := c.health[healthKey{h.Peer, h.Plane}]
	if old == nil || now.Sub(old.born) >= c.ttl {
		return true
	}
	switch {
	case old.r.From == h.From && !h.At.After(old.r.At):
		return false // the same reporter's, not newer (a copy, or late)
	case old.r.From != h.From && !born.After(old.born):
		return false // measured before the verdict held
	case old.r.From == old.r.Peer && notUp(old.r.State) && h.From != h.Peer && !notUp(h.State):
		// The plane's own gateway says its plane is down: another
		// gateway's up on its paths to it (one link, often an up its
		// damping held back and now releases) does not overrule it for
		// everyone; the owner's own up, or the verdict's expiry, ends it.
		// It took the key, and the owner's down, already sent, reached
		// no one else until its renewal (the fleet storm, 8 gateways).
		// The owner itself still takes that up in (aboutSelfLocked).
		return false
	case old.r.State == h.State && born.Sub(old.born) < c.dedupWindow() &&
		!(h.From == h.Peer && old.r.From != old.r.Peer):
		// The same verdict, fresh: another reporter of it. Not when h is
		// the plane's own gateway's verdict on it and the table holds
		// another's: a peer's verdict on its paths to that gateway (one
		// damping may be holding at down long after the fact) must not
		// silence the owner's, or the owner's down waits for its renewal
		// (a refresh interval) and the peer's later up overwrites it.
		return false
	}
	return true
}

// storeLocked puts h in the table and returns the view changes it causes.
// In a table full of down verdicts, a verdict that is not down is not
// stored (no entry means up) and a down one takes the oldest one's place.
func (c *core) storeLocked(h HealthReport, born, now time.Time) []Change {
	k := healthKey{h.Peer, h.Plane}
	if c.health[k] == nil && len(c.health) >= c.healthBoundLocked() && !c.evictLocked(now, notUp(h.State)) {
		return nil
	}
	c.health[k] = &healthEntry{r: h, born: born}
	if m := c.members[h.Peer]; m != nil {
		if ch, ok := c.refreshLocked(m); ok {
			return []Change{ch}
		}
	}
	return nil
}

// addHealth stores a report received age after it was measured (local:
// one this gateway sends). It reports whether the report was news, to be
// relayed: not expired, not this gateway's own report coming back, and it
// changes or renews the verdict the table holds (see newsLocked).
func (c *core) addHealth(h HealthReport, age time.Duration, local bool) bool {
	if age >= c.ttl || (!local && h.From == c.self) {
		return false
	}
	now := c.now()
	born := now.Add(-age)
	c.mu.Lock()
	about := !local && h.Peer == c.self && c.aboutSelfLocked(h, born, now)
	if !c.newsLocked(h, born, now) {
		c.mu.Unlock()
		if about {
			// Not news for the table (another reporter's verdict of the
			// same state holds this gateway's key), but news for this
			// gateway: the reporter's paths to it over the plane.
			c.reports.send(h)
		}
		return false
	}
	changes := c.storeLocked(h, born, now)
	c.mu.Unlock()
	for _, ch := range changes {
		c.announce(ch)
	}
	if !local {
		c.reports.send(h)
	}
	return true
}

// aboutSelfLocked records h, a verdict of another gateway on its paths to
// this one, and reports whether it is news for this gateway: the first
// from that reporter on that plane, a change of its state, or a renewal
// (later At). The table keeps one verdict per (gateway, plane) whoever
// said it, which is right for everyone else (a verdict on this gateway's
// plane tells them all the same thing) but not for this gateway, for
// which each reporter's verdict is about its own link to it: with two
// regions a gateway whose plane fails can only say so per peer, and
// that verdict must reach the peer even when the key already holds a
// third gateway's down (issue: the fleet storm's missed deliveries,
// docs/results/fleet.md). Copies (the same At again) are not news.
func (c *core) aboutSelfLocked(h HealthReport, born, now time.Time) bool {
	k := healthKey{h.From, h.Plane}
	if e, ok := c.own.aboutSelf[k]; ok && now.Sub(e.born) < c.ttl && e.state == h.State && !h.At.After(e.at) {
		return false
	}
	if _, ok := c.own.aboutSelf[k]; !ok && len(c.own.aboutSelf) >= c.healthBoundLocked() {
		// Full: the oldest gives way. At worst a copy of its next
		// verdict is delivered twice; the watcher deduplicates.
		var oldest healthKey
		var ob time.Time
		for ak, e := range c.own.aboutSelf {
			if ob.IsZero() || e.born.Before(ob) {
				oldest, ob = ak, e.born
			}
		}
		delete(c.own.aboutSelf, oldest)
	}
	c.own.aboutSelf[k] = aboutEntry{state: h.State, at: h.At, born: born}
	return true
}

// evictLocked makes room: expired entries first, else the oldest that is
// not down; a down verdict gives way only to another down (down) when all
// are down, and that is counted and logged. It reports whether there is
// room.
func (c *core) evictLocked(now time.Time, down bool) bool {
	var victim, victimDown healthKey
	var vBorn, dBorn time.Time
	for k, e := range c.health {
		switch {
		case now.Sub(e.born) >= c.ttl:
			delete(c.health, k)
		case !notUp(e.r.State) && (vBorn.IsZero() || e.born.Before(vBorn)):
			victim, vBorn = k, e.born
		case notUp(e.r.State) && (dBorn.IsZero() || e.born.Before(dBorn)):
			victimDown, dBorn = k, e.born
		}
	}
	switch {
	case len(c.health) < c.healthBoundLocked():
		return true
	case !vBorn.IsZero():
		delete(c.health, victim)
		return true
	case !down || dBorn.IsZero():
		return false
	}
	delete(c.health, victimDown)
	c.own.downEvicted.Add(1)
	c.log.Warn("path-health table full of down verdicts: the oldest gave way",
		"peer", victimDown.peer, "plane", victimDown.plane, "bound", c.healthBoundLocked())
	return true
}

// prune drops expired reports and re-evaluates the peers they were about
// (a peer whose "down" reports expire is no longer suspect).
func (c *core) prune() {
	now := c.now()
	c.mu.Lock()
	peers := map[string]bool{}
	for k, e := range c.health {
		if now.Sub(e.born) >= c.ttl {
			delete(c.health, k)
			peers[k.peer] = true
		}
	}
	for k, e := range c.own.aboutSelf {
		if now.Sub(e.born) >= c.ttl {
			delete(c.own.aboutSelf, k)
		}
	}
	var changes []Change
	for p := range peers {
		if m := c.members[p]; m != nil {
			if ch, ok := c.refreshLocked(m); ok {
				changes = append(changes, ch)
			}
		}
	}
	c.mu.Unlock()
	for _, ch := range changes {
		c.announce(ch)
	}
}

// freshHealth returns every unexpired report with its current age: the
// digest a push/pull exchange carries.
func (c *core) freshHealth() ([]HealthReport, []time.Duration) {
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	var rs []HealthReport
	var ages []time.Duration
	for _, e := range c.health {
		if age := now.Sub(e.born); age < c.ttl {
			rs = append(rs, e.r)
			ages = append(ages, age)
		}
	}
	return rs, ages
}

// latest is the verdict on peer's plane: the table's, else this gateway's
// own first-hand one (an "up" it kept to itself).
func (c *core) latest(peer, plane string) (HealthReport, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	if h, ok := c.latestLocked(peer, plane, now); ok {
		return h, true
	}
	if o := c.own.peers[plane][peer]; o != nil && now.Sub(o.seen) < c.ttl {
		return o.r, true
	}
	return HealthReport{}, false
}

// publishOwn records this gateway's verdict h on its paths to h.Peer over
// h.Plane (From set, validated, At set) and returns what must go on the
// wire for it, already stored in the table: nothing when it changes
// nothing others hold; the verdict on this gateway's own plane when that
// changes; else h (with an At that orders it after what was sent).
func (c *core) publishOwn(h HealthReport) ([]HealthReport, error) {
	now := c.now()
	c.mu.Lock()
	byPeer := c.own.peers[h.Plane]
	o := byPeer[h.Peer]
	if o != nil && !h.At.After(o.r.At) {
		c.mu.Unlock()
		return nil, errNotNewer
	}
	changed := o == nil || o.r.State != h.State
	if notUp(h.State) && (o == nil || !notUp(o.r.State)) && h.Peer != c.self {
		c.own.damp.flap(healthKey{h.Peer, h.Plane}, now)
	}
	if o == nil {
		if byPeer == nil {
			byPeer = map[string]*ownEntry{}
			c.own.peers[h.Plane] = byPeer
		}
		o = &ownEntry{wire: pathmgr.Up}
		byPeer[h.Peer] = o
		c.own.n++
	}
	o.r, o.seen = h, now
	if !changed && o.wire == h.State {
		// The same verdict again (the relay renews every TTL/3): nothing
		// to decide; the cluster renews what needs it.
		c.mu.Unlock()
		return nil, nil
	}
	var out []HealthReport
	var changes []Change
	if h.Peer == c.self {
		// A verdict on this gateway's own plane, given outright.
		out, changes = c.setSelfLocked(h.Plane, h.State, now, out, changes)
	} else {
		out, changes = c.selfVerdictLocked(h.Plane, now, out, changes)
		k := healthKey{h.Peer, h.Plane}
		switch s := c.own.self[h.Plane]; {
		case s != nil && s.wire != pathmgr.Up:
			c.own.covered.Add(1) // the plane's own verdict says it
		case notUp(h.State) && h.State != o.wire:
			if _, ok := c.own.pending[k]; !ok {
				c.own.pending[k] = now
			}
		default:
			delete(c.own.pending, k)
			out, changes = c.emitOwnLocked(o, now, out, changes)
		}
	}
	c.mu.Unlock()
	for _, ch := range changes {
		c.announce(ch)
	}
	return out, nil
}

// selfVerdictLocked recomputes the verdict on this gateway's plane from
// its verdicts on its peers over it, and emits it if it changed. When it
// comes back up, the per-peer verdicts it covered go out on their own.
func (c *core) selfVerdictLocked(plane string, now time.Time, out []HealthReport, changes []Change) ([]HealthReport, []Change) {
	n, bad, probing := 0, 0, 0
	regions := map[string]bool{}
	for peer, o := range c.own.peers[plane] {
		if peer == c.self || now.Sub(o.seen) >= c.ttl {
			continue
		}
		n++
		// A peer whose plane is already said down (by itself, or by
		// others) explains our paths to it: not evidence against ours.
		if e := c.health[healthKey{peer, plane}]; e != nil && e.r.From != c.self &&
			notUp(e.r.State) && now.Sub(e.born) < c.ttl {
			continue
		}
		if notUp(o.r.State) {
			bad++
			if o.r.State == pathmgr.Probing {
				probing++
			}
			region := "?" + peer
			if m := c.members[peer]; m != nil {
				region = m.gw.Meta.Region
			}
			regions[region] = true
		}
	}
	cur := pathmgr.Up
	if s := c.own.self[plane]; s != nil {
		cur = s.local
	}
	next := cur
	switch {
	case cur == pathmgr.Up && n >= selfMinPeers && 2*bad >= n && len(regions) >= selfMinRegions:
		next = pathmgr.Down
	case cur != pathmgr.Up && (n < selfMinPeers || 4*bad < n):
		next = pathmgr.Up
	}
	if next != pathmgr.Up {
		next = pathmgr.Down
		if probing == bad && bad > 0 {
			next = pathmgr.Probing
		}
	}
	if next == cur {
		return out, changes
	}
	return c.setSelfLocked(plane, next, now, out, changes)
}

// setSelfLocked records st as the verdict on this gateway's own plane and
// sends it, damped: a down (or probing) at once, an up unless it flapped
// too often lately (then it is held, and the wire keeps saying down until
// releaseHeldLocked lets it out).
func (c *core) setSelfLocked(plane string, st pathmgr.State, now time.Time, out []HealthReport, changes []Change) ([]HealthReport, []Change) {
	s := c.own.self[plane]
	if s == nil {
		s = &selfEntry{local: pathmgr.Up, wire: pathmgr.Up}
		c.own.self[plane] = s
	}
	k := healthKey{c.self, plane}
	prev := s.local
	s.local = st
	switch {
	case notUp(st):
		if !notUp(prev) {
			c.own.damp.flap(k, now)
		}
		// What this gateway last said is still what the cluster holds on
		// its plane: nothing to send. Not so when the table no longer
		// holds it (another gateway's later verdict took the key, its
		// probing say, while this gateway's own up was held back; or it
		// gave way): then the down goes out again, or the others would
		// hear of it only at the next renewal (TTL/3).
		said := s.wire == st && c.holdsLocked(k, st, now)
		if c.own.damp.isHeld(k) {
			c.own.damp.unhold(k)
			if said {
				c.own.damp.absorbed++ // the wire never stopped saying it
				return out, changes
			}
		}
		if said {
			return out, changes
		}
		return c.emitSelfLocked(plane, st, now, out, changes)
	case s.wire == pathmgr.Up:
		return out, changes
	case c.own.damp.holdUp(k, now):
		return out, changes
	}
	out, changes = c.emitSelfLocked(plane, pathmgr.Up, now, out, changes)
	return c.uncoverLocked(plane, now, out, changes)
}

// holdsLocked reports whether the table holds st, unexpired, on k.
func (c *core) holdsLocked(k healthKey, st pathmgr.State, now time.Time) bool {
	e := c.health[k]
	return e != nil && e.r.State == st && now.Sub(e.born) < c.ttl
}

// uncoverLocked: this gateway's own plane is up again on the wire; what
// its verdict covered goes out per peer: an up at once, a down after
// attrDelay (while the plane comes back, paths come back one after
// another: most will be up by then).
func (c *core) uncoverLocked(plane string, now time.Time, out []HealthReport, changes []Change) ([]HealthReport, []Change) {
	for peer, o := range c.own.peers[plane] {
		switch {
		case peer == c.self || now.Sub(o.seen) >= c.ttl:
		case notUp(o.r.State) && o.r.State != o.wire:
			if k := (healthKey{peer, plane}); c.own.pending[k].IsZero() {
				c.own.pending[k] = now
			}
		default:
			out, changes = c.emitOwnLocked(o, now, out, changes)
		}
	}
	return out, changes
}

// releaseHeldLocked sends the ups damping held back whose penalty has
// decayed, if they are still up.
func (c *core) releaseHeldLocked(now time.Time, out []HealthReport, changes []Change) ([]HealthReport, []Change) {
	for _, k := range c.own.damp.due(now) {
		if k.peer == c.self {
			if s := c.own.self[k.plane]; s != nil && s.local == pathmgr.Up && s.wire != pathmgr.Up {
				out, changes = c.emitSelfLocked(k.plane, pathmgr.Up, now, out, changes)
				out, changes = c.uncoverLocked(k.plane, now, out, changes)
			}
			continue
		}
		if o := c.own.peers[k.plane][k.peer]; o != nil && o.r.State == pathmgr.Up {
			if s := c.own.self[k.plane]; s == nil || s.wire == pathmgr.Up {
				out, changes = c.emitOwnLocked(o, now, out, changes)
			}
		}
	}
	return out, changes
}

// emitSelfLocked sends the verdict st on this gateway's own plane.
func (c *core) emitSelfLocked(plane string, st pathmgr.State, now time.Time, out []HealthReport, changes []Change) ([]HealthReport, []Change) {
	s := c.own.self[plane]
	if s == nil {
		s = &selfEntry{local: st, wire: pathmgr.Up}
		c.own.self[plane] = s
	}
	h := HealthReport{From: c.self, Peer: c.self, Plane: plane, State: st, At: later(now, s.wireAt)}
	s.wire, s.sentAt, s.wireAt = st, now, h.At
	if !c.newsLocked(h, now, now) {
		c.own.deduped.Add(1)
		return out, changes
	}
	c.own.originated.Add(1)
	return append(out, h), append(changes, c.storeLocked(h, now, now)...)
}

// emitOwnLocked sends this gateway's verdict o on a peer's plane if it
// differs from what was last sent, or renews it if it is not up and was
// sent refreshEvery ago; unless the table already holds the same verdict,
// fresh (another gateway said it: a copy would only cost bandwidth).
func (c *core) emitOwnLocked(o *ownEntry, now time.Time, out []HealthReport, changes []Change) ([]HealthReport, []Change) {
	st := o.r.State
	k := healthKey{o.r.Peer, o.r.Plane}
	if notUp(st) && c.own.damp.isHeld(k) {
		c.own.damp.unhold(k)
		if st == o.wire {
			c.own.damp.absorbed++ // the wire never stopped saying it
		}
	}
	if st == pathmgr.Up && o.wire != pathmgr.Up && c.own.damp.holdUp(k, now) {
		// Held back: the wire keeps saying down, renewed as any down.
		if now.Sub(o.sentAt) < c.refreshEvery() {
			return out, changes
		}
		st = o.wire
	}
	if st == o.wire && (st == pathmgr.Up || now.Sub(o.sentAt) < c.refreshEvery()) {
		return out, changes
	}
	h := o.r
	h.State = st
	h.At = later(h.At, o.wireAt)
	o.wire, o.sentAt, o.wireAt = st, now, h.At
	c.directLocked(h)
	if !c.newsLocked(h, now, now) {
		c.own.deduped.Add(1)
		return out, changes
	}
	c.own.originated.Add(1)
	return append(out, h), append(changes, c.storeLocked(h, now, now)...)
}

// directLocked queues h, this gateway's verdict on its paths to h.Peer,
// for a datagram straight to h.Peer besides the gossip. The gossip keeps
// one verdict per (gateway, plane) whoever said it: when the key already
// holds a third gateway's verdict of the same state, h is not news to
// the table here nor at the relays, and was dropped, so the peer never
// heard that this gateway's paths to it failed (its own plane looked the
// same to the others): with two regions, where a failing plane can only
// be said per peer, that was the fleet storm's missed deliveries. The
// peer takes it in (aboutSelfLocked) whatever its table holds. One
// datagram per verdict change or renewal, to one gateway: O(1).
//
// Not when the peer already said it (an echo): its own verdict on its
// plane, or its verdict on its paths to this gateway, of the same state.
// Then this gateway's verdict is most often its relay repeating the
// peer's report (taking its paths down on it), and sent back it arrived
// as news of this link, once the peer's paths had come back: the peer
// took them down again on it, and the two kept each other down (in the
// fleet test at 32 gateways, health traffic that never stopped).
func (c *core) directLocked(h HealthReport) {
	if h.Peer == c.self {
		return
	}
	now := c.now()
	if e := c.health[healthKey{h.Peer, h.Plane}]; e != nil && e.r.From == h.Peer && e.r.State == h.State && now.Sub(e.born) < c.ttl {
		return
	}
	if e, ok := c.own.aboutSelf[healthKey{h.Peer, h.Plane}]; ok && e.state == h.State && now.Sub(e.born) < c.ttl {
		return
	}
	if len(c.own.direct) >= maxDirect {
		c.own.directLost.Add(1)
		return
	}
	c.own.direct = append(c.own.direct, h)
}

// takeDirect returns the verdicts waiting for a direct send.
func (c *core) takeDirect() []HealthReport {
	c.mu.Lock()
	defer c.mu.Unlock()
	d := c.own.direct
	c.own.direct = nil
	return d
}

// gossipAddr is a member's gossip address, if it is known and alive.
func (c *core) gossipAddr(name string) (netip.AddrPort, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.members[name]
	if m == nil || m.gossip != Alive || !m.gw.Gossip.IsValid() {
		return netip.AddrPort{}, false
	}
	return m.gw.Gossip, true
}

// later is t, or just after prev if t is not after it.
func later(t, prev time.Time) time.Time {
	if t.After(prev) {
		return t
	}
	return prev.Add(time.Microsecond)
}

// flushOwn sends the verdicts on peers that waited attrDelay and that this
// gateway's verdict on its own plane does not cover.
func (c *core) flushOwn() []HealthReport {
	now := c.now()
	c.mu.Lock()
	var out []HealthReport
	var changes []Change
	out, changes = c.releaseHeldLocked(now, out, changes)
	for k, since := range c.own.pending {
		if now.Sub(since) < c.own.attrDelay {
			continue
		}
		delete(c.own.pending, k)
		o := c.own.peers[k.plane][k.peer]
		switch s := c.own.self[k.plane]; {
		case o == nil:
		case s != nil && s.wire != pathmgr.Up:
			c.own.covered.Add(1)
		default:
			out, changes = c.emitOwnLocked(o, now, out, changes)
		}
	}
	c.mu.Unlock()
	for _, ch := range changes {
		c.announce(ch)
	}
	return out
}

// refreshOwn renews the verdicts this gateway holds that are not up,
// forgets its verdicts on peers it stopped publishing about (for a health
// TTL), re-evaluates its planes, and returns what must go on the wire.
func (c *core) refreshOwn() []HealthReport {
	now := c.now()
	c.mu.Lock()
	var out []HealthReport
	var changes []Change
	for plane, byPeer := range c.own.peers {
		for peer, o := range byPeer {
			if now.Sub(o.seen) >= c.ttl {
				delete(byPeer, peer)
				delete(c.own.pending, healthKey{peer, plane})
				c.own.n--
			}
		}
		if len(byPeer) == 0 {
			delete(c.own.peers, plane)
		}
	}
	for plane, s := range c.own.self {
		if _, ok := c.own.peers[plane]; !ok && s.wire == pathmgr.Up && s.local == pathmgr.Up {
			delete(c.own.self, plane)
		}
	}
	c.own.damp.prune(now, func(k healthKey) bool {
		if k.peer == c.self {
			return c.own.self[k.plane] != nil
		}
		return c.own.peers[k.plane][k.peer] != nil
	})
	planes := make(map[string]bool, len(c.own.peers)+len(c.own.self))
	for p := range c.own.peers {
		planes[p] = true
	}
	for p := range c.own.self {
		planes[p] = true
	}
	for plane := range planes {
		out, changes = c.selfVerdictLocked(plane, now, out, changes)
		s := c.own.self[plane]
		selfDown := s != nil && s.wire != pathmgr.Up
		if selfDown && now.Sub(s.sentAt) >= c.refreshEvery() {
			out, changes = c.emitSelfLocked(plane, s.wire, now, out, changes) // a renewal: the local verdict stays
		}
		for peer, o := range c.own.peers[plane] {
			if _, wait := c.own.pending[healthKey{peer, plane}]; peer != c.self && !selfDown && !wait {
				out, changes = c.emitOwnLocked(o, now, out, changes)
			}
		}
	}
	c.mu.Unlock()
	for _, ch := range changes {
		c.announce(ch)
	}
	return out
}

// HealthTables are the sizes of the path-health tables of one gateway.
type HealthTables struct {
	// Verdicts held (one per gateway and plane with news within the
	// health TTL) and their bound (see [Config.MaxHealthReports]).
	Verdicts, VerdictBound int
	// Own verdicts: one per peer and plane this gateway publishes about,
	// and its own planes.
	Own int
	// Queued health messages waiting to be gossiped (at most two per
	// verdict).
	Queued int
	// Damped: verdicts with a flap penalty (at most Own), Held of them
	// with an up held back.
	Damped, Held int
}
