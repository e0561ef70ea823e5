package pathmgr

import (
	"math/rand/v2"
	"time"
)

// Set holds a connection's paths, drives their health state machine and
// sprays packets over them.
type Set struct {
	cfg   Config
	Paths []Path
	rng   *rand.Rand
	next  int // round-robin cursor of the sprayer
	// credited: the path under the cursor has had its quantum for this
	// turn (PickWeighted).
	credited bool

	transitions []Transition // pending, drained by the owner
}

// NewSet creates n paths, all up, with distinct entropy values drawn from rng.
func NewSet(n int, cfg Config, rng *rand.Rand) *Set {
	s := &Set{cfg: cfg, Paths: make([]Path, n), rng: rng}
	base := uint16(rng.IntN(1 << 15))
	for i := range s.Paths {
		s.Paths[i] = Path{ID: i, Entropy: 49152 + (base+uint16(i))%16384, probeInterval: cfg.ProbeInterval}
	}
	return s
}

// Config returns the set's configuration.
func (s *Set) Config() *Config { return &s.cfg }

// DrainTransitions returns and clears the transitions recorded since the last call.
func (s *Set) DrainTransitions(dst []Transition) []Transition {
	dst = append(dst, s.transitions...)
	s.transitions = s.transitions[:0]
	return dst
}

func (s *Set) move(p *Path, to State, now time.Duration, reason string) {
	if p.State == to {
		return
	}
	s.transitions = append(s.transitions, Transition{Path: p.ID, From: p.State, To: to, At: now, Reason: reason, Entropy: p.Entropy})
	p.State = to
}

// reroll gives the path a new entropy value different from every other path's.
func (s *Set) reroll(p *Path) {
	for {
		e := uint16(49152 + s.rng.IntN(16384))
		clash := false
		for i := range s.Paths {
			if s.Paths[i].Entropy == e {
				clash = true
				break
			}
		}
		if !clash {
			p.Entropy = e
			return
		}
	}
}

// OnProgress records that an ack on path acknowledged new data.
func (s *Set) OnProgress(now time.Duration, path int) {
	p := &s.Paths[path]
	p.LastProgress = now
	p.consecutiveTimeouts = 0
	if p.State == Suspect {
		s.move(p, Up, now, "ack after timeout")
	}
}

// OnTimeout records that path's outstanding data went unacknowledged for a
// PTO. It returns true if the path is now down (and its entropy re-rolled).
func (s *Set) OnTimeout(now time.Duration, path int) bool {
	p := &s.Paths[path]
	p.Timeouts++
	p.consecutiveTimeouts++
	if !p.State.Usable() {
		return false
	}
	if p.consecutiveTimeouts >= s.cfg.DownAfter {
		s.markDown(now, p, "timeouts")
		return true
	}
	s.move(p, Suspect, now, "timeout")
	p.suspectMisses = 0
	p.suspectAnswers, p.suspectWait = 0, 0
	// Should the path carry nothing from now on (round robin prefers up
	// paths), a probe tests it after one more PTO (ProbeDue).
	p.ProbeOutstanding = false
	p.NextProbe = now + p.PTO(&s.cfg)
	return false
}

// suspectIdle reports whether p is suspect with nothing in flight: the
// sprayer prefers up paths, so without a probe such a path would never be
// acked back up nor time out to down.
func suspectIdle(p *Path) bool { return p.State == Suspect && p.InflightBytes == 0 }

// MarkDown takes a path out of service at once (for example when a peer
// gateway reported its plane dead), re-rolling its entropy.
func (s *Set) MarkDown(now time.Duration, path int, reason string) {
	p := &s.Paths[path]
	if !p.State.Usable() {
		return
	}
	s.markDown(now, p, reason)
}

// markDown takes p out of service with a new entropy and starts probing it.
func (s *Set) markDown(now time.Duration, p *Path, reason string) {
	s.reroll(p)
	p.probeInterval = s.cfg.ProbeInterval
	p.NextProbe = now
	p.probeAnswers = 0
	p.ProbeOutstanding = false
	s.move(p, Down, now, reason)
}

