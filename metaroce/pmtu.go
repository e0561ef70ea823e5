package metaroce

import (
	"fmt"
	"time"
)

// Packetization-layer path MTU discovery (PLPMTUD), in the spirit of RFC
// 8899 (datagram PLPMTUD), per group of paths: a gateway's plane.
//
// A PMTUSearch is the sans-I/O state machine of one group: it decides
// which probe sizes to send and when, and turns the answers (and their
// absence) into the group's validated size, the largest datagram known to
// cross the plane. Sizes are datagram bytes (the UDP payload: the packet
// plus whatever the driver adds, the AEAD envelope). Time is an argument
// of every method; nothing here reads a clock.
//
//   - It starts at Base, a size every path carries (RFC 9000 §14: 1200),
//     and searches (Base, Max] in rounds: each round probes up to
//     ProbesPerRound sizes at once, spread over the interval still in
//     doubt, so the interval shrinks by that factor per round trip (a
//     binary search with more than one probe in flight). A round ends when
//     every probe is answered or after the probe timeout the caller
//     passes (the path's PTO).
//   - An answered probe raises the validated size at once. An unanswered
//     one only bounds the search from above once it has gone unanswered
//     MaxProbes times (a random loss is not a size limit).
//   - The search is complete when the interval in doubt is at most Step.
//     Then every ConfirmInterval (unless data of the validated size was
//     acknowledged meanwhile) one probe confirms the validated size;
//     MaxProbes confirmations lost in a row is a black hole: back to Base
//     and search again below the size that failed. BlackHole probe
//     timeouts in a row of data larger than Base (OnDataTimeout) start
//     the confirmation at once. Every round carries a control probe of a
//     size known to cross; a round whose control is lost (the plane
//     failed, or lost a burst) judges no size: a dead plane is not a
//     small one. Every RaiseInterval the search starts again above the
//     validated size, so that a path that grew is used.
//   - A settled size below Max (for a connection: the group may carry no
//     DATA) is retried RetryInterval after the search settled with a
//     probe of Max and a control, then after twice that, and so on up to
//     RaiseInterval: a verdict that took the size away may have come from
//     congestion (a drop-tail queue with room for a Base probe and not
//     for a full-size one drops exactly what a black hole drops), and
//     without it such a group carried nothing until the raise interval.
//   - Data acknowledged proves its size as an answered probe does
//     (OnDataAcked).
//   - OnTooBig (the local stack refused a datagram: EMSGSIZE) bounds the
//     search at once.
type PMTUSearch struct {
	cfg   PMTUConfig
	state PMTUState
	// lo is the validated size; hi the smallest size that failed (a
	// suspicion until it failed MaxProbes times: hiStrikes), or Max+1.
	lo, hi    int
	hiStrikes int
	loStrikes int  // confirmations of lo lost in a row
	timeouts  int  // data probe timeouts in a row (black-hole detection)
	check     bool // confirm lo at once (data timed out)

	round    []pmtuProbe // probes of the round in flight
	roundEnd time.Duration
	inRound  bool

	confirmAt, raiseAt, retryAt time.Duration
	retryWait                   time.Duration // RetryInterval, doubled by each retry

	// Counters since the search started.
	Stats PMTUStats
}

// PMTUStats counts what a PMTUSearch did.
type PMTUStats struct {
	ProbesSent, ProbesAcked, ProbesLost uint64
	BlackHoles, TooBig, Raises          uint64
	// Retries counts the probes of Max a search settled below it sent
	// (RetryInterval).
	Retries uint64
	// Settled is when the search last completed (-1: never).
	Settled time.Duration
}

type pmtuProbe struct {
	size    int
	acked   bool
	confirm bool // of the validated size, still crossing?
	control bool // a size known to cross: did anything cross?
	retry   bool // of Max, below which the search settled: crossing again?
}

// PMTUState is the state of a PMTUSearch.
type PMTUState uint8

// The states: RFC 8899's SEARCHING and SEARCH_COMPLETE (its BASE and
// ERROR states are not needed: Base is assumed to work, as every path must
// carry it).
const (
	PMTUDisabled PMTUState = iota
	PMTUSearching
	PMTUComplete
)

