package cc

import (
	"time"

	"github.com/mrgw/mrgw/units"
)

// GrowthState is what a growth function sees when the connection may grow.
type GrowthState struct {
	// Rate is the connection's current rate and LineRate its ceiling (0 if
	// unknown), both in bytes per second.
	Rate, LineRate float64
	// Hint is the receiver's allocated share, bytes per second (0: none).
	Hint float64
	// SinceCongestion is the time since the connection last backed off.
	SinceCongestion time.Duration
	// SRTT is the smoothed round trip of the path whose ack triggered the
	// growth; RefRTT is the controller's reference round trip.
	SRTT, RefRTT time.Duration
}

// Growth returns how fast the connection's rate may grow, in bytes per second
// per second. The engine spreads it over the paths in proportion to their
// rates (coupling), so the connection as a whole grows at this speed however
// many paths it has.
type Growth func(g GrowthState) float64

// AIMDConfig parameterises the AIMD engine shared by the data-center and the
// long-RTT controllers. The engine is rate-based: each path has a rate, its
// window is that rate times the path's round trip (with headroom), and the
// connection paces at the sum of the path rates, never above the receiver's
// hint.
type AIMDConfig struct {
	Name   string
	Growth Growth
	// RefRTT is the reference round trip. With RTTFair, a path's back-off per
	// round is scaled by its srtt/RefRTT, so that backing off, like growing,
	// happens at a rate per unit of time that does not depend on the path's
	// round trip. Without it, a path backs off fully once per its own round
	// trip (DCTCP).
	RefRTT  time.Duration
	RTTFair bool
	// Gain is the weight of one round's marked fraction in the running
	// estimate alpha (DCTCP's g; default 1/16).
	Gain float64
	// MaxCut bounds one back-off (default 0.5).
	MaxCut float64
	// DelayTarget and DelayTargetFrac make a path's queueing-delay target:
	// DelayTarget + DelayTargetFrac × the path's minimum RTT.
	DelayTarget     time.Duration
	DelayTargetFrac float64
	// LossAbove and LossFactor make the loss test: a round's loss rate is
	// congestion on its own only when it exceeds LossFactor × floor +
	// LossAbove, where floor is the path's running loss floor (defaults 0.02
	// and 3).
	LossAbove, LossFactor float64
	// MarkGain is the RTT-fair ECN reaction: each marked byte takes
	// MarkGain/RefRTT off the path's rate, in bytes per second (default 1).
	MarkGain float64
	// WindowGain is the headroom of a path's window over rate × srtt
	// (default 2): pacing, not the window, normally sets the rate.
	WindowGain float64
	// QueueShare, if positive, turns on the delay equilibrium (FAST TCP,
	// Jin, Wei and Low 2004) while the connection's paths queue (smoothed
	// RTT at least QueueShare/4 above the minimum): the connection's window
	// w = rate × rtt follows dw/dt = EqGain/rtt · (α − w·q/rtt), with
	// α = QueueShare × scale (scale: the hint, else the line rate) and q the
	// queueing delay, and the rate is w over the current round trip. At
	// equilibrium every connection through one queue keeps α bytes in it,
	// so their rates are equal whatever their round trips, and two
	// connections' difference shrinks by about EqGain·q/rtt per round trip.
	// While it steers, the growth function, the delay cut and the per-byte
	// ECN back-off are off; they act when the queue is (nearly) empty.
	QueueShare time.Duration
	// EqGain is FAST's γ (default 0.7).
	EqGain float64
	// MarkPrice adds the marked-fraction price (markPrice) to the
	// queueing delay the delay equilibrium answers, so that at a marking
	// bottleneck the queue stays near the marking threshold whatever the
	// number of connections. It acts only while the
	// connection has no receiver hint (priceOn). On in the registered
	// long-RTT controllers (docs/CC.md §4).
	MarkPrice bool
	// SearchStart, if positive, raises the starting rate of a connection
	// without a hint to this fraction of the line rate when that is above
	// the default (10 packets per base RTT): the search doubles per round
	// trip, so starting from a fixed packet count takes log2 of the line
	// rate more round trips to find a share, about 7 more at 100 Gbit/s
	// than at 1 Gbit/s, and at 100 ms those are 0.7 s of the newcomer
	// idling while the incumbent holds the link (docs/CC.md §4).
	SearchStart float64
	Params      Params
}

