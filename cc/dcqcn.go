package cc

import (
	"time"

	"github.com/mrgw/mrgw/units"
)

// dcqcnController is a baseline in the spirit of DCQCN (Zhu et al., "Congestion
// Control for Large-Scale RDMA Deployments", SIGCOMM 2015), the rate
// controller RoCEv2 NICs run. It starts at line rate; an ack that reports
// CE marks acts as a congestion notification (at most one per 50 µs): the
// target rate takes the current rate and the current rate drops by alpha/2.
// pathAlpha decays every 55 µs without notification. Every 55 µs, and every
// 10 MiB sent, the rate recovers: halfway to the target for five steps (fast
// recovery), then the target itself rises by R_AI (additive) and later by
// R_HAI (hyper). All timers are in absolute time, tuned for microsecond
// round trips, which is why it misbehaves over long ones. It ignores loss
// and the receiver's hint. For measurement only.
type dcqcnController struct {
	pkt        int
	line       float64 // bytes/s
	rc, rt     float64
	alpha      float64
	lastCNP    time.Duration
	lastAlpha  time.Duration
	lastTimer  time.Duration
	bytes      int
	timerCount int
	byteCount  int
	srtt       time.Duration
	paths      int
	usable     []bool
	nUsable    int
}

const (
	dcqcnCNPInterval = 50 * time.Microsecond
	dcqcnAlphaTimer  = 55 * time.Microsecond
	dcqcnRateTimer   = 55 * time.Microsecond
	dcqcnByteCounter = 10 << 20
	dcqcnG           = 1.0 / 256
	dcqcnF           = 5
)

// newDCQCN returns a Factory for the DCQCN-like baseline. Without a line rate
// it assumes 100 Gbit/s.
func newDCQCN(p Params) Factory {
	line := min(float64(p.LineRate.Bytes()), MaxRate)
	if line <= 0 {
		line = float64((100 * units.Gbps).Bytes())
	}
	return func(paths, packetSize int) Controller {
		d := &dcqcnController{pkt: packetSize, line: line, rc: line, rt: line, alpha: 1, lastCNP: -dcqcnCNPInterval, srtt: p.BaseRTT, paths: paths, usable: make([]bool, paths), nUsable: paths}
		if d.srtt <= 0 {
			d.srtt = time.Millisecond
		}
		for i := range d.usable {
			d.usable[i] = true
		}
		return d
	}
}

// Name implements Controller.
func (d *dcqcnController) Name() string { return "dcqcn" }

// Rate returns the current rate in bytes per second.
func (d *dcqcnController) Rate() float64 { return d.rc }

// Window implements Controller: RoCEv2 has no window; this one only keeps
// the path's sequence space sane (twice the line rate's worth per round trip).
func (d *dcqcnController) Window(path int) int {
	if !d.usable[path] || d.nUsable == 0 {
		return 0
	}
	return windowBytes(2*d.line*d.srtt.Seconds()/float64(d.nUsable), 16*d.pkt)
}

// PacingRate implements Controller.
func (d *dcqcnController) PacingRate() units.ByteRate { return units.ByteRate(d.rc) }

// OnSent implements Controller.
func (d *dcqcnController) OnSent(now time.Duration, _ int, bytes int) {
	d.tick(now)
	d.bytes += bytes
	for d.bytes >= dcqcnByteCounter {
		d.bytes -= dcqcnByteCounter
		d.byteCount++
		d.increase()
	}
}

// tick runs the timers that expired since the last call.
func (d *dcqcnController) tick(now time.Duration) {
	for now-d.lastAlpha >= dcqcnAlphaTimer {
		d.lastAlpha += dcqcnAlphaTimer
		if d.lastAlpha-d.lastCNP >= dcqcnAlphaTimer {
			d.alpha *= 1 - dcqcnG
		}
		if now-d.lastAlpha > 1000*dcqcnAlphaTimer {
			d.lastAlpha = now // long idle: do not loop for ever
		}
	}
	for now-d.lastTimer >= dcqcnRateTimer {
		d.lastTimer += dcqcnRateTimer
		d.timerCount++
		d.increase()
		if now-d.lastTimer > 1000*dcqcnRateTimer {
			d.lastTimer = now
		}
	}
}

func (d *dcqcnController) increase() {
	ai := d.line / 1000
	switch {
	case d.timerCount > dcqcnF && d.byteCount > dcqcnF:
		d.rt += float64(min(d.timerCount, d.byteCount)-dcqcnF) * 10 * ai
	case d.timerCount > dcqcnF || d.byteCount > dcqcnF:
		d.rt += ai
	}
	if d.rt > d.line {
		d.rt = d.line
	}
	d.rc = (d.rt + d.rc) / 2
}

// OnAck implements Controller.
func (d *dcqcnController) OnAck(now time.Duration, _ int, s AckSample) {
	clampRTTs(&s)
	if s.SRTT > 0 {
		d.srtt = s.SRTT
	}
	d.tick(now)
	if s.MarkedBytes == 0 || now-d.lastCNP < dcqcnCNPInterval {
		return
	}
	d.lastCNP = now
	d.rt = d.rc
	d.rc *= 1 - d.alpha/2
	d.alpha = (1-dcqcnG)*d.alpha + dcqcnG
	if m := float64(d.pkt) / d.srtt.Seconds(); d.rc < m {
		d.rc = m
	}
	d.timerCount, d.byteCount, d.bytes = 0, 0, 0
	d.lastTimer = now
}

// OnLoss implements Controller: RoCEv2 assumes a lossless fabric.
func (d *dcqcnController) OnLoss(time.Duration, int, int) {}

// OnRateHint implements Controller: RoCEv2 has no receiver loop.
func (d *dcqcnController) OnRateHint(time.Duration, units.ByteRate) {}

// OnPathState implements Controller.
func (d *dcqcnController) OnPathState(_ time.Duration, path int, usable bool) {
	if d.usable[path] == usable {
		return
	}
	d.usable[path] = usable
	if usable {
		d.nUsable++
	} else {
		d.nUsable--
	}
}