func (s PMTUState) String() string {
	switch s {
	case PMTUSearching:
		return "searching"
	case PMTUComplete:
		return "complete"
	}
	return "disabled"
}

// PMTUConfig configures path MTU discovery. Zero fields take the defaults.
type PMTUConfig struct {
	// Groups is the number of path groups: path i is in group i mod
	// Groups (a gateway's planes). 0 turns discovery off.
	Groups int
	// Base is the datagram size assumed to cross every path
	// [DefaultPMTUBase]; Max the largest searched [Base].
	Base, Max int
	// Overhead is what the driver adds to every packet it sends (the AEAD
	// envelope): a probe of datagram size s is a packet of s-Overhead.
	Overhead int
	// Step is the search's resolution in bytes [16].
	Step int
	// ProbesPerRound is how many sizes one round probes at once [8].
	ProbesPerRound int
	// MaxProbes is how many times a size must go unanswered before it is
	// taken as too big [2].
	MaxProbes int
	// BlackHole is how many probe timeouts in a row of data larger than
	// Base send the group back to Base [3].
	BlackHole int
	// ConfirmInterval is how often a settled size is confirmed when no
	// data of that size was acknowledged [15 s]; RaiseInterval how often
	// a settled search tries larger sizes again [10 min].
	ConfirmInterval, RaiseInterval time.Duration
	// RetryInterval is how long after settling below Max a search probes
	// Max again [1 s]; each unanswered retry doubles the wait, up to
	// RaiseInterval. Two probes each (Max and a control): a group that a
	// false verdict left unable to carry DATA (a congested queue dropped
	// its full-size probes) carries it again within about a second of a
	// short congestion ending, and within about the congestion's length
	// of a long one; a plane that really is smaller costs about ten
	// retries per raise interval.
	RetryInterval time.Duration
}

// DefaultPMTUBase is the datagram every path is assumed to carry: QUIC's
// minimum (RFC 9000 §14), which fits the IPv6 minimum MTU (1280) with the
// IPv6 and UDP headers and fits any IPv4 path of 1228 bytes or more.
const DefaultPMTUBase = 1200

// MinPMTUProbe is the smallest probe packet (its header); MaxPMTUSize the
// largest size searched (a UDP payload over IPv4 is at most 65507).
const (
	MinPMTUProbe = PMTUProbeLen
	MaxPMTUSize  = 65507
)

func (c PMTUConfig) withDefaults() PMTUConfig {
	if c.Base == 0 {
		c.Base = DefaultPMTUBase
	}
	if c.Max < c.Base {
		c.Max = c.Base
	}
	if c.Step == 0 {
		c.Step = 16
	}
	if c.ProbesPerRound == 0 {
		c.ProbesPerRound = 8
	}
	if c.MaxProbes == 0 {
		c.MaxProbes = 2
	}
	if c.BlackHole == 0 {
		c.BlackHole = 3
	}
	if c.ConfirmInterval == 0 {
		c.ConfirmInterval = 15 * time.Second
	}
	if c.RaiseInterval == 0 {
		c.RaiseInterval = 10 * time.Minute
	}
	if c.RetryInterval == 0 {
		c.RetryInterval = time.Second
	}
	return c
}

// Validate reports a configuration out of range.
func (c PMTUConfig) Validate() error {
	d := c.withDefaults()
	switch {
	case c.Groups < 0 || c.Groups > 1024:
		return fmt.Errorf("metaroce: PMTU groups %d outside [0, 1024]", c.Groups)
	case c.Overhead < 0 || c.Overhead > 1024:
		return fmt.Errorf("metaroce: PMTU overhead %d outside [0, 1024]", c.Overhead)
	case d.Base < PMTUProbeLen+d.Overhead || d.Max > MaxPMTUSize:
		return fmt.Errorf("metaroce: PMTU sizes [%d, %d] outside [%d, %d]", d.Base, d.Max, PMTUProbeLen+d.Overhead, MaxPMTUSize)
	case d.Step < 1 || d.ProbesPerRound < 1 || d.ProbesPerRound > 64 || d.MaxProbes < 1 || d.BlackHole < 1:
		return fmt.Errorf("metaroce: PMTU step, probes per round (1..64), max probes and black hole must be positive")
	case d.ConfirmInterval < 0 || d.RaiseInterval < 0 || d.RetryInterval < 0:
		return fmt.Errorf("metaroce: PMTU intervals must not be negative")
	}
	return nil
}