// aimdPath is one path's state.
type aimdPath struct {
	rate         float64 // bytes/s
	usable       bool
	srtt, minRTT time.Duration
	// ownMin is the path's own minimum RTT, not bounded by the configured
	// base RTT as minRTT is: what balance measures the path's queue
	// against, so that a longer path's extra propagation is not read as a
	// queue (docs/CC.md §2).
	ownMin     time.Duration
	alpha      float64
	lastUpdate time.Duration
	balAt      time.Duration // the path's last step of balance
	// the current round
	roundStart                         time.Duration
	roundAcked, roundMarked, roundLost int
	roundPkts                          int
	lossFloor                          float64
	floorSet                           bool
	cwrUntil                           time.Duration // signals before this are the last back-off's echo
	everMarked                         bool
	// RTT samples: the smallest and largest of the current round, and rttHi,
	// a slowly decaying maximum. Queueing delay is read from the round's
	// smallest sample (a standing queue delays every packet; a late timer
	// or a delayed ack only some), and the window covers rttHi, so that
	// acks that come late because the driver's timers fire late do not
	// stall a path whose srtt is far smaller than that lateness.
	roundMinRTT, roundMaxRTT, rttHi time.Duration
	// rttLo follows the path's RTT samples down at once and up by 1/8
	// of the difference per sample: a smoothed RTT that a late ack moves
	// for one sample only. The path's queue as balance reads it
	// (splitQueue).
	rttLo time.Duration
	// rttDev is the mean deviation of the RTT samples from srtt (gain
	// 1/8): the noise the path's samples carry (ack delay, late timers).
	// A delay target below it would read that noise as a queue.
	rttDev time.Duration
	// splitF is SplitWeight's queue factor, computed from the path's queue
	// splitQ and balance's splitBalQ and splitRef (splitFactor); splitOK:
	// it was computed.
	splitF                      float64
	splitQ, splitBalQ, splitRef time.Duration
	splitOK                     bool
}

// AIMD is the engine behind dc-aimd and the long-RTT controllers: ECN-driven
// multiplicative decrease in proportion to the fraction of bytes marked
// (DCTCP), once per round per path; queueing delay above a per-path target as
// a second signal; loss read as congestion only when well above the path's
// running loss floor or when it comes with marks or delay; growth by a
// pluggable function, coupled across paths; the receiver's hint as a ceiling
// and as the starting point.
type AIMD struct {
	cfg   AIMDConfig
	pkt   int
	paths []aimdPath
	total float64 // sum of usable path rates, bytes/s
	// parked is the connection's rate while no path is usable: it is given
	// back to the first path that returns, so a moment with every path
	// down (a host's LAN link flapping) does not reset the rate to zero.
	parked         float64
	hint           float64
	searching      bool // no hint and no congestion yet: multiplicative search
	lastCongestion time.Duration
	lastHintRise   time.Duration
	// the delay equilibrium: its window, the rate it last set, its clock
	eqW, eqSet float64
	eqLast     time.Duration
	// What balance last measured, for SplitWeight: the number of paths
	// it split over, the rate-weighted mean queue and its reference.
	balN         int
	balQ, balRef time.Duration
	// lateMax is the largest lateness of a paced send (OnSendLate) at
	// lateAt, decaying from then on (stallAllowance).
	lateMax, lateAt time.Duration
	// markMem is how persistently the connection's paths have seen ECN
	// marks while the delay equilibrium steered: it rises by a quarter of
	// the gap with every marked round and decays over markMemory.
	markMem float64
	// fb is the classic fallback's state (Params.ClassicFallback).
	fb fallbackState
	// ovf is the drop-tail overflow rule's state (aimd_overflow.go).
	ovf overflowState
	// mkF is the running fraction of acked bytes that were marked, the
	// input of the marked-fraction price (AIMDConfig.MarkPrice); mkLast
	// its clock.
	mkF       float64
	mkLast    time.Duration
	mkStarted bool // mkLast is set: the first sample only starts the clock
	// mkMarkAt is when the last ack with marks came (or the first ack):
	// the price's probe (priceProbe) waits for a round trip without one.
	mkMarkAt time.Duration
	// held is the rate the connection had before the receiver's hint
	// capped it, less its own back-offs since: when the receiver releases
	// its hold-back, the connection returns to it (never above the hint).
	held float64
	// use tells whether the connection delivers what its rate allows; while
	// it does not (application-limited), the rate does not grow (RFC 7661).
	use useMeter
	// The sending gateway's egress share (Params.Egress):
	// the connection's place there, the last level it gave, and the
	// receiver's own hint. The hint the engine acts on (a.hint) is the
	// smaller of the receiver's hint and the egress level.
	eg               *egressConn
	egLevel, rcvHint float64
	// weight is the shares of a shared bottleneck the connection stands
	// for (SetWeight; 0: one).
	weight float64
}