// ProbeDue reports whether a probe should be sent on path now, and if so
// records it as sent.
func (s *Set) ProbeDue(now time.Duration, path int) bool {
	p := &s.Paths[path]
	if suspectIdle(p) {
		return s.probeSuspect(now, path)
	}
	if p.State.Usable() || now < p.NextProbe {
		return false
	}
	if p.ProbeOutstanding {
		// The last probe went unanswered: this entropy may hash onto a dead
		// plane too, so roll again and back off.
		s.reroll(p)
		p.probeAnswers = 0
		if p.State == Probing {
			s.move(p, Down, now, "probe unanswered")
		}
		p.probeInterval *= 2
		if p.probeInterval > s.cfg.MaxProbeInterval {
			p.probeInterval = s.cfg.MaxProbeInterval
		}
	}
	p.ProbeOutstanding = true
	wait := p.probeInterval
	if pto := p.PTO(&s.cfg); wait < pto {
		wait = pto
	}
	p.NextProbe = now + wait
	return true
}

// suspectBackoffAfter is how many answers in a row an idle suspect path
// gives before its probes back off. A path that is suspect for a moment
// of a transfer is probed at the PTO as before (backing off from the
// first answer cost goodput at 10% loss, sim TestLossSweepTargets); one
// left suspect by an idle connection backs off.
const suspectBackoffAfter = 8

// probeSuspect is ProbeDue for a suspect path with nothing in flight: a
// probe every max(PTO, probe interval); after suspectBackoffAfter answers
// in a row the wait doubles with every answer up to MaxProbeInterval, and
// a miss brings it back to the PTO. An answer keeps the path suspect (it
// is alive), so the probes go on for as long as the connection stays
// idle: at the PTO, the probes and answers between a gateway and a
// thousand idle hosts came to about 190,000 datagrams a second (one
// answer later than a PTO leaves a path suspect).
//
// 2×DownAfter unanswered in a row take it down. Twice DownAfter, not
// DownAfter: on a lossy but live path (10% loss) a probe round trip fails
// one time in five, and counting misses as timeouts took such paths down
// often enough to cost a fifth of the goodput (sim TestLossSweepTargets);
// a dead path fails every probe, so it still goes down within a few PTOs.
func (s *Set) probeSuspect(now time.Duration, path int) bool {
	p := &s.Paths[path]
	if now < p.NextProbe {
		return false
	}
	if p.ProbeOutstanding {
		p.ProbeOutstanding = false
		p.suspectMisses++
		p.suspectAnswers, p.suspectWait = 0, 0 // it may be dying: probe at the PTO again
		if p.suspectMisses >= 2*s.cfg.DownAfter {
			p.Timeouts++
			s.markDown(now, p, "probes unanswered")
			return false // down: probed as down paths are, from now on
		}
	}
	p.ProbeOutstanding = true
	p.NextProbe = now + max(p.suspectWait, p.probeInterval, p.PTO(&s.cfg))
	return true
}

// OnProbeAck records a probe's answer. A down path comes back up after
// UpAfter consecutive answers; a suspect one stays suspect and is known
// alive.
func (s *Set) OnProbeAck(now time.Duration, path int, rtt time.Duration) {
	p := &s.Paths[path]
	if p.State == Suspect && p.ProbeOutstanding {
		// The path is alive: it stays suspect (an ack of its data brings
		// it up, as before) and is probed again while it stays idle.
		// Neither an RTT sample (a probe skips the data queue) nor a move
		// to up: more up paths on a lossy link cost a quarter of the
		// goodput at 10% loss (sim TestLossSweepTargets).
		p.ProbeOutstanding = false
		p.suspectMisses = 0
		if p.suspectAnswers++; p.suspectAnswers >= suspectBackoffAfter {
			p.suspectWait = min(2*max(p.suspectWait, p.PTO(&s.cfg)), s.cfg.MaxProbeInterval)
		}
		return
	}
	if p.State.Usable() || !p.ProbeOutstanding {
		return
	}
	p.ProbeOutstanding = false
	p.OnRTTSample(rtt)
	p.probeAnswers++
	if p.probeAnswers >= s.cfg.UpAfter {
		p.consecutiveTimeouts = 0
		p.LastProgress = now
		s.move(p, Up, now, "probes answered")
		return
	}
	s.move(p, Probing, now, "probe answered")
	p.NextProbe = now // probe again at once; hysteresis is the answer count
}

// NextProbe returns the earliest probe deadline of any down or probing
// path, or suspect path with nothing in flight, or -1 if none.
func (s *Set) NextProbe() time.Duration {
	t := time.Duration(-1)
	for i := range s.Paths {
		p := &s.Paths[i]
		if p.State.Usable() && !suspectIdle(p) {
			continue
		}
		if t < 0 || p.NextProbe < t {
			t = p.NextProbe
		}
	}
	return t
}