// NewPMTUSearch starts a search at now.
func NewPMTUSearch(cfg PMTUConfig, now time.Duration) *PMTUSearch {
	s := &PMTUSearch{}
	s.init(cfg, now)
	return s
}

func (s *PMTUSearch) init(cfg PMTUConfig, now time.Duration) {
	cfg = cfg.withDefaults()
	*s = PMTUSearch{cfg: cfg, lo: cfg.Base, hi: cfg.Max + 1, round: make([]pmtuProbe, 0, cfg.ProbesPerRound+1)}
	s.Stats.Settled = -1
	s.state = PMTUSearching
	if s.done() {
		s.settle(now)
	}
}

// Size is the validated size: the largest datagram known to cross.
func (s *PMTUSearch) Size() int { return s.lo }

// State is the search's state.
func (s *PMTUSearch) State() PMTUState { return s.state }

// Config is the configuration with its defaults.
func (s *PMTUSearch) Config() PMTUConfig { return s.cfg }

// Bounds are the interval still in doubt: lo fits, hi is the smallest
// size that failed (Max+1 if none did).
func (s *PMTUSearch) Bounds() (lo, hi int) { return s.lo, s.hi }

func (s *PMTUSearch) hiConfirmed() bool {
	return s.hi > s.cfg.Max || s.hiStrikes >= s.cfg.MaxProbes
}

func (s *PMTUSearch) done() bool {
	return s.lo >= s.cfg.Max || (s.hiConfirmed() && s.hi-s.lo <= s.cfg.Step)
}

func (s *PMTUSearch) settle(now time.Duration) {
	s.state = PMTUComplete
	s.Stats.Settled = now
	s.confirmAt = now + s.cfg.ConfirmInterval
	s.raiseAt = now + s.cfg.RaiseInterval
	s.retryWait = s.cfg.RetryInterval
	s.retryAt = now + s.retryWait
}

// Deadline is when the search next wants to run (Next): now or earlier
// when a round is due at once; -1 when disabled.
func (s *PMTUSearch) Deadline() time.Duration {
	switch {
	case s.state == PMTUDisabled:
		return -1
	case s.inRound:
		return s.roundEnd
	case s.state == PMTUSearching || s.loStrikes > 0 || s.check:
		return 0
	}
	d := time.Duration(-1)
	if s.lo < s.cfg.Max {
		d = min(s.raiseAt, s.retryAt)
	}
	if s.lo > s.cfg.Base && (d < 0 || s.confirmAt < d) {
		d = s.confirmAt
	}
	return d // -1: nothing to raise, nothing to confirm
}