// NewAIMD returns a Factory for the AIMD engine with cfg.
func NewAIMD(cfg AIMDConfig) Factory {
	if cfg.Gain == 0 {
		cfg.Gain = 1.0 / 16
	}
	if cfg.MaxCut == 0 {
		cfg.MaxCut = 0.5
	}
	if cfg.LossAbove == 0 {
		cfg.LossAbove = 0.02
	}
	if cfg.LossFactor == 0 {
		cfg.LossFactor = 3
	}
	if cfg.MarkGain == 0 {
		cfg.MarkGain = 0.2
	}
	if cfg.WindowGain == 0 {
		cfg.WindowGain = 2
	}
	if cfg.RefRTT == 0 {
		cfg.RefRTT = cfg.Params.RefRTT
	}
	if cfg.RefRTT == 0 {
		cfg.RefRTT = 10 * time.Millisecond
	}
	return func(paths, packetSize int) Controller {
		a := &AIMD{cfg: cfg, pkt: packetSize, paths: make([]aimdPath, paths), searching: true}
		base := cfg.Params.BaseRTT
		if base <= 0 {
			base = time.Millisecond
		}
		start := float64(cfg.Params.InitialRate.Bytes())
		if start <= 0 {
			start = 10 * float64(packetSize) / base.Seconds()
			if f := cfg.SearchStart * float64(cfg.Params.LineRate.Bytes()); f > start {
				start = f
			}
		}
		for i := range a.paths {
			a.paths[i] = aimdPath{rate: start / float64(paths), usable: true, srtt: base, minRTT: base, ownMin: base}
		}
		a.total = start
		return a
	}
}

// Name implements Controller.
func (a *AIMD) Name() string { return a.cfg.Name }

// Rate returns the connection's current rate in bytes per second, before the
// hint cap (for tests and plots).
func (a *AIMD) Rate() float64 { return a.total }

// Hint returns the ceiling the connection acts on, bytes per second: the
// smaller of the receiver's hint and the egress level (0: neither).
func (a *AIMD) Hint() float64 { return a.hint }

// MarkMem returns the connection's memory of marks at a standing queue
// (markMem; for tests and traces).
func (a *AIMD) MarkMem() float64 { return a.markMem }

// queueDelay returns the connection's rate-weighted queueing delay (for
// tests and traces).
func (a *AIMD) queueDelay() time.Duration { _, q, _ := a.connDelay(); return q }

// pathRate returns one path's rate in bytes per second.
func (a *AIMD) pathRate(path int) float64 { return a.paths[path].rate }

// pathAlpha returns a path's running marked fraction.
func (a *AIMD) pathAlpha(path int) float64 { return a.paths[path].alpha }

// pathLossFloor returns a path's running loss floor.
func (a *AIMD) pathLossFloor(path int) float64 { return a.paths[path].lossFloor }

// appLimited reports whether the connection's last measured round delivered
// less than useFraction of what its rate allowed: the sender does not use
// its rate (it has less to send, or something other than this controller
// holds it back), so the rate does not grow.
func (a *AIMD) appLimited() bool { return a.use.limited }

