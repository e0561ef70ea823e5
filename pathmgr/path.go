// Package pathmgr keeps the state of a connection's paths: each path's RTT
// estimate, its health (up, suspect, down, probing) with hysteresis, its ECMP
// entropy (the UDP source port the fabric hashes onto a plane), and the
// sprayer that picks a path for the next packet.
//
// A path that stops answering is suspected after one probe timeout and marked
// down after a few; its entropy is then re-rolled so that its packets hash
// onto another plane, and it is probed until it answers again. Every state
// change is returned as a Transition with its reason, for metrics, logs and
// gossip.
//
// Like the protocol state machine that uses it, this package takes time as an
// argument and does no I/O. It must not import metaroce.
package pathmgr

import (
	"fmt"
	"time"
)

// State is a path's health.
type State uint8

const (
	// Up paths carry data.
	Up State = iota
	// Suspect paths timed out once; an ack of their data brings them up,
	// and they go down if the timeouts continue. Round robin (Set.Pick)
	// sends them only what the up paths have no room for, the weighted
	// sprayer (Set.PickWeighted) their weight, as up paths.
	Suspect
	// Down paths carry no data; their entropy has been re-rolled and they
	// are probed.
	Down
	// Probing paths answered a probe; they go up after enough consecutive
	// answers (hysteresis).
	Probing
)

func (s State) String() string {
	switch s {
	case Up:
		return "up"
	case Suspect:
		return "suspect"
	case Down:
		return "down"
	case Probing:
		return "probing"
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// Usable reports whether new data may be sprayed onto a path in this state.
func (s State) Usable() bool { return s == Up || s == Suspect }

// Transition records one change of a path's state.
type Transition struct {
	Path     int
	From, To State
	At       time.Duration
	Reason   string
	Entropy  uint16 // the path's entropy after the transition
}

// Config tunes failure detection.
type Config struct {
	// InitialRTT is assumed before the first sample.
	InitialRTT time.Duration
	// MinPTO bounds the probe timeout from below (timer granularity).
	MinPTO time.Duration
	// MaxAckDelay is the receiver's longest ack delay, added to the PTO.
	MaxAckDelay time.Duration
	// DownAfter is the number of consecutive timeouts that marks a path down.
	DownAfter int
	// ProbeInterval is the first interval between probes of a down path; it
	// doubles after every unanswered probe, up to MaxProbeInterval.
	ProbeInterval, MaxProbeInterval time.Duration
	// UpAfter is the number of consecutive probe answers a down path needs
	// before it carries data again.
	UpAfter int
}

// DefaultConfig returns settings suited to data-center RTTs; WAN users raise
// InitialRTT and the probe intervals.
func DefaultConfig() Config {
	return Config{
		InitialRTT:       100 * time.Microsecond,
		MinPTO:           50 * time.Microsecond,
		MaxAckDelay:      10 * time.Microsecond,
		DownAfter:        3,
		ProbeInterval:    200 * time.Microsecond,
		MaxProbeInterval: 100 * time.Millisecond,
		UpAfter:          2,
	}
}

// Path is one path of a connection.
type Path struct {
	ID      int
	Entropy uint16
	State   State

	// RTT estimator (RFC 6298 style).
	SRTT, RTTVar, MinRTT, LatestRTT time.Duration
	hasRTT                          bool

	// suspectMisses counts the probes of this suspect, idle path that went
	// unanswered in a row (Set.probeSuspect).
	suspectMisses int

	// InflightBytes is the payload-carrying bytes sent and not yet acked or lost.
	InflightBytes int

	// Counters for reports and metrics.
	SentPackets, AckedPackets, LostPackets, MarkedPackets, Timeouts uint64

	consecutiveTimeouts int
	probeAnswers        int
	probeInterval       time.Duration
	// suspectAnswers counts the answers in a row to an idle suspect
	// path's probes; suspectWait is the wait between them once it
	// backs off (probeSuspect).
	suspectAnswers int
	suspectWait    time.Duration
	// NextProbe is when the next probe of a down or probing path is due.
	NextProbe time.Duration
	// ProbeOutstanding is true while a probe awaits its answer.
	ProbeOutstanding bool
	// LastProgress is the last time an ack acknowledged something new.
	LastProgress time.Duration

	// deficit is the bytes the path may still send in the weighted
	// sprayer's current turn (Set.PickWeighted, deficit round robin).
	deficit float64
}

// OnRTTSample folds one round-trip sample into the estimator.
func (p *Path) OnRTTSample(rtt time.Duration) {
	if rtt <= 0 {
		rtt = 1
	}
	p.LatestRTT = rtt
	if !p.hasRTT {
		p.hasRTT = true
		p.SRTT, p.RTTVar, p.MinRTT = rtt, rtt/2, rtt
		return
	}
	if rtt < p.MinRTT {
		p.MinRTT = rtt
	}
	d := p.SRTT - rtt
	if d < 0 {
		d = -d
	}
	p.RTTVar = (3*p.RTTVar + d) / 4
	p.SRTT = (7*p.SRTT + rtt) / 8
}

// HasRTT reports whether the path has an RTT sample yet.
func (p *Path) HasRTT() bool { return p.hasRTT }

// PTO is how long the path may go without acknowledging outstanding data
// before a timeout is declared.
func (p *Path) PTO(c *Config) time.Duration {
	srtt, v := p.SRTT, p.RTTVar
	if !p.hasRTT {
		srtt, v = c.InitialRTT, c.InitialRTT/2
	}
	pto := srtt + 4*v + c.MaxAckDelay
	if pto < c.MinPTO {
		pto = c.MinPTO
	}
	return pto
}