// Next ends the round in flight if its time is up, starts the next round
// if one is due, and appends the sizes to probe now to dst (none while a
// round is in flight or nothing is due). pto is how long the probes of a
// round starting now may take to be answered.
func (s *PMTUSearch) Next(now, pto time.Duration, dst []int) []int {
	if s.state == PMTUDisabled {
		return dst
	}
	if s.inRound {
		if now < s.roundEnd {
			return dst
		}
		s.endRound(now)
	}
	confirm := s.lo > s.cfg.Base && (s.check || s.loStrikes > 0 || s.state == PMTUComplete && now >= s.confirmAt)
	if s.state == PMTUComplete && !confirm {
		if s.lo >= s.cfg.Max {
			return dst
		}
		if now < s.raiseAt {
			if now < s.retryAt {
				return dst
			}
			// Max again, with the validated size as the control: an
			// answer raises the size to Max (OnAck); silence judges
			// nothing (the search already settled below it).
			s.Stats.Retries++
			s.retryWait = min(2*s.retryWait, s.cfg.RaiseInterval)
			s.retryAt = now + s.retryWait
			s.round = append(s.round[:0], pmtuProbe{size: s.cfg.Max, retry: true}, pmtuProbe{size: s.lo, control: true})
			return s.start(now, pto, dst)
		}
		// Try larger sizes again: forget the upper bound.
		s.Stats.Raises++
		s.state = PMTUSearching
		s.hi, s.hiStrikes = s.cfg.Max+1, 0
	}
	if confirm {
		// The validated size again, with a Base probe as the control: a
		// plane that carries nothing at all (failed) is not a black hole.
		s.check = false
		s.round = append(s.round[:0], pmtuProbe{size: s.lo, confirm: true}, pmtuProbe{size: s.cfg.Base, control: true})
		return s.start(now, pto, dst)
	}
	// The control of a search round is the validated size: when it is
	// lost too, the round says nothing about the larger sizes.
	s.round = append(s.round[:0], pmtuProbe{size: s.lo, control: true})
	if !s.hiConfirmed() {
		s.round = append(s.round, pmtuProbe{size: s.hi})
	}
	top := s.hi
	if s.hi > s.cfg.Max {
		top = s.cfg.Max
		s.round = append(s.round, pmtuProbe{size: top})
	}
	k := s.cfg.ProbesPerRound + 1 - len(s.round) // the control is extra
	for j := 1; j <= k; j++ {
		v := s.lo + (top-s.lo)*j/(k+1)
		v -= v % s.cfg.Step
		if v > s.lo && v < top && !s.inThisRound(v) {
			s.round = append(s.round, pmtuProbe{size: v})
		}
	}
	if len(s.round) == 1 && top-s.lo > 1 {
		s.round = append(s.round, pmtuProbe{size: s.lo + (top-s.lo)/2})
	}
	if len(s.round) == 1 {
		s.settle(now)
		return dst
	}
	return s.start(now, pto, dst)
}

func (s *PMTUSearch) inThisRound(v int) bool {
	for _, p := range s.round {
		if p.size == v {
			return true
		}
	}
	return false
}

func (s *PMTUSearch) start(now, pto time.Duration, dst []int) []int {
	s.inRound = true
	s.roundEnd = now + max(pto, time.Millisecond)
	for _, p := range s.round {
		dst = append(dst, p.size)
	}
	s.Stats.ProbesSent += uint64(len(s.round))
	return dst
}

// endRound judges the round's unanswered probes.
func (s *PMTUSearch) endRound(now time.Duration) {
	s.inRound = false
	fail := 0
	void := false
	for _, p := range s.round {
		if p.control && !p.acked {
			void = true // nothing crossed: the plane failed, not a size
		}
	}
	for _, p := range s.round {
		if p.acked {
			continue
		}
		s.Stats.ProbesLost++
		if void {
			continue
		}
		if p.retry {
			continue
		}
		if p.confirm {
			if p.size == s.lo {
				s.loStrikes++
				if s.loStrikes >= s.cfg.MaxProbes {
					s.blackHole(now, s.lo, false)
					return
				}
			}
			continue
		}
		if p.size > s.lo && (fail == 0 || p.size < fail) {
			fail = p.size
		}
	}
	s.round = s.round[:0]
	switch {
	case fail == 0:
	case fail < s.hi:
		s.hi, s.hiStrikes = fail, 1
	case fail == s.hi:
		s.hiStrikes++
	}
	if s.state == PMTUSearching && s.done() {
		s.settle(now)
	}
}

// blackHole sends the group back to Base: size stopped crossing. Refused
// by the local stack (tooBig), size bounds the search for good; lost in
// confirmations, it is only suspected: the search probes it again in its
// rounds like any size in doubt, because the confirmations ran while data
// timed out, when a congested queue with room for the control and not for
// the larger probe loses exactly what a black hole loses. Taken as
// confirmed, a group whose lost size was the full DATA datagram carried
// no DATA until the raise interval (10 min; the chaos run's wedge,
// TestWedgeAfterAllPathsTimeOut).
func (s *PMTUSearch) blackHole(now time.Duration, size int, tooBig bool) {
	s.Stats.BlackHoles++
	s.lo = s.cfg.Base
	if size > s.lo && size < s.hi {
		s.hi, s.hiStrikes = size, 0
		if tooBig {
			s.hiStrikes = s.cfg.MaxProbes
		}
	}
	s.loStrikes, s.timeouts, s.check = 0, 0, false
	s.inRound = false
	s.round = s.round[:0]
	s.state = PMTUSearching
	if s.done() {
		s.settle(now)
	}
}