// Window implements Controller: the path's rate times its round trip, with
// headroom, and never less than four packets on a usable path.
func (a *AIMD) Window(path int) int {
	p := &a.paths[path]
	if !p.usable {
		return 0
	}
	rtt := p.srtt
	if p.rttHi > rtt {
		rtt = p.rttHi
	}
	// The full headroom on every path, also where balance splits the
	// rate: the sender sprays by the split (Splitter), so windows need
	// not carry it.
	w := p.rate * rtt.Seconds() * a.cfg.WindowGain
	return windowBytes(w, 4*a.pkt)
}

// PacingRate implements Controller: the sum of the path rates, capped by the
// receiver's hint and the line rate.
func (a *AIMD) PacingRate() units.ByteRate {
	r := a.total
	if a.hint > 0 && r > a.hint {
		r = a.hint
	}
	if lr := float64(a.cfg.Params.LineRate.Bytes()); lr > 0 && r > lr {
		r = lr
	}
	return units.ByteRate(min(r, MaxRate))
}

// OnSent implements Controller: the bytes sent tell whether the sender uses
// its rate (useMeter).
func (a *AIMD) OnSent(now time.Duration, _ int, bytes int) {
	a.use.advance(now, a.PacingRate())
	a.use.onSent(bytes)
	if e := a.cfg.Params.Egress; e != nil {
		if a.eg == nil {
			a.eg = e.join()
		}
		if lvl := e.sent(now, a.eg, bytes); lvl != a.egLevel {
			a.egLevel = lvl
			if h := a.effHint(); h > 0 {
				a.setHint(now, h)
			} else {
				// The egress lost its capacity (a reload to an
				// unlimited rate) and no receiver hints: no ceiling
				// is left, not the last level.
				a.hint = 0
			}
		}
	}
}

// LeaveEgress takes the connection out of its gateway's egress share
// (Params.Egress) at once: its connection closed, and the others' shares
// rise now instead of after it idled for 50 windows. The gateway calls it
// when it drops a connection.
func (a *AIMD) LeaveEgress() {
	if e := a.cfg.Params.Egress; e != nil && a.eg != nil {
		e.leave(a.eg)
	}
}

func (a *AIMD) retotal() {
	t := 0.0
	for i := range a.paths {
		if a.paths[i].usable {
			t += a.paths[i].rate
		}
	}
	a.total = t
}

// capTo scales every path down so that the connection's rate is at most c.
// SetLineRate changes the ceiling (Params.LineRate, here in bytes per
// second; 0 removes it) of a running controller, as a live reload of the
// operator's maximum rate does. A rate above the new ceiling comes down to
// it at once; a higher ceiling is grown into as usual.
func (a *AIMD) SetLineRate(rate units.ByteRate) {
	a.cfg.Params.LineRate = max(rate, 0).Bits()
	a.capTo(float64(rate) * a.headroom()) // as ceiling() reads it
}

func (a *AIMD) capTo(c float64) bool {
	if c <= 0 || a.total <= c {
		return false
	}
	f := c / a.total
	for i := range a.paths {
		a.paths[i].rate *= f
	}
	a.retotal()
	return true
}

// setTotal spreads a new connection rate over the usable paths in proportion
// to their current rates.
func (a *AIMD) setTotal(r float64) {
	if a.total <= 0 {
		return
	}
	f := r / a.total
	for i := range a.paths {
		a.paths[i].rate *= f
	}
	a.retotal()
}

