//go:build linux

package fleet

import (
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mrgw/mrgw/pathmgr"
	"github.com/mrgw/mrgw/region"
)

// One gateway of the fleet: its gossip and the stand-in for its relay.

// node is one gateway: its gossip and a stand-in for its relay.
type node struct {
	f      *fleet
	name   string
	region string
	c      *region.Cluster

	mu      sync.Mutex
	sets    map[string]*pathmgr.Set // per peer gateway of another region
	reports *pathmgr.Reports
	lastAt  time.Time
	epoch   time.Time
	dead    atomic.Bool
	failed  map[int]bool // n's own planes that failed
	// hearsay: paths n took down on a third gateway's report (not the
	// peer's own), which it does not publish until they work again, as
	// gateway/health.go does (healthState.hearsay). Publishing them
	// echoed one report as everyone's: since a gateway takes in every
	// reporter's verdict on its links, each echo came back as a report
	// on the echoing gateway's own link, and a storm cascaded.
	hearsay map[hearsayKey]bool
	expired time.Duration

	stopWatch []func()
	wg        sync.WaitGroup
}

// initSets gives n a path set to every live gateway of another region it
// has none for.
func (n *node) initSets() {
	var peers []string
	for _, m := range n.f.live() {
		if m.region != n.region {
			peers = append(peers, m.name)
		}
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, p := range peers {
		if n.sets[p] == nil {
			n.sets[p] = pathmgr.NewSet(n.f.o.Planes, pathmgr.DefaultConfig(), rand.New(rand.NewPCG(uint64(len(n.sets)), 7)))
			for i := range n.f.o.Planes {
				n.sets[p].Paths[i].OnRTTSample(20 * time.Millisecond)
			}
		}
	}
}

func (n *node) now() time.Duration { return time.Since(n.epoch) }

// hearsayKey names a path of n's: to peer, over plane.
type hearsayKey struct {
	peer  string
	plane int
}

// publishLocked publishes n's verdict on its paths to peer over plane, as
// the relay does (gateway/health.go publishPlanes): not while the path is
// down on hearsay.
func (n *node) publishLocked(peer string, plane int) {
	set := n.sets[peer]
	ps := set.PlaneSummary(plane, planeOf)
	if k := (hearsayKey{peer, plane}); n.hearsay[k] {
		if st := ps.State(); st == pathmgr.Down || st == pathmgr.Probing {
			return
		}
		delete(n.hearsay, k)
	}
	at := time.Now()
	if !at.After(n.lastAt) {
		at = n.lastAt.Add(time.Microsecond)
	}
	n.lastAt = at
	_ = n.c.PublishHealth(region.HealthReport{Peer: peer, Plane: planeName(plane), State: ps.State(), RTT: ps.SRTT, At: at})
}

// failPlane: n's plane fails; its paths over it to every peer go down,
// one peer after another, and its relay publishes each.
func (n *node) failPlane(plane int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	now := n.now()
	if debug == n.name+"/"+planeName(plane) {
		fmt.Fprintf(os.Stderr, "%s FAIL %s/%d\n", time.Now().Format("05.000"), n.name, plane)
	}
	n.failed[plane] = true
	n.f.setFailed(n.name, plane, true)
	for peer, set := range n.sets {
		set.MarkDown(now, plane, "plane failed")
		// n's own probes find its plane dead: first-hand, published
		// even where a report had taken the path down before.
		delete(n.hearsay, hearsayKey{peer, plane})
		n.publishLocked(peer, plane)
	}
}

// restorePlane: the plane works again and n's probes bring every path
// over it back.
func (n *node) restorePlane(plane int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	now := n.now()
	if debug == n.name+"/"+planeName(plane) {
		fmt.Fprintf(os.Stderr, "%s RESTORE %s/%d\n", time.Now().Format("05.000"), n.name, plane)
	}
	delete(n.failed, plane)
	n.f.setFailed(n.name, plane, false)
	for peer, set := range n.sets {
		if n.f.isFailed(peer, plane) {
			continue // the peer's side of the plane is down: probes still fail
		}
		if restorePath(set, now, plane) {
			n.publishLocked(peer, plane)
		}
	}
}

// restorePath answers probes on path until it is up; it reports whether
// the path was not up.
func restorePath(set *pathmgr.Set, now time.Duration, path int) bool {
	if set.Paths[path].State == pathmgr.Up {
		return false
	}
	for range 16 {
		if set.Paths[path].State == pathmgr.Up {
			break
		}
		set.ProbeDue(now, path)
		set.OnProbeAck(now, path, 20*time.Millisecond)
	}
	return true
}

// watchHealth is the gateway's watchHealth and relay.onReport: reports on
// a peer n has paths to (or that peer's on n) go into n's Reports; one
// that starts a down episode takes n's path over the plane down, and n
// publishes it as its relay would; an up brings the path back (as n's
// own probes would).
func (n *node) watchHealth(ch <-chan region.HealthReport) {
	defer n.wg.Done()
	for h := range ch {
		if debug == h.Peer+"/"+h.Plane && n.name == "g000-r00" {
			fmt.Fprintf(os.Stderr, "%s %s got %s from %s at %s\n", time.Now().Format("05.000"), n.name, h.State, h.From, h.At.Format("05.000"))
		}
		// The verdict on b's plane: b's own (Peer = From = b), anyone's
		// on b's plane (Peer = b), or b's on its paths to n (Peer = n,
		// From = b: what b says when it cannot tell its side from the
		// other region's).
		kind := "planeup"
		if h.State == pathmgr.Down || h.State == pathmgr.Probing {
			kind = "plane"
		}
		n.f.tr.deliver(kind, h.Peer, h.Plane, n.name)
		if h.Peer == n.name {
			n.f.tr.deliver(kind, h.From, h.Plane, n.name)
		}
		peer := h.Peer
		if peer == n.name {
			peer = h.From
		}
		var plane int
		if _, err := fmt.Sscanf(h.Plane, "p%d", &plane); err != nil || plane >= n.f.o.Planes {
			continue
		}
		n.mu.Lock()
		set := n.sets[peer]
		if set == nil || n.dead.Load() {
			n.mu.Unlock()
			continue
		}
		now := n.now()
		if n.reports.Add(now, pathmgr.PeerReport{From: h.From, Peer: peer, Plane: plane, State: h.State}) {
			if set.Paths[plane].State.Usable() {
				set.MarkDown(now, plane, "peer report")
				if h.From != peer {
					// A third gateway's report: not echoed (gateway/health.go).
					n.hearsay[hearsayKey{peer, plane}] = true
				}
				n.publishLocked(peer, plane)
			}
		} else if h.State == pathmgr.Up && !n.failed[plane] && !n.f.isFailed(peer, plane) && restorePath(set, now, plane) {
			// Both sides work: n's probes would bring the path back.
			n.publishLocked(peer, plane)
		}
		if now-n.expired >= time.Second {
			n.reports.Expire(now) // O(reports): once a second, as the relay's snapshot does
			n.expired = now
		}
		n.mu.Unlock()
	}
}

func (n *node) watchChanges(ch <-chan region.Change) {
	defer n.wg.Done()
	for c := range ch {
		switch {
		case c.To == region.Dead || c.To == region.Left:
			n.f.tr.deliver("dead", c.Name, "", n.name)
		case c.To == region.Alive && c.From == region.Unknown:
			n.f.tr.deliver("join", c.Name, "", n.name)
		}
	}
}

// kill stops n's gossip without a goodbye (a crash).
func (n *node) kill() {
	if n.dead.Swap(true) {
		return
	}
	_ = n.c.Shutdown() // closes the watch channels
	n.wg.Wait()
}

// node finds a gateway by name (nil if none).
func (f *fleet) node(name string) *node {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, n := range f.nodes {
		if n.name == name {
			return n
		}
	}
	return nil
}
