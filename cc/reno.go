package cc

import (
	"time"

	"github.com/mrgw/mrgw/units"
)

// renoController is the loss-driven baseline: one congestion window for the
// connection, split evenly over its usable paths; slow start, then one packet
// per round trip of additive increase; halving on loss, at most once per
// round trip. It ignores ECN marks and the receiver's hint, as a classic TCP
// would. It exists to be measured beside the real controllers, never to be
// deployed.
type renoController struct {
	pkt         int
	cwnd        float64 // bytes
	ssthresh    float64
	srtt        time.Duration
	recoverTill time.Duration
	usable      []bool
	nUsable     int
	// ecnBeta, if positive, makes this a classic-ECN flow (RFC 3168): a
	// round trip with a CE echo multiplies the window by ecnBeta, as a loss
	// would, at most once per round trip.
	ecnBeta float64
	name    string
	// use tells whether the sender fills its window; while it does not
	// (application-limited), the window does not grow (RFC 7661).
	use useMeter
}

// newReno returns a Factory for the Reno baseline.
func newReno(p Params) Factory {
	return func(paths, packetSize int) Controller {
		r := &renoController{pkt: packetSize, cwnd: 10 * float64(packetSize), ssthresh: 1e18, srtt: p.BaseRTT, usable: make([]bool, paths), nUsable: paths, name: "reno"}
		if r.srtt <= 0 {
			r.srtt = time.Millisecond
		}
		for i := range r.usable {
			r.usable[i] = true
		}
		return r
	}
}

// NewRenoECN returns a Factory for a classic-ECN flow: Reno that also
// reacts to CE marks as RFC 3168 asks, multiplying its window by 0.7 (Linux
// cubic's beta) once per round trip that echoed a mark. It stands in for
// kernel TCP with ECN negotiated (net.ipv4.tcp_ecn=1) in the coexistence
// scenario; like Reno it exists only to be measured beside mrgw.
func NewRenoECN(p Params) Factory {
	base := newReno(p)
	return func(paths, packetSize int) Controller {
		r := base(paths, packetSize).(*renoController)
		r.ecnBeta, r.name = 0.7, "reno-ecn"
		return r
	}
}

// Name implements Controller.
func (r *renoController) Name() string { return r.name }

// Window implements Controller.
func (r *renoController) Window(path int) int {
	if !r.usable[path] || r.nUsable == 0 {
		return 0
	}
	return windowBytes(r.cwnd/float64(r.nUsable), r.pkt)
}

// PacingRate implements Controller: twice the window per round trip in slow
// start and 1.2 times after, as Linux paces TCP.
func (r *renoController) PacingRate() units.ByteRate {
	g := 1.2
	if r.cwnd < r.ssthresh {
		g = 2
	}
	return units.ByteRate(min(g*r.cwnd/r.srtt.Seconds(), MaxRate))
}

// OnSent implements Controller: the bytes sent tell whether the sender fills
// its window (useMeter).
func (r *renoController) OnSent(now time.Duration, _ int, bytes int) {
	r.use.advance(now, units.ByteRate(r.cwnd/r.srtt.Seconds()))
	r.use.onSent(bytes)
}

// OnAck implements Controller.
func (r *renoController) OnAck(now time.Duration, path int, s AckSample) {
	clampRTTs(&s)
	r.use.advance(now, units.ByteRate(r.cwnd/r.srtt.Seconds()))
	if s.SRTT > 0 {
		r.srtt = s.SRTT
	}
	r.use.onAck(now, s.AckedBytes, r.srtt)
	if r.ecnBeta > 0 && s.MarkedBytes > 0 {
		if now >= r.recoverTill {
			r.recoverTill = now + r.srtt
			r.cwnd *= r.ecnBeta
			if m := 2 * float64(r.pkt); r.cwnd < m {
				r.cwnd = m
			}
			r.ssthresh = r.cwnd
		}
		return
	}
	if r.use.limited {
		// The window is not used: growing it would test nothing, and in
		// slow start it grew by every acked byte for ever.
		return
	}
	if r.cwnd < r.ssthresh {
		r.cwnd += float64(s.AckedBytes)
	} else {
		r.cwnd += float64(r.pkt) * float64(s.AckedBytes) / r.cwnd
	}
	r.cwnd = min(r.cwnd, MaxWindow)
}

// OnLoss implements Controller.
func (r *renoController) OnLoss(now time.Duration, path int, bytes int) {
	r.use.advance(now, units.ByteRate(r.cwnd/r.srtt.Seconds()))
	if now < r.recoverTill {
		return
	}
	r.recoverTill = now + r.srtt
	r.cwnd /= 2
	if m := 2 * float64(r.pkt); r.cwnd < m {
		r.cwnd = m
	}
	r.ssthresh = r.cwnd
}

// OnRateHint implements Controller: Reno ignores the receiver.
func (r *renoController) OnRateHint(time.Duration, units.ByteRate) {}

// OnPathState implements Controller.
func (r *renoController) OnPathState(_ time.Duration, path int, usable bool) {
	if r.usable[path] == usable {
		return
	}
	r.usable[path] = usable
	if usable {
		r.nUsable++
	} else {
		r.nUsable--
	}
}