// OnAck implements Controller.
func (a *AIMD) OnAck(now time.Duration, path int, s AckSample) {
	clampRTTs(&s)
	p := &a.paths[path]
	if s.SRTT > 0 {
		p.srtt = s.SRTT
	}
	if s.MinRTT > 0 {
		p.minRTT = s.MinRTT
		p.ownMin = s.MinRTT
		// A flow that starts into a standing queue never sees the true
		// propagation delay; the configured base RTT is a lower bound on
		// what it is measured against (it must not exceed the true one).
		if b := a.cfg.Params.BaseRTT; b > 0 && b < p.minRTT {
			p.minRTT = b
		}
	}
	a.use.advance(now, a.PacingRate())
	a.use.onAck(now, s.AckedBytes, a.maxSRTT())
	if a.cfg.MarkPrice && a.cfg.QueueShare > 0 {
		// From the connection's first ack, the search included: every
		// connection through a bottleneck must read the same F, and
		// connections end their searches at different times. A
		// newcomer's search into a marked queue reads the marks the
		// incumbents read, which is how it catches up with their F.
		a.markSample(now, s.AckedBytes, s.MarkedBytes)
	}
	a.grow(now, path)
	if p.roundPkts == 0 {
		p.roundStart = now
	}
	if r := s.RTT; r > 0 {
		d := r - p.srtt
		if d < 0 {
			d = -d
		}
		p.rttDev += (d - p.rttDev) / 8
		if p.roundMinRTT == 0 || r < p.roundMinRTT {
			p.roundMinRTT = r
		}
		if r > p.roundMaxRTT {
			p.roundMaxRTT = r
		}
		if p.rttLo == 0 || r < p.rttLo {
			p.rttLo = r
		} else {
			p.rttLo += (r - p.rttLo) / rttLoRise
		}
		// One outlier (a descheduled process) must not size the window
		// for long: rttHi is bounded by a few srtt plus a few ms.
		if lim := 4*p.srtt + 4*time.Millisecond; r > lim {
			r = lim
		}
		if r > p.rttHi {
			p.rttHi = r
		}
	}
	p.roundAcked += s.AckedBytes
	p.roundMarked += s.MarkedBytes
	if s.AckedBytes > 0 {
		p.roundPkts += (s.AckedBytes-1)/a.pkt + 1 // rounded up, without overflow
	}
	if s.MarkedBytes > 0 {
		p.everMarked = true
		if a.cfg.RTTFair && !a.searching && !a.steering() {
			a.markedBackoff(now, path, s.MarkedBytes)
		}
	}
	if now-p.roundStart >= p.srtt {
		a.endRound(now, path)
	}
	if a.cfg.QueueShare > 0 {
		a.overflowAck(now, s.AckedBytes)
	}
	if a.cfg.QueueShare > 0 {
		a.balance(now, path)
		a.equilibrium(now)
	}
	if a.cfg.Params.Egress != nil && a.egLevel > 0 {
		// The egress level acts as a receiver's hint would, which comes
		// with every ack: its rises are taken on acks, as a hint's are.
		// Not redundant with OnRateHint's call on the same ack, which
		// comes before this ack's round, balance and equilibrium: this one
		// cuts back to the ceiling what they raised above it.
		a.setHint(now, a.effHint())
	}
	// Last: the classic fallback's cut and curve bound whatever the
	// rounds, the equilibrium and the hint made of this ack.
	a.fallbackAck(now, s.MarkedBytes)
}

func (a *AIMD) maxSRTT() time.Duration {
	m := time.Duration(0)
	for i := range a.paths {
		if a.paths[i].srtt > m {
			m = a.paths[i].srtt
		}
	}
	return m
}

// OnPathState implements Controller: a path that goes down hands its rate to
// the others (the connection's share does not change because one route
// failed); a path that comes back takes an equal part of the connection's
// rate and starts its estimates afresh.
func (a *AIMD) OnPathState(now time.Duration, path int, usable bool) {
	p := &a.paths[path]
	if p.usable == usable {
		return
	}
	a.use.advance(now, a.PacingRate())
	total := a.total
	p.usable = usable
	n := 0
	for i := range a.paths {
		if a.paths[i].usable {
			n++
		}
	}
	if usable {
		if total <= 0 && a.parked > 0 {
			total = a.parked
		}
		a.parked = 0
		p.rate = total / float64(n)
		p.alpha, p.floorSet, p.roundPkts, p.roundAcked, p.roundMarked, p.roundLost = 0, false, 0, 0, 0, 0
		p.lastUpdate = now
		a.retotal()
		a.setTotal(total)
		return
	}
	a.retotal()
	if n == 0 {
		a.parked = total
		return
	}
	if a.total <= 0 {
		for i := range a.paths {
			if a.paths[i].usable {
				a.paths[i].rate = total / float64(n)
			}
		}
		a.retotal()
		return
	}
	a.setTotal(total)
}

// Paths returns the number of paths the controller was built for.
func (a *AIMD) Paths() int { return len(a.paths) }