// Pick chooses the path for the next packet of size bytes: the next usable
// path, in round-robin order, whose window has room. Up paths are preferred
// to suspect ones. It returns -1 if no path has room.
func (s *Set) Pick(size int, window func(path int) int) int {
	n := len(s.Paths)
	suspect := -1
	for k := 0; k < n; k++ {
		i := (s.next + k) % n
		p := &s.Paths[i]
		if !p.State.Usable() || p.InflightBytes+size > window(i) {
			continue
		}
		if p.State == Suspect {
			if suspect < 0 {
				suspect = i
			}
			continue
		}
		s.next = (i + 1) % n
		return i
	}
	if suspect >= 0 {
		s.next = (suspect + 1) % n
	}
	return suspect
}

// PickWeighted chooses the path for the next packet of size bytes so that,
// among the usable paths with window room, each carries packets in
// proportion to weight(path): deficit round robin (Shreedhar and Varghese
// 1995), each path's quantum weight × size per turn, so a path of weight 1
// sends one packet per turn, one of weight 2 two in a row, one of weight ¼
// one every fourth turn. Weights are read at each path's turn, so they may
// change between packets; they are relative (a controller passes each
// path's rate over the connection's mean per path). A path without room
// loses its turn and what it had saved (no catch-up burst when its window
// reopens). It returns -1 if no path has room. Work per packet is constant
// on average: about the largest weight over the mean weight of the paths
// with room.
//
// Suspect paths take their turns too, at their weight, unlike Pick's
// preference for up paths: the weights are the controller's split, which
// counts every usable path, and a weighted split leaves the up paths room,
// so a suspect path sent only what they had no room for was sent nothing
// again and never acked back up, while the controller kept its share and
// read its stale samples as an empty queue (docs/CC.md §2, "Suspect
// paths"). Sent its share, a live suspect path is acked up within a round
// trip (OnProgress); a dead one is taken down by its DownAfter timeouts.
// When the weights are too small to reach a packet within maxLaps, an up
// path with room is preferred.
//
// Why not round robin: over planes that ECMP hashed unequal numbers of
// paths onto, round robin sends each plane its number of paths' part of
// the connection, whatever the controller's rate for those paths, and the
// plane with the fewest paths idles (docs/CC.md §2, the split).
func (s *Set) PickWeighted(size int, window func(path int) int, weight func(path int) float64) int {
	n := len(s.Paths)
	if n == 0 {
		return -1
	}
	fsize := float64(size)
	// A lap of n turns that finds no path with room ends the search;
	// laps in which the paths with room only save (weights far below 1)
	// end it after maxLaps, so that a pick never loops for long.
	const maxLaps = 64
	roomy, firstUp, firstSuspect := false, -1, -1
	for k := 0; k < maxLaps*n; k++ {
		if k > 0 && k%n == 0 {
			if !roomy {
				break
			}
			roomy = false
		}
		i := s.next
		p := &s.Paths[i]
		if p.State.Usable() && p.InflightBytes+size <= window(i) {
			roomy = true
			if p.State == Up && firstUp < 0 {
				firstUp = i
			} else if p.State == Suspect && firstSuspect < 0 {
				firstSuspect = i
			}
			if !s.credited {
				s.credited = true
				if w := weight(i); w > 0 {
					p.deficit += w * fsize
				}
			}
			if p.deficit >= fsize {
				p.deficit -= fsize
				return i
			}
		} else {
			p.deficit = 0
		}
		s.next = (i + 1) % n
		s.credited = false
	}
	// maxLaps of saving: weights this small are the controller's
	// business, not a reason to stall the connection.
	if firstUp >= 0 {
		return firstUp
	}
	return firstSuspect
}

// UsableCount returns the number of paths that may carry data.
func (s *Set) UsableCount() int {
	c := 0
	for i := range s.Paths {
		if s.Paths[i].State.Usable() {
			c++
		}
	}
	return c
}

// PlaneMap tells which plane a path with the given entropy is known to use,
// or -1 when the sender cannot know (the fabric hashes it). A gateway knows
// it when paths are bound to per-plane local addresses.
type PlaneMap func(path int, entropy uint16) int

// PathsOnPlane appends to dst the usable paths that planeOf places on plane
// and returns it. A gateway calls it on another gateway's report that the
// plane failed (path-health gossip), then takes those paths down at once
// instead of waiting for its own timeouts.
func (s *Set) PathsOnPlane(dst []int, plane int, planeOf PlaneMap) []int {
	for i := range s.Paths {
		p := &s.Paths[i]
		if p.State.Usable() && planeOf(i, p.Entropy) == plane {
			dst = append(dst, i)
		}
	}
	return dst
}
