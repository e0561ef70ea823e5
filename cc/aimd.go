package cc

import (
	"math"
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

// Steering reports whether the delay equilibrium sets the rate now.
func (a *AIMD) Steering() bool { return a.steering() }

// MarkMem returns the connection's memory of marks at a standing queue
// (markMem; for tests and traces).
func (a *AIMD) MarkMem() float64 { return a.markMem }

// QueueDelay returns the connection's rate-weighted queueing delay (for
// tests and traces).
func (a *AIMD) QueueDelay() time.Duration { _, q, _ := a.connDelay(); return q }

// PathRate returns one path's rate in bytes per second.
func (a *AIMD) PathRate(path int) float64 { return a.paths[path].rate }

// Alpha returns a path's running marked fraction.
func (a *AIMD) Alpha(path int) float64 { return a.paths[path].alpha }

// LossFloor returns a path's running loss floor.
func (a *AIMD) LossFloor(path int) float64 { return a.paths[path].lossFloor }

// AppLimited reports whether the connection's last measured round delivered
// less than UseFraction of what its rate allowed: the sender does not use
// its rate (it has less to send, or something other than this controller
// holds it back), so the rate does not grow.
func (a *AIMD) AppLimited() bool { return a.use.limited }

// DeliveryRate returns the highest delivery rate (acked bytes per second over
// one round) the connection has measured.
func (a *AIMD) DeliveryRate() float64 { return a.use.bestDelivery }

func (a *AIMD) minRate() float64 {
	return 2 * float64(a.pkt) / a.cfg.RefRTT.Seconds() / float64(len(a.paths))
}

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

// effHint is the ceiling the hint logic acts on: the receiver's hint and
// the sending gateway's egress level, whichever is lower and known.
func (a *AIMD) effHint() float64 {
	h := a.rcvHint
	if a.egLevel > 0 && (h <= 0 || a.egLevel < h) {
		h = a.egLevel
	}
	return h * a.headroom()
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

// balanceGain is how fast the split of a connection's rate over its paths
// follows the paths' own queueing delays: per round trip, a path's share
// moves by up to this fraction (e^±0.06), towards the paths whose queues
// are shorter than the connection's mean. Every step reaches the planes
// (the sender sprays by the split), so a larger gain swings them and a
// smaller one is slow to lift a plane ECMP hashed few paths onto
// (docs/CC.md §2, "Tuning").
const balanceGain = 0.06

// balanceDeadBand is the part of the reference (d, in balance) within which
// a path's queue counts as the connection's mean: paths through one
// bottleneck differ only by noise (which path a burst's packets took), and
// integrating that noise would move real traffic between paths of one
// queue. A wider band slows the split where planes really differ
// (docs/CC.md §2, "Tuning").
const balanceDeadBand = 0.05

// splitDamp is the proportional part of the split (SplitWeight): a path
// whose queue is longer than the connection's mean is sent up to
// e^splitDamp less than its rate says, at once, while balance moves the
// rate itself. Without it the split is a double integrator (balance
// integrates the queue difference into the rate, the plane's queue
// integrates the rate) and swings; with it, a damped one. It must stay
// small: the queue it answers is a round trip old, and such a loop is
// stable only for splitDamp·rtt/ref below π/2.
const splitDamp = 0.1

// balance moves the connection's rate between its paths after each path's
// own queueing delay (splitQueue), keeping the total:
// a path whose queue is longer than the connection's rate-weighted mean q̄
// loses share, one whose queue is shorter gains, in proportion to the
// difference relative to q̄ (bounded by ±1), balanceGain per round trip.
// This is a gradient step towards equal queueing delay on every path that
// carries traffic (a Wardrop equilibrium): over disjoint planes, whatever
// the number of paths ECMP hashed onto each and whatever each plane's
// capacity, every plane ends up with the same queue, so none idles while
// another holds a standing queue. Paths through one queue see the same
// delay and are left as they are (the coupling of a shared bottleneck is
// unchanged). The total is the equilibrium's or the growth function's; this
// only splits it. The split reaches the wire through the sprayer, which
// sends each path in proportion to SplitWeight (Splitter).
//
// Each path steps on its own acks (path is the one acked), by the time
// since its previous step but at most one round trip: its queue is known
// only from its own RTT samples, so a path that is sent a packet every
// few round trips moves by one round trip's step per sample, not by every
// round trip it had no news in (stepping every path on every ack would
// integrate a sparse path's last, stale reading). Where the samples are
// dense the steps over a round trip add up to one round trip's step.
func (a *AIMD) balance(now time.Duration, path int) {
	p := &a.paths[path]
	dt := now - p.balAt
	p.balAt = now
	if !p.usable || p.rate <= 0 {
		return
	}
	n := 0
	for i := range a.paths {
		if a.paths[i].usable && a.paths[i].rate > 0 {
			n++
		}
	}
	if n < 2 || dt <= 0 || a.total <= 0 {
		return
	}
	qbar, srtt := a.splitDelay()
	if srtt <= 0 {
		return
	}
	dt = min(dt, srtt)
	// Differences are measured against the mean queue, but never against
	// less than half the queue share or a quarter of the round trip: a
	// few milliseconds of difference between planes whose queues are
	// nearly empty is noise to be moved slowly, not a signal to act on at
	// full gain.
	ref := max(qbar, min(a.cfg.QueueShare/2, srtt/4))
	floor := a.total / float64(n) / 16
	d := float64(qbar-splitQueue(p)) / float64(ref)
	d = math.Max(-1, math.Min(1, d))
	if math.Abs(d) <= balanceDeadBand {
		d = 0
	} else {
		d -= math.Copysign(balanceDeadBand, d)
	}
	p.rate = math.Max(floor, p.rate*math.Exp(balanceGain*d*dt.Seconds()/srtt.Seconds()))
	total := a.total
	a.retotal()
	a.setTotal(total)
	a.balN, a.balQ, a.balRef = n, qbar, ref
}

// Splits implements Splitter: a connection with a queue share splits its
// rate over its paths after their own queues (balance), and the sender
// sprays by that split.
func (a *AIMD) Splits() bool { return a.cfg.QueueShare > 0 && len(a.paths) > 1 }

// SplitWeight implements Splitter: the path's rate over the connection's
// mean per path, times exp(-splitDamp·(q_p − q̄)/ref) (q_p the path's queue,
// q̄ and ref balance's).
func (a *AIMD) SplitWeight(path int) float64 {
	p := &a.paths[path]
	if !p.usable || a.total <= 0 {
		return 0
	}
	n := a.balN
	if n <= 0 {
		n = len(a.paths)
	}
	w := p.rate / a.total * float64(n)
	if a.balRef > 0 {
		d := float64(a.balQ-splitQueue(p)) / float64(a.balRef)
		w *= math.Exp(splitDamp * math.Max(-1, math.Min(1, d)))
	}
	return w
}

// rttLoRise is the inverse of the gain with which rttLo follows an RTT
// sample above it: srtt's (RFC 6298), so that a queue that really grows is
// read as fast as the smoothed RTT reads it.
const rttLoRise = 8

// splitQueue is path p's queueing delay as balance reads it: the smaller of
// its smoothed RTT and rttLo (which falls to a lower sample at once and
// rises by 1/8 per sample), above the path's own minimum. A standing queue
// delays every packet, a host's stall or a burst only some: a path the
// split sends little gets few samples, and one late ack must not keep its
// queue reading high for many round trips. Against the path's own minimum
// (ownMin), so that a longer path's propagation is not read as a queue.
func splitQueue(p *aimdPath) time.Duration {
	r := p.srtt
	if p.rttLo > 0 && p.rttLo < r {
		r = p.rttLo
	}
	return max(0, r-p.ownMin)
}

// splitDelay returns the connection's queueing delay as balance measures
// it (splitQueue) and its smoothed RTT, both weighted by path rate.
func (a *AIMD) splitDelay() (q, srtt time.Duration) {
	var qq, sr, wsum float64
	for i := range a.paths {
		p := &a.paths[i]
		if !p.usable || p.rate <= 0 {
			continue
		}
		qq += p.rate * float64(splitQueue(p))
		sr += p.rate * float64(p.srtt)
		wsum += p.rate
	}
	if wsum <= 0 {
		return 0, 0
	}
	return time.Duration(qq / wsum), time.Duration(sr / wsum)
}

// connDelay returns the connection's minimum RTT, queueing delay (smoothed
// RTT above the minimum) and smoothed RTT, each weighted by path rate.
func (a *AIMD) connDelay() (base, q, srtt time.Duration) {
	var b, qq, sr, wsum float64
	for i := range a.paths {
		p := &a.paths[i]
		if !p.usable || p.rate <= 0 {
			continue
		}
		b += p.rate * float64(p.minRTT)
		qq += p.rate * float64(max(0, p.srtt-p.minRTT))
		sr += p.rate * float64(p.srtt)
		wsum += p.rate
	}
	if wsum <= 0 {
		return 0, 0, 0
	}
	return time.Duration(b / wsum), time.Duration(qq / wsum), time.Duration(sr / wsum)
}

// equilibrium is the delay equilibrium (QueueShare), run on every ack: the
// connection's window w follows FAST's law continuously,
// dw/dt = γ/rtt · (α − w·q/rtt), and the rate is w over the current round
// trip, so that, as with a window, the rate falls the moment the queue
// grows, before the law has had a round trip to react.
func (a *AIMD) equilibrium(now time.Duration) {
	base, q, srtt := a.connDelay()
	if srtt <= 0 || base <= 0 || !a.eqScaled() {
		return
	}
	dt := now - a.eqLast
	a.eqLast = now
	scale := a.scale()
	// The bytes this connection keeps queued; beyond twice the delay
	// target every connection's share shrinks alike (as 1/q), which bounds
	// the queue n connections hold to about sqrt(n·QueueShare·2·target)
	// while keeping their rates equal.
	alpha := a.cfg.QueueShare.Seconds() * scale * a.markedShare(scale)
	if lim := 2 * a.cfg.DelayTarget; lim > 0 && q > lim {
		alpha *= float64(lim) / float64(q)
	}
	rtt := (base + q).Seconds()
	// The price the law answers: the queueing delay, plus the marked
	// fraction's price with AIMDConfig.MarkPrice (markPrice).
	p := q + a.markPrice()
	// The queue that covers the sender's own stalls is no price
	// (stallAllowance); the search's end and the steering threshold still
	// read the whole queue.
	stall := a.stallAllowance(now, base)
	lawQ := max(0, q-stall)
	lawP := lawQ + a.markPrice()
	if a.searching {
		// The search ends once the connection holds its share of the queue:
		// from there the equilibrium steers.
		if a.total*p.Seconds() >= alpha {
			a.searching = false
			a.eqW = a.total * rtt
			a.eqSet = a.total
		}
		return
	}
	if p < a.steerFrom(scale) {
		// An (almost) empty queue says nothing about a share: the growth
		// function probes for capacity.
		a.eqW = 0
		return
	}
	if a.eqW <= 0 || a.eqSet <= 0 {
		a.eqW = a.total * rtt
	} else if a.total != a.eqSet {
		// A back-off (marks, loss, a lower hint) or a raised hint changed
		// the rate since the last step: the window follows it.
		a.eqW *= a.total / a.eqSet
	}
	if dt > srtt {
		dt = srtt
	}
	g := a.cfg.EqGain
	if g <= 0 {
		g = 0.7
	}
	if dt > 0 && a.priceOn() {
		// dw/dt = γ/rtt · (α − w·p/rtt), integrated exactly over dt: w
		// relaxes towards α·rtt/p at the rate γ·p/rtt², at most
		// markPriceRelax per round trip. With a price of seconds the
		// uncapped rate is many times per round trip: an Euler step
		// overshoots, and an uncapped exact step follows every swing of
		// the queue.
		if ps := lawP.Seconds(); ps > 0 {
			target := alpha * rtt / ps
			k := math.Min(g*ps/rtt, markPriceRelax) / rtt
			a.eqW = target + (a.eqW-target)*math.Exp(-k*dt.Seconds())
		}
	} else if dt > 0 {
		a.eqW += g / rtt * (alpha - a.eqW*lawQ.Seconds()/rtt) * dt.Seconds()
	}
	a.eqW = math.Max(a.eqW, a.minRate()*float64(len(a.paths))*rtt)
	r := a.eqW / rtt
	if ceiling := a.ceiling(); r > ceiling {
		r = ceiling
		a.eqW = a.ceilingWindow(ceiling, alpha, base, stall, rtt)
	}
	if a.use.limited && r > a.total {
		// The equilibrium, too, raises only a rate the sender uses.
		r = a.total
		a.eqW = r * rtt
	}
	if r < a.total {
		a.held = math.Max(0, a.held-(a.total-r))
	}
	a.setTotal(r)
	a.eqSet = a.total
}

// stallMemory is the time constant over which the largest lateness of a
// paced send (OnSendLate) is forgotten: long against a busy host's stalls
// (several per 100 ms), so that the allowance does not fall between two of
// them, and short enough that a host that has become quiet gives the
// queue back within a few seconds.
const stallMemory = 2 * time.Second

// OnSendLate implements SendLateObserver: it remembers the largest
// lateness of the sender's driver, decaying over stallMemory.
func (a *AIMD) OnSendLate(now, late time.Duration) {
	if late <= 0 {
		return
	}
	if cur := a.decayedLate(now); late >= cur {
		a.lateMax, a.lateAt = late, now
	}
}

func (a *AIMD) decayedLate(now time.Duration) time.Duration {
	if a.lateMax <= 0 {
		return 0
	}
	return time.Duration(float64(a.lateMax) * math.Exp(-float64(now-a.lateAt)/float64(stallMemory)))
}

// stallAllowance is the queueing delay the delay equilibrium does not
// price: the longest recent stall of the sender's driver (OnSendLate), at
// most 2 × QueueShare and half the base round trip. While the sender is
// descheduled only the bottleneck's queue keeps the link busy, and on
// waking it catches up what fell due (metaroce.Config.PacingCatchUp), so a
// queue as long as its stalls costs no link time and a shorter one idles
// the link for the difference. The law answers q − allowance: a connection
// holds its α of queue above the allowance, so connections through one
// bottleneck whose hosts stall alike still hold equal rates, and a host
// that does not stall changes nothing. Bounded because a stall longer than
// half the round trip cannot be caught up anyway (PacingCatchUp ≤ 1), and a
// queue beyond twice the queue share is delay every other flow pays
// (docs/CC.md §4, "A host that stalls").
func (a *AIMD) stallAllowance(now, base time.Duration) time.Duration {
	s := a.decayedLate(now)
	return min(s, 2*a.cfg.QueueShare, base/2)
}

// ceilingWindow is the equilibrium's window for a connection held at its
// ceiling (hint or line rate) whose driver stalls (stallAllowance > 0).
// Clamped to ceiling × the current round trip, every stall's late acks
// would cut the rate at once by the ratio of the round trips. The window
// is ceiling × (base + s + min(s, α/ceiling)), s the allowance: the rate
// stays at the ceiling while the queue is within the allowance and as much
// again (at most the law's own fixed point at the ceiling, α/ceiling, above
// it), and falls as w/rtt beyond. With s = 0 it is ceiling × rtt, so a
// driver that does not stall sees no change; never below ceiling × rtt, so
// a queue already above it does not cut the rate either.
func (a *AIMD) ceilingWindow(ceiling, alpha float64, base, stall time.Duration, rtt float64) float64 {
	s := stall.Seconds()
	return ceiling * math.Max(rtt, base.Seconds()+s+math.Min(s, alpha/ceiling))
}

// hintStepMarked is the part of the gap to the hint that a calm connection
// closes per round trip while it remembers marks at a standing queue
// (markMem at least markMemCalm), instead of half: it is then yielding to
// whatever pushes the queue up (markedShare), and half-gap steps would undo
// that. Not nothing: a lone connection whose own queue stands above a
// shallow marking threshold yields too, and on a host that stalls it needs
// the small steps to refill the link.
const hintStepMarked = 1.0 / 32

// markMemCalm is the memory of marks at a standing queue (markMem) from
// which the hint's rise takes hintStepMarked steps.
const markMemCalm = 0.05

// queueStands reports whether the connection's paths hold a queue of at
// least a quarter of its full queue share (QueueShare/4, whatever
// markedShare made of the steering threshold): a queue the delay
// equilibrium answers, during which the hint's rises stand back.
func (a *AIMD) queueStands() bool {
	if a.cfg.QueueShare <= 0 || a.searching || !a.eqScaled() {
		return false
	}
	_, q, _ := a.connDelay()
	return q >= a.cfg.QueueShare/4
}

// atHintFrac is the part of its hint from which a connection is at it
// (atHint): where setHint's rises towards the hint stop.
const atHintFrac = 0.9

// atHint reports whether the connection runs at its hint (at least
// atHintFrac of it): it holds the whole share its receiver and its egress
// allow, so a queue it meets is not one it is still converging through.
func (a *AIMD) atHint() bool {
	return a.hint > 0 && a.total >= atHintFrac*a.hint
}

// markMemory is the time over which the memory of marks seen while the
// delay equilibrium steers decays: longer than a classic flow's recovery
// from one cut at the bottlenecks in question (tens of round trips), so
// that a flow that yields its queue share once it has starved a classic
// competitor keeps yielding while that competitor grows back.
const markMemory = 10 * time.Second

// markedShare is the factor on the equilibrium's queue share α at a
// marking bottleneck. A queue share α = QueueShare × scale above the
// marking threshold starves any flow that reacts to marks the classic way
// (RFC 3168: cut by 0.3-0.5 per marked round trip): the queue never falls
// below the threshold, so it is marked in every round trip and the classic
// flow sits at two packets (docs/CC.md §4). The connection cannot
// tell such a flow from another equilibrium connection, so it reads its own
// part of the capacity: with n equilibrium connections of the same scale
// each takes scale/n, and while it takes no more than markedShareFrom of
// its scale the share is whole (two connections or more). Above that,
// while marks persist, the share falls steeply, to markedShareMin at
// markedShareTo: a connection that
// takes more than half the bottleneck while the queue is marked yields to
// whatever pushes the queue up, before the queue reaches the threshold, so
// a classic flow grows into the room without being marked in every round
// trip.
func (a *AIMD) markedShare(scale float64) float64 {
	if a.markMem <= 0 || scale <= 0 {
		return 1
	}
	x := a.total / scale
	m := 1 - (x-markedShareFrom)/(markedShareTo-markedShareFrom)*(1-markedShareMin)
	m = math.Min(1, math.Max(markedShareMin, m))
	return 1 - math.Min(1, 2*a.markMem)*(1-m)
}

// markedShareFrom, markedShareTo and markedShareMin shape markedShare: the
// queue share is whole while the connection takes at most markedShareFrom
// of its scale, and markedShareMin of it from markedShareTo on.
const (
	markedShareFrom = 0.5
	markedShareTo   = 0.65
	markedShareMin  = 0.2
)

// eqScaled reports whether the equilibrium has an absolute scale for α (a
// line rate or a hint). Measured against the connection's own rate, α/q
// would make the rate grow or decay exponentially with the sign of
// QueueShare − q: no equilibrium at all.
func (a *AIMD) eqScaled() bool {
	return a.cfg.Params.LineRate > 0 || a.hint > 0
}

// steering reports whether the delay equilibrium, not the growth function,
// sets the connection's rate now.
func (a *AIMD) steering() bool {
	if a.cfg.QueueShare <= 0 || a.searching || !a.eqScaled() {
		return false
	}
	_, q, _ := a.connDelay()
	return q+a.markPrice() >= a.steerFrom(a.scale())
}

// markPriceBeta, markPriceTau, markPriceTauGrowth and markPriceRelax shape
// the marked-fraction price (AIMDConfig.MarkPrice): a connection whose
// running marked fraction is F adds QueueShare × (e^(markPriceBeta·F) − 1)
// to the queueing delay its delay equilibrium answers; F is a time-weighted
// running mean of the acks' marked fractions over markPriceTau ×
// (1 + markPriceTauGrowth·F); and the equilibrium's window relaxes
// towards its target by at most markPriceRelax per round trip. The marks
// are a relay (the queue is above the threshold or not), and the relay
// and the running mean make a limit cycle whose swing grows with β/τ: a
// large β keeps F low at a given number of connections
// (F = ln(n + 1 − K/QueueShare)/β), so the queue sits above the threshold
// for less of each cycle, and a longer mean at high F slows the price's
// fall when the marks stop (docs/CC.md §2, "Tuning").
const (
	markPriceBeta      = 12.0
	markPriceTau       = 5 * time.Second
	markPriceTauGrowth = 4.0
	markPriceRelax     = 0.25
	// markPriceProbeStep is how fast a connection probes past the price
	// once the marks stop (priceProbe): this fraction of its own rate per
	// RefRTT, the same for every controller, so that n connections rise
	// together as fast as one.
	markPriceProbeStep = 0.015
)

// markPrice is the price of the marks at a marking bottleneck, in seconds
// of virtual queue. With the queueing delay alone as the
// price, n connections each keeping α = QueueShare × scale in the queue
// hold n·QueueShare of it: the price must grow with n, and a delay that
// grows with n is a queue that does. A bottleneck that marks above a
// threshold K gives a second price that can grow while the queue does not:
// the fraction F of bytes marked, i.e. of the time the queue is above K.
// The equilibrium answers p = q + V(F), V = QueueShare·(e^(βF) − 1), so at
// equilibrium q + V(F) = n·QueueShare·scale/capacity: once that passes K,
// F settles where V makes up the rest while the queue hovers about K
// (marks raise F, the rates fall until the queue drops below K, which
// stops the marks). The map is exponential so that F between 0 and 1 spans
// prices of 1 to e^β connections (e^12 ≈ 160,000). Every connection
// through the bottleneck measures the same F over the same time, so V,
// like q, is common to them and the rates α/p stay equal (F is read from
// the connection's first ack for that reason: see OnAck). A newcomer
// starts at F = 0; its search into the marked queue reads the marks the
// incumbents read at the same time, which is how it catches up. Zero
// while priceOn is false.
func (a *AIMD) markPrice() time.Duration {
	if a.mkF <= 0 || !a.priceOn() {
		return 0
	}
	return time.Duration(float64(a.cfg.QueueShare) * math.Expm1(markPriceBeta*a.mkF))
}

// priceOn reports whether the marked-fraction price acts: MarkPrice is set
// and the connection has no receiver hint (nor egress level). With a hint
// the receiver loop hands out the shares (§3 of docs/CC.md: max-min over
// measured demand) and the connection's scale is its share, so its delay
// equilibrium keeps QueueShare at its share's rate, not the line rate's;
// the price is for the bottleneck no receiver sees (the fabric, hints
// off). And a lone connection at its hint would pay for marks that are its
// own (a stalling host's catch-up bursts, or balance's per-plane queues).
// The alternatives measured are in docs/CC.md §2, "Tuning".
func (a *AIMD) priceOn() bool {
	return a.cfg.MarkPrice && a.hint <= 0
}

// priceProbe reports whether the rate probes past the marked-fraction
// price: the price acts (priceOn, F > 0), the connection is not
// searching, no ack has carried a mark for a round trip (the connection's
// rate-weighted srtt), i.e. the bottleneck's queue has been below its
// marking threshold for that long, and the connection's own queueing
// delay is below its steering threshold (steerFrom: QueueShare/4, lower
// while markedShare yields). The last test is for a classic-ECN flow in
// the same queue: it keeps the queue below the threshold but not empty,
// and on the marks alone the probe would take back the room markedShare
// yielded.
//
// Why: F is a mean over seconds (markPriceTau), so when the load falls (a
// competitor leaves) the price would hold the rate at α/V over an empty
// queue for seconds. The marks, unlike the RTT samples (which a receiver's
// delayed-ack timer inflates differently per connection), are common to
// every connection through the bottleneck, so the probe starts alike for
// all of them. The rate then rises by markPriceProbeStep of itself per
// RefRTT and the price gives way by as much (priceGiveWay). In a dip of
// the relay the queue comes back within a round trip or two and the marks
// stop the probe; after a load drop the probe goes on until the link is
// full. The alternatives tried are in docs/CC.md §2, "Tuning".
func (a *AIMD) priceProbe() bool {
	if !a.priceOn() || a.mkF <= 0 || a.searching {
		return false
	}
	_, q, srtt := a.connDelay()
	return srtt > 0 && a.mkLast-a.mkMarkAt >= srtt && q < a.steerFrom(a.scale())
}

// priceGiveWay lowers the marked-fraction price after the probe raised the
// rate by 1/k: the equilibrium's rate is α/p (p = q + V), so p × k keeps
// the probed rate the equilibrium's own rather than one the law pulls back
// to where it was.
func (a *AIMD) priceGiveWay(k float64) {
	_, q, _ := a.connDelay()
	v := max(0, time.Duration(float64(q+a.markPrice())*k)-q)
	a.mkF = math.Log1p(float64(v)/float64(a.cfg.QueueShare)) / markPriceBeta
}

// markSample folds one ack into the running marked fraction, weighted by
// the time since the previous ack: a mean over time, whatever the
// connection's rate.
func (a *AIMD) markSample(now time.Duration, acked, marked int) {
	if acked <= 0 {
		return
	}
	if !a.mkStarted {
		// The connection's first sample starts the clock: weighted
		// by the time since the connection began (or since 0), one
		// marked ack would set the price at its maximum.
		a.mkStarted, a.mkLast, a.mkMarkAt = true, now, now
		return
	}
	if marked > 0 {
		a.mkMarkAt = now
	}
	dt := max(0, now-a.mkLast)
	a.mkLast = now
	tau := markPriceTau.Seconds() * (1 + markPriceTauGrowth*a.mkF)
	w := dt.Seconds() / tau
	a.mkF += math.Min(1, w) * (math.Min(1, float64(marked)/float64(acked)) - a.mkF)
}

func (a *AIMD) scale() float64 {
	return Scale(GrowthState{Rate: a.total, LineRate: float64(a.cfg.Params.LineRate.Bytes()), Hint: a.hint})
}

// steerFrom is the queueing delay from which the equilibrium steers: a
// quarter of the queue share it holds, so that where marks made it hold
// less (markedShare), it also takes over from the growth function at a
// shallower queue, before the growth function's probing pushes the queue
// past the marking threshold.
func (a *AIMD) steerFrom(scale float64) time.Duration {
	return time.Duration(float64(a.cfg.QueueShare/4) * a.markedShare(scale))
}

// grow applies the growth function for the time since path last grew.
func (a *AIMD) grow(now time.Duration, path int) {
	p := &a.paths[path]
	dt := now - p.lastUpdate
	p.lastUpdate = now
	if dt <= 0 || !p.usable {
		return
	}
	if dt > p.srtt {
		dt = p.srtt // after an idle spell, grow by at most one round's worth
	}
	share := 1.0 / float64(len(a.paths))
	if a.total > 0 {
		share = p.rate / a.total
	}
	if a.use.limited {
		// Not while the sender does not use the rate it has (RFC 7661):
		// nothing would test the higher rate, and without a ceiling it
		// would grow without bound.
		return
	}
	// Not while the equilibrium steers, unless only the marked-fraction
	// price holds the rate and the marks have stopped: then the rate
	// probes and the price gives way (priceProbe).
	probe := false
	if a.steering() {
		if !a.priceProbe() {
			return
		}
		probe = true
	}
	var inc float64
	if a.searching {
		// No hint and no congestion yet: double per round trip.
		inc = p.rate * dt.Seconds() * math.Ln2 / p.srtt.Seconds()
	} else {
		g := a.cfg.Growth(GrowthState{
			Rate: a.total, LineRate: float64(a.cfg.Params.LineRate.Bytes()), Hint: a.hint,
			SinceCongestion: now - a.lastCongestion, SRTT: p.srtt, RefRTT: a.cfg.RefRTT,
		})
		inc = g * dt.Seconds() * share
		if probe {
			// Not the growth function's step, which is a fraction of the
			// scale: markPriceProbeStep of the connection's own rate per
			// RefRTT, so that every connection at the bottleneck rises
			// by the same fraction of its rate and n of them together as
			// fast as one, whatever n and whichever controller.
			inc = markPriceProbeStep * a.total * dt.Seconds() / a.cfg.RefRTT.Seconds() * share
		}
	}
	before := a.total
	// Never grow beyond what the receiver allows: rate above the hint would
	// only be stored, not used, and would make the next back-off meaningless.
	ceiling := a.ceiling()
	p.rate += inc
	a.total += inc
	if ceiling > 0 && a.total > ceiling {
		// Take the excess back from the path that grew, so that a path
		// trimmed by marks does not creep back at its siblings' expense.
		back := math.Min(a.total-ceiling, inc)
		p.rate -= back
		a.total -= back
		a.capTo(ceiling)
	}
	if probe && before > 0 && a.total > before {
		a.priceGiveWay(before / a.total)
	}
}

// endRound closes path's round: it folds the marked fraction into alpha,
// updates the loss floor and backs off once if the round saw congestion.
func (a *AIMD) endRound(now time.Duration, path int) {
	p := &a.paths[path]
	acked, marked, lost := p.roundAcked, p.roundMarked, p.roundLost
	p.roundAcked, p.roundMarked, p.roundLost, p.roundPkts = 0, 0, 0, 0
	p.roundStart = now
	roundMin, roundMax := p.roundMinRTT, p.roundMaxRTT
	p.roundMinRTT, p.roundMaxRTT = 0, 0
	if roundMax > 0 && roundMax < p.rttHi {
		p.rttHi -= (p.rttHi - roundMax) / 4
	}
	frac := 0.0
	if acked > 0 {
		frac = float64(marked) / float64(acked)
	}
	p.alpha += a.cfg.Gain * (frac - p.alpha)
	if a.cfg.QueueShare > 0 && !a.searching {
		// Only a standing queue counts: every sample of the round was
		// delayed (its smallest too), as by a queue another flow keeps
		// above the marking threshold. A burst of the sender's own (a
		// late wake-up on a busy host) marks some packets but delays only
		// those: the round's samples spread over more than the queue its
		// smallest one saw.
		//
		// The spread allowed is QueueShare/4, and a quarter of the
		// smallest queue while the connection runs at its hint
		// (atHint): a deep queue that moves but never drains stands too
		// (an unevenly hashed plane's), while a stalling host's own
		// bursts spread over several times their smallest queue and
		// still do not count. Only at the hint: a connection below it is
		// still converging, and the queues it meets then move because
		// every connection there moves; counting them would make it
		// yield the room it is to take.
		qmin, spread := roundMin-p.minRTT, roundMax-roundMin
		standing := roundMin > 0 && qmin >= a.cfg.QueueShare/4 &&
			(spread < a.cfg.QueueShare/4 || a.atHint() && spread < qmin/4)
		if frac > 0 && standing && a.steering() {
			a.markMem += (1 - a.markMem) / 4
		} else if a.markMem > 0 {
			// Every path's rounds decay it: n paths, n rounds per srtt.
			a.markMem *= math.Exp(-p.srtt.Seconds() / markMemory.Seconds() / float64(len(a.paths)))
		}
	}
	lossRate := 0.0
	if acked+lost > 0 {
		lossRate = float64(lost) / float64(acked+lost)
	}
	// The loss floor: random loss that is always there. It falls fast and
	// rises slowly, so a burst of congestive loss barely moves it while a
	// lossy path's steady rate is learnt within a few tens of rounds.
	lossCongestion := false
	switch {
	case acked+lost < 8*a.pkt:
		// Too few packets for a loss rate: keep the floor as it is.
	case !p.floorSet:
		p.floorSet = true
		p.lossFloor = lossRate
	default:
		lossCongestion = lossRate > a.cfg.LossFactor*p.lossFloor+a.cfg.LossAbove && lost >= 4*a.pkt
		if lossRate < p.lossFloor {
			p.lossFloor += (lossRate - p.lossFloor) / 4
		} else {
			p.lossFloor += (lossRate - p.lossFloor) / 32
		}
	}
	// Queueing delay: the round's smallest RTT sample above the minimum.
	// A standing queue delays every packet of the round; timer lateness and
	// ack delay only some, so the smallest sample filters them out.
	cur := p.srtt
	if roundMin > 0 && roundMin < cur {
		cur = roundMin
	}
	qdelay := cur - p.minRTT
	target := a.cfg.DelayTarget + time.Duration(a.cfg.DelayTargetFrac*float64(p.minRTT))
	if n := 2 * p.rttDev; target > 0 && n > target {
		target = n
	}
	// With the delay equilibrium on, the queueing delay is its signal, not
	// a cut of its own.
	delayed := target > 0 && qdelay > target && a.cfg.QueueShare <= 0

	cut := 0.0
	if frac > 0 && (!a.cfg.RTTFair || a.searching && a.cfg.QueueShare <= 0) {
		cut = p.alpha / 2
		if a.searching {
			// The end of the search: the last round overshot by up to 2x.
			cut = 0.5
			p.alpha = frac
		}
	}
	if delayed {
		cut = math.Max(cut, 0.25*math.Min(1, float64(qdelay-target)/float64(target)))
	}
	if lost > 0 && (frac > 0 || delayed) && !a.steering() && lossRate > a.cfg.LossFactor*p.lossFloor {
		// Loss with other signs of congestion: a full queue. Not while
		// the delay equilibrium steers: it reads a full queue as a long
		// queueing delay and answers it itself, as it answers the marks
		// (a mark is no separate back-off then either). And not loss at
		// the path's random floor: a lossy path that also sees a mark,
		// which a sender's burst after a late wake-up makes, lost those
		// packets anyway; without this test random loss would cut a path
		// in most rounds.
		cut = math.Max(cut, 0.3)
	}
	if lossCongestion {
		cut = math.Max(cut, math.Min(0.5, lossRate-p.lossFloor))
	}
	if cut == 0 || now < p.cwrUntil {
		return
	}
	if a.cfg.RTTFair && !a.searching {
		cut *= p.srtt.Seconds() / a.cfg.RefRTT.Seconds()
	}
	if cut > a.cfg.MaxCut {
		cut = a.cfg.MaxCut
	}
	a.searching = false
	a.lastCongestion = now
	p.cwrUntil = now + p.srtt
	old := p.rate
	p.rate *= 1 - cut
	if m := a.minRate(); p.rate < m {
		p.rate = m
	}
	a.total += p.rate - old
	a.held *= 1 - cut
}

// markedBackoff is the RTT-fair reaction to ECN: every marked byte takes
// MarkGain/RefRTT bytes per second off the path's rate. A path whose bytes
// are marked at fraction F then loses MarkGain·F·rate/RefRTT per second,
// whatever its round trip, which balances the growth (also per second) at
// the same rate for every flow that sees the same F. Reacting per byte
// rather than per round also spreads the back-off smoothly over the round.
func (a *AIMD) markedBackoff(now time.Duration, path int, marked int) {
	p := &a.paths[path]
	dec := a.cfg.MarkGain * float64(marked) / a.cfg.RefRTT.Seconds()
	if dec > p.rate/2 {
		dec = p.rate / 2
	}
	old := p.rate
	p.rate -= dec
	if m := a.minRate(); p.rate < m {
		p.rate = m
	}
	a.total += p.rate - old
	a.held = math.Max(0, a.held-dec)
	a.lastCongestion = now
}

// OnLoss implements Controller.
func (a *AIMD) OnLoss(now time.Duration, path int, bytes int) {
	a.paths[path].roundLost += bytes
}

// OnRateHint implements Controller. The first hint, and a hint that rises
// while the connection sees no congestion, set the rate at once: the
// receiver knows its share better than any search could find it. A hint
// below the current rate cuts it at once. With Params.Egress, the hint
// acted on is the smaller of the receiver's and the egress level.
func (a *AIMD) OnRateHint(now time.Duration, hint units.ByteRate) {
	if float64(hint) <= 0 {
		return
	}
	a.rcvHint = min(float64(hint), MaxRate)
	a.setHint(now, a.effHint())
	a.fallbackCap(now)
}

// setHint acts on a new value of the connection's ceiling (OnRateHint).
func (a *AIMD) setHint(now time.Duration, bps float64) {
	if bps <= 0 {
		return
	}
	a.use.advance(now, a.PacingRate())
	bps = min(bps, MaxRate)
	prev := a.hint
	a.hint = bps
	// Calm: no back-off for two round trips, and no standing queue that
	// the delay equilibrium answers. The equilibrium's answers are no
	// back-offs (they do not set lastCongestion), so without the second
	// test a hint far above the connection's share of a fabric bottleneck
	// would lift the rate half-way to the hint every round trip while the
	// equilibrium pulled it back (TestHintRiseStandsBackWhileSteering).
	// The threshold is the full queue share's quarter, not the steering
	// threshold that markedShare lowers: a lone connection on a stalling
	// host needs the rises at a shallow queue.
	calm := now-a.lastCongestion > 2*a.maxSRTT() && !a.queueStands()
	if prev == 0 || (bps > prev*1.05 && calm) {
		a.searching = false
		if a.total < bps {
			a.setTotal(bps)
		}
		a.lastHintRise = now
	} else if calm && !a.searching && !a.use.limited && a.total < atHintFrac*bps && now-a.lastHintRise > a.maxSRTT() {
		// Well below the receiver's share with no congestion for two round
		// trips (our own back-offs left us there, and the queue behind them
		// has drained): close half the gap per round trip. Binary increase
		// towards the hint reaches the share in a few round trips instead
		// of crawling there additively, without overshooting a bottleneck
		// elsewhere in the fabric, whose marks stop it again.
		step := 0.5
		if a.markMem >= markMemCalm {
			step = hintStepMarked
		}
		a.setTotal(a.total + (bps-a.total)*step)
		a.lastHintRise = now
	} else if bps > prev && a.held > a.total {
		// The receiver releases (part of) a hold-back it imposed: return
		// to the rate the connection had before it, as far as allowed.
		// Its own back-offs since then are already taken off held.
		a.setTotal(math.Min(a.held, bps))
	}
	if a.held > 0 && a.held <= a.total {
		a.held = 0
	}
	if before := a.total; a.capTo(bps) && prev > 0 {
		if before > a.held {
			a.held = before
		}
		// A lower hint is a back-off the receiver made for us: what the
		// next round reports was sent before it.
		for i := range a.paths {
			a.paths[i].cwrUntil = now + a.paths[i].srtt
		}
	}
}

// ceiling is the highest rate the connection may hold: the receiver's hint
// or the line rate, whichever is lower and known, and never above MaxRate.
func (a *AIMD) ceiling() float64 {
	c := MaxRate
	if a.hint > 0 && a.hint < c {
		c = a.hint
	}
	if lr := float64(a.cfg.Params.LineRate.Bytes()) * a.headroom(); lr > 0 && lr < c {
		c = lr
	}
	return c
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

// MarkPrice returns the connection's marked-fraction price (0 unless
// AIMDConfig.MarkPrice), for tests and plots.
func (a *AIMD) MarkPrice() time.Duration { return a.markPrice() }