// OnAck records that a probe of size bytes was answered: size crosses.
func (s *PMTUSearch) OnAck(now time.Duration, size int) {
	if s.state == PMTUDisabled || size > s.cfg.Max {
		return
	}
	s.Stats.ProbesAcked++
	all := s.inRound
	for i := range s.round {
		if s.round[i].size == size {
			s.round[i].acked = true
		}
		all = all && s.round[i].acked
	}
	s.crossed(now, size)
	if all {
		s.endRound(now)
	}
}

// crossed records that a datagram of size bytes (at most Max) crossed the
// group: an answered probe, or acknowledged data.
func (s *PMTUSearch) crossed(now time.Duration, size int) {
	if size >= s.lo {
		s.loStrikes = 0
		s.timeouts = 0
		if s.state == PMTUComplete {
			s.confirmAt = now + s.cfg.ConfirmInterval
		}
	}
	if size > s.lo {
		s.lo = size
		if s.lo >= s.hi {
			// What failed was lost, not too big.
			s.hi, s.hiStrikes = s.cfg.Max+1, 0
		}
		if s.state == PMTUComplete && !s.done() {
			s.state = PMTUSearching // a late answer reopened the interval
		}
	}
}

// OnTooBig records that the local stack refused to send size bytes
// (EMSGSIZE): nothing that large crosses.
func (s *PMTUSearch) OnTooBig(now time.Duration, size int) {
	if s.state == PMTUDisabled || size > s.cfg.Max || size <= s.cfg.Base {
		return
	}
	s.Stats.TooBig++
	if size <= s.lo {
		s.blackHole(now, size, true)
		return
	}
	if size < s.hi || !s.hiConfirmed() && size == s.hi {
		s.hi = size
		s.hiStrikes = s.cfg.MaxProbes
	}
	if s.state == PMTUSearching && !s.inRound && s.done() {
		s.settle(now)
	}
}

// OnDataAcked records that data of size bytes was acknowledged on the
// group: it confirms size, and, larger than Base, ends any run of
// timeouts (a smaller packet proves the path, not the size). Larger than
// the validated size, it raises it, as an answered probe of that size
// does: a datagram sent without fragmentation crossed. A group that lost
// its size to a false black-hole verdict (congestion) while full-size
// DATA was in flight gets it back with the first of those acknowledged,
// when that DATA is as large as the size the connection requires (Conn's
// pmtuDataSize: a full DATA of the connection's wire version).
func (s *PMTUSearch) OnDataAcked(now time.Duration, size int) {
	if s.state == PMTUDisabled {
		return
	}
	if size > s.cfg.Base {
		s.timeouts = 0
	}
	if size > s.lo && size <= s.cfg.Max {
		s.crossed(now, size)
		if s.state == PMTUSearching && !s.inRound && s.done() {
			s.settle(now)
		}
		return
	}
	if size >= s.lo && s.state == PMTUComplete {
		s.loStrikes = 0
		s.confirmAt = now + s.cfg.ConfirmInterval
	}
}

// OnDataTimeout records a probe timeout of data of size bytes on the
// group (nothing in flight was acknowledged). BlackHole of them in a row,
// for data larger than Base, is a black hole.
func (s *PMTUSearch) OnDataTimeout(now time.Duration, size int) {
	if s.state == PMTUDisabled || size <= s.cfg.Base {
		return
	}
	s.timeouts++
	if s.timeouts >= s.cfg.BlackHole {
		// Confirm the validated size (with a control) before dropping it:
		// timeouts of a plane that failed outright are no black hole.
		s.timeouts = 0
		s.check = s.lo > s.cfg.Base
	}
}
